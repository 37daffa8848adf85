//! What the ledger is told about a step: the device ([`DeviceFacts`]), the batch
//! ([`BatchFacts`], sampled from the batch source) and the model ([`StepSpec`]), with the
//! per-band statistics sampled from the same batches.

use serde::{Deserialize, Serialize};
use widebag_config::bands::{Band, ModelBands};
use widebag_config::{
    Activation, BandPlacement, Checkpointing, Config, CpuKernels, DenseOptim, GpuKernels, Layout,
    Logits, Precision, Screening, TableOptim, TaskKind,
};

use crate::shapes;

/// The output layer of a sparse step, chosen once from the device and the output bands: what
/// the ledger prices (one branch per kind in each stage) and what the model builds
/// (`widebag_model::output::build`; a test holds the two to the same choice). A tied output
/// layer is the host softmax whose weight is the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputLayerKind {
    /// The full softmax in class chunks on burn's tensors (wgpu, or flex's tensor path).
    ChunkedSoftmax,
    /// The full softmax on flex's host kernels, by cache-sized class block (across ranks: split
    /// by classes).
    HostSoftmax,
    /// The adaptive softmax on autodiff.
    AdaptiveSoftmax,
    /// The adaptive softmax off autodiff on widebag's CubeCL kernels (wgpu with
    /// `train.gpu_kernels = "cubecl"`, one process): the head and each tail cluster through the
    /// full softmax's passes, each stepped inside the backward pass.
    CubeAdaptiveSoftmax,
    /// The adaptive softmax on flex's host kernels (across ranks: each tail cluster at its
    /// owner).
    HostAdaptiveSoftmax,
    /// A sampled loss on autodiff over the batch's positives and the drawn negatives (one
    /// process, on either path).
    Sampled,
}

/// Where the full softmax's class chunks take their optimizer step in the sparse layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputUpdate {
    /// After the backward pass, from each chunk's whole weight and bias gradient (alive from
    /// the output's backward pass to the dense updates).
    #[default]
    AfterBackward,
    /// Inside the backward pass, each chunk's gradient formed tile by tile and applied at once
    /// (widebag's CubeCL kernels, `train.gpu_kernels = "cubecl"`, on a device of its own): no
    /// output gradient buffer.
    InBackward,
}

/// What the ledger needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// The largest single buffer.
    pub max_buffer_bytes: u64,
    /// Every allocation is rounded up to a multiple of this.
    pub alignment_bytes: u64,
    /// Threads of flex's host kernels (its softmax runs over class blocks, one scratch block
    /// per thread; see `host`); 0 on wgpu, whose step is the tensor path.
    #[serde(default)]
    pub host_threads: u64,
    /// Whether the device stores bf16 tensors (lavapipe does not; flex and most GPUs do): the
    /// solver offers bf16 moments on the device only then.
    #[serde(default)]
    pub bf16: bool,
    /// Whether the device computes in the host's memory (flex): a host tier there moves bytes
    /// within the same memory and saves none, so the solver does not offer it.
    #[serde(default)]
    pub host_memory: bool,
}

/// What the ledger needs to know about a batch (from data statistics at the batch size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFacts {
    pub n_rows: u64,
    /// Stored `(id, value)` entries.
    pub nnz: u64,
    /// Distinct ids (table rows touched).
    pub n_unique: u64,
    /// Target entries (one per row for next-id targets).
    pub n_targets: u64,
}

impl BatchFacts {
    /// The largest nnz, unique ids and targets among the batches `sampling` reads of `source`
    /// (the source is cloned, so the run still sees those batches).
    pub fn sample(
        source: &widebag_data::BatchSource,
        sampling: &Sampling,
    ) -> Result<Self, widebag_data::DataError> {
        let mut out = Self::default();
        sampling.each(source, |b| out.fold(&b))?;
        Ok(out)
    }

    /// The largest of each statistic so far and `b`'s.
    pub fn fold(&mut self, b: &widebag_csr::CsrBatch) {
        self.n_rows = self.n_rows.max(b.n_rows() as u64);
        self.nnz = self.nnz.max(b.nnz() as u64);
        self.n_unique = self.n_unique.max(b.unique_ids().len() as u64);
        self.n_targets = self.n_targets.max(b.targets().classes.len() as u64);
    }
}

