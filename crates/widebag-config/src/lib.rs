//! The run configuration: typed sections with the quickstart as defaults, TOML files, `--set`
//! overrides, and errors that name the file, the line and the key.
//!
//! Loading is layered: built-in defaults, then an optional TOML file, then `--set key=value`
//! overrides in order. Every key is checked against the schema (an unknown key is refused with the
//! nearest valid one), the merged table is deserialised with the failing key's path, and every
//! value is range-checked. The error says where the offending value came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
pub use widebag_data::{Format, TargetKind, TextMode, TokenFormat};

pub mod bands;
pub mod data;
mod locate;
pub mod sweep;
pub mod units;

pub use data::{BandReport, DataSummary, Prepared, open_data, synthetic_spec};

/// The built-in quickstart, layered over the schema defaults when no `--config` is given.
pub const QUICKSTART_TOML: &str = include_str!("../../../configs/quickstart.toml");
/// How the quickstart is named in error messages.
pub const QUICKSTART_NAME: &str = "<built-in quickstart: configs/quickstart.toml>";

/// Which device the run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    /// wgpu when an adapter exists, else the flex CPU backend (with a one-line notice).
    Auto,
    /// wgpu only; an error when no adapter is found.
    Wgpu,
    /// burn's flex CPU backend.
    Cpu,
}

/// Optimizer of the dense layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenseOptim {
    Sgd,
    /// SGD with a momentum buffer (PyTorch's, no dampening): one state tensor per weight.
    Momentum,
    Adam,
    /// Adam with decoupled weight decay (`optim.weight_decay`), as `torch.optim.AdamW`.
    #[serde(rename = "adamw")]
    AdamW,
}

impl DenseOptim {
    pub const ALL: [DenseOptim; 4] = [
        DenseOptim::Sgd,
        DenseOptim::Momentum,
        DenseOptim::Adam,
        DenseOptim::AdamW,
    ];

    /// State tensors kept per parameter tensor, each of its shape.
    pub fn state_per_weight(self) -> u64 {
        match self {
            DenseOptim::Sgd => 0,
            DenseOptim::Momentum => 1,
            DenseOptim::Adam | DenseOptim::AdamW => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DenseOptim::Sgd => "sgd",
            DenseOptim::Momentum => "momentum",
            DenseOptim::Adam => "adam",
            DenseOptim::AdamW => "adamw",
        }
    }
}

/// How the model is laid out on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Embedding bag over a row-sharded table off autodiff, chunked softmax: only the rows a
    /// batch touches get gradients and updates.
    #[default]
    Sparse,
    /// The naive baseline as a PyTorch user writes it: a dense `[batch, width]` input, a dense
    /// first-layer weight on autodiff, full `[batch, classes]` logits. Every weight gets a dense
    /// gradient and the dense optimizer.
    Dense,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Sparse => "sparse",
            Layout::Dense => "dense",
        }
    }
}

/// Optimizer of the embedding table (row-sparse: only touched rows are updated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableOptim {
    /// Row-sparse SGD.
    Sgd,
    /// Row-sparse momentum SGD: a momentum buffer in the table's row layout, updated (and
    /// applied) only for the rows a batch touches (`optim.momentum`).
    Momentum,
    /// Lazy Adam (PyTorch `SparseAdam`): moments of touched rows only, global step count.
    Adam,
    /// Lazy AdamW: lazy Adam with decoupled weight decay (`optim.weight_decay`) and catch-up: a
    /// row untouched for k steps gets, when next touched, the k decayed-moment updates and decays
    /// it missed, so it equals dense AdamW.
    #[serde(rename = "adamw")]
    AdamW,
    /// Row-wise Adagrad (TorchRec's `EXACT_ROWWISE_ADAGRAD`): one accumulator value per row,
    /// `G_r += mean_j g_rj²`, `w_r -= lr · g_r / (√G_r + eps)`.
    RowwiseAdagrad,
}

impl TableOptim {
    pub const ALL: [TableOptim; 5] = [
        TableOptim::Sgd,
        TableOptim::Momentum,
        TableOptim::Adam,
        TableOptim::AdamW,
        TableOptim::RowwiseAdagrad,
    ];

