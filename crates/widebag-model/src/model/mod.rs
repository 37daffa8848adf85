//! The sparse layout's model ([`SparseModel`]): its shapes (`ModelSpec`), its parts — the input
//! bands' row-sharded tables off autodiff, the trunk's dense parameters by name and the output
//! layer ([`crate::output::OutputLayer`], chosen once here) — and what can be asked of it
//! between steps: sizes, the flush of deferred row updates, the trunk's forward pass
//! (`trunk`), the bag (`bag`), class scores and log-probabilities, the input embedding.

pub mod bag;
#[cfg(test)]
mod tests;
pub mod trunk;

use burn::tensor::{Device, Tensor};
use widebag_config::bands::ModelBands;
use widebag_config::{BandPlacement, Config, OptimConfig};
use widebag_csr::CsrBatch;

use crate::device::{Compute, check_precisions};
use crate::entries::{CheckpointEntry, dense_entries, table_entries};
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::optim::scheduled;
use crate::output::OutputLayer;
use crate::output::scores::{BlockScorer, ChunksWanted, ScoreKind, Visit};
use crate::params::init::{self, Init};
use crate::params::{TrunkParams, n_values};
use crate::ranks::Ranks;
use crate::spec::ModelSpec;
use crate::table::bands::InputBand;
use crate::table::ids::SortedIds;
use crate::table::optim::TableState;
use crate::table::{RowFormat, ShardedTable};
use crate::tensors::to_vec;

/// What a rank of a run across ranks has sent the others, counted as it goes.
#[derive(Clone, Debug, Default)]
pub struct RankTraffic {
    /// Bytes this rank has sent to the other ranks, by collective.
    pub sent_bytes: std::collections::BTreeMap<&'static str, u64>,
    /// Bytes the row exchange would have sent as pooled partial sums instead, on the same
    /// batches (`widebag_collective::pooled`).
    pub pooled_bytes: u64,
    /// Steps `pooled_bytes` counts.
    pub pooled_steps: u64,
}

impl RankTraffic {
    /// Adds `bytes` sent by the collective `what`.
    pub fn add(&mut self, what: &'static str, bytes: u64) {
        *self.sent_bytes.entry(what).or_default() += bytes;
    }
}

/// The sparse-input model.
pub struct SparseModel {
    pub(crate) spec: ModelSpec,
    /// Input bands: the head, then each tail band (one band: the unsplit table).
    pub(crate) bands: Vec<InputBand>,
    /// The trunk's dense parameters: the bag bias, the projections, the hidden layers.
    pub(crate) trunk: TrunkParams,
    pub(crate) output: Box<dyn OutputLayer>,
    pub(crate) optim: OptimConfig,
    pub(crate) step: u64,
    /// This process's rank and the ranks training together: each band's table holds only this
    /// rank's block of rows (`widebag_collective::route::BlockSharding`). One rank: all rows.
    pub(crate) ranks: Ranks,
    pub(crate) traffic: RankTraffic,
    device: Device,
}

