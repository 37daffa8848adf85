//! Products with a long reduction on a device with its own memory: `[m, k] × [k, n]` with `k`
//! in the tens of thousands and `m · n` small (the output layer's `dL/dh = g · Wᵀ` over every
//! class, the dense layout's input product over the whole width). One tile per output block
//! would walk all of `k` alone and leave most of a GPU idle (`dL/dh` of the seed model took
//! 13.2 of a 25 ms step on an H200), so `k` is cut into `shapes::split_k_blocks` blocks run as
//! one batched product, `[s, m, k/s] × [s, k/s, n]`, and the `s` partial products summed. On
//! flex (`device::is_flex`) the host's own product runs whole.

use burn::tensor::Tensor;
use widebag_ledger::shapes::split_k_blocks;

use crate::device::is_flex;

/// The reduction's blocks for `a` on its device: 1 on flex.
fn blocks(a: &Tensor<2>, m: usize, n: usize, k: usize) -> usize {
    if is_flex(&a.device()) {
        1
    } else {
        split_k_blocks(m, n, k)
    }
}

/// `a · b` for `a: [m, k]`, `b: [k, n]` (both contiguous), the reduction split where long.
/// Differentiable: each block's gradient is its own slice of `a`'s and `b`'s.
pub fn matmul(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let ([m, k], [_, n]) = (a.dims(), b.dims());
    let s = blocks(&a, m, n, k);
    if s <= 1 {
        return a.matmul(b);
    }
    let a = a.reshape([m, s, k / s]).swap_dims(0, 1);
    let b = b.reshape([s, k / s, n]);
    a.matmul(b).sum_dim(0).reshape([m, n])
}

/// `a · bᵀ` for `a: [m, k]`, `b: [n, k]` (both contiguous), the reduction split where long.
pub fn matmul_nt(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let ([m, k], [n, _]) = (a.dims(), b.dims());
    let s = blocks(&a, m, n, k);
    if s <= 1 {
        return a.matmul(b.transpose());
    }
    let a = a.reshape([m, s, k / s]).swap_dims(0, 1);
    let b = b.reshape([n, s, k / s]).swap_dims(0, 1).swap_dims(1, 2);
    a.matmul(b).sum_dim(0).reshape([m, n])
}