/// The training batches the ledger samples: the next `n_batches` batches of `batch_size` rows
/// of a stream, the first of them step `first_step` (1-based), each with the input dropout the
/// trainer gives that step's batch (so the rows it gathers are the rows priced).
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub batch_size: usize,
    pub n_batches: usize,
    pub first_step: u64,
    pub dropout: widebag_data::InputDropout,
}

impl Sampling {
    /// The first `n_batches` batches of a run of `config` (steps 1, 2, …).
    pub fn of_run(config: &Config, n_batches: usize) -> Self {
        Self {
            batch_size: config.train.batch_size,
            n_batches,
            first_step: 1,
            dropout: widebag_data::InputDropout::new(config.model.input_dropout, config.train.seed),
        }
    }

    /// The same after `skip` batches.
    pub fn after(self, skip: usize) -> Self {
        Self {
            first_step: self.first_step + skip as u64,
            ..self
        }
    }

    /// Calls `f` with each sampled batch of `source` (a clone), as its step sees it.
    pub fn each(
        &self,
        source: &widebag_data::BatchSource,
        mut f: impl FnMut(widebag_csr::CsrBatch),
    ) -> Result<(), widebag_data::DataError> {
        let mut source = source.clone();
        for k in 0..self.n_batches.max(1) {
            let b = source.next_batch(self.batch_size)?;
            f(self.dropout.apply(b, self.first_step + k as u64));
        }
        Ok(())
    }
}

/// The step the ledger describes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSpec {
    pub layout: Layout,
    pub width: u64,
    pub n_classes: u64,
    pub dim: u64,
    pub hidden: Vec<u64>,
    pub batch: BatchFacts,
    pub table_optim: TableOptim,
    pub dense_optim: DenseOptim,
    /// `model.class_chunk` (0: as large as the buffer limit allows).
    pub class_chunk: u64,
    pub device: DeviceFacts,
    /// Input bands and where each lives (one device band: the unsplit table).
    #[serde(default)]
    pub input_bands: Vec<(Band, BandPlacement)>,
    /// Output clusters (one or none: the full softmax; more: the adaptive softmax).
    #[serde(default)]
    pub output_bands: Vec<Band>,
    /// Per tail cluster, the most batch rows with a target in it among sampled batches
    /// ([`StepSpec::sample_bands`]); empty: bounded by the batch's rows and targets.
    #[serde(default)]
    pub cluster_rows: Vec<u64>,
    /// Per input band, the most distinct ids of the band among sampled batches
    /// ([`StepSpec::sample_bands`]); empty: each band may hold all of the batch's unique ids.
    #[serde(default)]
    pub band_unique: Vec<u64>,
    /// Per input band, how its table rows are stored (empty: all f32).
    #[serde(default)]
    pub band_dtypes: Vec<Precision>,
    /// How the table optimizer's moments are stored (row-wise Adagrad's accumulator stays f32).
    #[serde(default)]
    pub state_dtype: Precision,
    /// What the MLP saves for backward (`model.checkpointing`).
    #[serde(default)]
    pub checkpointing: Checkpointing,
    /// What the full softmax keeps of its logits, or whether it tiles them (`model.logits`).
    #[serde(default)]
    pub logits: Logits,
    /// The full softmax's product operands on burn's tensors (`model.output_precision`): in a
    /// half dtype, `h` has a half copy for the step.
    #[serde(default)]
    pub output_precision: Precision,
    /// Where the full softmax's weights take their step (`train.gpu_kernels`, with
    /// [`Self::output_update`] the sparse step's resolution).
    #[serde(default)]
    pub gpu_output_update: OutputUpdate,
    /// Each layer's activation, the bag's then each hidden layer's (`ModelConfig::activations`);
    /// a `linear` layer saves no pre-activation of its own. Empty: none is linear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub activations: Vec<Activation>,
    /// The rank this step runs on in a multi-process run (`None`: one process). With it,
    /// [`Self::batch`] is the rank's own rows of the global batch ([`StepSpec::on_rank`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<RankFacts>,
    /// A sampled output loss (`model.output`), when the step runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampledFacts>,
    /// How an evaluation pass makes a ranking's class scores (`eval.screening`, where it
    /// applies: a recommender on flex's host kernels, on a CPU with a bf16 dot product).
    #[serde(default)]
    pub eval_scores: EvalScores,
}

