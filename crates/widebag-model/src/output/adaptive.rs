//! The adaptive softmax (Grave et al. 2017) on autodiff ([`AdaptiveSoftmax`]): its loss is
//! differentiated with the trunk in one pass, each tail evaluated only on the rows whose targets
//! fall in it, in row pieces within the buffer limit; and a batch's targets split over the head
//! and the tail clusters ([`AdaptiveTargets`]), which the host path reads too. The parameters
//! are [`crate::output::clusters::AdaptiveParams`].

use burn::tensor::{Device, Tensor};
use widebag_collective::Collective;
use widebag_config::bands::Band;
use widebag_csr::Targets;
use widebag_ledger::shapes::ClassChunk;
use widebag_ledger::step::OutputLayerKind;

use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::clusters::{self, AdaptiveParams, cluster_logits, log_softmax_rows};
use crate::output::scores::{ScoreKind, Visit};
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass};
use crate::params::{Cluster, Linear};
use crate::probe::{Point, StepProbe};
use crate::ranks::{RankBatch, Ranks};
use crate::tensors::{floats, ints, scalar};

/// Rows of the batch whose targets fall in one output cluster, and those targets.
pub(crate) struct ClusterTargets {
    /// Rows of the batch (sorted, distinct) with a target in the cluster.
    pub rows: Vec<u32>,
    /// Per target entry: `(position in rows, class within the cluster, weight)`.
    pub entries: Vec<(u32, u32, f32)>,
}

/// A batch's targets split over the adaptive softmax's head and tail clusters.
pub(crate) struct AdaptiveTargets {
    /// `(row, head column, weight)`: head classes, and each tail target's cluster token.
    pub head: Vec<(u32, u32, f32)>,
    pub tails: Vec<ClusterTargets>,
}

impl AdaptiveTargets {
    pub(crate) fn new(targets: &Targets, clusters: &[Band]) -> Self {
        let head_n = clusters[0].n_rows();
        let mut head = Vec::new();
        let mut tails: Vec<ClusterTargets> = clusters[1..]
            .iter()
            .map(|_| ClusterTargets {
                rows: Vec::new(),
                entries: Vec::new(),
            })
            .collect();
        for r in 0..targets.row_ptr.len() - 1 {
            for k in targets.row_ptr[r]..targets.row_ptr[r + 1] {
                let (class, w) = (targets.classes[k] as usize, targets.weights[k]);
                let c = clusters.partition_point(|b| b.end <= class);
                if c == 0 {
                    head.push((r as u32, class as u32, w));
                    continue;
                }
                head.push((r as u32, (head_n + c - 1) as u32, w));
                let t = &mut tails[c - 1];
                if t.rows.last() != Some(&(r as u32)) {
                    t.rows.push(r as u32);
                }
                let pos = (t.rows.len() - 1) as u32;
                t.entries.push((pos, (class - clusters[c].start) as u32, w));
            }
        }
        Self { head, tails }
    }
}

/// `sum_i w_i · logp[row_i, col_i]` for `(row, col, w)` entries of a `[rows, cols]` matrix.
fn weighted_pick(logp: Tensor<2>, entries: &[(u32, u32, f32)], device: &Device) -> Tensor<1> {
    let cols = logp.shape()[1];
    let rows = logp.shape()[0];
    let flat: Vec<u32> = entries
        .iter()
        .map(|&(r, c, _)| r * cols as u32 + c)
        .collect();
    let w: Vec<f32> = entries.iter().map(|e| e.2).collect();
    let picked = logp.reshape([rows * cols]).select(0, ints(&flat, device));
    (picked * floats(w, [entries.len()], device)).sum()
}

/// The adaptive softmax on autodiff: its parameters are gradient leaves of the step's graph.
pub struct AdaptiveSoftmax {
    pub(crate) params: AdaptiveParams,
    objective: Objective,
}

/// What the forward pass keeps for the backward pass: the loss on autodiff and the leaves.
struct Saved {
    loss: Tensor<1>,
    head: Linear<Tensor<2>>,
    clusters: Vec<Cluster<Tensor<2>>>,
}

impl AdaptiveSoftmax {
    pub fn new(params: AdaptiveParams, objective: Objective) -> Self {
        Self { params, objective }
    }

