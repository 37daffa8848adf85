//! Class scores of a batch, one class chunk at a time, for evaluation and prediction: the
//! sparse layout's full softmax by its class chunks (logits; on flex by class blocks on the
//! host), the adaptive softmax by head and tail cluster (log-probabilities), the dense layout by
//! the same chunks of its full logits.
//! Deferred row updates are applied first, so the weights read are up to date.

use burn::tensor::Tensor;
use widebag_csr::CsrBatch;

use crate::ModelError;
use crate::cpu::ChunkRef;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::layout::dense::DenseModel;
use crate::model::WideModel;
use crate::model::params::OutputParams;
use crate::output::adaptive::{cluster_logits, log_softmax_rows};
use crate::output::softmax;

/// What the visited scores are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreKind {
    /// Logits: `log p = score − logsumexp(all scores of the row)`.
    Logits,
    /// Log-probabilities already.
    LogProbs,
}

/// Receives `[rows, n]` scores of the classes `class_start..class_start + n`.
pub type Visit<'a> = dyn FnMut(usize, Tensor<2>) -> Result<(), ModelError> + 'a;

/// Receives `h` (`[rows, hidden]`, row-major), `hidden`, the full softmax's class chunks and
/// each chunk's first class, to score them by class block.
pub type BlockScorer<'a> = dyn FnMut(&[f32], usize, &[ChunkRef], &[usize]) + 'a;

impl WideModel {
    /// Visits the scores of every class of `batch`'s rows, chunk by chunk.
    pub fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        let (h, params) = self.eval_hidden(batch)?;
        self.score_hidden(&h, &params, visit)
    }

    /// Visits the scores of every class this model holds (a rank: its class block of the full
    /// softmax) for the rows of `h`, chunk by chunk.
    pub(crate) fn score_hidden(
        &self,
        h: &Tensor<2>,
        params: &crate::model::params::DenseParams<Tensor<2>>,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        let h = h.clone();
        match &params.output {
            OutputParams::Full { .. } => {
                for (chunk, (w, b)) in self.chunks.iter().zip(params.full_chunks()) {
                    visit(chunk.offset, softmax::logits(&h, w, b))?;
                }
                Ok(ScoreKind::Logits)
            }
            OutputParams::Adaptive { head, clusters } => {
                let bands = &self.spec.bands.output;
                let head_n = bands[0].n_rows();
                let cols = self.spec.reduce_cols;
                let head_lp = log_softmax_rows(
                    h.clone().matmul(head.weight.clone()) + head.bias.clone(),
                    cols,
                );
                visit(0, head_lp.clone().narrow(1, 0, head_n))?;
                for (k, cluster) in clusters.iter().enumerate() {
                    let z = cluster_logits(h.clone(), cluster);
                    let lp = log_softmax_rows(z, cols) + head_lp.clone().narrow(1, head_n + k, 1);
                    visit(bands[k + 1].start, lp)?;
                }
                Ok(ScoreKind::LogProbs)
            }
        }
    }
}

impl WideModel {
    /// On flex's host kernels with the full softmax: `batch`'s rows through the trunk, then `f`
    /// with `h` (`[rows, hidden]`), the output layer's class chunks (lent without a copy) and
    /// each chunk's first class, to score them block by block
    /// ([`crate::cpu::score_blocks::visit_score_blocks`]). `false`, with nothing visited, where
    /// the scores are tensors ([`Self::score_chunks`]).
    pub(crate) fn host_score_blocks(
        &mut self,
        batch: &CsrBatch,
        f: &mut BlockScorer<'_>,
    ) -> Result<bool, ModelError> {
        if !self.host_softmax() || !matches!(self.dense.output, OutputParams::Full { .. }) {
            return Ok(false);
        }
        let (h, params) = self.eval_hidden(batch)?;
        // The parameters' handles go first, so that the layer's buffers are lent, not copied.
        drop(params);
        let h = HostMatrix::take(h)?;
        let layer = HostLayer::take(&mut self.dense.output)?;
        let offsets: Vec<usize> = self.chunks.iter().map(|c| c.offset).collect();
        f(h.as_slice(), h.cols, &layer.refs(), &offsets);
        let device = self.device().clone();
        layer.restore(&mut self.dense.output, &device);
        Ok(true)
    }
}

impl DenseModel {
    /// Visits the chunks of the dense layout's full logits (which it holds whole, as in
    /// training).
    pub fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        let logits = self.logits(batch)?;
        for chunk in softmax::class_chunks(self.spec.n_classes, self.spec.class_chunk) {
            visit(
                chunk.offset,
                logits.clone().narrow(1, chunk.offset, chunk.n),
            )?;
        }
        Ok(ScoreKind::Logits)
    }
}
