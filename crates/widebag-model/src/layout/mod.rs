//! A training layout as the training loop sees it: the sparse layout ([`WideModel`]) or the dense
//! baseline ([`DenseModel`]), stepped, flushed, evaluated and measured through one trait.

pub mod dense;
#[cfg(any(test, feature = "test-support"))]
pub mod reference;

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_config::bands::ModelBands;
use widebag_config::{Config, Layout};
use widebag_csr::CsrBatch;

use crate::checkpoint::slots::Named;
use crate::layout::dense::DenseModel;
use crate::model::{Ranks, StepStats, WideModel};
use crate::output::scores::{ScoreKind, Visit};
use crate::step::memory::MemoryMeter;
use crate::{Compute, ModelError};

/// What a run reports about its model's sizes and host traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutFacts {
    /// Bytes of the input tables (0: the dense layout has none).
    pub table_bytes: u64,
    pub table_shards: usize,
    pub class_chunks: usize,
    pub max_buffer_bytes: u64,
    /// Bytes of every parameter.
    pub parameter_bytes: u64,
    /// Values of the input side (tables and projections, or the input weight).
    pub table_parameters: u64,
    /// Values of the output layer.
    pub output_parameters: u64,
    /// Bytes of tables and their optimizer state kept in host memory.
    pub host_bytes: u64,
    /// Bytes host tables sent to the device and took back so far.
    pub to_device_bytes: u64,
    pub to_host_bytes: u64,
}

/// A model the training loop can run.
pub trait TrainLayout {
    /// One training step on this process's `batch`, its rows of a global batch of
    /// `global_rows` rows; a single process is the one-rank case (`widebag_collective::local`).
    fn train_step_part(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError>;

    /// Applies every update still deferred, so the weights are those of dense training (the
    /// end of a run, before its weights are read).
    fn flush_deferred(&mut self) -> Result<(), ModelError>;

    /// Mean loss over held-out batches (weighted by rows); `None` without any. Across ranks
    /// every rank holds every batch and calls it.
    fn held_out_loss(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError>;

    /// The sparse layout's model, the one layout that trains across ranks.
    fn wide(&mut self) -> Option<&mut WideModel>;

    /// Sizes and traffic for the run's summary.
    fn facts(&self) -> LayoutFacts;

    /// Every weight and optimizer state by name (checkpoints).
    fn slots(&mut self) -> Vec<Named<'_>>;

    /// `sparse` or `dense`.
    fn name(&self) -> &'static str;

    /// The input embedding of sorted distinct ids, projected to the full dim, `[n, dim]`.
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError>;

    /// Every dense parameter's name and value (the input weight of the dense layout aside).
    fn dense_values(&self) -> Vec<(String, Tensor<2>)>;

    /// Sets the count of steps taken (a resumed run).
    fn set_step(&mut self, step: u64);

    /// Visits the class scores of `batch`'s rows chunk by chunk, weights up to date
    /// ([`crate::output::scores`]).
    fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError>;
}

/// The configured layout with the resolved `bands`.
pub fn build(
    config: &Config,
    bands: &ModelBands,
    compute: &Compute,
) -> Result<Box<dyn TrainLayout>, ModelError> {
    build_rank(config, bands, compute, Ranks::ONE)
}

/// Rank `ranks.rank` of `ranks.size`'s part of the configured layout (across ranks, only the
/// sparse layout).
pub fn build_rank(
    config: &Config,
    bands: &ModelBands,
    compute: &Compute,
    ranks: Ranks,
) -> Result<Box<dyn TrainLayout>, ModelError> {
    Ok(match config.model.layout {
        Layout::Sparse => Box::new(WideModel::new_rank(config, bands, compute, ranks)?),
        Layout::Dense if ranks.size > 1 => return Err(sparse_only()),
        Layout::Dense => Box::new(DenseModel::new(config, bands, compute)?),
    })
}

/// An error unless `comm` is the group of one: the dense baseline trains in one process.
fn one_process(comm: &dyn Collective) -> Result<(), ModelError> {
    match comm.size() {
        1 => Ok(()),
        _ => Err(sparse_only()),
    }
}

/// Why a layout other than the sparse one cannot run across ranks.
pub(crate) fn sparse_only() -> ModelError {
    ModelError::Unsupported {
        key: "model.layout",
        message: "training across ranks needs the sparse layout".into(),
    }
}

impl TrainLayout for WideModel {
    fn train_step_part(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        WideModel::train_step_part(self, batch, global_rows, comm, meter)
    }

    fn wide(&mut self) -> Option<&mut WideModel> {
        Some(self)
    }

    fn flush_deferred(&mut self) -> Result<(), ModelError> {
        WideModel::flush_deferred(self)
    }

    fn held_out_loss(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError> {
        WideModel::held_out_loss_part(self, batches, comm)
    }

    fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        WideModel::score_chunks(self, batch, visit)
    }

    fn slots(&mut self) -> Vec<Named<'_>> {
        WideModel::slots(self)
    }

    fn name(&self) -> &'static str {
        "sparse"
    }

    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        WideModel::embedding_rows(self, ids)
    }

    fn dense_values(&self) -> Vec<(String, Tensor<2>)> {
        self.dense
            .iter()
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect()
    }

    fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    fn facts(&self) -> LayoutFacts {
        let (to_device_bytes, to_host_bytes) = self.host_traffic();
        LayoutFacts {
            table_bytes: self.bands.iter().map(|b| b.table.bytes()).sum(),
            table_shards: self.bands.iter().map(|b| b.table.n_shards()).sum(),
            class_chunks: self.chunks.len(),
            max_buffer_bytes: self.spec.max_buffer_bytes,
            parameter_bytes: self.parameter_bytes(),
            table_parameters: self.table_parameters(),
            output_parameters: self.output_parameters(),
            host_bytes: self.host_bytes(),
            to_device_bytes,
            to_host_bytes,
        }
    }
}

impl TrainLayout for DenseModel {
    fn train_step_part(
        &mut self,
        batch: &CsrBatch,
        _global_rows: usize,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        one_process(comm)?;
        DenseModel::train_step(self, batch, meter)
    }

    fn wide(&mut self) -> Option<&mut WideModel> {
        None
    }

    /// Dense updates are never deferred.
    fn flush_deferred(&mut self) -> Result<(), ModelError> {
        Ok(())
    }

    fn held_out_loss(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError> {
        one_process(comm)?;
        DenseModel::eval_loss(self, batches)
    }

    fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        DenseModel::score_chunks(self, batch, visit)
    }

    fn slots(&mut self) -> Vec<Named<'_>> {
        DenseModel::slots(self)
    }

    fn name(&self) -> &'static str {
        "dense"
    }

    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        DenseModel::embedding_rows(self, ids)
    }

    fn dense_values(&self) -> Vec<(String, Tensor<2>)> {
        self.params
            .iter()
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect()
    }

    fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    fn facts(&self) -> LayoutFacts {
        let s = &self.spec;
        let last = s.hidden.last().copied().unwrap_or(s.dim);
        LayoutFacts {
            class_chunks: 1,
            max_buffer_bytes: s.max_buffer_bytes,
            parameter_bytes: self.parameter_bytes(),
            table_parameters: (s.width * s.dim) as u64,
            output_parameters: ((last + 1) * s.n_classes) as u64,
            ..LayoutFacts::default()
        }
    }
}
