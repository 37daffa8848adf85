//! The configuration schema: the `[data]`, `[model]`, `[train]`, `[optim]` and `[plan]` sections
//! with their serde defaults (`Config::default()` is the schema's defaults; the quickstart layers
//! over them).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use widebag_kinds::{Format, LabelMode, ShuffleMode, TargetKind, TextMode, TokenFormat};

use crate::band_keys::{InputBands, OutputBands};
use crate::choices::{
    Activation, Checkpointing, CpuKernels, DenseOptim, DeviceChoice, GpuKernels, InputInit, Layout,
    Logits, Precision, RecallConvention, Rounding, Schedule, Screening, TableOptim,
};
use crate::sampling::{Pooling, SamplingConfig, Score};

/// `[data]`: where batches come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Input width (number of distinct ids).
    pub width: usize,
    /// Output classes; defaults to the width (next-id targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_classes: Option<usize>,
    /// Mean ids drawn per row.
    pub nnz: f64,
    /// Half-width of the uniform spread of ids per row.
    pub nnz_spread: f64,
    pub zipf_exponent: f64,
    /// Share of a row's ids that carry signal about its target.
    pub signal_share: f64,
    pub target: TargetKind,
    /// A data file (or directory, for `text`) to train on instead of synthetic data. The file
    /// then decides the width and the classes; the synthetic keys above are not used. Relative
    /// to the working directory; a leading `~/` is the home directory (`$HOME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Format of `path`: `libsvm`, `npz`, `lightgcn`, `text` or `dictd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// A held-out file in the same format, read with the training file's width, id numbering
    /// and vocabulary (`lightgcn`: the held-out interactions of the training users).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_path: Option<PathBuf>,
    /// Scale each input bag to unit L2 norm (Mult-DAE/Mult-VAE's `F.normalize`).
    pub normalize: bool,
    /// `lightgcn`: > 0 gives each user its own input column past the items, of this value in
    /// its bag (before `normalize`), so the input table learns a vector per user that is added
    /// to its items' (SimpleX's user vector beside the pooled items); 0: none.
    pub user_vector: f32,
    /// `text`/`dictd`: `bow` (one row per document) or `cbow` (one row per word).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<TextMode>,
    /// `cbow`: context words on each side.
    pub window: usize,
    /// `text`/`dictd`: words seen fewer times are left out of the vocabulary.
    pub min_count: u64,
    /// `text`/`dictd`: the most words kept; 0 keeps all.
    pub max_vocab: usize,
    /// `text`/`dictd`: `plain`, or `tagged` for `word/TAG` tokens (Brown corpus).
    pub tokens: TokenFormat,
    /// `text` in bow mode: a document's target is its own bag of words (`bag`), or one class
    /// (`file_name`: the label cut from the document's file name by `label_chars`; classes are
    /// the sorted distinct labels of the training documents, so `data.path` is a directory).
    pub label: LabelMode,
    /// `label = "file_name"`: the characters `[start, end)` of the file name that are the label
    /// (Brown's genre letter of `ca01`: `[1, 2]`); `[0, 0]` takes the whole name.
    pub label_chars: [usize; 2],
    /// `libsvm`: ids are 0-based (true) or 1-based (false); detected when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_based: Option<bool>,
    /// Skip malformed lines (counted and reported) instead of refusing the file.
    pub skip_bad_lines: bool,
    /// How a data file's rows are shuffled each epoch: `rows` (one permutation of every row)
    /// or `blocks` (the blocks permuted, then the rows within windows of `shuffle_rows` rows:
    /// reads a window at a time, for data larger than memory).
    pub shuffle: ShuffleMode,
    /// `shuffle = "blocks"`: rows in a window (whole blocks).
    pub shuffle_rows: usize,
    /// `shuffle = "blocks"`: rows in a block, the unit the blocks are permuted in (the same
    /// for a file and its packed form, whatever the packed blocks' size, so both shuffle
    /// alike; packed blocks of this size read each shuffled block from one place).
    pub shuffle_block_rows: usize,
    /// `shuffle = "blocks"`: streams the file's blocks are cut into (contiguous spans, each
    /// shuffled on its own; every batch takes an equal share of each, whole batches only). A
    /// run across N ranks (N dividing it) then has each rank read only its streams' blocks,
    /// and trains as one process with the same streams does. 1: one walk over every block.
    pub shuffle_streams: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            width: 240_000,
            n_classes: None,
            nnz: 20.0,
            nnz_spread: 10.0,
            zipf_exponent: 1.05,
            signal_share: 0.5,
            target: TargetKind::NextId,
            path: None,
            format: None,
            test_path: None,
            normalize: false,
            user_vector: 0.0,
            mode: None,
            window: 2,
            min_count: 1,
            max_vocab: 0,
            tokens: TokenFormat::Plain,
            label: LabelMode::Bag,
            label_chars: [0, 0],
            zero_based: None,
            skip_bad_lines: false,
            shuffle: ShuffleMode::Rows,
            shuffle_rows: 65_536,
            shuffle_block_rows: 4096,
            shuffle_streams: 1,
        }
    }
}

