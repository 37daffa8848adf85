//! The model's shapes, resolved against the device: `ModelSpec` (layout, bands, dims, the class
//! chunks and kernels the step uses), checked once when the model is built.

use serde::Serialize;
use widebag_config::bands::{Band, ModelBands};
use widebag_config::{Config, OutputKind};

use crate::device::ComputePath;
use crate::device::{BackendKind, Compute};
use crate::error::ModelError;

/// Columns one row reduction (`max_dim`, `sum_dim`) over classes spans at most on wgpu. On
/// lavapipe, burn 0.22's fused row reductions over tens of thousands of columns came back wrong
/// in some op graphs (the sparse layout's loss over 8 chunks of 30,000 classes 0.034 low, the
/// dense layout's over one chunk of 240,000 half the truth, a 140,000-column adaptive tail
/// cluster with a row of `+inf`), while pieces of this width were right in every case tried.
pub const WGPU_REDUCE_COLS: usize = 8_192;

/// Columns one row reduction over classes spans at most on `backend`. flex reduces whole rows
/// right, and its narrowed views are slow to reduce (the dense layout ran 6.6× slower in
/// 8,192-column pieces), so it takes a row at once.
pub fn reduce_cols(backend: BackendKind) -> usize {
    match backend {
        BackendKind::Wgpu => WGPU_REDUCE_COLS,
        BackendKind::Flex => usize::MAX,
    }
}

/// Which kernels form each row's log-sum-exp and each chunk's logit gradient
/// (`train.gpu_kernels`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SoftmaxKernels {
    /// burn's tensor operations, no row reduction over more than `reduce_cols` columns.
    Tensor { reduce_cols: usize },
    /// widebag's CubeCL kernels (`crate::cube`); on a device that is not a cubecl one
    /// (flex), burn's tensor operations in pieces of [`WGPU_REDUCE_COLS`].
    Cube,
}

impl SoftmaxKernels {
    /// widebag's CubeCL kernels on wgpu where `choice` asks for them; burn's tensor operations
    /// otherwise, and always on flex.
    pub fn choose(backend: BackendKind, choice: widebag_config::GpuKernels) -> Self {
        match (backend, choice) {
            (BackendKind::Wgpu, widebag_config::GpuKernels::Cubecl) => SoftmaxKernels::Cube,
            _ => SoftmaxKernels::Tensor {
                reduce_cols: reduce_cols(backend),
            },
        }
    }

    /// Columns one tensor-path row reduction spans at most.
    pub fn reduce_cols(self) -> usize {
        match self {
            SoftmaxKernels::Tensor { reduce_cols } => reduce_cols,
            SoftmaxKernels::Cube => WGPU_REDUCE_COLS,
        }
    }
}

/// Shapes of the model, resolved against the device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelSpec {
    pub width: usize,
    pub n_classes: usize,
    pub dim: usize,
    pub hidden: Vec<usize>,
    /// Largest batch the output chunks were sized for.
    pub batch_size: usize,
    pub class_chunk: usize,
    pub max_buffer_bytes: u64,
    /// How the embedding bag sums its entries (by the device).
    pub bag_sum: crate::device::BagSum,
    /// Columns one row reduction over classes spans at most ([`reduce_cols`]).
    pub reduce_cols: usize,
    /// Host kernels (flex) or burn's tensor operations for the softmax and the updates.
    pub compute_path: ComputePath,
    /// On burn's tensors, which kernels form the full softmax's row log-sum-exp and logit
    /// gradient (`train.gpu_kernels` on wgpu).
    pub softmax_kernels: SoftmaxKernels,
    pub seed: u64,
    pub output: OutputKind,
    /// Each layer's activation: the bag's, then each hidden layer's.
    pub activations: Vec<widebag_config::Activation>,
    /// How the input table starts.
    pub input_init: widebag_config::InputInit,
    /// What the MLP saves for backward: everything, or (`mlp`) only its block input and output.
    pub checkpointing: widebag_config::Checkpointing,
    /// What the host softmax keeps of the full softmax's logits in one process (`model.logits`).
    pub logits: widebag_config::Logits,
    /// The full softmax's product operands on burn's tensors (`model.output_precision`).
    pub output_precision: widebag_config::Precision,
    /// The output layer's weight is the input table (`model.tie_output`).
    pub tied: bool,
    /// How the output scores a class (`model.score`), and cosine's temperature.
    pub score: widebag_config::Score,
    pub temperature: f64,
    /// A sampled output loss's negatives and constants (`model.sampling`).
    pub sampling: widebag_config::SamplingConfig,
    /// The training targets' class counts where a unigram proposal reads them (empty
    /// otherwise; a run read back for evaluation has none).
    #[serde(skip)]
    pub class_counts: Vec<f64>,
    /// Input bands (one: the unsplit table) and output clusters (one: the full softmax; more:
    /// the adaptive softmax's head and tails), as run preparation resolved them.
    pub bands: ModelBands,
}

