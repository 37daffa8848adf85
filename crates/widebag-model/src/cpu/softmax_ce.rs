//! Full-softmax cross-entropy on the host, for the flex CPU backend: the same loss and
//! gradients as [`crate::output::softmax`], computed over cache-sized class blocks in parallel (rayon),
//! each block's logits made by one single-threaded `gemm` into a reused scratch buffer, with a
//! vectorised `exp` ([`super::vexp`]). No `[batch, classes]` buffer is ever allocated.
//!
//! 1. forward: per block, `z = h W + b` and each row's block max and `Σ e^(z − max)`; merged
//!    into `lse`; the target term from the targets' own columns;
//! 2. backward: per block, `z` again, `g = (w_r e^(z − lse) − y) / B` in place, then
//!    `dh += g Wᵀ` (a per-thread accumulator), `dW = hᵀ g` and `db = Σ_r g` into the block's
//!    own columns of the gradient.
#![allow(
    unsafe_code,
    reason = "gemm takes raw pointers; blocks write disjoint columns of one gradient"
)]

use rayon::prelude::*;
use widebag_csr::Targets;

pub use super::blocks::ChunkRef;
use super::blocks::{Block, BlockZ, SharedMut, block_cols, blocks, gemm};
use super::vexp;

/// The output gradient of one class chunk, row-major as its [`ChunkRef`].
pub struct ChunkGrad {
    pub dw: Vec<f32>,
    pub db: Vec<f32>,
}

/// Targets by chunk, each sorted by class: `(row, class in the chunk, weight)`, and the factor
/// the loss and the gradients are scaled by (`1 / B` for a batch mean).
pub struct HostTargets {
    n_rows: usize,
    per_chunk: Vec<Vec<(u32, u32, f32)>>,
    row_weight: Vec<f32>,
    scale: f32,
}

impl HostTargets {
    /// `targets` laid out for chunks of `chunk_n` classes each, averaged over the rows.
    pub fn new(targets: &Targets, chunk_n: &[usize]) -> Self {
        let n_rows = targets.row_ptr.len().saturating_sub(1);
        let entries = (0..n_rows).flat_map(|r| {
            (targets.row_ptr[r]..targets.row_ptr[r + 1])
                .map(move |k| (r as u32, targets.classes[k], targets.weights[k]))
        });
        Self::from_entries(n_rows, entries, chunk_n, 1.0 / n_rows.max(1) as f32)
    }

    /// `(row, class, weight)` entries of `n_rows` rows, the loss scaled by `scale`.
    pub fn from_entries(
        n_rows: usize,
        entries: impl IntoIterator<Item = (u32, u32, f32)>,
        chunk_n: &[usize],
        scale: f32,
    ) -> Self {
        let offsets: Vec<usize> = chunk_n
            .iter()
            .scan(0, |acc, &n| {
                let o = *acc;
                *acc += n;
                Some(o)
            })
            .collect();
        let mut per_chunk = vec![Vec::new(); chunk_n.len()];
        let mut row_weight = vec![0.0f32; n_rows];
        for (r, class, w) in entries {
            let class = class as usize;
            let c = offsets.partition_point(|&o| o <= class) - 1;
            per_chunk[c].push((r, (class - offsets[c]) as u32, w));
            row_weight[r as usize] += w;
        }
        for list in &mut per_chunk {
            list.sort_by_key(|&(r, j, _)| (j, r));
        }
        Self {
            n_rows,
            per_chunk,
            row_weight,
            scale,
        }
    }

    /// The same targets with each row's total weight given (the classes of an output layer
    /// split by rank hold only part of a row's targets, while its log-sum-exp term weighs them
    /// all).
    pub fn with_row_weights(mut self, row_weight: Vec<f32>) -> Self {
        assert_eq!(row_weight.len(), self.n_rows, "one weight per row");
        self.row_weight = row_weight;
        self
    }

    /// Targets of `block`, as `(row, column in the block, weight)`.
    fn of(&self, b: Block) -> impl Iterator<Item = (usize, usize, f32)> + '_ {
        let list = &self.per_chunk[b.chunk];
        let lo = list.partition_point(|t| (t.1 as usize) < b.start);
        let hi = list.partition_point(|t| (t.1 as usize) < b.start + b.n);
        list[lo..hi]
            .iter()
            .map(move |&(r, j, w)| (r as usize, j as usize - b.start, w))
    }
}

/// Whether the forward pass keeps every chunk's `[B, n]` logits for the backward pass (the
/// dense layout's full logits, as PyTorch keeps them; the sparse layout with `model.logits =
/// "keep"`) or the backward pass makes them again one block at a time (no buffer wider than a
/// block).
pub use widebag_config::Logits;