    /// State values kept per table row of `dim` values.
    pub fn state_per_row(self, dim: u64) -> u64 {
        match self {
            TableOptim::Sgd => 0,
            TableOptim::Momentum => dim,
            TableOptim::Adam | TableOptim::AdamW => 2 * dim,
            TableOptim::RowwiseAdagrad => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TableOptim::Sgd => "sgd",
            TableOptim::Momentum => "momentum",
            TableOptim::Adam => "adam",
            TableOptim::AdamW => "adamw",
            TableOptim::RowwiseAdagrad => "rowwise_adagrad",
        }
    }
}

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
    /// then decides the width and the classes; the synthetic keys above are not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Format of `path`: `libsvm`, `npz`, `lightgcn`, `text` or `dictd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// `lightgcn`: the held-out interactions file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_path: Option<PathBuf>,
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
    /// `libsvm`: ids are 0-based (true) or 1-based (false); detected when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_based: Option<bool>,
    /// Skip malformed lines (counted and reported) instead of refusing the file.
    pub skip_bad_lines: bool,
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
            mode: None,
            window: 2,
            min_count: 1,
            max_vocab: 0,
            tokens: TokenFormat::Plain,
            zero_based: None,
            skip_bad_lines: false,
        }
    }
}

impl DataConfig {
    pub fn n_classes(&self) -> usize {
        self.n_classes.unwrap_or(self.width)
    }

    /// The data file to read, when the run trains on one (validated: `format` is set).
    pub fn source(&self) -> Option<widebag_data::Source> {
        let (path, format) = (self.path.as_ref()?, self.format?);
        let mut s = widebag_data::Source::new(path, format);
        s.test_path = self.test_path.clone();
        s.read.zero_based = self.zero_based;
        s.read.skip_bad_lines = self.skip_bad_lines;
        s.text = widebag_data::TextOptions {
            mode: self.mode.unwrap_or_default(),
            window: self.window,
            min_count: self.min_count,
            max_vocab: self.max_vocab,
            tokens: self.tokens,
        };
        Some(s)
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
    /// The output objective: `full` softmax, `adaptive` softmax (`output_bands`), or
    /// `multinomial` (a target bag's counts, full or, with `output_bands`, adaptive).
    pub output: OutputKind,
    /// Head/tail bands of the input ids (adaptive input).
    pub input_bands: InputBands,
    /// Head shortlist and tail clusters of the output classes (adaptive softmax).
    pub output_bands: OutputBands,
}

impl ModelConfig {
    /// Size of the last hidden representation (the output layer's input).
    pub fn last_hidden(&self) -> usize {
        self.hidden.last().copied().unwrap_or(self.dim)
    }
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
}

impl OutputKind {
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Full => "full",
            OutputKind::Adaptive => "adaptive",
            OutputKind::Multinomial => "multinomial",
        }
    }
}

/// Where a band's table and its optimizer state live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BandPlacement {
    #[default]
    Device,
    /// Host memory: the device gets only a batch's unique rows (and their state) each step and
    /// sends back only the updates.
    Host,
}

/// How ids are numbered before they are cut into bands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdOrder {
    /// Renumbered by their frequency in the data (most frequent first), so the head band holds
    /// the most frequent ids whatever the data's own numbering (hashed ids, item ids).
    #[default]
    Frequency,
    /// The data's own numbering (already frequency-sorted, e.g. a text reader's vocabulary).
    Data,
}

impl BandPlacement {
    pub fn name(self) -> &'static str {
        match self {
            BandPlacement::Device => "device",
            BandPlacement::Host => "host",
        }
    }
}

/// Band boundaries over frequency-sorted ids: `"auto"` (chosen from the data's frequencies and
/// a byte budget) or explicit ascending cutoffs (`[20000, 80000]`: ids below 20,000 are the
/// head, 20,000–79,999 the first tail band, the rest the second). Empty: one band.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Cutoffs {
    Auto,
    #[default]
    None,
    Ids(Vec<usize>),
}

impl Cutoffs {
    /// The explicit cutoffs (empty for `None`; `Auto` is resolved by `open_data`).
    pub fn ids(&self) -> &[usize] {
        match self {
            Cutoffs::Ids(v) => v,
            _ => &[],
        }
    }
    pub fn is_split(&self) -> bool {
        !matches!(self, Cutoffs::None)
    }
}

