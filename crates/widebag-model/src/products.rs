//! Products with a long reduction on a device with its own memory: `[m, k] × [k, n]` with `k`
//! in the tens of thousands and `m · n` small (the output layer's `dL/dh = g · Wᵀ` over every
//! class, the dense layout's input product over the whole width). One tile per output block
//! would walk all of `k` alone and leave most of a GPU idle (`dL/dh` of the seed model took
//! 13.2 of a 25 ms step on an H200), so `k` is cut into `shapes::split_k_blocks` blocks run as
//! one batched product, `[s, m, k/s] × [s, k/s, n]`, and the `s` partial products summed. On
//! flex (`device::is_flex`) the host's own product runs whole. Half-precision operands
//! ([`Operands`]) give a half product (summed in f32 inside the kernel), cast to f32 before any
//! partial products are added; on flex, whose f16 product sums in f16, the half operands are
//! multiplied in f32 and the result rounded to the half dtype: the GPU's numbers.

use burn::tensor::{DType, FloatDType, Tensor};
use widebag_config::Precision;
use widebag_ledger::shapes::split_k_blocks;

use crate::device::is_flex;

/// The operand dtype of the output layer's products (`model.output_precision`): f32, or f16 or
/// bf16, whose products cubek's matmul sums in f32 and writes in the half dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operands(pub Precision);

impl Operands {
    pub const F32: Operands = Operands(Precision::F32);

    /// The half dtype, or `None` for f32 operands.
    pub fn half(self) -> Option<FloatDType> {
        match self.0 {
            Precision::F32 => None,
            Precision::F16 => Some(FloatDType::F16),
            Precision::Bf16 => Some(FloatDType::BF16),
        }
    }

    /// `t` as an operand: itself in f32, else a copy in the half dtype.
    pub fn cast(self, t: Tensor<2>) -> Tensor<2> {
        match self.half() {
            None => t,
            Some(d) => t.cast(d),
        }
    }

    /// The factor the logit gradient `g = (p·w − y) / B` is multiplied by before it is cast
    /// to f16 (and the products divided by after): `B · 2^s`, `2^s` the largest power of two
    /// with `B · 2^s ≤ 2^15`. Unscaled, `g`'s entries for 240,000 classes (about `4e-6 / B`)
    /// are below f16's smallest normal (6.1e-5) and lose their digits or flush to zero; scaled,
    /// a probability of 4e-6 becomes at least 4e-6 · 2^15 / B, and the weight gradient's sum
    /// over the `B` rows stays under f16's 65,504 while the mean over rows of `|h| · |p·w − y|`
    /// is under 2 (larger activations: bf16, which has f32's range and is not scaled).
    pub fn gradient_scale(self, n_rows: usize) -> f64 {
        if self.0 != Precision::F16 {
            return 1.0;
        }
        let rows = n_rows.max(1) as f64;
        let s = (32768.0 / rows).log2().floor().max(0.0);
        rows * s.exp2()
    }
}

/// `t` in f32 (a half product's result).
pub fn to_f32<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    match t.dtype() {
        DType::F32 => t,
        _ => t.cast(FloatDType::F32),
    }
}

/// `a · b` in f32, for operands of one dtype: f32's product; half operands' on a GPU (cubek
/// sums them in f32 and writes the half dtype), on flex in f32 from the half values, rounded to
/// the half dtype as the GPU writes it.
pub fn product<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
    let dtype = a.dtype();
    if dtype == DType::F32 || !is_flex(&a.device()) {
        return to_f32(a.matmul(b));
    }
    let half = match dtype {
        DType::BF16 => FloatDType::BF16,
        _ => FloatDType::F16,
    };
    to_f32(to_f32(a).matmul(to_f32(b)).cast(half))
}

/// The reduction's blocks for `a` on its device: 1 on flex.
fn blocks(a: &Tensor<2>, m: usize, n: usize, k: usize) -> usize {
    if is_flex(&a.device()) {
        1
    } else {
        split_k_blocks(m, n, k)
    }
}

/// `a · b` for `a: [m, k]`, `b: [k, n]` (both contiguous, of one dtype), the reduction split
/// where long; in f32. Differentiable: each block's gradient is its own slice of `a`'s and `b`'s.
pub fn matmul(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let ([m, k], [_, n]) = (a.dims(), b.dims());
    let s = blocks(&a, m, n, k);
    if s <= 1 {
        return product(a, b);
    }
    let a = a.reshape([m, s, k / s]).swap_dims(0, 1);
    let b = b.reshape([s, k / s, n]);
    product(a, b).sum_dim(0).reshape([m, n])
}

/// `a · bᵀ` for `a: [m, k]`, `b: [n, k]` (both contiguous, of one dtype), the reduction split
/// where long; in f32.
pub fn matmul_nt(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let ([m, k], [n, _]) = (a.dims(), b.dims());
    let s = blocks(&a, m, n, k);
    if s <= 1 {
        return product(a, b.transpose());
    }
    let a = a.reshape([m, s, k / s]).swap_dims(0, 1);
    let b = b.reshape([n, s, k / s]).swap_dims(0, 1).swap_dims(1, 2);
    product(a, b).sum_dim(0).reshape([m, n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_f16_gradient_scale_keeps_b_times_the_scale_under_2_to_the_15() {
        let f16 = Operands(Precision::F16);
        assert_eq!(f16.gradient_scale(128), 128.0 * 256.0);
        assert_eq!(f16.gradient_scale(500), 500.0 * 64.0);
        assert_eq!(f16.gradient_scale(32768), 32768.0);
        assert_eq!(f16.gradient_scale(100_000), 100_000.0);
        for rows in [1, 7, 128, 500, 4096, 32768] {
            let s = f16.gradient_scale(rows) / rows as f64;
            assert!(rows as f64 * s <= 32768.0 || s == 1.0, "{rows}");
            assert!(2.0 * rows as f64 * s > 32768.0, "{rows}: the largest power");
        }
        assert_eq!(Operands(Precision::Bf16).gradient_scale(128), 1.0);
        assert_eq!(Operands::F32.gradient_scale(128), 1.0);
    }
}