/// What the forward pass hands to the backward pass.
pub struct CeForward {
    /// Each row's log-sum-exp.
    pub lse: Vec<f32>,
    /// The scaled loss (the mean over rows for [`HostTargets::new`]).
    pub loss: f32,
    /// Each chunk's logits, with [`Logits::Keep`].
    kept: Option<Vec<Vec<f32>>>,
}

/// One block's forward results: each row's `(block max, Σ e^(z − max))`, and `(row, w z)` for
/// each of its targets.
type BlockStats = (Vec<(f32, f32)>, Vec<(usize, f64)>);

/// Pass 1: each row's log-sum-exp and the scaled loss. `h` is `[B, hidden]`.
pub fn forward(
    h: &[f32],
    hidden: usize,
    layer: &[ChunkRef],
    targets: &HostTargets,
    logits: Logits,
) -> CeForward {
    forward_in(
        h,
        hidden,
        layer,
        targets,
        logits,
        block_cols(targets.n_rows),
    )
}

fn forward_in(
    h: &[f32],
    hidden: usize,
    layer: &[ChunkRef],
    targets: &HostTargets,
    logits: Logits,
    width: usize,
) -> CeForward {
    let n_rows = targets.n_rows;
    if n_rows == 0 {
        return CeForward {
            lse: Vec::new(),
            loss: 0.0,
            kept: (logits == Logits::Keep).then(|| layer.iter().map(|_| Vec::new()).collect()),
        };
    }
    // Kept logits are allocated without zeroing: every element is written by its block's
    // `fill` before anything reads it.
    let mut kept: Option<Vec<Vec<f32>>> = (logits == Logits::Keep).then(|| {
        layer
            .iter()
            .map(|c| Vec::with_capacity(n_rows * c.n()))
            .collect()
    });
    let shared: Option<Vec<SharedMut>> = kept
        .as_mut()
        .map(|k| k.iter_mut().map(|z| SharedMut(z.as_mut_ptr())).collect());
    let blocks = blocks(layer, width);
    // Per block: each row's (block max, Σ e^(z − max)), and its targets' `w z` (read from the
    // block's logits while they are in cache).
    let stats: Vec<BlockStats> = blocks
        .par_iter()
        .map_init(Vec::new, |scratch, &b| {
            let c = layer[b.chunk];
            let z = BlockZ::at(b, n_rows, scratch, shared.as_deref(), c.n());
            z.fill(h, hidden, c, b);
            let rows = (0..n_rows)
                .map(|r| {
                    // SAFETY: one row at a time, within the block's own columns.
                    let row = unsafe { z.row(r) };
                    let m = vexp::max(row);
                    (m, vexp::sum_exp_shift(row, m))
                })
                .collect();
            let picked = targets
                .of(b)
                // SAFETY: as above; the target's column lies in the block.
                .map(|(r, j, w)| (r, (w * unsafe { z.row(r)[j] }) as f64))
                .collect();
            (rows, picked)
        })
        .collect();
    if let Some(k) = kept.as_mut() {
        for (z, c) in k.iter_mut().zip(layer) {
            // SAFETY: the blocks cover every column of every chunk, and each block's `fill`
            // wrote all `n_rows` rows of its columns.
            unsafe { z.set_len(n_rows * c.n()) };
        }
    }
    let lse: Vec<f32> = (0..n_rows)
        .map(|r| {
            let m = stats.iter().fold(f32::NEG_INFINITY, |a, s| a.max(s.0[r].0));
            let s: f64 = stats
                .iter()
                .map(|s| s.0[r].1 as f64 * ((s.0[r].0 - m) as f64).exp())
                .sum();
            m + s.ln() as f32
        })
        .collect();
    // Σ_j y_rj z_rj, added in block order (the same sums whichever thread made each block).
    let mut picked = vec![0.0f64; n_rows];
    for (_, list) in &stats {
        for &(r, wz) in list {
            picked[r] += wz;
        }
    }
    let total: f64 = (0..n_rows)
        .filter(|&r| targets.row_weight[r] != 0.0)
        .map(|r| targets.row_weight[r] as f64 * lse[r] as f64 - picked[r])
        .sum();
    CeForward {
        lse,
        loss: (total * targets.scale as f64) as f32,
        kept,
    }
}

/// Pass 2: the gradients of the output layer (one [`ChunkGrad`] per chunk) and `dL/dh`
/// (`[B, hidden]`). Kept logits are turned into their gradient in place.
pub fn backward(
    h: &[f32],
    hidden: usize,
    layer: &[ChunkRef],
    targets: &HostTargets,
    fwd: &mut CeForward,
) -> (Vec<f32>, Vec<ChunkGrad>) {
    backward_in(h, hidden, layer, targets, fwd, block_cols(targets.n_rows))
}