impl DataConfig {
    pub fn n_classes(&self) -> usize {
        self.n_classes.unwrap_or(self.width)
    }

    /// `data.path` as it is read (`~/` expanded), when the run trains on a file.
    pub fn resolved_path(&self) -> Option<PathBuf> {
        self.path.as_deref().map(home)
    }

    /// `data.test_path` as it is read (`~/` expanded), when there is one.
    pub fn resolved_test_path(&self) -> Option<PathBuf> {
        self.test_path.as_deref().map(home)
    }
}

/// `path` with a leading `~/` replaced by `$HOME` (when set); other paths as they are.
fn home(path: &std::path::Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(h)) => PathBuf::from(h).join(rest),
        _ => path.to_path_buf(),
    }
}

/// `[model]`: embedding bag → ReLU MLP → softmax over the classes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// `sparse` (embedding bag, row-sparse updates) or `dense` (the naive baseline).
    pub layout: Layout,
    /// Embedding-bag output size (the first layer, width → dim).
    pub dim: usize,
    /// Hidden layer sizes after the bag, each followed by ReLU.
    pub hidden: Vec<usize>,
    /// Classes per output chunk; 0 picks the largest chunk the device's buffer limit allows.
    pub class_chunk: usize,
    /// Caps any single device buffer (MiB) below the adapter's own limit; 0 keeps the adapter's.
    pub max_buffer_mib: u64,
    /// `none`, or `mlp`: the MLP's activations are recomputed in backward instead of saved
    /// (sparse layout).
    pub checkpointing: Checkpointing,
    /// `recompute` (the default), or `keep`: the full softmax's `[batch, classes]` logits (the
    /// adaptive softmax's `[batch, head]`) kept for the backward pass on flex's host kernels (one
    /// output matmul fewer per step); or `tiled`: never written, formed tile by tile inside
    /// widebag's CubeCL kernels in both passes (wgpu, `train.gpu_kernels = "cubecl"`).
    pub logits: Logits,
    /// The operands of the full softmax's three products (the logits, `dL/dh` and the weight
    /// gradient) on burn's tensors: `f32` (the default), or `f16`/`bf16` operands summed in f32
    /// (the products a GPU's tensor cores take, through SPIR-V's cooperative matrices); the
    /// softmax, the loss and every gradient stay f32. Not on flex's host kernels.
    #[serde(skip_serializing_if = "Precision::is_f32")]
    pub output_precision: Precision,
    /// The output objective: `full` softmax, `adaptive` softmax (`output_bands`), or
    /// `multinomial` (a target bag's counts, full or, with `output_bands`, adaptive).
    pub output: OutputKind,
    /// The hidden layers' activation: `relu`, `tanh` or `linear`.
    pub activation: Activation,
    /// The last layer's activation (the last of `hidden`, or the bag's without hidden layers)
    /// when it differs from `activation`: `linear` makes it a low-rank projection into the output
    /// layer. Unset: `activation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_activation: Option<Activation>,
    /// How the input table starts: `uniform` (variance 1 / dim), `normal` (N(0, 1), as
    /// PyTorch's EmbeddingBag) or `fan_in` (U(±1/sqrt(width)), as PyTorch's Linear).
    pub input_init: InputInit,
    /// Dropout on the input bag in training: each entry is dropped with this probability and
    /// the rest scaled by `1 / (1 − p)` (Mult-DAE's input dropout). 0: none.
    pub input_dropout: f64,
    /// The output layer's weight is the input table, transposed (one item vector per id on
    /// both sides; the classes are the input ids). The table then has no optimizer of its own:
    /// `optim.dense` updates it with the gradient of both uses. Flex's host kernels, one process.
    pub tie_output: bool,
    /// How the output layer scores a class: `dot` (`h · w + b`) or `cosine`
    /// (`cos(h, w) / model.temperature`), in training and in evaluation.
    pub score: Score,
    /// Divides cosine scores (`model.score = "cosine"`): 1 with dot scores.
    pub temperature: f64,
    /// How the input bag is pooled: `sum` of its rows by value, or their `mean`.
    pub pooling: Pooling,
    /// The sampled output losses' negatives and constants.
    pub sampling: SamplingConfig,
    /// Head/tail bands of the input ids (adaptive input).
    pub input_bands: InputBands,
    /// Head shortlist and tail clusters of the output classes (adaptive softmax).
    pub output_bands: OutputBands,
}