impl Serialize for Cutoffs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cutoffs::Auto => s.serialize_str("auto"),
            Cutoffs::None => Vec::<usize>::new().serialize(s),
            Cutoffs::Ids(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Cutoffs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Cutoffs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "\"auto\" or a list of ascending ids")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Cutoffs, E> {
                if v == "auto" {
                    Ok(Cutoffs::Auto)
                } else {
                    Err(E::custom(format!(
                        "expected \"auto\" or a list of ascending ids, found \"{v}\""
                    )))
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Cutoffs, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = a.next_element::<usize>()? {
                    out.push(x);
                }
                Ok(if out.is_empty() {
                    Cutoffs::None
                } else {
                    Cutoffs::Ids(out)
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `[model.input_bands]`: adaptive input. Band 0 (the head) has `model.dim`-wide rows; tail band
/// `k` has `dim / factor^k`-wide rows (at least 1) and a learned `[dim_k, dim]` projection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputBands {
    pub cutoffs: Cutoffs,
    pub factor: usize,
    /// Placement of band k: `placement[min(k, len - 1)]`, so `["device", "host"]` keeps the
    /// head on the device and every tail band in host memory.
    pub placement: Vec<BandPlacement>,
    /// `"frequency"` renumbers the ids by their frequency in the data before the cut.
    pub order: IdOrder,
    /// `cutoffs = "auto"`: bytes the bands' tables, projections and table-optimizer state may
    /// take (units as `plan.budget`); unset: a fifth of the unsplit table's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

impl Default for InputBands {
    fn default() -> Self {
        Self {
            cutoffs: Cutoffs::None,
            factor: 4,
            placement: vec![BandPlacement::Device],
            order: IdOrder::Frequency,
            budget: None,
        }
    }
}

impl InputBands {
    pub fn placement_of(&self, band: usize) -> BandPlacement {
        self.placement
            .get(band.min(self.placement.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    }
}

/// `[model.output_bands]`: adaptive softmax. The head holds classes below the first cutoff plus
/// one token per tail cluster, on the last hidden size `h`; tail cluster `k` projects `h` to
/// `h / factor^k` (at least 1) and has its own softmax over its classes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputBands {
    pub cutoffs: Cutoffs,
    pub factor: usize,
    /// `"frequency"` renumbers the classes by their frequency in the data before the cut.
    pub order: IdOrder,
    /// `cutoffs = "auto"`: bytes the output layer's parameters and dense-optimizer state may take;
    /// unset: a fifth of the full output layer's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

impl Default for OutputBands {
    fn default() -> Self {
        Self {
            cutoffs: Cutoffs::None,
            factor: 4,
            order: IdOrder::Frequency,
            budget: None,
        }
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
            output: OutputKind::Full,
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
    pub seed: u64,
    pub device: DeviceChoice,
    /// Held-out rows for the validation loss reported at the end of a run (0: none). Synthetic
    /// data draws them from a row range training never reaches; a data file sets aside that many
    /// rows, chosen by a seeded hash, and trains on the rest.
    pub eval_rows: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            batch_size: 64,
            steps: 100,
            seed: 0,
            device: DeviceChoice::Auto,
            eval_rows: 0,
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
        }
    }
}

impl OptimConfig {
    pub fn table_lr(&self) -> f64 {
        self.table_lr.unwrap_or(self.lr)
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
pub const PLAN_KNOBS: [&str; 3] = ["train.batch_size", "optim.table", "optim.dense"];

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
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            budget: None,
            objective: Objective::Batch,
            min_batch: 1,
            max_batch: 4096,
            pin: Vec::new(),
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
    pub plan: PlanConfig,
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    Default,
    File { path: PathBuf, line: Option<usize> },
    Set { arg: String },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => write!(f, "built-in default"),
            Origin::File {
                path,
                line: Some(l),
            } => write!(f, "{}:{l}", path.display()),
            Origin::File { path, line: None } => write!(f, "{}", path.display()),
            Origin::Set { arg } => write!(f, "--set {arg}"),
        }
    }
}

/// Configuration errors. Each names the key (where there is one) and where the value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read config file: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: invalid TOML: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: unknown key `{key}`{}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownKey {
        key: String,
        origin: Origin,
        suggestion: Option<String>,
    },
    #[error("{arg}: expected `key=value`")]
    BadOverride { arg: String },
    #[error("{origin}: key `{key}`: {message}")]
    Invalid {
        key: String,
        origin: Origin,
        message: String,
    },
}

/// A flattened TOML table: dotted key → value (arrays are leaves).
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push((key, other.clone())),
        }
    }
}