fn backward_in(
    h: &[f32],
    hidden: usize,
    layer: &[ChunkRef],
    targets: &HostTargets,
    fwd: &mut CeForward,
    width: usize,
) -> (Vec<f32>, Vec<ChunkGrad>) {
    let n_rows = targets.n_rows;
    if n_rows == 0 {
        let grads = layer
            .iter()
            .map(|c| ChunkGrad {
                dw: vec![0.0; c.w.len()],
                db: vec![0.0; c.n()],
            })
            .collect();
        return (Vec::new(), grads);
    }
    // dW is allocated without zeroing: each block writes (not adds) its own columns, for
    // every hidden unit.
    let mut grads: Vec<ChunkGrad> = layer
        .iter()
        .map(|c| {
            // The blocks write `hidden` rows of every column: exactly the buffer, no more.
            assert_eq!(c.w.len(), hidden * c.n(), "a chunk's W is [hidden, n]");
            ChunkGrad {
                dw: Vec::with_capacity(c.w.len()),
                db: vec![0.0; c.n()],
            }
        })
        .collect();
    let scale = targets.scale;
    let coef: Vec<f32> = targets.row_weight.iter().map(|w| w * scale).collect();
    let outs: Vec<(SharedMut, SharedMut)> = grads
        .iter_mut()
        .map(|g| (SharedMut(g.dw.as_mut_ptr()), SharedMut(g.db.as_mut_ptr())))
        .collect();
    let shared: Option<Vec<SharedMut>> = fwd
        .kept
        .as_mut()
        .map(|k| k.iter_mut().map(|z| SharedMut(z.as_mut_ptr())).collect());
    let lse = &fwd.lse;
    let blocks = blocks(layer, width);
    let dh = blocks
        .par_iter()
        .fold(
            || (Vec::new(), vec![0.0f32; n_rows * hidden]),
            |(mut scratch, mut dh), &b| {
                let c = layer[b.chunk];
                let z = BlockZ::at(b, n_rows, &mut scratch, shared.as_deref(), c.n());
                if shared.is_none() {
                    z.fill(h, hidden, c, b);
                }
                for r in 0..n_rows {
                    // SAFETY: one row at a time, within the block's own columns.
                    let row = unsafe { z.row(r) };
                    if coef[r] == 0.0 {
                        row.fill(0.0);
                    } else {
                        vexp::exp_shift_sum(row, lse[r], coef[r]);
                    }
                }
                for (r, j, w) in targets.of(b) {
                    // SAFETY: as above.
                    unsafe { z.row(r)[j] -= w * scale };
                }
                let (dw, db) = (outs[b.chunk].0, outs[b.chunk].1);
                let zs = z.row_stride as isize;
                // SAFETY: z is [B, b.n] rows row_stride apart; W's and dW's columns b.start..
                // of [hidden, c.n()] are in range, and each block writes only its own columns
                // of z, dW and db.
                unsafe {
                    // dh[B, H] += g[B, n] · W[:, block]ᵀ
                    gemm(
                        (n_rows, hidden, b.n),
                        (dh.as_mut_ptr(), hidden as isize, 1),
                        true,
                        (z.ptr, zs, 1),
                        (c.w.as_ptr().add(b.start), 1, c.n() as isize),
                    );
                    // dW[:, block] = hᵀ[H, B] · g[B, n]
                    gemm(
                        (hidden, b.n, n_rows),
                        (dw.0.add(b.start), c.n() as isize, 1),
                        false,
                        (h.as_ptr(), 1, hidden as isize),
                        (z.ptr, zs, 1),
                    );
                    let db = std::slice::from_raw_parts_mut(db.0.add(b.start), b.n);
                    for r in 0..n_rows {
                        for (d, &g) in db.iter_mut().zip(z.row(r).iter()) {
                            *d += g;
                        }
                    }
                }
                (scratch, dh)
            },
        )
        .map(|(_, dh)| dh)
        .reduce_with(|mut a, b| {
            for (x, y) in a.iter_mut().zip(&b) {
                *x += y;
            }
            a
        })
        .unwrap_or_else(|| vec![0.0; n_rows * hidden]);
    for (g, c) in grads.iter_mut().zip(layer) {
        // SAFETY: the blocks cover every column of every chunk, each block's `dW` gemm wrote
        // all `hidden` rows of its columns, and `c.w.len() == hidden * c.n()` (asserted above).
        unsafe { g.dw.set_len(c.w.len()) };
    }
    (dh, grads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference loss and gradients in f64, straight from the definition.
    fn reference(
        h: &[f32],
        hidden: usize,
        w: &[f32],
        b: &[f32],
        t: &Targets,
    ) -> (f64, Vec<f64>, Vec<f64>, Vec<f64>) {
        let n = b.len();
        let rows = h.len() / hidden;
        let (mut loss, mut dh, mut dw, mut db) = (
            0.0,
            vec![0.0; rows * hidden],
            vec![0.0; w.len()],
            vec![0.0; n],
        );
        for r in 0..rows {
            let z: Vec<f64> = (0..n)
                .map(|j| {
                    b[j] as f64
                        + (0..hidden)
                            .map(|k| h[r * hidden + k] as f64 * w[k * n + j] as f64)
                            .sum::<f64>()
                })
                .collect();
            let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + z.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            let mut y = vec![0.0; n];
            for k in t.row_ptr[r]..t.row_ptr[r + 1] {
                y[t.classes[k] as usize] += t.weights[k] as f64;
            }
            let rw: f64 = y.iter().sum();
            loss += rw * lse - (0..n).map(|j| y[j] * z[j]).sum::<f64>();
            for j in 0..n {
                let g = (rw * (z[j] - lse).exp() - y[j]) / rows as f64;
                db[j] += g;
                for k in 0..hidden {
                    dw[k * n + j] += h[r * hidden + k] as f64 * g;
                    dh[r * hidden + k] += g * w[k * n + j] as f64;
                }
            }
        }
        (loss / rows as f64, dh, dw, db)
    }

    fn close(got: &[f32], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        for (g, w) in got.iter().zip(want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-5 * scale.max(1e-3),
                "{g} vs {w}"
            );
        }
    }

    #[test]
    fn blocks_over_chunks_give_the_definitions_loss_and_gradients() {
        // 5 rows, 3 hidden, 2,300 classes in chunks of 1,000, 1,000 and 300, weighted bag
        // targets and an empty row (total weight 0).
        let (rows, hidden, n) = (5usize, 3usize, 2300usize);
        let h: Vec<f32> = (0..rows * hidden)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3)
            .collect();
        let w: Vec<f32> = (0..hidden * n)
            .map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.05)
            .collect();
        let b: Vec<f32> = (0..n).map(|j| (j % 5) as f32 * 0.01).collect();
        let t = Targets {
            n_classes: n,
            row_ptr: vec![0, 1, 3, 3, 4, 6],
            classes: vec![7, 1500, 2299, 999, 1000, 5],
            weights: vec![1.0, 0.25, 0.75, 1.0, 2.0, 1.0],
            single_class: false,
        };
        let cuts = [1000usize, 1000, 300];
        let mut off = 0;
        let (mut ws, mut bs) = (Vec::new(), Vec::new());
        for &c in &cuts {
            let wc: Vec<f32> = (0..hidden)
                .flat_map(|k| w[k * n + off..k * n + off + c].to_vec())
                .collect();
            ws.push(wc);
            bs.push(b[off..off + c].to_vec());
            off += c;
        }
        let layer: Vec<ChunkRef> = ws.iter().zip(&bs).map(|(w, b)| ChunkRef { w, b }).collect();
        let targets = HostTargets::new(&t, &cuts);
        let (loss, dh, dw, db) = reference(&h, hidden, &w, &b, &t);
        // One block per chunk, and blocks of 64 and 48 columns (the last of a chunk narrower).
        let widths = [block_cols(rows), 64, 48];
        for (width, logits) in widths
            .into_iter()
            .flat_map(|w| [(w, Logits::Recompute), (w, Logits::Keep)])
        {
            let mut fwd = forward_in(&h, hidden, &layer, &targets, logits, width);
            assert!(
                (fwd.loss as f64 - loss).abs() < 1e-5 * loss.abs(),
                "{} vs {loss}",
                fwd.loss
            );
            let (got_dh, grads) = backward_in(&h, hidden, &layer, &targets, &mut fwd, width);
            close(&got_dh, &dh);
            let mut off = 0;
            assert_eq!(grads.len(), cuts.len());
            for (g, &c) in grads.iter().zip(&cuts) {
                let want_w: Vec<f64> = (0..hidden)
                    .flat_map(|k| dw[k * n + off..k * n + off + c].to_vec())
                    .collect();
                close(&g.dw, &want_w);
                close(&g.db, &db[off..off + c]);
                off += c;
            }
        }
        assert_eq!(blocks(&layer, block_cols(rows)).len(), 3);
        assert_eq!(blocks(&layer, 48).len(), 21 + 21 + 7);
    }
}
