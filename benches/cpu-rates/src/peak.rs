//! One core's peak multiply-add throughput: independent chains of 512-bit f32 FMAs against the
//! same count of AVX512-BF16 dot products (`vdpbf16ps`: 32 bf16 products into 16 f32 sums, twice
//! the work of an FMA per instruction), each on every core at once.

use std::time::Instant;

/// Independent accumulators: more than any core's latency × throughput.
const CHAINS: usize = 12;
/// Instructions per chain.
const ROUNDS: usize = 50_000_000;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, ROUNDS};
    use std::arch::x86_64::*;

    /// `CHAINS × ROUNDS` FMAs of 16 lanes (32 flops each).
    #[target_feature(enable = "avx512f")]
    pub fn fma(x: f32) -> f32 {
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        let (a, b) = (_mm512_set1_ps(x), _mm512_set1_ps(0.9999));
        for _ in 0..ROUNDS {
            for s in &mut acc {
                *s = _mm512_fmadd_ps(a, b, *s);
            }
        }
        acc.iter().map(|&s| _mm512_reduce_add_ps(s)).sum()
    }

    /// `CHAINS × ROUNDS` bf16 dot products of 16 lanes (64 flops each).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub fn dot_bf16(x: f32) -> f32 {
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        let a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(x), _mm512_set1_ps(x));
        let b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.9999), _mm512_set1_ps(0.9999));
        for _ in 0..ROUNDS {
            for s in &mut acc {
                *s = _mm512_dpbf16_ps(*s, a, b);
            }
        }
        acc.iter().map(|&s| _mm512_reduce_add_ps(s)).sum()
    }
}

/// Runs `f` on every core at once; the mean GFLOP/s of one core.
fn per_core(flop_per_instruction: f64, f: fn() -> f32) -> f64 {
    let threads = rayon::current_num_threads();
    let rates: Vec<f64> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let t = Instant::now();
                    std::hint::black_box(f());
                    (CHAINS * ROUNDS) as f64 * flop_per_instruction / t.elapsed().as_secs_f64()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("a run")).collect()
    });
    rates.iter().sum::<f64>() / rates.len() as f64 / 1e9
}

/// Prints one core's f32 FMA and bf16 dot-product GFLOP/s where the processor has them.
pub fn report() {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            println!("no AVX-512: peak rates not measured");
            return;
        }
        // SAFETY: AVX-512F was detected above.
        let fma = per_core(32.0, || unsafe { x86::fma(std::hint::black_box(1.0001)) });
        println!(
            "one core of {}: f32 FMA {fma:.1} GFLOP/s",
            rayon::current_num_threads()
        );
        if std::arch::is_x86_feature_detected!("avx512bf16") {
            // SAFETY: AVX512-BF16 was detected above.
            let bf16 = per_core(64.0, || unsafe {
                x86::dot_bf16(std::hint::black_box(1.0001))
            });
            println!(
                "one core: bf16 dot products {bf16:.1} GFLOP/s ({:.2}x the FMA's)",
                bf16 / fma
            );
        } else {
            println!("no AVX512-BF16");
        }
    }
}
