//! The closed choices a configuration names: device, layout, and the table and dense optimizers
//! with what state each keeps.

use serde::{Deserialize, Serialize};

/// Which device the run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    /// A hardware GPU through wgpu (discrete, then integrated), else the flex CPU backend with a
    /// one-line notice; never a software adapter or wgpu's OpenGL backend.
    Auto,
    /// wgpu only (a software adapter when there is no GPU); an error when no adapter is found.
    Wgpu,
    /// burn's flex CPU backend.
    Cpu,
}

/// How the CPU backend (flex) runs the output softmax, the dense optimizers and the table
/// updates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuKernels {
    /// widebag's host kernels over the tensors' own buffers (class blocks, in-place updates).
    #[default]
    Host,
    /// burn's tensor operations, as on wgpu (the reference path, for comparison).
    Tensor,
}

/// How wgpu runs the full softmax's row log-sum-exp and logit gradient.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuKernels {
    /// widebag's CubeCL kernels: one pass over each chunk's logits for the log-sum-exp, the
    /// gradient formed in the logits' buffer.
    Cubecl,
    /// burn's tensor operations, fused by burn (the default until the kernels are measured
    /// faster on a GPU: on lavapipe they ran the seed model's sparse layout at 0.75×, its
    /// dense layout at 1.04×; docs/gpu.md).
    #[default]
    Tensor,
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

/// The hidden layers' activation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    #[default]
    Relu,
    /// As Mult-DAE and Mult-VAE use.
    Tanh,
    /// None (the identity): as `model.last_activation`, the last hidden layer is a linear
    /// low-rank projection into the output layer.
    Linear,
}

impl Activation {
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Linear => "linear",
        }
    }
}

/// How the input table (every band's rows, and the dense layout's input weight) starts. The
/// layers after it start as PyTorch's `nn.Linear` does, `U(±1/sqrt(fan_in))`, whatever this is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputInit {
    /// `U(±sqrt(3 / band dim))`: variance 1 / dim, so a bag of `n` unit values has variance
    /// about `n / dim` whatever the width (a tail band's projection keeps its rows' scale).
    #[default]
    Uniform,
    /// `N(0, 1)`: PyTorch's `nn.Embedding` and `nn.EmbeddingBag`.
    Normal,
    /// `U(±1/sqrt(width))`: PyTorch's `nn.Linear(width, dim)` on the dense input.
    FanIn,
}

impl InputInit {
    pub fn name(self) -> &'static str {
        match self {
            InputInit::Uniform => "uniform",
            InputInit::Normal => "normal",
            InputInit::FanIn => "fan_in",
        }
    }
}

/// How the learning rate moves over a run (both the table's and the dense layers'), after a
/// linear warm-up of `optim.warmup_steps` from 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// The configured rate throughout (after the warm-up).
    #[default]
    Constant,
    /// Half a cosine from the configured rate to 0 at the last step
    /// (`transformers.get_cosine_schedule_with_warmup`).
    Cosine,
    /// A straight line from the configured rate to 0 at the last step
    /// (`transformers.get_linear_schedule_with_warmup`).
    Linear,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Constant => "constant",
            Schedule::Cosine => "cosine",
            Schedule::Linear => "linear",
        }
    }

    /// The multiplier of the configured rate at `step` (1-based) of `total` steps with `warmup`
    /// warm-up steps, as `transformers`' schedules compute it through `LambdaLR` on the step's
    /// 0-based index `i = step − 1`: `i / warmup` during the warm-up (the first step has rate 0
    /// when `warmup > 0`), then the decay over the remaining `total − warmup` steps.
    pub fn factor(self, step: u64, total: u64, warmup: u64) -> f64 {
        let i = step.saturating_sub(1);
        if i < warmup {
            return i as f64 / warmup as f64;
        }
        let span = total.saturating_sub(warmup).max(1) as f64;
        let progress = ((i - warmup) as f64 / span).min(1.0);
        match self {
            Schedule::Constant => 1.0,
            Schedule::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
            Schedule::Linear => 1.0 - progress,
        }
    }
}

/// The recall denominator of ranking metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecallConvention {
    /// LightGCN's and RecBole's: hits / |test items|.
    #[default]
    Lightgcn,
    /// Mult-VAE's (dawenl/vae_cf): hits / min(K, |test items|).
    Multvae,
}

impl RecallConvention {
    pub fn name(self) -> &'static str {
        match self {
            RecallConvention::Lightgcn => "lightgcn",
            RecallConvention::Multvae => "multvae",
        }
    }
}

