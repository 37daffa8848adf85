//! A ranking's exact top-K on flex without the f32 product of every class: each class scored
//! from bf16 operands ([`crate::cpu::bf16_products`], about 2.5× the f32 rate where the CPU has
//! AVX-512 BF16), each score's distance from the f32 score bounded (`ε = relative_bound ·
//! ‖h‖ · ‖w‖`), and only the classes whose upper bound reaches the row's K-th best lower
//! bound rescored in f32. Those rescored scores give the top-K: every class of the f32 top-K is
//! among them, so the result is the f32 scorer's but for classes whose f32 scores tie within
//! f32 rounding (the two sum in different orders).

use std::sync::{Mutex, OnceLock};

use rayon::prelude::*;
use widebag_eval::RowTopK;

use crate::cpu::ChunkRef;
use crate::cpu::bf16_products::{
    PANEL_COLS, PackedRows, Panels, absolute_bound, products, relative_bound,
};
use crate::eval::fold::masked_in;

use widebag_ledger::shapes::{
    SCREEN_PRUNE_PER_K as PRUNE_PER_K, SCREEN_PRUNE_SLACK as PRUNE_SLACK,
    SCREEN_TASK_PANELS as PANELS_PER_TASK,
};

/// The output layer packed once per evaluation (the weights do not change between its
/// batches): bf16 panels, f32 class rows and norms. Packed by the first batch that needs it.
#[derive(Default)]
pub struct ScreenCache {
    panels: OnceLock<Panels>,
}

impl ScreenCache {
    /// Whether the layer is packed already (later batches need not lend it).
    pub fn is_packed(&self) -> bool {
        self.panels.get().is_some()
    }

    /// Bytes it holds once packed: 2 per weight (bf16, padded to whole panels), 4 per weight
    /// (the f32 rows), 12 per class (norm and bias).
    pub fn packed_bytes(&self) -> u64 {
        self.panels.get().map_or(0, Panels::bytes)
    }
}

impl std::fmt::Debug for ScreenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScreenCache({} bytes)", self.packed_bytes())
    }
}

impl PartialEq for ScreenCache {
    /// The same cache (one evaluation's), not equal contents.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for ScreenCache {}

/// One row's screen: the K best lower bounds seen so far (their worst is the bar a class's
/// upper bound must reach) and the classes that reached it, with their upper bounds.
struct RowScreen {
    lower: RowTopK,
    candidates: Vec<(u32, f32)>,
}

impl RowScreen {
    fn bar(&self) -> f32 {
        self.lower.kth_score().unwrap_or(f32::NEG_INFINITY)
    }

