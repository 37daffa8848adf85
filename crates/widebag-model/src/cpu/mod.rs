//! Host kernels for the flex CPU backend, where burn's op-by-op tensors allocate, fault in and
//! copy a `[batch, classes]` buffer for every step of the softmax: the full softmax's forward and
//! backward fused over cache-sized class blocks, the dense optimizers in one pass, and zero-copy
//! access to a flex tensor's buffer. The numbers are those of the tensor path (tested against
//! it and against the definitions).

pub mod access;
mod blocks;
pub mod dense_update;
pub mod host_layer;
pub mod rounding;
pub mod row_update;
pub mod score_blocks;
pub mod softmax_ce;
pub mod vexp;

pub use blocks::ChunkRef;

use burn::tensor::Device;
use widebag_config::CpuKernels;

/// Whether `device` is flex's (tensors whose buffers the host kernels can use in place).
pub fn is_flex(device: &Device) -> bool {
    *device == Device::flex()
}

/// Which code runs a model's softmax, dense optimizers and table updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernels {
    /// The host kernels of this module (flex with `train.cpu_kernels = "host"`).
    Host,
    /// burn's tensor operations (wgpu, or flex with `train.cpu_kernels = "tensor"`).
    Tensor,
}

impl Kernels {
    /// Host kernels on flex unless `choice` asks for the tensor path; tensors elsewhere.
    pub fn choose(device: &Device, choice: CpuKernels) -> Self {
        match (is_flex(device), choice) {
            (true, CpuKernels::Host) => Kernels::Host,
            _ => Kernels::Tensor,
        }
    }
}

/// Threads the host kernels run on for `device`: rayon's pool on flex, 0 elsewhere (the ledger
/// prices one scratch block per thread).
pub fn host_threads(device: &Device) -> u64 {
    if is_flex(device) {
        rayon::current_num_threads() as u64
    } else {
        0
    }
}
