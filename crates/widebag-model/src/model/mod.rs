//! The sparse layout's model: its shapes (`ModelSpec`), its parts (input bands of row-sharded
//! tables off autodiff, the dense parameters by name) and what can be asked of it between steps
//! (log-probabilities, sizes, the flush of deferred row updates).

pub mod bag;
pub mod dense_optim;
pub mod init;
pub mod params;
pub mod spec;
#[cfg(test)]
mod tests;
pub mod tied;

pub use spec::ModelSpec;

use burn::tensor::{Device, Tensor};
use serde::Serialize;
use widebag_config::bands::ModelBands;
use widebag_config::{Config, OptimConfig, OutputKind};
use widebag_csr::{CsrBatch, Targets};

use crate::model::bag::InputBand;
use crate::model::params::{DenseParams, OutputParams, n_values};
use crate::output::softmax::{self, ClassChunk};
use crate::table::optim::TableState;
use crate::table::{RowFormat, ShardedTable};

use crate::{Compute, ModelError};

/// The optimizer settings with the schedule spanning the run's steps.
pub(crate) fn scheduled(config: &Config) -> OptimConfig {
    OptimConfig {
        schedule_steps: config.train.steps as u64,
        ..config.optim.clone()
    }
}

/// What one training step did.
#[derive(Clone, Debug, Serialize)]
pub struct StepStats {
    pub step: u64,
    pub loss: f32,
    pub n_rows: usize,
    pub nnz: usize,
    pub n_unique: usize,
    /// Wall seconds of the step (set by the training loop).
    pub step_s: f64,
    /// Peak bytes in use read so far in the run, after the warm-up (set by the training loop;
    /// `None` without allocator counters).
    pub peak_in_use_bytes: Option<u64>,
    /// The dense layers' learning rate this step (the schedule's; set by the training loop).
    pub lr: f64,
    /// The epoch this step belongs to (data files; set by the training loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The evaluation run after this step, if any (set by the training loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<widebag_eval::EvalReport>,
    /// Whether a checkpoint is written after this step (set by the training loop, which
    /// writes it once the step's callback has returned).
    pub checkpoint_due: bool,
}

impl StepStats {
    /// An error naming the step when its loss is not a finite number.
    pub(crate) fn check_finite(&self) -> Result<(), ModelError> {
        match self.loss.is_finite() {
            true => Ok(()),
            false => Err(ModelError::Execution(format!(
                "loss became {} at step {}",
                self.loss, self.step
            ))),
        }
    }

    pub fn new(step: u64, loss: f32, batch: &CsrBatch) -> Self {
        Self {
            step,
            loss,
            n_rows: batch.n_rows(),
            nnz: batch.nnz(),
            n_unique: batch.unique_ids().len(),
            step_s: 0.0,
            peak_in_use_bytes: None,
            lr: 0.0,
            epoch: None,
            eval: None,
            checkpoint_due: false,
        }
    }
}

/// The sparse-input model.
pub struct WideModel {
    pub spec: ModelSpec,
    /// Class chunks of the full softmax (empty with the adaptive softmax).
    pub chunks: Vec<ClassChunk>,
    /// Input bands: the head, then each tail band (one band: the unsplit table).
    pub bands: Vec<InputBand>,
    pub dense: DenseParams,
    pub optim: OptimConfig,
    pub step: u64,
    /// This process's rank and the ranks training together: each band's table holds only this
    /// rank's block of rows (`widebag_collective::route::BlockSharding`). One rank: all rows.
    pub ranks: Ranks,
    /// Bytes this rank has sent to the other ranks, by collective (`Self::train_step_part`).
    pub sent_bytes: std::collections::BTreeMap<&'static str, u64>,
    /// Bytes the row exchange would have sent as pooled partial sums instead, on the same
    /// batches (`widebag_collective::pooled`).
    pub pooled_bytes: u64,
    /// Steps `pooled_bytes` counts.
    pub pooled_steps: u64,
    device: Device,
}

/// A rank of a multi-process run (`rank` of `size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ranks {
    pub rank: usize,
    pub size: usize,
}

impl Ranks {
    /// The single process.
    pub const ONE: Ranks = Ranks { rank: 0, size: 1 };

    /// The full softmax's classes this rank owns (all of them for one rank).
    pub fn class_block(&self, n_classes: usize) -> std::ops::Range<usize> {
        widebag_collective::partition::class_block(n_classes, self.rank, self.size)
    }

    /// How a band of `n_rows` rows is split over the ranks.
    pub fn sharding(&self, n_rows: usize) -> widebag_collective::route::BlockSharding {
        widebag_collective::route::BlockSharding::new(n_rows, self.size)
    }
}

impl WideModel {
    /// The configured model with the resolved `bands`, every parameter at its seeded initial
    /// value ([`init`]).
    pub fn new(config: &Config, bands: &ModelBands, compute: &Compute) -> Result<Self, ModelError> {
        Self::new_rank(config, bands, compute, Ranks::ONE)
    }