/// One input band's table and its optimizer state: rank `ranks.rank`'s block of band `k`'s rows,
/// starting as the whole table's same rows (or zeros, `Init::Zeros`).
fn input_band(
    config: &Config,
    spec: &ModelSpec,
    k: usize,
    ranks: Ranks,
    init: Init,
    device: &Device,
) -> InputBand {
    let band = spec.bands.input[k];
    let block = ranks.sharding(band.n_rows()).rows_of(ranks.rank);
    let rows = init::table_rows(spec, k, band, init);
    let table = ShardedTable::placed(
        block.len(),
        band.dim,
        spec.max_buffer_bytes,
        device,
        config.model.input_bands.placement_of(k),
        spec.compute_path,
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
}

impl SparseModel {
    /// The configured model with the resolved `bands`, every parameter at its seeded initial
    /// value ([`init`]).
    pub fn new(config: &Config, bands: &ModelBands, compute: &Compute) -> Result<Self, ModelError> {
        Self::new_rank(config, bands, compute, Ranks::ONE, Init::Seeded)
    }

    /// Rank `ranks.rank`'s part of the model: its block of each band's rows with their optimizer
    /// state, every dense parameter of the trunk, and the output layer (its classes, or the
    /// tail clusters it owns), starting as `init` says.
    pub fn new_rank(
        config: &Config,
        bands: &ModelBands,
        compute: &Compute,
        ranks: Ranks,
        init: Init,
    ) -> Result<Self, ModelError> {
        let spec = ModelSpec::new(config, bands, compute)?;
        check_precisions(config, compute, bands.input.len())?;
        let device = compute.device.clone();
        let mut bands: Vec<InputBand> = (0..spec.bands.input.len())
            .map(|k| input_band(config, &spec, k, ranks, init, &device))
            .collect();
        let trunk = init::trunk_params(&spec, config.optim.dense, init, &device);
        let output = crate::output::build::build(
            &spec,
            ranks,
            config.optim.dense,
            init,
            &mut bands,
            &device,
        )?;
        Ok(Self {
            spec,
            bands,
            trunk,
            output,
            optim: scheduled(config),
            step: 0,
            ranks,
            traffic: RankTraffic::default(),
            device,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The model's shapes.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The input bands: the head, then each tail band.
    pub fn bands(&self) -> &[InputBand] {
        &self.bands
    }

    /// The output layer.
    pub fn output(&self) -> &dyn OutputLayer {
        self.output.as_ref()
    }

    /// Steps taken.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// This process's rank among the ranks training together.
    pub fn ranks(&self) -> Ranks {
        self.ranks
    }

    /// Whether the output layer's weight is the input table (`model.tie_output`).
    pub fn tied(&self) -> bool {
        self.spec.tied
    }

    /// Every dense parameter in one fixed order: the trunk's, then the output layer's.
    pub fn dense_params(&self) -> Vec<&DenseParam> {
        self.trunk.iter().chain(self.output.params()).collect()
    }

    /// [`Self::dense_params`] by mutable reference.
    pub fn dense_params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.trunk
            .iter_mut()
            .chain(self.output.params_mut())
            .collect()
    }

    /// An error unless `batch` fits the model: its width and classes, the batch size the
    /// output chunks were sized for, and the buffers a step of it needs.
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
        self.output.check_batch(batch.n_rows(), s.max_buffer_bytes)
    }

    /// Applies every row update still deferred (lazy AdamW's catch-up of rows the last steps
    /// did not touch), so that the tables hold the weights dense training would have. Reads
    /// of the weights (the held-out loss, [`Self::log_probs`], the end of a run) call it.
    pub fn flush_deferred(&mut self) -> Result<(), ModelError> {
        for b in &mut self.bands {
            b.state.flush(&mut b.table, &self.optim, self.step)?;
        }
        Ok(())
    }

    /// The last hidden representation of `batch` off autodiff, deferred row updates applied
    /// first: what evaluation reads.
    pub(crate) fn eval_hidden(&mut self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        self.flush_deferred()?;
        self.check_batch(batch)?;
        let ids = self.band_ids(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        let params = self.trunk.map(|p| p.value.clone().autodiff());
        Ok(self.forward_hidden(&rows, &params, &inputs).inner())
    }

    /// Log-probabilities of every class for each row of `batch`, `[rows, n_classes]` (the
    /// adaptive softmax evaluates every cluster here; evaluation only). Deferred row updates
    /// are applied first.
    pub fn log_probs(&mut self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        let h = self.eval_hidden(batch)?;
        Ok(self.output.log_probs(&h))
    }

    /// Visits the scores of every class of `batch`'s rows, chunk by chunk, weights up to date.
    pub fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        let h = self.eval_hidden(batch)?;
        self.output.scores(&h, visit)
    }

    /// On flex's host kernels with the full softmax: `batch`'s rows through the trunk, then `f`
    /// with `h` (`[rows, hidden]`), the output layer's class chunks (lent without a copy) and
    /// each chunk's first class, to score them block by block
    /// ([`crate::cpu::score_blocks::visit_score_blocks`]). `false`, with nothing visited, where
    /// the scores are tensors ([`Self::score_chunks`]).
    pub(crate) fn host_score_blocks(
        &mut self,
        batch: &CsrBatch,
        wanted: ChunksWanted,
        f: &mut BlockScorer<'_>,
    ) -> Result<bool, ModelError> {
        if !self.output.scores_by_block() {
            return Ok(false);
        }
        let h = self.eval_hidden(batch)?;
        self.output.score_blocks(h, wanted, f)
    }

    /// The input embedding of sorted distinct (frequency-numbered) `ids`: each band's rows, the
    /// tails projected to the full dim, `[n, dim]` row-major.
    pub fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        let mut out = Vec::with_capacity(ids.len() * self.spec.dim);
        for (k, b) in self.bands.iter().enumerate() {
            let (lo, hi) = (b.band.start as u32, b.band.end as u32);
            let local: Vec<u32> = ids
                .iter()
                .filter(|&&i| (lo..hi).contains(&i))
                .map(|&i| i - lo)
                .collect();
            if local.is_empty() {
                continue;
            }
            let mut rows = b.table.gather(SortedIds::new(&local)?)?;
            if k > 0 {
                rows = rows.matmul(self.trunk.projections[k - 1].value.clone());
            }
            out.extend(to_vec(rows)?);
        }
        Ok(out)
    }

    /// Every weight and optimizer state by name, in a fixed order: each band's table and state,
    /// then every dense parameter ([`Self::dense_params`] order) and its state.
    pub fn entries(&mut self) -> Vec<CheckpointEntry<'_>> {
        let mut out = Vec::new();
        for (k, band) in self.bands.iter_mut().enumerate() {
            table_entries(
                &format!("input.{k}"),
                &mut band.table,
                &mut band.state,
                &mut out,
            );
        }
        for p in self.trunk.iter_mut().chain(self.output.params_mut()) {
            dense_entries(p, &mut out);
        }
        out
    }

    /// Values of the input bands' tables (whatever their precision) and projections.
    pub fn table_parameters(&self) -> u64 {
        let tables: u64 = self
            .bands
            .iter()
            .map(|b| (b.table.n_rows() * b.table.dim()) as u64)
            .sum();
        tables + n_values(&self.trunk.projections)
    }

    /// Values (f32) of the output layer; a tied layer's weight is the table's values, counted
    /// there, so only its bias.
    pub fn output_parameters(&self) -> u64 {
        self.output.n_values()
    }

    /// Bytes of the input bands' tables and their state placed in host memory.
    pub fn host_bytes(&self) -> u64 {
        self.bands
            .iter()
            .filter(|b| b.table.placement() == BandPlacement::Host)
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
        self.bands.iter().map(|b| b.table.bytes()).sum::<u64>() + 4 * n_values(self.dense_params())
    }
}

/// Perturbations of single weights, for finite-difference tests.
#[cfg(any(test, feature = "test-support"))]
impl SparseModel {
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
        band.table.scatter_add(SortedIds::new(&row)?, t)
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
            .dense_params_mut()
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ModelError::Shape(format!("no dense parameter {name}")))?;
        let shape = p.value.shape();
        let mut v = to_vec(p.value.clone())?;
        v[index] += delta;
        p.value = crate::tensors::floats(v, [shape[0], shape[1]], &device);
        Ok(())
    }
}