/// The output objective.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Softmax cross-entropy against each row's target distribution (a bag's weights are
    /// normalised to sum to 1; a next-id target is one class of weight 1).
    #[default]
    Full,
    /// Adaptive softmax (Grave et al. 2017): a head shortlist plus one token per tail cluster,
    /// tail clusters with reduced dims; only clusters that hold a target are evaluated in training.
    Adaptive,
    /// Multinomial likelihood of a target bag (Mult-DAE/Mult-VAE): `-sum_j x_j log p_j` with the
    /// bag's raw counts; adaptive when `model.output_bands.cutoffs` is set.
    Multinomial,
    /// Softmax over the batch's positives and `model.sampling.negatives` drawn classes, each
    /// drawn score less the log of its probability of being drawn (log-Q; Jean et al. 2015,
    /// Yi et al. 2019), against the targets' raw weights. Every class drawn: `multinomial`.
    SampledSoftmax,
    /// word2vec's negative sampling: `−log σ(s)` for each target, `−log σ(−s)` for each drawn
    /// negative, per unit of target weight.
    NegativeSampling,
    /// SimpleX's cosine contrastive loss (Mao et al. 2021): `1 − cos` for each target, and
    /// `model.sampling.negative_weight` times the mean of `max(0, cos − margin)` over the
    /// row's negatives (the drawn classes and the batch's other positives), per unit of target
    /// weight.
    CosineContrastive,
}

impl OutputKind {
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Full => "full",
            OutputKind::Adaptive => "adaptive",
            OutputKind::Multinomial => "multinomial",
            OutputKind::SampledSoftmax => "sampled_softmax",
            OutputKind::NegativeSampling => "negative_sampling",
            OutputKind::CosineContrastive => "cosine_contrastive",
        }
    }

    /// Whether training scores only the batch's positives and drawn negatives.
    pub fn sampled(self) -> bool {
        matches!(
            self,
            OutputKind::SampledSoftmax
                | OutputKind::NegativeSampling
                | OutputKind::CosineContrastive
        )
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            layout: Layout::Sparse,
            dim: 32,
            hidden: vec![64],
            class_chunk: 0,
            max_buffer_mib: 0,
            checkpointing: Checkpointing::None,
            logits: Logits::Recompute,
            output_precision: Precision::F32,
            output: OutputKind::Full,
            activation: Activation::Relu,
            last_activation: None,
            input_init: InputInit::Uniform,
            input_dropout: 0.0,
            tie_output: false,
            score: Score::Dot,
            temperature: 1.0,
            pooling: Pooling::Sum,
            sampling: SamplingConfig::default(),
            input_bands: InputBands::default(),
            output_bands: OutputBands::default(),
        }
    }
}

