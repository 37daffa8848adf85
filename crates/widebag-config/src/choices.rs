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