    fn prune(&mut self) {
        let bar = self.bar();
        self.candidates.retain(|&(_, upper)| upper >= bar);
    }
}

/// Offers every class of `layer` (chunks first classes `offsets`) to `tops` (one per row of
/// `h`, `[rows, hidden]`), leaving out each row's `seen` classes: screened by bf16 scores,
/// the survivors rescored in f32 (`h · w + b`) and offered with their f32 scores.
pub(crate) fn offer_screened(
    cache: &ScreenCache,
    h: &[f32],
    hidden: usize,
    layer: &[ChunkRef],
    offsets: &[usize],
    seen: &[Vec<u32>],
    tops: &mut [RowTopK],
) {
    let packed = cache
        .panels
        .get_or_init(|| Panels::pack(layer, offsets, hidden));
    let rows = PackedRows::pack(h, hidden);
    let n = rows.n_rows.min(tops.len());
    let k = tops.first().map_or(0, |t| t.k());
    if n == 0 || k == 0 {
        return;
    }
    let relative = relative_bound(hidden);
    let largest_h = h.iter().fold(0f64, |m, &x| m.max(x.abs() as f64));
    let absolute = absolute_bound(hidden, packed.largest.max(largest_h));
    // Per row: the distance bound per unit of a class's norm.
    let per_norm: Vec<f64> = rows.norms.iter().map(|&r| relative * r).collect();
    let screens: Vec<Mutex<RowScreen>> = (0..n)
        .map(|_| {
            Mutex::new(RowScreen {
                lower: RowTopK::new(k),
                candidates: Vec::new(),
            })
        })
        .collect();
    let tasks: Vec<std::ops::Range<usize>> = (0..packed.panels.len())
        .step_by(PANELS_PER_TASK)
        .map(|q| q..(q + PANELS_PER_TASK).min(packed.panels.len()))
        .collect();
    let threads = rayon::current_num_threads().max(1);
    tasks.par_iter().enumerate().for_each_init(
        Vec::new,
        |scratch: &mut Vec<f32>, (index, range)| {
            let width = range.len() * PANEL_COLS;
            scratch.resize(rows.n_rows * width, 0.0);
            products(&rows, packed, range.clone(), scratch);
            // Each task starts at another row so that threads seldom wait for a row's lock.
            let first = (index % threads) * n / threads;
            for i in 0..n {
                let r = (first + i) % n;
                let mut screen = screens[r].lock().unwrap_or_else(|e| e.into_inner());
                let scores = &scratch[r * width..(r + 1) * width];
                let bounds = Bounds {
                    per_norm: per_norm[r],
                    absolute,
                };
                for (i, q) in range.clone().enumerate() {
                    let part = &scores[i * PANEL_COLS..(i + 1) * PANEL_COLS];
                    screen_panel(packed, q, part, seen_of(seen, r), bounds, &mut screen);
                }
                if screen.candidates.len() > PRUNE_PER_K * k + PRUNE_SLACK {
                    screen.prune();
                }
            }
        },
    );
    // The survivors of each row's final bar, rescored in f32.
    tops[..n]
        .par_iter_mut()
        .zip(screens)
        .enumerate()
        .for_each(|(r, (top, screen))| {
            let mut screen = screen.into_inner().unwrap_or_else(|e| e.into_inner());
            screen.prune();
            let row = &h[r * hidden..(r + 1) * hidden];
            for &(class, _) in &screen.candidates {
                let c = class as usize;
                top.offer(class, dot(row, packed.column(c)) + packed.biases[c]);
            }
        });
}

fn seen_of(seen: &[Vec<u32>], r: usize) -> &[Vec<u32>] {
    seen.get(r).map_or(&[], std::slice::from_ref)
}

/// A row's error bound: `per_norm · ‖w‖ + absolute`.
#[derive(Clone, Copy)]
struct Bounds {
    per_norm: f64,
    absolute: f64,
}

/// Folds one panel's bf16 scores (`part`, bias not yet added) of one row into its screen.
/// `seen` is the row's seen classes as a one-row table (empty: none).
fn screen_panel(
    packed: &Panels,
    q: usize,
    part: &[f32],
    seen: &[Vec<u32>],
    bounds: Bounds,
    screen: &mut RowScreen,
) {
    let p = packed.panels[q];
    let bar = screen.bar();
    let eps_max = (bounds.per_norm * packed.panel_norm(q) + bounds.absolute) as f32;
    let best = (0..p.n).fold(f32::NEG_INFINITY, |m, j| {
        m.max(part[j] + packed.biases[p.class_start + j])
    });
    // Nothing in the panel can reach the bar (NaN and infinite scores never skip).
    if best.is_finite() && best + eps_max * 1.0001 < bar {
        return;
    }
    let masked = masked_in(seen, 0, p.class_start, p.class_start + p.n);
    for (j, &raw) in part[..p.n].iter().enumerate() {
        let class = p.class_start + j;
        if masked.binary_search(&(class as u32)).is_ok() {
            continue;
        }
        let s = raw + packed.biases[class];
        let eps = (bounds.per_norm * packed.norms[class] + bounds.absolute) as f32 * 1.0001;
        let (lower, upper) = match s.is_finite() {
            true => (s - eps, s + eps),
            false => (f32::NEG_INFINITY, f32::INFINITY),
        };
        screen.lower.offer(class as u32, lower);
        if upper >= screen.bar() {
            screen.candidates.push((class as u32, upper));
        }
    }
}

/// `Σ a·b` in f32, eight running sums.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = (a8.remainder().iter())
        .zip(b8.remainder())
        .map(|(&x, &y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer whose scores crowd together near the top (many classes within the bf16 error
    /// of each other), in two chunks, with biases.
    fn crowded(hidden: usize, sizes: &[usize]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let w = sizes
            .iter()
            .enumerate()
            .map(|(c, &n)| {
                (0..hidden * n)
                    .map(|i| 0.5 + ((i * 31 + c * 7) as f32 * 0.377).sin() * 0.02)
                    .collect()
            })
            .collect();
        let b = sizes
            .iter()
            .map(|&n| (0..n).map(|j| (j as f32 * 0.13).cos() * 0.01).collect())
            .collect();
        (w, b)
    }

    fn f32_top(
        h: &[f32],
        hidden: usize,
        refs: &[ChunkRef],
        offsets: &[usize],
        seen: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<u32>> {
        let n_rows = h.len() / hidden;
        (0..n_rows)
            .map(|r| {
                let mut top = RowTopK::new(k);
                for (c, &off) in refs.iter().zip(offsets) {
                    for j in 0..c.b.len() {
                        let class = (off + j) as u32;
                        if seen[r].contains(&class) {
                            continue;
                        }
                        let s: f64 = (0..hidden)
                            .map(|i| h[r * hidden + i] as f64 * c.w[i * c.b.len() + j] as f64)
                            .sum::<f64>()
                            + c.b[j] as f64;
                        top.offer(class, s as f32);
                    }
                }
                top.into_classes()
            })
            .collect()
    }

    /// The screened top-K is the exact top-K (f64 reference), masks respected, on a layer
    /// where bf16 alone would reorder the top, over chunks that end inside a panel.
    #[test]
    fn the_screened_top_k_is_the_exact_top_k() {
        let (hidden, sizes, offsets) = (50, [70usize, 333], [0usize, 70]);
        let (w, b) = crowded(hidden, &sizes);
        let refs: Vec<ChunkRef> = w.iter().zip(&b).map(|(w, b)| ChunkRef { w, b }).collect();
        let n_rows = 29;
        let h: Vec<f32> = (0..n_rows * hidden)
            .map(|i| 1.0 + (i as f32 * 0.71).sin() * 0.3)
            .collect();
        let seen: Vec<Vec<u32>> = (0..n_rows as u32)
            .map(|r| vec![r, 69, 70 + r * 3, 400])
            .collect();
        let k = 10;
        let want = f32_top(&h, hidden, &refs, &offsets, &seen, k);
        let cache = ScreenCache::default();
        for _batch in 0..2 {
            let mut tops: Vec<RowTopK> = (0..n_rows).map(|_| RowTopK::new(k)).collect();
            offer_screened(&cache, &h, hidden, &refs, &offsets, &seen, &mut tops);
            let got: Vec<Vec<u32>> = tops.into_iter().map(|t| t.into_classes()).collect();
            assert_eq!(got, want);
        }
        // bf16 scores alone would not have given this order: the test can fail.
        let rows = PackedRows::pack(&h, hidden);
        let packed = Panels::pack(&refs, &offsets, hidden);
        let width = packed.panels.len() * PANEL_COLS;
        let mut out = vec![0f32; n_rows * width];
        products(&rows, &packed, 0..packed.panels.len(), &mut out);
        let bf16_order: Vec<Vec<u32>> = (0..n_rows)
            .map(|r| {
                let mut top = RowTopK::new(k);
                for (q, p) in packed.panels.iter().enumerate() {
                    for j in 0..p.n {
                        let class = p.class_start + j;
                        if !seen[r].contains(&(class as u32)) {
                            let s = out[r * width + q * PANEL_COLS + j] + packed.biases[class];
                            top.offer(class as u32, s);
                        }
                    }
                }
                top.into_classes()
            })
            .collect();
        assert_ne!(
            bf16_order, want,
            "the layer must be crowded enough to matter"
        );
        assert!(cache.packed_bytes() > 0);
    }
}