/// Every valid dotted key, from the schema's defaults with optional keys filled in.
pub fn known_keys() -> Vec<String> {
    let mut full = Config::default();
    full.data.n_classes = Some(1);
    full.data.path = Some(PathBuf::from("x"));
    full.data.format = Some(Format::Libsvm);
    full.data.test_path = Some(PathBuf::from("x"));
    full.data.mode = Some(TextMode::Bow);
    full.data.zero_based = Some(true);
    full.optim.table_lr = Some(1.0);
    full.plan.budget = Some("1GiB".to_string());
    full.model.input_bands.budget = Some("1GiB".to_string());
    full.model.output_bands.budget = Some("1GiB".to_string());
    let table = toml::Table::try_from(&full).expect("config serialises");
    let mut out = Vec::new();
    flatten("", &table, &mut out);
    out.into_iter().map(|(k, _)| k).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The valid key nearest to `key`, if any is reasonably close.
pub fn nearest_key(key: &str) -> Option<String> {
    known_keys()
        .into_iter()
        .map(|k| (edit_distance(key, &k), k))
        .min()
        .filter(|(d, k)| *d <= k.len().max(4) / 2)
        .map(|(_, k)| k)
}

fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut table = root;
    for p in parts {
        table = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("schema sections are tables");
    }
    table.insert(last.to_string(), value);
}

/// Parses the value of `--set key=value`: TOML if it parses, else a plain string.
pub fn parse_override_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Builds configurations from defaults, a file and overrides, remembering each key's origin.
#[derive(Clone, Debug)]
pub struct ConfigLoader {
    table: toml::Table,
    origins: BTreeMap<String, Origin>,
    known: Vec<String>,
}

impl Default for ConfigLoader {
    fn default() -> Self {
        Self::new()
    }
}

impl ConfigLoader {
    pub fn new() -> Self {
        Self {
            table: toml::Table::try_from(Config::default()).expect("config serialises"),
            origins: BTreeMap::new(),
            known: known_keys(),
        }
    }

    fn check_known(&self, key: &str, origin: &Origin) -> Result<(), ConfigError> {
        if self.known.iter().any(|k| k == key) {
            Ok(())
        } else {
            Err(ConfigError::UnknownKey {
                key: key.to_string(),
                origin: origin.clone(),
                suggestion: nearest_key(key),
            })
        }
    }

    /// Layers a TOML file over what is loaded so far.
    pub fn file(self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.text(path, &text)
    }

    /// Layers TOML text (read from `path`, or named so) over what is loaded so far.
    pub fn text(mut self, path: &Path, text: &str) -> Result<Self, ConfigError> {
        let parsed: toml::Table = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| locate::line_col(text, s.start))
                .unwrap_or((1, 1));
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        let mut leaves = Vec::new();
        flatten("", &parsed, &mut leaves);
        for (key, value) in leaves {
            let origin = Origin::File {
                path: path.to_path_buf(),
                line: locate::key_line(text, &key),
            };
            self.check_known(&key, &origin)?;
            set_path(&mut self.table, &key, value);
            self.origins.insert(key, origin);
        }
        Ok(self)
    }

    /// Applies one `key=value` override.
    pub fn set(mut self, arg: &str) -> Result<Self, ConfigError> {
        let (key, raw) = arg
            .split_once('=')
            .ok_or_else(|| ConfigError::BadOverride {
                arg: arg.to_string(),
            })?;
        let key = key.trim();
        let origin = Origin::Set {
            arg: arg.to_string(),
        };
        self.check_known(key, &origin)?;
        set_path(&mut self.table, key, parse_override_value(raw.trim()));
        self.origins.insert(key.to_string(), origin);
        Ok(self)
    }

    fn origin_of(&self, key: &str) -> Origin {
        self.origins.get(key).cloned().unwrap_or(Origin::Default)
    }

    /// Deserialises and range-checks the merged configuration.
    pub fn build(self) -> Result<Config, ConfigError> {
        let value = toml::Value::Table(self.table.clone());
        let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            // Paths into arrays read `model.hidden[1]`; the origin is the array's key.
            let base = key.split('[').next().unwrap_or(&key).to_string();
            ConfigError::Invalid {
                origin: self.origin_of(&base),
                key: base,
                message: e.into_inner().message().to_string(),
            }
        })?;
        // The quickstart's class count is for its synthetic data; a data file brings its own.
        let from_quickstart = matches!(
            self.origin_of("data.n_classes"),
            Origin::File { path, .. } if path == Path::new(QUICKSTART_NAME)
        );
        if config.data.path.is_some() && from_quickstart {
            config.data.n_classes = None;
        }
        if let Err((key, message)) = validate(&config) {
            return Err(ConfigError::Invalid {
                origin: self.origin_of(key),
                key: key.to_string(),
                message,
            });
        }
        Ok(config)
    }
}