/// How an evaluation pass scores a ranking's classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalScores {
    /// Every class in f32.
    #[default]
    F32,
    /// bf16 products screen, f32 rescoring of the survivors: the output layer packed once per
    /// evaluation (bf16 panels and f32 class rows).
    Bf16Screened,
}

/// What the ledger needs to know of a sampled output loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledFacts {
    /// Classes drawn per step (`model.sampling.negatives`).
    pub negatives: u64,
    /// Which loss (`model.output`'s name).
    pub loss: SampledLossKind,
    /// Scores by cosine (`model.score`).
    pub cosine: bool,
    /// The batch's other rows' positives are a row's negatives too
    /// (`model.sampling.batch_negatives`).
    #[serde(default = "batch_negatives_default")]
    pub batch_negatives: bool,
}

fn batch_negatives_default() -> bool {
    true
}

/// The sampled losses, as the ledger prices their autodiff graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampledLossKind {
    SampledSoftmax,
    NegativeSampling,
    CosineContrastive,
}

impl SampledFacts {
    /// The sampled loss `config` trains, if any.
    pub fn of(config: &Config) -> Option<Self> {
        use widebag_config::OutputKind::*;
        let loss = match config.model.output {
            SampledSoftmax => SampledLossKind::SampledSoftmax,
            NegativeSampling => SampledLossKind::NegativeSampling,
            CosineContrastive => SampledLossKind::CosineContrastive,
            _ => return None,
        };
        Some(Self {
            negatives: config.model.sampling.negatives as u64,
            loss,
            cosine: config.model.score == widebag_config::Score::Cosine,
            batch_negatives: config.model.sampling.batch_negatives,
        })
    }
}

/// Rank `rank` of `size` in a multi-process run, and the global batch the ranks split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankFacts {
    pub rank: u64,
    pub size: u64,
    /// The global batch (the sum of the ranks' local batches).
    pub global: BatchFacts,
}

impl StepSpec {
    /// The step of `config` with its `bands` (resolved once by run preparation,
    /// `Prepared::model_bands`) on a device with `device` facts and batches like `batch`.
    /// `model.max_buffer_mib` caps the device's buffer limit, as in the trainer.
    pub fn from_config(
        config: &Config,
        bands: &ModelBands,
        device: DeviceFacts,
        batch: BatchFacts,
    ) -> Self {
        let cap_bytes = config.model.max_buffer_mib << 20;
        let max_buffer_bytes = if cap_bytes > 0 {
            device.max_buffer_bytes.min(cap_bytes)
        } else {
            device.max_buffer_bytes
        };
        Self {
            layout: config.model.layout,
            width: config.data.width as u64,
            n_classes: config.data.n_classes() as u64,
            dim: config.model.dim as u64,
            hidden: config.model.hidden.iter().map(|&h| h as u64).collect(),
            batch,
            table_optim: config.table_optim(),
            dense_optim: config.optim.dense,
            class_chunk: config.model.class_chunk as u64,
            device: DeviceFacts {
                max_buffer_bytes,
                alignment_bytes: device.alignment_bytes,
                host_threads: match config.train.cpu_kernels {
                    CpuKernels::Host => device.host_threads,
                    CpuKernels::Tensor => 0,
                },
                bf16: device.bf16,
                host_memory: device.host_memory,
            },
            input_bands: bands
                .input
                .iter()
                .enumerate()
                .map(|(k, &b)| (b, config.model.input_bands.placement_of(k)))
                .collect(),
            output_bands: bands.output.clone(),
            cluster_rows: Vec::new(),
            band_unique: Vec::new(),
            band_dtypes: (0..bands.input.len().max(1))
                .map(|k| config.model.input_bands.dtype_of(k))
                .collect(),
            state_dtype: config.optim.state_dtype,
            checkpointing: config.model.checkpointing,
            logits: config.model.logits,
            output_precision: config.model.output_precision,
            // widebag's CubeCL kernels run on a device of its own (wgpu), not on flex.
            gpu_output_update: match (config.train.gpu_kernels, device.host_memory) {
                (GpuKernels::Cubecl, false) => OutputUpdate::InBackward,
                _ => OutputUpdate::AfterBackward,
            },
            activations: config.model.activations(),
            ranks: None,
            sampled: SampledFacts::of(config),
            eval_scores: match (
                config.task_kind(),
                config.eval.screening,
                config.train.cpu_kernels == CpuKernels::Host && device.host_threads > 0,
            ) {
                (TaskKind::Recommendation, Screening::Bf16, true) if shapes::host_bf16_dot() => {
                    EvalScores::Bf16Screened
                }
                _ => EvalScores::F32,
            },
        }
    }

