//! A training layout as the training loop sees it: the sparse layout ([`SparseModel`]) or the dense
//! baseline ([`DenseModel`]), stepped, flushed, evaluated and measured through one trait.

pub mod dense;
#[cfg(any(test, feature = "test-support"))]
pub mod reference;

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_config::bands::ModelBands;
use widebag_config::{Config, Layout};
use widebag_csr::CsrBatch;

use crate::device::Compute;
use crate::entries::CheckpointEntry;
use crate::error::ModelError;
use crate::layout::dense::DenseModel;
use crate::model::SparseModel;
use crate::output::scores::{ScoreKind, Visit};
use crate::params::init::Init;
use crate::probe::StepProbe;
use crate::ranks::Ranks;
use crate::step::done::StepDone;

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
pub trait Trainable {
    /// One training step on this process's `batch`, its rows of a global batch of
    /// `global_rows` rows; a single process is the one-rank case (`widebag_collective::local`).
    fn train_step_on_rank(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        probe: &mut StepProbe,
    ) -> Result<StepDone, ModelError>;

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
    fn sparse(&mut self) -> Option<&mut SparseModel>;

    /// Sizes and traffic for the run's summary.
    fn facts(&self) -> LayoutFacts;

    /// Every weight and optimizer state by name (checkpoints).
    fn entries(&mut self) -> Vec<CheckpointEntry<'_>>;

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

/// Rank `ranks.rank` of `ranks.size`'s part of the configured layout with the resolved `bands`
/// (across ranks, only the sparse layout), its numbers starting as `init` says.
pub fn build(
    config: &Config,
    bands: &ModelBands,
    compute: &Compute,
    ranks: Ranks,
    init: Init,
) -> Result<Box<dyn Trainable>, ModelError> {
    Ok(match config.model.layout {
        Layout::Sparse => Box::new(SparseModel::new_rank(config, bands, compute, ranks, init)?),
        Layout::Dense if ranks.size > 1 => return Err(sparse_only()),
        Layout::Dense => Box::new(DenseModel::new(config, bands, compute, init)?),
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

impl Trainable for SparseModel {
    fn train_step_on_rank(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        probe: &mut StepProbe,
    ) -> Result<StepDone, ModelError> {
        SparseModel::train_step_on_rank(self, batch, global_rows, comm, probe)
    }

    fn sparse(&mut self) -> Option<&mut SparseModel> {
        Some(self)
    }

    fn flush_deferred(&mut self) -> Result<(), ModelError> {
        SparseModel::flush_deferred(self)
    }

    fn held_out_loss(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError> {
        SparseModel::held_out_loss_part(self, batches, comm)
    }

    fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        SparseModel::score_chunks(self, batch, visit)
    }

    fn entries(&mut self) -> Vec<CheckpointEntry<'_>> {
        SparseModel::entries(self)
    }

    fn name(&self) -> &'static str {
        "sparse"
    }

    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        SparseModel::embedding_rows(self, ids)
    }

    fn dense_values(&self) -> Vec<(String, Tensor<2>)> {
        self.dense_params()
            .into_iter()
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
            class_chunks: self.output.class_chunks().len(),
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

impl Trainable for DenseModel {
    fn train_step_on_rank(
        &mut self,
        batch: &CsrBatch,
        _global_rows: usize,
        comm: &dyn Collective,
        probe: &mut StepProbe,
    ) -> Result<StepDone, ModelError> {
        one_process(comm)?;
        DenseModel::train_step(self, batch, probe)
    }

    fn sparse(&mut self) -> Option<&mut SparseModel> {
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

    fn entries(&mut self) -> Vec<CheckpointEntry<'_>> {
        DenseModel::entries(self)
    }

    fn name(&self) -> &'static str {
        "dense"
    }

    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        DenseModel::embedding_rows(self, ids)
    }

    fn dense_values(&self) -> Vec<(String, Tensor<2>)> {
        self.dense_params()
            .into_iter()
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