    /// Rank `ranks.rank`'s part of the model: its block of each band's rows with their optimizer
    /// state (initialised as the whole table's same rows), and every dense parameter.
    pub fn new_rank(
        config: &Config,
        bands: &ModelBands,
        compute: &Compute,
        ranks: Ranks,
    ) -> Result<Self, ModelError> {
        let spec = ModelSpec::new(config, bands, compute)?;
        crate::device::check_precisions(config, compute, bands.input.len())?;
        let device = compute.device.clone();
        let bands = spec
            .bands
            .input
            .iter()
            .enumerate()
            .map(|(k, &band)| {
                let block = ranks.sharding(band.n_rows()).rows_of(ranks.rank);
                let rows = init::table_rows(&spec, k, band);
                let table = ShardedTable::placed(
                    block.len(),
                    band.dim,
                    spec.max_buffer_bytes,
                    &device,
                    config.model.input_bands.placement_of(k),
                    spec.kernels,
                    RowFormat {
                        precision: config.model.input_bands.dtype_of(k),
                        rounding: config.optim.rounding,
                        seed: init::rounding_seed(spec.seed, k),
                    },
                    move |r: usize, out: &mut [f32]| rows(block.start + r, out),
                );
                let state = TableState::new(
                    config.table_optim(),
                    &table,
                    spec.max_buffer_bytes,
                    config.optim.state_dtype,
                );
                InputBand { band, table, state }
            })
            .collect();
        // The full softmax's classes are split by rank (each owns a block, `class_block`); the
        // chunks keep their global offsets, so they start as the whole layer's same columns.
        let chunks = if spec.bands.output_split() {
            Vec::new()
        } else {
            let block = ranks.class_block(spec.n_classes);
            softmax::class_chunks(block.len(), spec.class_chunk)
                .into_iter()
                .map(|c| ClassChunk {
                    offset: c.offset + block.start,
                    n: c.n,
                })
                .collect()
        };
        let dense = init::dense_params(&spec, &chunks, config.optim.dense, &device);
        let mut model = Self {
            spec,
            chunks,
            bands,
            dense,
            optim: scheduled(config),
            step: 0,
            ranks,
            sent_bytes: Default::default(),
            pooled_bytes: 0,
            pooled_steps: 0,
            device,
        };
        // The adaptive softmax's tail clusters other ranks own are not held here.
        model.release_clusters();
        if model.spec.tied {
            model.tie()?;
        }
        Ok(model)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the output layer is the adaptive softmax.
    pub fn adaptive(&self) -> bool {
        self.spec.bands.output_split()
    }

    /// The targets the objective sees: a distribution per row (`full`, `adaptive`), or the bag's
    /// raw counts (`multinomial`).
    pub(crate) fn objective_targets(&self, batch: &CsrBatch) -> Targets {
        match self.spec.output {
            OutputKind::Multinomial => batch.targets().clone(),
            OutputKind::Full | OutputKind::Adaptive => batch.targets().normalised(),
        }
    }

    pub(crate) fn check_batch(&self, batch: &CsrBatch) -> Result<(), ModelError> {
        let s = &self.spec;
        if batch.width() != s.width {
            return Err(ModelError::Shape(format!(
                "batch width {} but the model's width is {}",
                batch.width(),
                s.width
            )));
        }
        if batch.targets().n_classes > s.n_classes {
            return Err(ModelError::Shape(format!(
                "targets have {} classes but the model has {}",
                batch.targets().n_classes,
                s.n_classes
            )));
        }
        if batch.n_rows() > s.batch_size {
            return Err(ModelError::Shape(format!(
                "batch of {} rows but the output chunks were sized for {}",
                batch.n_rows(),
                s.batch_size
            )));
        }
        // Gathered rows and bag entries are split by segment and piece; the `[batch, width]`
        // hidden activations are single buffers: refuse, before any work, one over the limit.
        let widest = s.layer_sizes().into_iter().max().unwrap_or(1);
        let bytes = 4 * (batch.n_rows() * widest) as u64;
        if bytes > s.max_buffer_bytes {
            return Err(ModelError::Shape(format!(
                "the batch's hidden activations need one {bytes}-byte buffer, over the device's \
                 {}-byte limit: use a smaller train.batch_size or hidden size",
                s.max_buffer_bytes
            )));
        }
        if self.adaptive() {
            let head_n = s.head_classes();
            let logits = 4 * (batch.n_rows() * head_n) as u64;
            if logits > s.max_buffer_bytes {
                return Err(ModelError::Shape(format!(
                    "the adaptive softmax's [batch, {head_n}] head logits need one {logits}-byte \
                     buffer, over the device's {}-byte limit: use a smaller head \
                     (model.output_bands.cutoffs) or train.batch_size",
                    s.max_buffer_bytes
                )));
            }
            for p in self.dense.output.iter() {
                let bytes = 4 * p.value.shape().num_elements() as u64;
                if bytes > s.max_buffer_bytes {
                    return Err(ModelError::Shape(format!(
                        "{} needs one {bytes}-byte buffer, over the device's {}-byte limit",
                        p.name, s.max_buffer_bytes
                    )));
                }
            }
        }
        Ok(())
    }

    /// Applies every row update still deferred (lazy AdamW's catch-up of rows the last steps
    /// did not touch), so that the tables hold the weights dense training would have. Reads
    /// of the weights ([`Self::eval_loss`], [`Self::log_probs`], the end of a run) call it.
    pub fn flush_deferred(&mut self) -> Result<(), ModelError> {
        for b in &mut self.bands {
            b.state.flush(&mut b.table, &self.optim, self.step)?;
        }
        Ok(())
    }

    /// Log-probabilities of every class for each row of `batch`, `[rows, n_classes]` (the
    /// adaptive softmax evaluates every cluster here; evaluation only). Deferred row updates
    /// are applied first.
    pub fn log_probs(&mut self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        let (h, params) = self.eval_hidden(batch)?;
        Ok(match &params.output {
            OutputParams::Full { .. } => {
                softmax::log_probs(&h, &params.full_chunks(), self.spec.reduce_cols)
            }
            OutputParams::Adaptive { head, clusters } => {
                self.adaptive_log_probs(&h, head, clusters)
            }
        })
    }

    /// The last hidden representation of `batch` off autodiff, with the dense parameters it
    /// was computed from (the output layer's among them), deferred row updates applied first:
    /// what evaluation reads.
    pub(crate) fn eval_hidden(
        &mut self,
        batch: &CsrBatch,
    ) -> Result<(Tensor<2>, DenseParams<Tensor<2>>), ModelError> {
        self.flush_deferred()?;
        self.check_batch(batch)?;
        let ids = self.band_ids(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        let params = self
            .dense
            .map_split(|p| p.value.clone().autodiff(), |p| p.value.clone());
        let h = self.forward_hidden(&rows, &params, &inputs).inner();
        Ok((h, params))
    }

    /// Values of the input bands' tables (whatever their precision) and projections.
    pub fn table_parameters(&self) -> u64 {
        let tables: u64 = self
            .bands
            .iter()
            .map(|b| (b.table.n_rows() * b.table.dim()) as u64)
            .sum();
        tables + n_values(&self.dense.projections)
    }

    /// Values (f32) of the output layer; a tied layer's weight is the table's values, counted
    /// there, so only its bias.
    pub fn output_parameters(&self) -> u64 {
        let all = n_values(self.dense.output.iter());
        match self.spec.tied {
            true => all - (self.spec.n_classes * self.spec.dim) as u64,
            false => all,
        }
    }

    /// Bytes of the input bands' tables and their state placed in host memory.
    pub fn host_bytes(&self) -> u64 {
        self.bands
            .iter()
            .filter(|b| b.table.placement() == widebag_config::BandPlacement::Host)
            .map(|b| b.table.bytes() + b.state.bytes())
            .sum()
    }

    /// Bytes host bands sent to the device and took back so far (tables and state).
    pub fn host_traffic(&self) -> (u64, u64) {
        let mut total = (0, 0);
        for b in &self.bands {
            for t in b.state.tables().into_iter().chain([&b.table]) {
                let (up, down) = t.traffic();
                total = (total.0 + up, total.1 + down);
            }
        }
        total
    }

    /// Bytes of all parameters (tables and dense).
    pub fn parameter_bytes(&self) -> u64 {
        self.bands.iter().map(|b| b.table.bytes()).sum::<u64>() + 4 * n_values(self.dense.iter())
    }
}

/// Perturbations of single weights, for finite-difference tests.
#[cfg(any(test, feature = "test-support"))]
impl WideModel {
    /// Adds `delta` to one entry of an input id's row.
    pub fn perturb_table(&mut self, id: u32, col: usize, delta: f32) -> Result<(), ModelError> {
        let k = self
            .bands
            .partition_point(|b| b.band.end <= id as usize)
            .min(self.bands.len() - 1);
        let band = &mut self.bands[k];
        let mut v = vec![0.0; band.band.dim];
        v[col] = delta;
        let t = crate::tensors::floats(v, [1, band.band.dim], &self.device);
        let row = [id - band.band.start as u32];
        band.table
            .scatter_add(crate::table::ids::SortedIds::new(&row)?, t)
    }

    /// Adds `delta` to element `index` of the dense parameter called `name`.
    pub fn perturb_dense(
        &mut self,
        name: &str,
        index: usize,
        delta: f32,
    ) -> Result<(), ModelError> {
        let device = self.device.clone();
        let p = self
            .dense
            .get_mut(name)
            .ok_or_else(|| ModelError::Shape(format!("no dense parameter {name}")))?;
        let shape = p.value.shape();
        let mut v = crate::tensors::to_vec(p.value.clone())?;
        v[index] += delta;
        p.value = crate::tensors::floats(v, [shape[0], shape[1]], &device);
        Ok(())
    }
}
