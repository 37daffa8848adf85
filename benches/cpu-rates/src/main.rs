//! What the cores can multiply, for the time-to-recall bound (docs/benchmarks.md): one core's
//! f32 FMA and AVX512-BF16 dot-product throughput, and widebag's gemm on the output layer's
//! class blocks (`cargo run --release -- [batch hidden classes block]`, default Gowalla's
//! 500 600 40981 512), each of the step's three products timed over every block in parallel.

mod peak;

use rayon::prelude::*;
use std::time::Instant;

/// A pointer the blocks share, each writing only its own columns.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: every block writes a disjoint set of columns through it.
unsafe impl Send for Shared {}
// SAFETY: as for Send.
unsafe impl Sync for Shared {}

/// `dst (+)= lhs · rhs`, each operand as (pointer, row stride, column stride), on this thread.
///
/// # Safety
/// The pointers and strides address valid `m × k`, `k × n` and `m × n` matrices.
unsafe fn gemm(
    (m, n, k): (usize, usize, usize),
    dst: (*mut f32, isize, isize),
    accumulate: bool,
    lhs: (*const f32, isize, isize),
    rhs: (*const f32, isize, isize),
) {
    // SAFETY: as the caller promises.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.2,
            dst.1,
            accumulate,
            lhs.0,
            lhs.2,
            lhs.1,
            rhs.0,
            rhs.2,
            rhs.1,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The best of `reps` timings of `f`, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("sizes are whole numbers"))
        .collect();
    let [b, h, c, nb] = match args.as_slice() {
        [] => [500, 600, 40_981, 512],
        [b, h, c, nb] => [*b, *h, *c, *nb],
        _ => panic!("usage: cpu-rates [batch hidden classes block]"),
    };
    peak::report();
    let threads = rayon::current_num_threads();
    let hv: Vec<f32> = (0..b * h).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
    let w: Vec<f32> = (0..h * c).map(|i| (i % 11) as f32 * 0.01 - 0.05).collect();
    let mut z = vec![0f32; b * c];
    let mut dw = vec![0f32; h * c];
    let blocks: Vec<(usize, usize)> = (0..c).step_by(nb).map(|s| (s, nb.min(c - s))).collect();
    let (zp, dwp) = (Shared(z.as_mut_ptr()), Shared(dw.as_mut_ptr()));
    let flop = 2.0 * (b * h * c) as f64;
    let (cs, hs) = (c as isize, h as isize);
    // SAFETY (all three): each block reads its columns of W, z and h, and writes only its own
    // columns of z or dW (dh: a per-thread accumulator).
    let fwd = best(5, || {
        blocks.par_iter().for_each(|&(s, n)| {
            let z = zp;
            unsafe {
                gemm(
                    (b, n, h),
                    (z.0.add(s), cs, 1),
                    false,
                    (hv.as_ptr(), hs, 1),
                    (w.as_ptr().add(s), cs, 1),
                )
            }
        })
    });
    let dh = best(5, || {
        let _ = blocks
            .par_iter()
            .fold(
                || vec![0f32; b * h],
                |mut dh, &(s, n)| {
                    let z = zp;
                    unsafe {
                        gemm(
                            (b, h, n),
                            (dh.as_mut_ptr(), hs, 1),
                            true,
                            (z.0.add(s), cs, 1),
                            (w.as_ptr().add(s), 1, cs),
                        )
                    };
                    dh
                },
            )
            .reduce_with(|mut a, o| {
                a.iter_mut().zip(&o).for_each(|(x, y)| *x += y);
                a
            });
    });
    let dwt = best(5, || {
        blocks.par_iter().for_each(|&(s, n)| {
            let (z, dw) = (zp, dwp);
            unsafe {
                gemm(
                    (h, n, b),
                    (dw.0.add(s), cs, 1),
                    false,
                    (hv.as_ptr(), 1, hs),
                    (z.0.add(s), cs, 1),
                )
            }
        })
    });
    println!(
        "gemm 0.19, {threads} threads, [{b}, {h}] x [{h}, {c}] in blocks of {nb} classes \
         ({:.1} GFLOP each):",
        flop / 1e9
    );
    for (name, s) in [("z = h W", fwd), ("dh = g Wt", dh), ("dW = ht g", dwt)] {
        println!(
            "  {name:<10} {:7.1} ms  {:6.1} GFLOP/s",
            s * 1e3,
            flop / s / 1e9
        );
    }
    println!("  the three: {:.1} ms", (fwd + dh + dwt) * 1e3);
}
