//! widebag's own CubeCL kernels for the full softmax on wgpu (`train.gpu_kernels = "cubecl"`),
//! called off autodiff as flex's host kernels are: each row's log-sum-exp folded chunk by chunk
//! in one pass over the logits ([`row_lse`]), and the logit gradient formed in place in the
//! logits' own buffer, the targets subtracted at their entries ([`logit_gradient`]). No dense
//! `[batch, classes]` target tensor exists, and no reduction is cut into column pieces; and
//! each chunk's optimizer step fused into the backward pass ([`output_step`]: the weight
//! gradient formed tile by tile and applied at once, no `[hidden, classes]` gradient buffer).
//! The adaptive softmax's head and tail clusters run through the same kernels
//! (`crate::output::adaptive_cube`).
//! The row log-sum-exp merges a cube's pairs by plane (subgroup) operations where the adapter
//! has them ([`row_lse::Merge`]), else in shared memory alone (lavapipe advertises none); the
//! others need none. [`bridge`] hands burn's wgpu tensors to the kernels and their outputs
//! back.

pub mod bridge;
pub mod logit_gradient;
pub mod output_step;
pub mod row_lse;
pub mod tiles;

use burn_cubecl::tensor::CubeTensor;

/// burn's tensor (the kernels' `Tensor` is cubecl's).
type BurnTensor<const D: usize, K = burn::tensor::Float> = burn::tensor::Tensor<D, K>;

/// Units per cube: a power of two, at most 256 and the adapter's limit.
fn block_units(z: &CubeTensor) -> usize {
    let limit = z.client.properties().hardware.max_units_per_cube.min(256) as usize;
    1 << (usize::BITS - 1 - limit.max(1).leading_zeros())
}