    /// This step on rank `rank` of `size`: `local` is the rank's part of the batch (its
    /// `widebag_collective::partition::local_rows`, sampled at that many rows); the spec's batch
    /// becomes the global one of [`RankFacts`]. One rank: the spec unchanged.
    pub fn on_rank(mut self, rank: u64, size: u64, local: BatchFacts) -> Self {
        if size > 1 {
            let global = self.batch;
            self.ranks = Some(RankFacts { rank, size, global });
            self.batch = local;
        }
        self
    }

    /// Rows the output layer scores: the global batch when the full softmax is split by classes
    /// across ranks (every rank scores every row against its classes), else the batch's.
    pub fn output_rows(&self) -> u64 {
        match self.ranks {
            Some(r) if !self.adaptive() => r.global.n_rows,
            _ => self.batch.n_rows,
        }
    }

    /// How band `k`'s table rows are stored.
    pub fn band_dtype(&self, k: usize) -> Precision {
        self.band_dtypes.get(k).copied().unwrap_or_default()
    }

    /// The input bands (one device band of the whole width when none are set).
    pub fn bands(&self) -> Vec<(Band, BandPlacement)> {
        if self.input_bands.is_empty() {
            let whole = Band {
                start: 0,
                end: self.width as usize,
                dim: self.dim as usize,
            };
            vec![(whole, BandPlacement::Device)]
        } else {
            self.input_bands.clone()
        }
    }

    /// Samples [`Self::cluster_rows`] and [`Self::band_unique`] from the batches `sampling`
    /// reads of `source` (cloned, so the run still sees those batches).
    pub fn sample_bands(
        &mut self,
        source: &widebag_data::BatchSource,
        sampling: &Sampling,
    ) -> Result<(), widebag_data::DataError> {
        let split_input = self.input_bands.len() > 1;
        if !self.adaptive() && !split_input {
            return Ok(());
        }
        let clusters = self.output_bands.clone();
        let bands = self.bands();
        let mut most = vec![0u64; clusters.len().saturating_sub(1)];
        let mut most_unique = vec![0u64; bands.len()];
        sampling.each(source, |b| {
            let mut unique = vec![0u64; bands.len()];
            for &id in b.unique_ids() {
                let k = bands.partition_point(|(x, _)| x.end <= id as usize);
                unique[k.min(bands.len() - 1)] += 1;
            }
            for (m, u) in most_unique.iter_mut().zip(unique) {
                *m = (*m).max(u);
            }
            let t = b.targets();
            let mut count = vec![0u64; most.len()];
            for r in 0..b.n_rows() {
                let mut seen = vec![false; most.len()];
                for &class in &t.classes[t.row_ptr[r]..t.row_ptr[r + 1]] {
                    let c = clusters.partition_point(|x| x.end <= class as usize);
                    if c > 0 && !seen[c - 1] {
                        seen[c - 1] = true;
                        count[c - 1] += 1;
                    }
                }
            }
            for (m, c) in most.iter_mut().zip(count) {
                *m = (*m).max(c);
            }
        })?;
        if self.adaptive() {
            self.cluster_rows = most;
        }
        if split_input {
            self.band_unique = most_unique;
        }
        Ok(())
    }