    /// The loss on autodiff: `-(1/B) sum w log p(target)`, where `log p(c) = log p_head(c)` for
    /// head classes and `log p_head(token_k) + log p_k(c)` for classes of tail cluster `k`. Only
    /// clusters holding a target are evaluated, on the rows whose targets fall in them, in row
    /// pieces within the buffer limit.
    fn loss(
        &self,
        h: &Tensor<2>,
        head: &Linear<Tensor<2>>,
        clusters: &[Cluster<Tensor<2>>],
        targets: &Targets,
        probe: &mut StepProbe,
    ) -> Tensor<1> {
        let p = &self.params;
        let ad = h.device();
        let n_rows = h.shape()[0];
        let split = AdaptiveTargets::new(targets, &p.bands);
        let head_logits = h.clone().matmul(head.weight.clone()) + head.bias.clone();
        let mut total = weighted_pick(
            log_softmax_rows(head_logits, p.reduce_cols),
            &split.head,
            &ad,
        );
        for (t, cluster) in split.tails.iter().zip(clusters) {
            if t.rows.is_empty() {
                continue;
            }
            let per = widebag_ledger::shapes::rows_per_piece(
                cluster.weight.shape()[1],
                p.max_buffer_bytes,
            );
            let mut first = 0;
            while first < t.rows.len() {
                let end = (first + per).min(t.rows.len());
                let hk = h.clone().select(0, ints(&t.rows[first..end], &ad));
                let z = cluster_logits(hk, cluster);
                let entries: Vec<(u32, u32, f32)> = t
                    .entries
                    .iter()
                    .filter(|e| (first..end).contains(&(e.0 as usize)))
                    .map(|&(r, c, w)| (r - first as u32, c, w))
                    .collect();
                total = total + weighted_pick(log_softmax_rows(z, p.reduce_cols), &entries, &ad);
                first = end;
            }
        }
        probe.detail(Point::ForwardLogits);
        total.mul_scalar(-1.0 / n_rows.max(1) as f64)
    }
}

impl OutputLayer for AdaptiveSoftmax {
    fn priced_as(&self) -> OutputLayerKind {
        OutputLayerKind::AdaptiveSoftmax
    }

    fn objective(&self) -> Objective {
        self.objective
    }

    fn class_chunks(&self) -> &[ClassChunk] {
        &[]
    }

    fn params(&self) -> Vec<&DenseParam> {
        self.params.params()
    }

    fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.params.params_mut()
    }

    fn replicated(&self) -> usize {
        2
    }

    fn check_batch(&self, n_rows: usize, max_buffer_bytes: u64) -> Result<(), ModelError> {
        self.params.check_batch(n_rows, max_buffer_bytes)
    }

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        // The output layer is on the trunk's graph: its parameters are gradient leaves.
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let head = self.params.head.map(leaf);
        let clusters: Vec<Cluster<Tensor<2>>> =
            self.params.clusters.iter().map(|c| c.map(leaf)).collect();
        let loss = self.loss(h, &head, &clusters, targets, probe);
        let value = scalar(loss.clone().inner())?;
        let saved = Saved {
            loss,
            head,
            clusters,
        };
        Ok(OutputPass::new(value, Vec::new(), saved))
    }

    fn backward(
        &mut self,
        pass: OutputPass,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        let Saved {
            loss,
            head,
            clusters,
        } = pass.into_saved();
        let mut leaves = vec![&head.weight, &head.bias];
        for c in &clusters {
            leaves.extend([&c.proj, &c.weight, &c.bias]);
        }
        Ok(OutputGrads::by_autodiff(loss, &leaves, probe))
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        self.params.scores(h, visit)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        self.params.log_probs(h)
    }

    fn splits_classes(&self) -> bool {
        false
    }

    fn begin_scoring(&mut self, comm: &dyn Collective) -> Result<(), ModelError> {
        clusters::sync(&mut self.params, comm)
    }

    fn end_scoring(&mut self) {
        clusters::release(&mut self.params);
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, ranks: Ranks) -> Result<(), ModelError> {
        self.params.gather_owned(&part.params(), ranks)
    }
}