/// How a ranking's class scores are made on flex's host kernels (`eval.screening`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Screening {
    /// Every class scored from bf16 operands where the CPU has AVX-512 BF16, then only the
    /// classes whose proven error bound reaches a row's top-K rescored in f32: the same top-K
    /// as `off` but for classes whose f32 scores tie within f32 rounding.
    #[default]
    Bf16,
    /// Every class scored in f32.
    Off,
}

impl Screening {
    pub fn name(self) -> &'static str {
        match self {
            Screening::Bf16 => "bf16",
            Screening::Off => "off",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_follow_the_transformers_formulas() {
        // 10 warm-up steps of 110: step s (1-based) has index i = s − 1.
        let f = |s: Schedule, step| s.factor(step, 110, 10);
        assert_eq!(f(Schedule::Constant, 1), 0.0);
        assert_eq!(f(Schedule::Constant, 6), 0.5);
        assert_eq!(f(Schedule::Constant, 11), 1.0);
        assert_eq!(f(Schedule::Constant, 110), 1.0);
        // After the warm-up, progress (i − 10) / 100.
        assert_eq!(f(Schedule::Linear, 11), 1.0);
        assert!((f(Schedule::Linear, 61) - 0.5).abs() < 1e-12);
        assert!((f(Schedule::Cosine, 61) - 0.5).abs() < 1e-12);
        assert!(
            (f(Schedule::Cosine, 36) - 0.5 * (1.0 + (0.25 * std::f64::consts::PI).cos())).abs()
                < 1e-12
        );
        assert!(f(Schedule::Cosine, 110) > 0.0 && f(Schedule::Cosine, 110) < 1e-3);
        // Without warm-up the first step has the full rate.
        assert_eq!(Schedule::Cosine.factor(1, 50, 0), 1.0);
    }
}

/// How table rows or table-optimizer state are stored (`model.input_bands.dtype`,
/// `optim.state_dtype`). Updates are computed in f32 and rounded back (`optim.rounding`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    F32,
    /// IEEE half: 10 mantissa bits, largest finite 65,504.
    F16,
    /// bfloat16: f32's exponent range, 7 mantissa bits.
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 3] = [Precision::F32, Precision::F16, Precision::Bf16];

    /// Whether this is f32 (the default, left out of a written config).
    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }

    /// Bytes of one element.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::F16 | Precision::Bf16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }
}

/// How an f32 update is rounded back into f16 or bf16 storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rounding {
    /// Up or down with probability by distance (unbiased; FBGEMM's default for FP16 weights),
    /// from seeded random bits that are a function of the seed, the step, the row and the column.
    #[default]
    Stochastic,
    /// To the nearest (ties to even): updates below half a unit in the last place are lost.
    Nearest,
}

/// What the full softmax keeps of the output's logits between the forward and the backward pass
/// (`model.logits`): one process, the sparse layout's full softmax (flex's host softmax or the
/// chunked softmax on tensors, wgpu's) or flex's adaptive softmax's head (the dense layout always
/// keeps them; the adaptive softmax's tail clusters, its autodiff path on wgpu, the sampled
/// output and a multi-process run recompute).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Logits {
    /// The backward pass makes each cache-sized block of logits again (one more output matmul;
    /// no `[batch, classes]` buffer).
    #[default]
    Recompute,
    /// The forward pass keeps the `[batch, classes]` logits and the backward pass turns them
    /// into their gradient in place, as PyTorch does: one output matmul fewer, the buffer priced.
    Keep,
    /// Neither pass writes the logits (Cut Cross-Entropy's structure): widebag's CubeCL kernels
    /// form them tile by tile in registers, the forward pass folding each tile into the rows'
    /// log-sum-exp, the backward pass forming the logit gradient from them where they are
    /// formed (the sparse layout's full softmax, `train.gpu_kernels = "cubecl"`, on wgpu).
    Tiled,
}

impl Logits {
    pub fn name(self) -> &'static str {
        match self {
            Logits::Recompute => "recompute",
            Logits::Keep => "keep",
            Logits::Tiled => "tiled",
        }
    }
}

/// What the MLP keeps for its backward pass (`model.checkpointing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkpointing {
    /// Autodiff saves every layer's activations in the forward pass.
    #[default]
    None,
    /// The MLP keeps only its block input (the gathered rows) and its output; its layers are
    /// recomputed on autodiff after the output layer's backward (one more MLP forward).
    Mlp,
}

impl Checkpointing {
    pub fn name(self) -> &'static str {
        match self {
            Checkpointing::None => "none",
            Checkpointing::Mlp => "mlp",
        }
    }
}