    /// Per input band, the batch's distinct ids in it: sampled, or bounded by the batch's
    /// unique ids and the band's rows.
    pub fn unique_per_band(&self) -> Vec<u64> {
        self.bands()
            .iter()
            .enumerate()
            .map(|(k, (band, _))| match self.band_unique.get(k) {
                Some(&u) => u,
                None => self.batch.n_unique.min(band.n_rows() as u64),
            })
            .collect()
    }

    /// Whether the step runs flex's host kernels for its softmax (see `host`).
    pub fn host_kernels(&self) -> bool {
        self.device.host_threads > 0
    }

    /// Whether the full softmax keeps its `[batch, classes]` logits (flex's host adaptive
    /// softmax its `[batch, head]`) for the backward pass: `model.logits = "keep"` in one
    /// process, the sparse layout, on host kernels or the chunked softmax on tensors (the dense
    /// layout keeps them whatever the key says; the sampled and the autodiff adaptive softmax
    /// never).
    pub fn keeps_logits(&self) -> bool {
        self.logits == Logits::Keep
            && self.ranks.is_none()
            && self.layout == Layout::Sparse
            && matches!(
                self.output_layer(),
                OutputLayerKind::HostSoftmax
                    | OutputLayerKind::HostAdaptiveSoftmax
                    | OutputLayerKind::ChunkedSoftmax
            )
    }

    /// Whether the full softmax forms its logits tile by tile inside widebag's CubeCL kernels
    /// (`model.logits = "tiled"`, the sparse layout's chunked softmax or the adaptive softmax's
    /// clusters, the kernels on a device of its own): no chunk's or cluster's logits are
    /// written in either pass.
    pub fn tiles_logits(&self) -> bool {
        self.logits == Logits::Tiled
            && self.layout == Layout::Sparse
            && match self.output_layer() {
                OutputLayerKind::ChunkedSoftmax => {
                    self.gpu_output_update == OutputUpdate::InBackward
                }
                OutputLayerKind::CubeAdaptiveSoftmax => true,
                _ => false,
            }
    }

    /// Where the step's output layer takes its optimizer step: inside the backward pass only
    /// with the CubeCL kernels on a device of its own, for the full softmax on tensors (the
    /// sparse layout's chunked softmax, the dense layout's one chunk) and the adaptive softmax
    /// on the kernels.
    pub fn output_update(&self) -> OutputUpdate {
        match (self.layout, self.output_layer()) {
            (Layout::Sparse, OutputLayerKind::ChunkedSoftmax) => self.gpu_output_update,
            (_, OutputLayerKind::CubeAdaptiveSoftmax) => OutputUpdate::InBackward,
            (Layout::Dense, _) if !self.host_kernels() => self.gpu_output_update,
            _ => OutputUpdate::AfterBackward,
        }
    }

    /// Whether the sampled step runs on flex's host kernels (the sampled softmax with the
    /// batch's positives as negatives: the host softmax's kernel over the gathered columns).
    pub fn sampled_on_host(&self) -> bool {
        self.host_kernels()
            && self
                .sampled
                .is_some_and(|s| s.loss == SampledLossKind::SampledSoftmax && s.batch_negatives)
    }

    /// Whether the output is the adaptive softmax.
    pub fn adaptive(&self) -> bool {
        self.output_bands.len() > 1
    }

    /// The output layer the step runs, as the ledger prices it: the full softmax or the
    /// adaptive softmax, on the tensor path or on flex's host kernels.
    pub fn output_layer(&self) -> OutputLayerKind {
        if self.sampled.is_some() {
            return OutputLayerKind::Sampled;
        }
        match (self.adaptive(), self.host_kernels()) {
            (false, false) => OutputLayerKind::ChunkedSoftmax,
            (false, true) => OutputLayerKind::HostSoftmax,
            (true, false) => match (self.gpu_output_update, self.ranks.is_none()) {
                (OutputUpdate::InBackward, true) => OutputLayerKind::CubeAdaptiveSoftmax,
                _ => OutputLayerKind::AdaptiveSoftmax,
            },
            (true, true) => OutputLayerKind::HostAdaptiveSoftmax,
        }
    }