/// `[train]`: the loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    pub batch_size: usize,
    pub steps: usize,
    /// Passes over a data file's training rows, reshuffled every epoch from the seed: an
    /// alternative to `train.steps` (setting both is an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<usize>,
    pub seed: u64,
    pub device: DeviceChoice,
    /// Held-out rows for the validation loss reported at the end of a run (0: none). Synthetic
    /// data draws them from a row range training never reaches; a data file sets aside that many
    /// rows, chosen by a seeded hash, and trains on the rest.
    pub eval_rows: usize,
    /// Evaluate every this many steps (epochs when `train.epochs` is set), and at the end of
    /// the run; 0: at the end only.
    pub eval_every: usize,
    /// Write a checkpoint every this many steps into the run directory (`--out`), and at the
    /// end; 0: at the end only.
    pub checkpoint_every: usize,
    /// On the CPU backend: the softmax, the dense optimizers and the table updates on widebag's
    /// host kernels (`"host"`, the default) or as burn's tensor operations (`"tensor"`, the
    /// reference path). No effect on wgpu.
    pub cpu_kernels: CpuKernels,
    /// On wgpu: the full softmax's row log-sum-exp and logit gradient as burn's tensor
    /// operations (`"tensor"`, the default) or on widebag's CubeCL kernels (`"cubecl"`). No
    /// effect on flex.
    pub gpu_kernels: GpuKernels,
    /// Stop at the first evaluation whose `train.stop_at_metric` reaches `train.stop_at_value`:
    /// the time to a result. The learning-rate schedule stays the configured run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_at_metric: Option<String>,
    /// The value `train.stop_at_metric` has to reach: at least it, or at most it for
    /// `perplexity`, `nll` and `bits_per_token` (lower is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_at_value: Option<f64>,
}

impl TrainConfig {
    /// Whether `value` of `metric` reaches the stop target (`train.stop_at_*`).
    pub fn reaches_stop(&self, metric: &str, value: f64) -> bool {
        match (&self.stop_at_metric, self.stop_at_value) {
            (Some(m), Some(target)) if m == metric => match lower_is_better(metric) {
                true => value <= target,
                false => value >= target,
            },
            _ => false,
        }
    }
}

/// Metrics where a smaller value is better.
pub fn lower_is_better(metric: &str) -> bool {
    matches!(metric, "perplexity" | "nll" | "bits_per_token")
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            batch_size: 64,
            steps: 100,
            epochs: None,
            seed: 0,
            device: DeviceChoice::Auto,
            eval_rows: 0,
            eval_every: 0,
            checkpoint_every: 0,
            cpu_kernels: CpuKernels::Host,
            gpu_kernels: GpuKernels::Tensor,
            stop_at_metric: None,
            stop_at_value: None,
        }
    }
}

/// `[optim]`: optimizers and their hyper-parameters. Defaults follow PyTorch: Adam betas
/// (0.9, 0.999), eps 1e-8, no weight decay; SGD without momentum or dampening.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    pub dense: DenseOptim,
    pub table: TableOptim,
    /// Learning rate of the dense layers.
    pub lr: f64,
    /// Learning rate of the table; defaults to `lr`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_lr: Option<f64>,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// `momentum`: the momentum factor (PyTorch's SGD, no dampening, no Nesterov).
    pub momentum: f64,
    /// `adamw`: decoupled weight decay (PyTorch's AdamW default, 0.01). Other optimizers ignore it.
    pub weight_decay: f64,
    /// The learning-rate schedule of both optimizers: `constant`, `cosine` or `linear` decay.
    pub schedule: Schedule,
    /// Steps of linear warm-up from 0 before the schedule.
    pub warmup_steps: usize,
    /// Storage of the table optimizer's moments (momentum, Adam's m and v): `"f32"`, `"f16"` or
    /// `"bf16"`. Row-wise Adagrad's accumulator stays f32.
    pub state_dtype: Precision,
    /// How f32 updates are rounded into f16/bf16 tables and state: `"stochastic"` or `"nearest"`.
    pub rounding: Rounding,
    /// Steps the schedule spans: the run's `train.steps`, set by the trainer (not a key).
    #[serde(skip)]
    pub schedule_steps: u64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            dense: DenseOptim::Adam,
            table: TableOptim::Adam,
            lr: 1e-3,
            table_lr: None,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            momentum: 0.9,
            weight_decay: 0.01,
            schedule: Schedule::Constant,
            warmup_steps: 0,
            state_dtype: Precision::F32,
            rounding: Rounding::Stochastic,
            schedule_steps: 0,
        }
    }
}