/// Loads the schema defaults, then `file` (or, without one, the built-in quickstart), then
/// `overrides` in order.
pub fn load(file: Option<&Path>, overrides: &[String]) -> Result<Config, ConfigError> {
    let loader = ConfigLoader::new();
    let mut loader = match file {
        Some(path) => loader.file(path)?,
        None => loader.text(Path::new(QUICKSTART_NAME), QUICKSTART_TOML)?,
    };
    for arg in overrides {
        loader = loader.set(arg)?;
    }
    loader.build()
}

/// The head/tail keys of `[model]`.
fn check_bands(m: &ModelConfig) -> Result<(), (&'static str, String)> {
    let err = |key: &'static str, msg: String| Err((key, msg));
    for (key, cutoffs) in [
        ("model.input_bands.cutoffs", &m.input_bands.cutoffs),
        ("model.output_bands.cutoffs", &m.output_bands.cutoffs),
    ] {
        let ids = cutoffs.ids();
        if ids.first() == Some(&0) {
            return err(
                key,
                "cutoffs must be > 0 (the head holds the ids below the first)".into(),
            );
        }
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return err(key, format!("cutoffs must ascend strictly, got {ids:?}"));
        }
    }
    for (key, factor) in [
        ("model.input_bands.factor", m.input_bands.factor),
        ("model.output_bands.factor", m.output_bands.factor),
    ] {
        if !(1..=1024).contains(&factor) {
            return err(key, "must be between 1 and 1024".into());
        }
    }
    if m.input_bands.placement.is_empty() {
        return err(
            "model.input_bands.placement",
            "needs at least one placement (\"device\" or \"host\")".into(),
        );
    }
    for (key, b) in [
        ("model.input_bands.budget", &m.input_bands.budget),
        ("model.output_bands.budget", &m.output_bands.budget),
    ] {
        if let Some(b) = b {
            units::parse_bytes(b).map_err(|e| (key, e))?;
        }
    }
    let split_out = m.output_bands.cutoffs.is_split();
    match m.output {
        OutputKind::Adaptive if !split_out => {
            return err(
                "model.output_bands.cutoffs",
                "output = \"adaptive\" needs output_bands.cutoffs (a list or \"auto\")".into(),
            );
        }
        OutputKind::Full if split_out => {
            return err(
                "model.output_bands.cutoffs",
                "applies to output = \"adaptive\" or \"multinomial\"; output is \"full\"".into(),
            );
        }
        _ => {}
    }
    if m.layout == Layout::Dense {
        if m.input_bands.cutoffs.is_split() {
            return err(
                "model.input_bands.cutoffs",
                "bands need layout = \"sparse\" (the dense layout is the unsplit baseline)".into(),
            );
        }
        if m.output != OutputKind::Full {
            return err(
                "model.output",
                "the dense layout has the full softmax only; use layout = \"sparse\"".into(),
            );
        }
        if m.input_bands.placement.contains(&BandPlacement::Host) {
            return err(
                "model.input_bands.placement",
                "host placement needs layout = \"sparse\"".into(),
            );
        }
    }
    Ok(())
}