    /// Upper bounds of the bytes host bands move per step, `(to the device, back)`: each host
    /// band's distinct ids of the batch ([`Self::unique_per_band`]) at its width, with the table
    /// optimizer's state rows.
    pub fn host_traffic_bytes(&self) -> (u64, u64) {
        // AdamW gathers its rows twice (catch-up and update).
        let extra = u64::from(self.table_optim == TableOptim::AdamW);
        let moved_bytes: u64 = self
            .bands()
            .iter()
            .zip(self.unique_per_band())
            .filter(|((_, p), _)| *p == BandPlacement::Host)
            .map(|((b, _), rows)| {
                let d = b.dim as u64;
                shapes::f32_bytes(rows * ((1 + extra) * d + self.table_optim.state_per_row(d)))
            })
            .sum();
        (moved_bytes, moved_bytes)
    }

    /// Input size of every layer after the first: `dim`, then each hidden size.
    pub(super) fn layer_sizes(&self) -> Vec<u64> {
        std::iter::once(self.dim)
            .chain(self.hidden.iter().copied())
            .collect()
    }

    /// Whether layer `l` (0: the bag) is linear: its output is its pre-activation.
    pub(super) fn linear_layer(&self, l: usize) -> bool {
        self.activations.get(l) == Some(&Activation::Linear)
    }

    pub(super) fn last_hidden(&self) -> u64 {
        self.hidden.last().copied().unwrap_or(self.dim)
    }

    /// A sampled step's candidates at most: the batch's targets and the drawn classes, no
    /// more than every class; on wgpu padded to its length bucket
    /// ([`shapes::step_length_bucket`]: the step fills it with more drawn classes).
    pub fn sampled_candidates(&self) -> u64 {
        let Some(s) = self.sampled else { return 0 };
        let most = (self.batch.n_targets + s.negatives).min(self.n_classes);
        match self.sampled_padded() {
            false => most,
            true => shapes::step_length_bucket(most as usize, self.n_classes as usize) as u64,
        }
    }

    /// Whether a sampled step pads its candidates and target entries to their length buckets:
    /// on a device that compiles its kernels (wgpu), not on flex.
    fn sampled_padded(&self) -> bool {
        self.sampled.is_some() && !self.device.host_memory
    }

    /// A sampled step's target entries at most: on wgpu padded to their length bucket (the
    /// padding weighs nothing).
    pub fn sampled_targets(&self) -> u64 {
        let n = self.batch.n_targets;
        match self.sampled_padded() {
            true => shapes::step_length_bucket(n as usize, usize::MAX) as u64,
            false => n,
        }
    }
}

/// The seed model (240,000 ids and classes, dim 1,024, one hidden layer of 512) at batch 128 on
/// a lavapipe-like device: the step the tests take apart.
#[cfg(test)]
pub(super) fn seed_spec(layout: Layout, dense_optim: DenseOptim) -> StepSpec {
    StepSpec {
        layout,
        width: 240_000,
        n_classes: 240_000,
        dim: 1024,
        hidden: vec![512],
        batch: BatchFacts {
            n_rows: 128,
            nnz: 2_560,
            n_unique: 1_400,
            n_targets: 128,
        },
        table_optim: TableOptim::Adam,
        dense_optim,
        class_chunk: 0,
        device: DeviceFacts {
            max_buffer_bytes: 128 << 20,
            alignment_bytes: 32,
            host_threads: 0,
            bf16: false,
            host_memory: false,
        },
        input_bands: Vec::new(),
        output_bands: Vec::new(),
        cluster_rows: Vec::new(),
        band_unique: Vec::new(),
        band_dtypes: Vec::new(),
        state_dtype: Precision::F32,
        checkpointing: Checkpointing::None,
        logits: Logits::Recompute,
        output_precision: Precision::F32,
        gpu_output_update: OutputUpdate::AfterBackward,
        activations: Vec::new(),
        ranks: None,
        sampled: None,
        eval_scores: EvalScores::F32,
    }
}