impl OptimConfig {
    pub fn table_lr(&self) -> f64 {
        self.table_lr.unwrap_or(self.lr)
    }

    /// The dense layers' learning rate at `step` (1-based) under the schedule.
    pub fn lr_at(&self, step: u64) -> f64 {
        self.lr * self.factor_at(step)
    }

    /// The table's learning rate at `step` (1-based) under the schedule.
    pub fn table_lr_at(&self, step: u64) -> f64 {
        self.table_lr() * self.factor_at(step)
    }

    fn factor_at(&self, step: u64) -> f64 {
        let total = self.schedule_steps.max(1);
        self.schedule.factor(step, total, self.warmup_steps as u64)
    }
}

/// `[eval]`: held-out evaluation's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Cut-offs of the ranking metrics (Recall@K, NDCG@K).
    pub k: Vec<usize>,
    /// Recall's denominator: `lightgcn` (hits / |test items|) or `multvae`
    /// (hits / min(K, |test items|)).
    pub recall: RecallConvention,
    /// Ranking scores on flex: `bf16` (screened by bf16 products, exact top-K by f32
    /// rescoring, where the CPU has AVX-512 BF16) or `off` (every class in f32).
    pub screening: Screening,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            k: vec![20],
            recall: RecallConvention::Lightgcn,
            screening: Screening::Bf16,
        }
    }
}

/// What the budget solver maximises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// The largest batch (up to `plan.max_batch`), then the most capable optimizers that fit at it.
    #[default]
    Batch,
    /// The largest predicted examples/s (the solver's documented throughput model).
    Throughput,
}

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::Batch => "batch",
            Objective::Throughput => "throughput",
        }
    }
}

/// The choices the budget solver may make (and a config may pin with `plan.pin`).
pub const PLAN_KNOBS: [&str; 11] = [
    "train.batch_size",
    "optim.table",
    "optim.dense",
    "model.input_bands.placement",
    "model.input_bands.dtype",
    "optim.state_dtype",
    "model.class_chunk",
    "model.checkpointing",
    "model.logits",
    "model.input_bands.cutoffs",
    "model.output_bands",
];

/// `[plan]`: the budget solver (`widebag plan`, `widebag train --budget`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanConfig {
    /// Memory budget with units (`6GiB`, `512MiB`, `8GB`, bytes); unset: the device's memory
    /// minus the reserve, when the device reports it. `--budget` overrides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    pub objective: Objective,
    /// The smallest batch the solver may choose.
    pub min_batch: usize,
    /// The largest batch the solver considers.
    pub max_batch: usize,
    /// Knobs the solver keeps at the config's value: any of `train.batch_size`, `optim.table`,
    /// `optim.dense` (keys given with `--set` on the command line are pinned too).
    pub pin: Vec<String>,
    /// Never take a remedy that costs accuracy (head/tail input bands, the adaptive softmax): a
    /// budget that needs one is refused, naming the smallest budget that does not.
    pub keep_accuracy: bool,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            budget: None,
            objective: Objective::Batch,
            min_batch: 1,
            max_batch: 4096,
            pin: Vec::new(),
            keep_accuracy: false,
        }
    }
}

/// A whole run configuration. `Config::default()` is the built-in quickstart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub data: DataConfig,
    pub model: ModelConfig,
    pub train: TrainConfig,
    pub optim: OptimConfig,
    pub eval: EvalConfig,
    pub plan: PlanConfig,
}