/// Range checks; returns the first failing key and why.
pub fn validate(c: &Config) -> Result<(), (&'static str, String)> {
    fn check(ok: bool, key: &'static str, msg: &str) -> Result<(), (&'static str, String)> {
        if ok {
            Ok(())
        } else {
            Err((key, msg.to_string()))
        }
    }
    let d = &c.data;
    check(
        (1..=u32::MAX as usize).contains(&d.width),
        "data.width",
        "must be between 1 and 4294967295",
    )?;
    if let Some(n) = d.n_classes {
        check(
            (2..=u32::MAX as usize).contains(&n),
            "data.n_classes",
            "must be between 2 and 4294967295",
        )?;
    } else {
        check(
            d.width >= 2,
            "data.n_classes",
            "defaults to data.width, which must then be at least 2",
        )?;
    }
    check(
        d.nnz.is_finite() && d.nnz >= 1.0 && d.nnz <= d.width as f64,
        "data.nnz",
        "must be a number between 1 and data.width",
    )?;
    check(
        d.nnz_spread.is_finite() && d.nnz_spread >= 0.0,
        "data.nnz_spread",
        "must be a finite number >= 0",
    )?;
    check(
        d.zipf_exponent.is_finite() && d.zipf_exponent >= 0.0,
        "data.zipf_exponent",
        "must be a finite number >= 0",
    )?;
    check(
        (0.0..=1.0).contains(&d.signal_share),
        "data.signal_share",
        "must be within [0, 1]",
    )?;
    match (&d.path, d.format) {
        (Some(_), None) => check(
            false,
            "data.format",
            "must be set with data.path: libsvm, npz, lightgcn, text or dictd",
        )?,
        (None, Some(_)) => check(false, "data.path", "must be set with data.format")?,
        _ => {}
    }
    if let Some(f) = d.format {
        check(
            d.mode.is_none() || f.is_text(),
            "data.mode",
            "applies to the text and dictd formats only",
        )?;
        check(
            d.test_path.is_none() || f == Format::Lightgcn,
            "data.test_path",
            "applies to the lightgcn format only",
        )?;
        check(
            d.zero_based.is_none() || f == Format::Libsvm,
            "data.zero_based",
            "applies to the libsvm format only",
        )?;
    }
    check(d.window >= 1, "data.window", "must be at least 1")?;
    check(d.min_count >= 1, "data.min_count", "must be at least 1")?;
    let m = &c.model;
    check(m.dim >= 1, "model.dim", "must be at least 1")?;
    check(
        m.hidden.iter().all(|&h| h >= 1),
        "model.hidden",
        "every hidden size must be at least 1",
    )?;
    check_bands(m)?;
    let t = &c.train;
    check(t.batch_size >= 1, "train.batch_size", "must be at least 1")?;
    check(t.steps >= 1, "train.steps", "must be at least 1")?;
    let o = &c.optim;
    check(
        o.lr.is_finite() && o.lr > 0.0,
        "optim.lr",
        "must be a finite number > 0",
    )?;
    if let Some(lr) = o.table_lr {
        check(
            lr.is_finite() && lr > 0.0,
            "optim.table_lr",
            "must be a finite number > 0",
        )?;
    }
    check(
        (0.0..1.0).contains(&o.beta1),
        "optim.beta1",
        "must be within [0, 1)",
    )?;
    check(
        (0.0..1.0).contains(&o.beta2),
        "optim.beta2",
        "must be within [0, 1)",
    )?;
    check(
        o.eps.is_finite() && o.eps > 0.0,
        "optim.eps",
        "must be a finite number > 0",
    )?;
    check(
        (0.0..1.0).contains(&o.momentum),
        "optim.momentum",
        "must be within [0, 1)",
    )?;
    check(
        o.weight_decay.is_finite() && o.weight_decay >= 0.0,
        "optim.weight_decay",
        "must be a finite number >= 0",
    )?;
    let p = &c.plan;
    if let Some(b) = &p.budget {
        units::parse_bytes(b).map_err(|e| ("plan.budget", e))?;
    }
    check(p.min_batch >= 1, "plan.min_batch", "must be at least 1")?;
    check(
        p.max_batch >= p.min_batch,
        "plan.max_batch",
        "must be at least plan.min_batch",
    )?;
    for key in &p.pin {
        if !PLAN_KNOBS.contains(&key.as_str()) {
            return Err((
                "plan.pin",
                format!("`{key}` is not a knob (use {})", PLAN_KNOBS.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sets(args: &[&str]) -> Result<Config, ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        load(None, &args)
    }

    #[test]
    fn quickstart_and_schema_defaults() {
        let c = sets(&[]).unwrap();
        assert_eq!(c.data.width, 240_000);
        assert_eq!(c.data.n_classes(), 4096);
        assert_eq!(c.optim.eps, 1e-8);
        let mut expected = Config::default();
        expected.data.n_classes = Some(4096);
        assert_eq!(
            c, expected,
            "the quickstart differs from the schema only in n_classes"
        );
        assert_eq!(Config::default().data.n_classes(), 240_000);
    }

    #[test]
    fn overrides_parse_toml_or_strings() {
        let c = sets(&[
            "model.hidden=[1024,512]",
            "optim.dense=sgd",
            "train.batch_size=7",
            "data.n_classes=16",
        ])
        .unwrap();
        assert_eq!(c.model.hidden, vec![1024, 512]);
        assert_eq!(c.optim.dense, DenseOptim::Sgd);
        assert_eq!(c.train.batch_size, 7);
        assert_eq!(c.data.n_classes(), 16);
    }

    #[test]
    fn unknown_key_suggests_nearest() {
        let e = sets(&["train.batchsize=3"]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("train.batchsize"), "{msg}");
        assert!(msg.contains("did you mean `train.batch_size`"), "{msg}");
    }

    #[test]
    fn range_and_type_errors_name_the_key() {
        for (arg, key) in [
            ("train.batch_size=0", "train.batch_size"),
            ("data.width=0", "data.width"),
            ("train.batch_size=abc", "train.batch_size"),
            ("model.hidden=[4,\"x\"]", "model.hidden"),
            ("optim.dense=rmsprop", "optim.dense"),
        ] {
            let msg = sets(&[arg]).unwrap_err().to_string();
            assert!(msg.contains(key), "{arg}: {msg}");
            assert!(msg.contains(arg), "{arg}: {msg}");
        }
    }

    #[test]
    fn file_errors_name_file_line_and_key() {
        let dir = std::env::temp_dir().join(format!("widebag-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, "[train]\nsteps = 3\n\n[model]\ndim = 0").unwrap();
        let msg = load(Some(&path), &[]).unwrap_err().to_string();
        assert!(msg.contains("bad.toml:5"), "{msg}");
        assert!(msg.contains("model.dim"), "{msg}");

        std::fs::write(&path, "[train]\nstepz = 3\n").unwrap();
        let msg = load(Some(&path), &[]).unwrap_err().to_string();
        assert!(msg.contains("bad.toml:2"), "{msg}");
        assert!(msg.contains("train.stepz"), "{msg}");
        assert!(msg.contains("train.steps"), "{msg}");

        std::fs::write(&path, "[train]\nsteps = = 3\n").unwrap();
        let msg = load(Some(&path), &[]).unwrap_err().to_string();
        assert!(msg.contains("bad.toml:2"), "{msg}");
    }

    #[test]
    fn data_file_keys() {
        let c = sets(&[
            "data.path=corpus.txt",
            "data.format=text",
            "data.mode=cbow",
            "data.window=3",
        ])
        .unwrap();
        let s = c.data.source().unwrap();
        assert_eq!(s.format, Format::Text);
        assert_eq!(s.text.mode, TextMode::Cbow);
        assert_eq!(s.text.window, 3);
        for (args, key) in [
            (&["data.path=x.svm"][..], "data.format"),
            (&["data.format=npz"][..], "data.path"),
            (
                &["data.path=x", "data.format=libsvm", "data.mode=cbow"][..],
                "data.mode",
            ),
            (&["data.path=x", "data.format=csv"][..], "data.format"),
        ] {
            let msg = sets(args).unwrap_err().to_string();
            assert!(msg.contains(key), "{args:?}: {msg}");
        }
    }

    #[test]
    fn later_layers_win() {
        let dir = std::env::temp_dir().join(format!("widebag-config-l-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ok.toml");
        std::fs::write(&path, "[train]\nsteps = 3\nbatch_size = 9\n").unwrap();
        let c = load(Some(&path), &["train.steps=5".to_string()]).unwrap();
        assert_eq!((c.train.steps, c.train.batch_size), (5, 9));
    }
}