/// An error unless `bands` cut `0..n` into contiguous, non-empty bands.
fn check_cover(side: &str, bands: &[Band], n: usize) -> Result<(), ModelError> {
    let mut next = 0;
    for b in bands {
        if b.start != next || b.end <= b.start || b.dim == 0 {
            return Err(ModelError::Shape(format!(
                "{side} bands {bands:?} do not cut 0..{n} into contiguous bands"
            )));
        }
        next = b.end;
    }
    if next != n || bands.is_empty() {
        return Err(ModelError::Shape(format!(
            "{side} bands {bands:?} cover 0..{next}, not 0..{n}"
        )));
    }
    Ok(())
}

impl ModelSpec {
    /// The shapes of `config` on `compute` with the resolved `bands`.
    pub fn new(config: &Config, bands: &ModelBands, compute: &Compute) -> Result<Self, ModelError> {
        let max_buffer_bytes = compute
            .clone()
            .with_buffer_cap(config.model.max_buffer_mib << 20)
            .max_buffer_bytes;
        let n_classes = config.data.n_classes();
        check_cover("input", &bands.input, config.data.width)?;
        check_cover("output", &bands.output, n_classes)?;
        let class_chunk = widebag_ledger::shapes::class_chunk(
            config.model.class_chunk,
            n_classes,
            config.model.last_hidden(),
            config.train.batch_size,
            max_buffer_bytes,
        );
        Ok(Self {
            width: config.data.width,
            n_classes,
            dim: config.model.dim,
            hidden: config.model.hidden.clone(),
            batch_size: config.train.batch_size,
            class_chunk,
            max_buffer_bytes,
            bag_sum: compute.bag_sum,
            reduce_cols: reduce_cols(compute.backend),
            compute_path: ComputePath::choose(&compute.device, config.train.cpu_kernels),
            softmax_kernels: SoftmaxKernels::choose(compute.backend, config.train.gpu_kernels),
            seed: config.train.seed,
            output: config.model.output,
            activations: config.model.activations(),
            input_init: config.model.input_init,
            checkpointing: config.model.checkpointing,
            logits: config.model.logits,
            output_precision: config.model.output_precision,
            tied: config.model.tie_output,
            score: config.model.score,
            temperature: config.model.temperature,
            sampling: config.model.sampling.clone(),
            class_counts: bands.class_counts.clone(),
            bands: bands.clone(),
        })
    }

    /// Input size of every dense layer after the bag, and the output layer's input size.
    pub(crate) fn layer_sizes(&self) -> Vec<usize> {
        std::iter::once(self.dim)
            .chain(self.hidden.iter().copied())
            .collect()
    }

    /// Size of the last hidden representation (the output layer's input).
    pub fn last_hidden(&self) -> usize {
        self.hidden.last().copied().unwrap_or(self.dim)
    }

    /// Columns of the adaptive softmax's head: its classes and one token per tail cluster.
    pub fn head_classes(&self) -> usize {
        self.bands.output[0].n_rows() + self.bands.output.len() - 1
    }
}
