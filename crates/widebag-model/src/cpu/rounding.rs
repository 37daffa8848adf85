//! f32 → f16 / bf16 by stochastic rounding, as FBGEMM stores half-precision tables: the update is
//! computed in f32 and rounded once to one of the two neighbouring half values, up with the
//! probability of the distance to the lower one, so the stored value is unbiased and a run of
//! updates each smaller than half a unit in the last place is not lost (round-to-nearest drops
//! every one of them). The random bits are a pure function of a seed, so a run stays a function
//! of its config and step.

use half::{bf16, f16};

/// A half-precision storage format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    F16,
    Bf16,
}

impl Half {
    /// The f32 a stored value stands for.
    pub fn to_f32(self, bits: u16) -> f32 {
        match self {
            Half::F16 => f16::from_bits(bits).to_f32(),
            Half::Bf16 => bf16::from_bits(bits).to_f32(),
        }
    }

    /// Round to nearest, ties to even (IEEE's default, and `half`'s).
    pub fn nearest(self, x: f32) -> u16 {
        match self {
            Half::F16 => f16::from_f32(x).to_bits(),
            Half::Bf16 => bf16::from_f32(x).to_bits(),
        }
    }

    /// Stochastic rounding of `x` with 32 random bits: the neighbour away from zero with
    /// probability `(|x| - |lo|) / (|hi| - |lo|)`, else the one toward zero. Values the format
    /// holds exactly, NaN and infinities round as [`Self::nearest`]; beyond the largest finite
    /// value the result stays at it.
    pub fn stochastic(self, x: f32, random: u32) -> u16 {
        let n = self.nearest(x);
        let nv = self.to_f32(n);
        if !x.is_finite() || nv == x {
            return n;
        }
        // Magnitude steps on the bit pattern: +1 is the next value away from zero.
        let (lo, hi) = if nv.abs() < x.abs() {
            (n, n + 1)
        } else {
            (n - 1, n)
        };
        let (lo_v, hi_v) = (self.to_f32(lo).abs() as f64, self.to_f32(hi).abs() as f64);
        if !hi_v.is_finite() {
            return lo;
        }
        let p = (x.abs() as f64 - lo_v) / (hi_v - lo_v);
        if (random as f64) < p * 4_294_967_296.0 {
            hi
        } else {
            lo
        }
    }
}

/// 32 random bits for element `index` of a store made at `step` under `seed` (SplitMix64's
/// finaliser over the three).
pub fn random_bits(seed: u64, step: u64, index: u64) -> u32 {
    let mut z =
        seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [Half; 2] = [Half::F16, Half::Bf16];

    #[test]
    fn values_the_format_holds_are_kept_whatever_the_bits() {
        for h in BOTH {
            for x in [
                0.0f32,
                -0.0,
                1.0,
                -2.5,
                0.125,
                2f32.powi(-15),
                f32::INFINITY,
            ] {
                let n = h.nearest(x);
                for r in [0, 1 << 31, u32::MAX] {
                    assert_eq!(h.stochastic(x, r), n, "{h:?} {x}");
                }
            }
            assert!(h.to_f32(h.stochastic(f32::NAN, 7)).is_nan());
        }
    }

    #[test]
    fn the_result_is_one_of_the_two_neighbours() {
        for h in BOTH {
            for x in [1.0001f32, -1.0001, 3.3e-6, -7.77e-8, 60001.0, -0.7] {
                // All-ones bits never round up, zero bits always do (x is not representable).
                let lo = h.to_f32(h.stochastic(x, u32::MAX));
                let hi = h.to_f32(h.stochastic(x, 0));
                assert!(
                    lo.abs() <= x.abs() && x.abs() <= hi.abs(),
                    "{h:?} {x}: {lo} {hi}"
                );
                assert!(lo == 0.0 || lo.signum() == x.signum(), "{h:?} {x}: {lo}");
                for i in 0..256 {
                    let v = h.to_f32(h.stochastic(x, random_bits(1, 0, i)));
                    assert!(v == lo || v == hi, "{h:?} {x} -> {v}, not {lo} or {hi}");
                }
            }
        }
    }

    /// E[round(x)] = x: the mean of many roundings lies within 5 standard errors of x.
    #[test]
    fn stochastic_rounding_is_unbiased() {
        for h in BOTH {
            for x in [1.0001f32, -0.3333, 1.7e-3, 5.9e-8, 1234.567] {
                let lo = h.to_f32(h.stochastic(x, u32::MAX));
                let hi = h.to_f32(h.stochastic(x, 0));
                let n = 200_000u64;
                let mean = (0..n)
                    .map(|i| h.to_f32(h.stochastic(x, random_bits(42, 3, i))) as f64)
                    .sum::<f64>()
                    / n as f64;
                let ulp = (hi as f64 - lo as f64).abs();
                let se = ulp * 0.5 / (n as f64).sqrt();
                assert!(
                    (mean - x as f64).abs() < 5.0 * se,
                    "{h:?} {x}: mean {mean}, ulp {ulp}, se {se}"
                );
            }
        }
    }

    /// 10,000 updates of 1e-4 to weights of 1: each is under half a unit in the last place of
    /// both formats at 1 (f16 2^-11, bf16 2^-8), so round-to-nearest keeps 1.0; stochastic
    /// rounding arrives near the true 2.0. The mean of 64 weights has a standard error of about
    /// 0.011 in bf16 (its unit at 1 is 2^-7) and 0.004 in f16.
    #[test]
    fn tiny_updates_that_nearest_rounding_loses_are_kept() {
        for h in BOTH {
            let mut nearest = h.nearest(1.0);
            let mut stochastic = [h.nearest(1.0); 64];
            for step in 0..10_000u64 {
                nearest = h.nearest(h.to_f32(nearest) + 1e-4);
                for (i, w) in stochastic.iter_mut().enumerate() {
                    *w = h.stochastic(h.to_f32(*w) + 1e-4, random_bits(9, step, i as u64));
                }
            }
            assert_eq!(h.to_f32(nearest), 1.0, "{h:?}: nearest loses every update");
            let mean = stochastic.iter().map(|&w| h.to_f32(w) as f64).sum::<f64>() / 64.0;
            assert!(
                (mean - 2.0).abs() < 0.05,
                "{h:?}: stochastic reached {mean}"
            );
        }
    }

    #[test]
    fn beyond_the_largest_finite_value_it_stays_there() {
        for r in [0, u32::MAX] {
            assert_eq!(Half::F16.to_f32(Half::F16.stochastic(65519.0, r)), 65504.0);
            assert_eq!(Half::F16.to_f32(Half::F16.stochastic(-1.0e30, r)), -65504.0);
        }
        assert!(
            Half::Bf16
                .to_f32(Half::Bf16.stochastic(1.0e30, 0))
                .is_finite()
        );
    }

    #[test]
    fn nearest_is_the_half_crates_conversion() {
        assert_eq!(Half::F16.nearest(1.0), 0x3c00);
        assert_eq!(Half::Bf16.nearest(1.0), 0x3f80);
        assert_eq!(Half::F16.to_f32(Half::F16.nearest(65504.0)), 65504.0);
    }
}
