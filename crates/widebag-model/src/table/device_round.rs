//! Stochastic rounding of f32 tensors to f16 or bf16 values on the device, for half-precision
//! table shards there: `floor(x / ulp + u) · ulp`, with `ulp` the power of two that is one unit
//! in the last place of `x`'s binade in the half format and `u` uniform in `[0, 1)`, rounds up
//! with probability equal to the distance from the lower neighbour. Scaling by a power of two
//! is exact, so the result is a value the half format holds and the cast to it is exact.

use burn::tensor::{FloatDType, Tensor};

use crate::cpu::rounding::{Half, random_bits};
use crate::table::host_rows::RoundKey;

/// `(mantissa bits, smallest normal exponent, largest finite value)` of a half format.
fn limits(half: Half) -> (i32, i32, f32) {
    match half {
        Half::F16 => (10, -14, 65_504.0),
        Half::Bf16 => (7, -126, f32::from_bits(0x7f7f_0000)),
    }
}

/// `x` rounded stochastically to `half`'s values with the uniform numbers `u` (same shape, in
/// `[0, 1)`), still as f32; beyond the largest finite value it is clamped to it. As the host
/// path (`Half::stochastic`), a value goes away from zero when `u` is below its fraction: `floor`
/// takes `u` itself for negative values and `1 − u − 2⁻²⁴` for the others.
pub fn stochastic(x: Tensor<2>, u: Tensor<2>, half: Half) -> Tensor<2> {
    let (mantissa, min_exp, max) = limits(half);
    let smallest = 2f32.powi(min_exp);
    let a = x.clone().abs().clamp_min(smallest);
    // floor(log2 a), then corrected by one where the logarithm's rounding crossed a power of two.
    let e = (a.clone().log() * std::f32::consts::LOG2_E).floor();
    // 2^e for integral e: `pow(2, e)` is exact there on flex and on lavapipe (tested below).
    let two = |e: Tensor<2>| e.full_like(2.0).powf(e);
    let p = two(e.clone());
    let below = p.clone().greater(a.clone()).float();
    let above = (p * 2.0).lower_equal(a).float();
    let e = e - below + above;
    let ulp = two(e - mantissa as f32);
    let positive = x.clone().greater_equal_elem(0.0).float();
    let v = u.clone() + positive * (u * -2.0 + (1.0 - 1.0 / 16_777_216.0));
    ((x / ulp.clone() + v).floor() * ulp).clamp(-max, max)
}

/// The float dtype of a half format.
pub fn dtype_of(half: Half) -> FloatDType {
    match half {
        Half::F16 => FloatDType::F16,
        Half::Bf16 => FloatDType::BF16,
    }
}

/// The stochastic rounding's uniform numbers in `[0, 1)` for rows `ids` of a `dim`-wide table:
/// the host path's random bits (their top 24) over 2²⁴.
pub fn uniforms(ids: &[u32], dim: usize, round: RoundKey) -> Vec<f32> {
    let mut u = Vec::with_capacity(ids.len() * dim);
    for &id in ids {
        let first = id as u64 * dim as u64;
        u.extend((0..dim as u64).map(|j| {
            (random_bits(round.seed, round.key, first + j) >> 8) as f32 * (1.0 / 16_777_216.0)
        }));
    }
    u
}

#[cfg(test)]
pub(crate) mod tests {
    use burn::tensor::Device;

    use super::*;
    use crate::tensors::{floats, to_vec};

    /// Rounds `xs`, each with every `u` of a fine grid, on `device`: every result is a value of
    /// the format, one of `x`'s two neighbours, and their mean is `x` (unbiased). Returns the
    /// formats the device does not store, which were not checked (the caller says what then).
    #[must_use = "the formats the device lacks were not checked"]
    pub(crate) fn check_unbiased(device: &Device) -> Vec<Half> {
        let mut lacking = Vec::new();
        let xs = [
            1.0f32 + 1e-4,
            -3.2719,
            1000.3,
            1e-6,
            -2.5e-7,
            0.099_99,
            2048.0 - 0.3,
            7.0,
        ];
        let grid = 1024usize;
        for half in [Half::F16, Half::Bf16] {
            if !device.supports_dtype(dtype_of(half)) {
                lacking.push(half);
                continue;
            }
            let x: Vec<f32> = xs
                .iter()
                .flat_map(|&x| std::iter::repeat_n(x, grid))
                .collect();
            let u: Vec<f32> = (0..xs.len())
                .flat_map(|_| (0..grid).map(|i| (i as f32 + 0.5) / grid as f32))
                .collect();
            let n = x.len();
            let r = to_vec(stochastic(
                floats(x, [n, 1], device),
                floats(u, [n, 1], device),
                half,
            ))
            .unwrap();
            for (k, &x) in xs.iter().enumerate() {
                let got = &r[k * grid..(k + 1) * grid];
                let near = half.to_f32(half.nearest(x));
                // The spacing of values next to x (the larger, at a binade's edge).
                let ulp = (half.to_f32(half.nearest(x).wrapping_add(1)) - near).abs() as f64;
                for &g in got {
                    assert_eq!(
                        half.to_f32(half.nearest(g)),
                        g,
                        "{half:?}: {g} is not a value"
                    );
                    assert!(
                        ((g - x).abs() as f64) < ulp,
                        "{half:?}: {g} is not next to {x}"
                    );
                }
                let mean = got.iter().map(|&g| g as f64).sum::<f64>() / grid as f64;
                assert!(
                    (mean - x as f64).abs() <= ulp / grid as f64 * 2.0 + 1e-12,
                    "{half:?} {x}: mean {mean}"
                );
            }
        }
        lacking
    }

    #[test]
    fn device_rounding_is_unbiased_and_lands_on_values_on_flex() {
        // flex stores both formats: neither may go unchecked.
        assert_eq!(check_unbiased(&Device::flex()), []);
    }
}
