//! Class scores from bf16 operands with f32 sums (AVX-512 BF16's `vdpbf16ps` where the CPU has
//! it, about 2.5× the f32 product's rate on this project's CPU), and the bound on how far each
//! such score lies from the f32 score: the screen that lets a ranking compute the f32 score
//! only for the classes that can still reach a row's top-K ([`crate::eval::screen`]).
#![allow(
    unsafe_code,
    reason = "AVX-512 BF16 intrinsics on packed operands, bounds checked by the callers"
)]

use super::ChunkRef;

/// Classes per panel: two 16-lane registers of one row's scores (the ledger's arithmetic).
pub const PANEL_COLS: usize = widebag_ledger::shapes::SCREEN_PANEL_COLS;
/// Rows per register tile of the kernel (`2 × ROW_TILE` accumulators).
const ROW_TILE: usize = 12;

/// `x` rounded to bf16 (nearest, ties to even), as its 16 bits; values below the smallest
/// normal bf16 (which the hardware's dot product reads as zero) become zero.
pub fn bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7fc0;
    }
    if x.abs() < f32::MIN_POSITIVE {
        return 0;
    }
    let b = x.to_bits();
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 value of bf16 bits.
pub fn bf16_value(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Whether this CPU runs the bf16 product in hardware (`avx512bf16`); elsewhere
/// [`products`] runs a portable loop of the same arithmetic, slower than the f32 product.
pub fn hardware() -> bool {
    widebag_ledger::shapes::host_bf16_dot()
}

/// How far a bf16-operand score can lie from the exact product, per unit of `‖a‖·‖b‖`, for
/// `hidden` terms: each operand rounded to 8 significant bits (relative error `u = 2⁻⁸`, so a
/// product within `2u + u²` of its value), the products exact in f32 and summed with at most
/// `hidden` f32 roundings (`γ = hidden · 2⁻²⁴ / (1 − hidden · 2⁻²⁴)` of `Σ|âᵢ b̂ᵢ|`), then
/// Cauchy–Schwarz (`Σ|aᵢ bᵢ| ≤ ‖a‖ ‖b‖`). Inflated by 1 % for the norms' own rounding.
pub fn relative_bound(hidden: usize) -> f64 {
    let u = 2f64.powi(-8);
    let n_u = hidden as f64 * 2f64.powi(-24);
    let gamma = n_u / (1.0 - n_u).max(0.5);
    (2.0 * u + u * u + (1.0 + u) * (1.0 + u) * gamma) * 1.01
}

/// Absolute slack for the values read as zero (below f32's smallest normal) and sums flushed
/// to zero by the hardware: at most `hidden + 2` such roundings of `2⁻¹²⁶` each, scaled by the
/// largest operand.
pub fn absolute_bound(hidden: usize, largest: f64) -> f64 {
    (hidden as f64 + 2.0) * 2f64.powi(-126) * (1.0 + largest) * 2.0
}

/// `[n_rows, hidden]` f32 rows as bf16 pairs along `hidden` (`[n_rows, ⌈hidden/2⌉]` u32s, the
/// lower half the even element), and each row's Euclidean norm.
pub struct PackedRows {
    pub pairs: Vec<u32>,
    pub norms: Vec<f64>,
    pub n_rows: usize,
    pub k_pairs: usize,
}

impl PackedRows {
    pub fn pack(h: &[f32], hidden: usize) -> Self {
        let k_pairs = hidden.div_ceil(2);
        let n_rows = h.len() / hidden.max(1);
        let mut pairs = vec![0u32; n_rows * k_pairs];
        let mut norms = Vec::with_capacity(n_rows);
        for (r, row) in h.chunks_exact(hidden.max(1)).enumerate() {
            for (p, two) in row.chunks(2).enumerate() {
                let hi = two.get(1).map_or(0, |&x| bf16_bits(x));
                pairs[r * k_pairs + p] = bf16_bits(two[0]) as u32 | (hi as u32) << 16;
            }
            norms.push(row.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt());
        }
        Self {
            pairs,
            norms,
            n_rows,
            k_pairs,
        }
    }
}

/// Where a panel's classes are: chunk `chunk`'s columns `start..start + n` (`n ≤ 32`), class
/// `class_start` onwards.
#[derive(Clone, Copy, Debug)]
pub struct Panel {
    pub chunk: usize,
    pub start: usize,
    pub n: usize,
    pub class_start: usize,
}

/// Bytes of one group of panels' f32 class rows (their bf16 pairs take half): under the 32 MiB
/// above which the process's allocator keeps freed blocks by size for the training step's next
/// allocation (`src/malloc_policy.rs`), so that an evaluation's packed layer, freed, does not
/// take the place of the step's own blocks there.
const GROUP_BYTES: usize = 16 << 20;

/// A run of consecutive panels (classes `first_class..first_class + n_classes`): their bf16
/// pairs (`[panel][⌈hidden/2⌉][32]`) and each class's f32 weights as a row.
struct Group {
    first_class: usize,
    pairs: Vec<u32>,
    columns: Vec<f32>,
}

/// Every class of an output layer as bf16 pairs in panels of [`PANEL_COLS`] classes (zero past
/// a chunk's last class), each class's f32 column as a contiguous row (for the f32 rescoring)
/// and its norm; the panels kept in groups of at most [`GROUP_BYTES`].
pub struct Panels {
    pub hidden: usize,
    pub k_pairs: usize,
    pub panels: Vec<Panel>,
    groups: Vec<Group>,
    panels_per_group: usize,
    pub norms: Vec<f64>,
    /// Each class's bias.
    pub biases: Vec<f32>,
    /// Each panel's largest class norm.
    panel_norms: Vec<f64>,
    /// The largest absolute weight (for [`absolute_bound`]).
    pub largest: f64,
}

impl Panels {
    /// Packs `layer` (chunks `[hidden, n]` row-major, first classes `offsets`, which follow
    /// one another from class 0).
    pub fn pack(layer: &[ChunkRef], offsets: &[usize], hidden: usize) -> Self {
        Self::pack_in_groups(layer, offsets, hidden, GROUP_BYTES)
    }

    /// As [`Self::pack`], groups of at most `group_bytes` of f32 rows (at least one panel).
    fn pack_in_groups(
        layer: &[ChunkRef],
        offsets: &[usize],
        hidden: usize,
        group_bytes: usize,
    ) -> Self {
        let k_pairs = hidden.div_ceil(2);
        let mut panels = Vec::new();
        for (chunk, c) in layer.iter().enumerate() {
            for start in (0..c.n()).step_by(PANEL_COLS) {
                let n = PANEL_COLS.min(c.n() - start);
                let class_start = offsets[chunk] + start;
                panels.push(Panel {
                    chunk,
                    start,
                    n,
                    class_start,
                });
            }
        }
        let n_classes = panels.last().map_or(0, |p| p.class_start + p.n);
        let panel_len = k_pairs * PANEL_COLS;
        let panels_per_group = (group_bytes / (PANEL_COLS * hidden.max(1) * 4)).max(1);
        let mut groups: Vec<Group> = panels
            .chunks(panels_per_group)
            .map(|run| {
                let first_class = run[0].class_start;
                let n: usize = run.iter().map(|p| p.n).sum();
                Group {
                    first_class,
                    pairs: vec![0u32; run.len() * panel_len],
                    columns: vec![0f32; n * hidden],
                }
            })
            .collect();
        let mut biases = vec![0f32; n_classes];
        let mut largest = 0f64;
        for (q, p) in panels.iter().enumerate() {
            let c = layer[p.chunk];
            biases[p.class_start..p.class_start + p.n]
                .copy_from_slice(&c.b[p.start..p.start + p.n]);
            let g = &mut groups[q / panels_per_group];
            let at = (q % panels_per_group) * panel_len;
            let out = &mut g.pairs[at..at + panel_len];
            let first = p.class_start - g.first_class;
            for i in 0..hidden {
                let row = &c.w[i * c.n() + p.start..i * c.n() + p.start + p.n];
                for (j, &x) in row.iter().enumerate() {
                    let shift = if i % 2 == 0 { 0 } else { 16 };
                    out[(i / 2) * PANEL_COLS + j] |= (bf16_bits(x) as u32) << shift;
                    g.columns[(first + j) * hidden + i] = x;
                    largest = largest.max(x.abs() as f64);
                }
            }
        }
        let norms: Vec<f64> = (groups.iter())
            .flat_map(|g| g.columns.chunks_exact(hidden.max(1)))
            .map(|col| col.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt())
            .collect();
        let panel_norms = (panels.iter())
            .map(|p| {
                let n = &norms[p.class_start..p.class_start + p.n];
                n.iter().fold(0f64, |m, &x| m.max(x))
            })
            .collect();
        Self {
            hidden,
            k_pairs,
            panels,
            groups,
            panels_per_group,
            norms,
            biases,
            panel_norms,
            largest,
        }
    }

    /// Panel `q`'s largest class norm.
    pub fn panel_norm(&self, q: usize) -> f64 {
        self.panel_norms[q]
    }

    /// Class `class`'s f32 weights.
    pub fn column(&self, class: usize) -> &[f32] {
        let g = &self.groups[self.groups.partition_point(|g| g.first_class <= class) - 1];
        let at = (class - g.first_class) * self.hidden;
        &g.columns[at..at + self.hidden]
    }

    /// Bytes held: the bf16 pairs, the f32 rows, each class's norm and bias.
    pub fn bytes(&self) -> u64 {
        let packed: usize = (self.groups.iter())
            .map(|g| g.pairs.len() * 4 + g.columns.len() * 4)
            .sum();
        (packed + self.norms.len() * 12) as u64
    }

    fn panel_pairs(&self, q: usize) -> &[u32] {
        let len = self.k_pairs * PANEL_COLS;
        let at = (q % self.panels_per_group) * len;
        &self.groups[q / self.panels_per_group].pairs[at..at + len]
    }
}

/// `out[r, 32·i + j] = Σ bf16(rows[r]) · bf16(panel i's class j)` (f32 sums, no bias) for the
/// panels `panels`, `out` `[n_rows, 32 · panels.len()]` row-major.
pub fn products(
    rows: &PackedRows,
    packed: &Panels,
    panels: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let width = panels.len() * PANEL_COLS;
    assert_eq!(
        rows.k_pairs, packed.k_pairs,
        "rows and panels of one hidden width"
    );
    assert!(
        out.len() >= rows.n_rows * width,
        "out holds [rows, panels · 32]"
    );
    for (i, q) in panels.enumerate() {
        let b = packed.panel_pairs(q);
        let out_at = i * PANEL_COLS;
        #[cfg(target_arch = "x86_64")]
        if hardware() {
            // SAFETY: the CPU has AVX-512 BF16 (checked); `rows.pairs` is `[n_rows, k_pairs]`,
            // `b` `[k_pairs, 32]`, and `out` holds `n_rows` rows of `width ≥ out_at + 32`.
            unsafe { x86::panel(rows, b, &mut out[out_at..], width) };
            continue;
        }
        portable_panel(rows, b, &mut out[out_at..], width);
    }
}

/// The same arithmetic without the instruction: each pair's two products (exact in f32) added
/// to the lane's sum one at a time.
fn portable_panel(rows: &PackedRows, b: &[u32], out: &mut [f32], ldc: usize) {
    let kp = rows.k_pairs;
    for r in 0..rows.n_rows {
        let a = &rows.pairs[r * kp..(r + 1) * kp];
        let mut acc = [0f32; PANEL_COLS];
        for (p, &ap) in a.iter().enumerate() {
            let (a0, a1) = (bf16_value(ap as u16), bf16_value((ap >> 16) as u16));
            for (j, s) in acc.iter_mut().enumerate() {
                let bp = b[p * PANEL_COLS + j];
                *s += a1 * bf16_value((bp >> 16) as u16);
                *s += a0 * bf16_value(bp as u16);
            }
        }
        out[r * ldc..r * ldc + PANEL_COLS].copy_from_slice(&acc);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{PANEL_COLS, PackedRows, ROW_TILE};

    /// One panel against every row, [`ROW_TILE`] rows at a time.
    ///
    /// # Safety
    /// AVX-512 BF16 is present; `b` is `[rows.k_pairs, 32]`; `out` holds `rows.n_rows` rows
    /// `ldc` apart, each with 32 values from its start.
    #[target_feature(enable = "avx512bf16,avx512f")]
    pub(super) unsafe fn panel(rows: &PackedRows, b: &[u32], out: &mut [f32], ldc: usize) {
        let kp = rows.k_pairs;
        assert!(b.len() >= kp * PANEL_COLS && rows.pairs.len() >= rows.n_rows * kp);
        assert!(rows.n_rows == 0 || out.len() >= (rows.n_rows - 1) * ldc + PANEL_COLS);
        let mut r = 0;
        while r + ROW_TILE <= rows.n_rows {
            // SAFETY: rows r..r + ROW_TILE exist in `rows.pairs` and `out` (asserted above).
            unsafe {
                tile::<ROW_TILE>(
                    rows.pairs.as_ptr().add(r * kp),
                    kp,
                    b.as_ptr(),
                    out.as_mut_ptr().add(r * ldc),
                    ldc,
                )
            };
            r += ROW_TILE;
        }
        while r < rows.n_rows {
            // SAFETY: row r exists in both (asserted above).
            unsafe {
                tile::<1>(
                    rows.pairs.as_ptr().add(r * kp),
                    kp,
                    b.as_ptr(),
                    out.as_mut_ptr().add(r * ldc),
                    ldc,
                )
            };
            r += 1;
        }
    }

    /// `MR` rows by 32 classes, the sums in `2 · MR` registers.
    ///
    /// # Safety
    /// AVX-512 BF16 is present; `a` holds `MR` rows of `kp` pairs, `b` `kp · 32` pairs, `c`
    /// `MR` rows `ldc` apart of 32 values each.
    #[target_feature(enable = "avx512bf16,avx512f")]
    unsafe fn tile<const MR: usize>(
        a: *const u32,
        kp: usize,
        b: *const u32,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: every address is within the operands the caller vouches for; __m512i and
        // __m512bh are both 64 bytes of lanes.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; MR];
            for p in 0..kp {
                let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * 32).cast()));
                let b1: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(b.add(p * 32 + 16).cast()));
                for (r, sums) in acc.iter_mut().enumerate() {
                    let av: __m512bh =
                        std::mem::transmute(_mm512_set1_epi32(*a.add(r * kp + p) as i32));
                    sums[0] = _mm512_dpbf16_ps(sums[0], av, b0);
                    sums[1] = _mm512_dpbf16_ps(sums[1], av, b1);
                }
            }
            for (r, sums) in acc.iter().enumerate() {
                _mm512_storeu_ps(c.add(r * ldc), sums[0]);
                _mm512_storeu_ps(c.add(r * ldc + 16), sums[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(hidden: usize, sizes: &[usize]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let w = sizes
            .iter()
            .enumerate()
            .map(|(c, &n)| {
                (0..hidden * n)
                    .map(|i| ((i * 7 + c * 13) as f32 * 0.173).sin() * 1.7)
                    .collect()
            })
            .collect();
        let b = sizes.iter().map(|&n| vec![0.0; n]).collect();
        (w, b)
    }

    /// Every panel's scores lie within the bound of the f64 product, on the hardware path
    /// (where present) and the portable one alike, for an odd hidden width and chunks that end
    /// inside a panel.
    #[test]
    fn bf16_scores_lie_within_the_bound_of_the_exact_product() {
        let (hidden, sizes) = (37, [45usize, 70]);
        let (w, b) = layer(hidden, &sizes);
        let refs: Vec<ChunkRef> = w.iter().zip(&b).map(|(w, b)| ChunkRef { w, b }).collect();
        let h: Vec<f32> = (0..13 * hidden)
            .map(|i| (i as f32 * 0.61).cos() * 3.0)
            .collect();
        let rows = PackedRows::pack(&h, hidden);
        let packed = Panels::pack(&refs, &[0, 45], hidden);
        let width = packed.panels.len() * PANEL_COLS;
        let mut out = vec![0f32; rows.n_rows * width];
        products(&rows, &packed, 0..packed.panels.len(), &mut out);
        let mut portable = vec![0f32; rows.n_rows * width];
        for (i, q) in (0..packed.panels.len()).enumerate() {
            portable_panel(
                &rows,
                packed.panel_pairs(q),
                &mut portable[i * PANEL_COLS..],
                width,
            );
        }
        let bound = relative_bound(hidden);
        let mut worst = 0f64;
        for (q, p) in packed.panels.iter().enumerate() {
            for j in 0..p.n {
                let class = p.class_start + j;
                let col = packed.column(class);
                for r in 0..rows.n_rows {
                    let a = &h[r * hidden..(r + 1) * hidden];
                    let exact: f64 = a.iter().zip(col).map(|(&x, &y)| x as f64 * y as f64).sum();
                    let eps = bound * rows.norms[r] * packed.norms[class];
                    for got in [
                        out[r * width + q * 32 + j],
                        portable[r * width + q * 32 + j],
                    ] {
                        let err = (got as f64 - exact).abs();
                        assert!(
                            err <= eps,
                            "row {r} class {class}: {got} vs {exact} > {eps}"
                        );
                        worst = worst.max(err / eps);
                    }
                }
            }
        }
        // The bound is not vacuous: the rounding does move the scores.
        assert!(worst > 1e-4, "worst error / bound {worst}");
    }

    /// Panels packed in groups of one or two panels read back as those packed in one group:
    /// the same pairs, rows, norms and biases for every class, across a chunk boundary.
    #[test]
    fn grouped_panels_read_as_one_group() {
        let (hidden, sizes) = (37, [45usize, 70]);
        let (w, b) = layer(hidden, &sizes);
        let refs: Vec<ChunkRef> = w.iter().zip(&b).map(|(w, b)| ChunkRef { w, b }).collect();
        let whole = Panels::pack(&refs, &[0, 45], hidden);
        assert_eq!(whole.groups.len(), 1);
        for group_bytes in [1, PANEL_COLS * hidden * 4 * 2] {
            let cut = Panels::pack_in_groups(&refs, &[0, 45], hidden, group_bytes);
            assert!(cut.groups.len() > 1);
            assert_eq!(cut.bytes(), whole.bytes());
            for q in 0..whole.panels.len() {
                assert_eq!(cut.panel_pairs(q), whole.panel_pairs(q));
            }
            for class in 0..115 {
                assert_eq!(cut.column(class), whole.column(class));
                let (chunk, local) = if class < 45 {
                    (0, class)
                } else {
                    (1, class - 45)
                };
                assert_eq!(cut.column(class)[3], w[chunk][3 * sizes[chunk] + local]);
            }
            assert_eq!((&cut.norms, &cut.biases), (&whole.norms, &whole.biases));
        }
    }

    #[test]
    fn bf16_rounding_is_to_nearest_even_and_flushes_subnormals() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even (1.0).
        assert_eq!(bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(bf16_bits(-2.0), 0xc000);
        assert_eq!(bf16_bits(f32::MIN_POSITIVE / 4.0), 0);
        assert_eq!(bf16_value(bf16_bits(0.15625)), 0.15625);
    }
}
