//! The input table tied to the output layer (`model.tie_output`): one vector per id, read by the
//! bag as the table's row and by the full softmax as its weight's column. The layer is the host
//! softmax ([`HostSoftmax`]) whose weight holds the same values as the table, transposed for the
//! host kernels' matmuls: a step adds the batch's row gradients into the weight's gradient
//! ([`OutputLayer::absorb_rows`]), `optim.dense` updates the weight, and the table's rows are
//! written again from its columns, in place ([`OutputLayer::after_update`]). **A tied table
//! equals the output weight's transpose after every step.**

use burn::tensor::Tensor;
use rayon::prelude::*;
use widebag_collective::Collective;
use widebag_config::OptimConfig;
use widebag_csr::Targets;
use widebag_ledger::shapes::ClassChunk;
use widebag_ledger::step::OutputLayerKind;

use crate::cpu::access::{HostMatrix, update_in_place};
use crate::device::ComputePath;
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::host::HostSoftmax;
use crate::output::scores::{BlockScorer, ChunksWanted, ScoreKind, Visit};
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass};
use crate::probe::StepProbe;
use crate::ranks::{RankBatch, Ranks};
use crate::table::Storage;
use crate::table::bands::{BandIds, BandSegment, InputBand};
use crate::table::host_rows::HostRows;

/// Table rows written per task when the table is refreshed (a block of rows stays in cache
/// while every weight row is read once).
const ROWS_PER_TASK: usize = 64;

/// The host softmax whose weight is the input table.
pub struct TiedSoftmax {
    host: HostSoftmax,
    /// The table's (and the weight's) vector width.
    dim: usize,
}

/// Why a model cannot tie.
pub(crate) fn refuse(message: &str) -> ModelError {
    ModelError::Unsupported {
        key: "model.tie_output",
        message: message.into(),
    }
}

impl TiedSoftmax {
    /// Checks that `bands` can tie to `host` (one f32 table; [`crate::output::build`] checks
    /// the rest: flex's host kernels, one process, the full softmax) and makes the table the
    /// output weight's transpose: a tied vector starts as the output layer's column
    /// (U(±1/√dim), PyTorch's `nn.Linear(dim, classes)`), the use that scales the logits.
    pub fn tie(host: HostSoftmax, bands: &mut [InputBand]) -> Result<Self, ModelError> {
        let dim = match bands {
            [b] if matches!(b.table.storage, Storage::Host(HostRows::F32(_))) => b.band.dim,
            _ => return Err(refuse("needs one f32 table and the full softmax")),
        };
        let mut tied = Self { host, dim };
        tied.after_update(bands)?;
        Ok(tied)
    }
}

impl OutputLayer for TiedSoftmax {
    fn priced_as(&self) -> OutputLayerKind {
        self.host.priced_as()
    }

    fn objective(&self) -> Objective {
        self.host.objective()
    }

    fn class_chunks(&self) -> &[ClassChunk] {
        self.host.class_chunks()
    }

    fn params(&self) -> Vec<&DenseParam> {
        self.host.params()
    }

    fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.host.params_mut()
    }

    fn replicated(&self) -> usize {
        self.host.replicated()
    }

    /// The weight's values are the table's, counted there: only the biases.
    fn n_values(&self) -> u64 {
        let n_classes: usize = self.class_chunks().iter().map(|c| c.n).sum();
        self.host.n_values() - (n_classes * self.dim) as u64
    }

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        self.host.forward(h, targets, batch, probe)
    }

    fn backward(
        &mut self,
        pass: OutputPass,
        batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        self.host.backward(pass, batch, probe)
    }

    fn end_pass(&mut self, pass: OutputPass) {
        self.host.end_pass(pass)
    }

    /// Moves the rows' gradients into the output weight's gradient: row `id`'s gradient is
    /// added to column `id`, so the weight's gradient is the whole parameter's and no row is
    /// left for the row updates.
    fn absorb_rows(
        &self,
        ids: &BandIds,
        rows: &mut Vec<(BandSegment, Tensor<2>)>,
        grads: &mut [Tensor<2>],
    ) -> Result<(), ModelError> {
        let dim = self.dim;
        for (s, g) in std::mem::take(rows) {
            let ids = ids.of(&s).as_slice();
            let g = HostMatrix::take(g)?;
            let g = g.as_slice();
            for (chunk, weight) in self.class_chunks().iter().zip(grads.iter_mut().step_by(2)) {
                let first = ids.partition_point(|&id| (id as usize) < chunk.offset);
                let end = ids.partition_point(|&id| (id as usize) < chunk.offset + chunk.n);
                if first == end {
                    continue;
                }
                update_in_place(weight, |w| {
                    w.par_chunks_mut(chunk.n).enumerate().for_each(|(h, col)| {
                        for (r, &id) in ids.iter().enumerate().take(end).skip(first) {
                            col[id as usize - chunk.offset] += g[r * dim + h];
                        }
                    });
                })?;
            }
        }
        Ok(())
    }

    fn update(
        &mut self,
        grads: Vec<Tensor<2>>,
        optim: &OptimConfig,
        step: u64,
        path: ComputePath,
        probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        self.host.update(grads, optim, step, path, probe)
    }

    /// Writes the table's rows again from the output weight's columns (after the weight's
    /// update), in place.
    fn after_update(&mut self, bands: &mut [InputBand]) -> Result<(), ModelError> {
        let dim = self.dim;
        let Storage::Host(HostRows::F32(table)) = &mut bands[0].table.storage else {
            return Err(ModelError::Shape(
                "a tied table is one f32 host table".into(),
            ));
        };
        let full = &mut self.host.full;
        for (chunk, layer) in full.chunks.iter().zip(full.layer.iter_mut()) {
            let rows = &mut table[chunk.offset * dim..(chunk.offset + chunk.n) * dim];
            let n = chunk.n;
            update_in_place(&mut layer.weight.value, |w| {
                let w: &[f32] = w;
                rows.par_chunks_mut(ROWS_PER_TASK * dim)
                    .enumerate()
                    .for_each(|(task, out)| {
                        let first = task * ROWS_PER_TASK;
                        let count = out.len() / dim;
                        for h in 0..dim {
                            let src = &w[h * n + first..h * n + first + count];
                            for (r, &x) in src.iter().enumerate() {
                                out[r * dim + h] = x;
                            }
                        }
                    });
            })?;
        }
        Ok(())
    }

    fn traffic(
        &self,
        batch: &RankBatch<'_>,
        n_targets: usize,
        pass_sent: &[(&'static str, u64)],
    ) -> Vec<(&'static str, u64)> {
        self.host.traffic(batch, n_targets, pass_sent)
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        self.host.scores(h, visit)
    }

    fn scores_by_block(&self) -> bool {
        self.host.scores_by_block()
    }

    fn score_blocks(
        &mut self,
        h: Tensor<2>,
        wanted: ChunksWanted,
        f: &mut BlockScorer<'_>,
    ) -> Result<bool, ModelError> {
        self.host.score_blocks(h, wanted, f)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        self.host.log_probs(h)
    }

    fn splits_classes(&self) -> bool {
        self.host.splits_classes()
    }

    fn begin_scoring(&mut self, comm: &dyn Collective) -> Result<(), ModelError> {
        self.host.begin_scoring(comm)
    }

    fn end_scoring(&mut self) {
        self.host.end_scoring()
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, ranks: Ranks) -> Result<(), ModelError> {
        self.host.gather_owned(part, ranks)
    }
}
