//! Running top-K selection over class scores offered chunk by chunk: [`RowTopK`] for one row and
//! [`TopKBatch`] for a block of rows.
//!
//! Ranking order: a higher score ranks first; among equal scores the LOWER class id ranks first.
//! `-0.0` is treated as `0.0` (and returned as `0.0`), so the order is total and deterministic.
//! NaN scores are never taken. Infinite scores are ordinary scores (`-inf` is taken only while
//! fewer than K classes have been seen). Each class should be offered once per row: a class
//! offered twice may appear twice.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::EvalError;

/// Scores tested against the threshold at once before any is looked at alone.
const SCAN_GROUP: usize = 64;

/// One kept candidate. Its `Ord` puts the WORSE candidate higher, so the max-heap's top is the
/// current worst of the kept K (the admission threshold).
#[derive(Clone, Copy, Debug)]
struct Entry {
    score: f32,
    class: u32,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Lower score is worse; at equal score the higher class id is worse.
        other
            .score
            .total_cmp(&self.score)
            .then(self.class.cmp(&other.class))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

/// Maps `-0.0` to `0.0` so that `total_cmp` agrees with `==` on every score the heap holds.
fn canonical(score: f32) -> f32 {
    if score == 0.0 { 0.0 } else { score }
}

/// The best `k` (class, score) pairs of one row seen so far. `k = 0` keeps nothing.
#[derive(Clone, Debug)]
pub struct RowTopK {
    k: usize,
    heap: BinaryHeap<Entry>,
}

impl RowTopK {
    /// An empty selection that will keep the best `k` classes.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            // Capped so that an absurd K does not reserve memory up front.
            heap: BinaryHeap::with_capacity(k.min(4096)),
        }
    }

    /// The K this selection keeps.
    pub fn k(&self) -> usize {
        self.k
    }

    /// How many classes are kept now (at most K).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing has been kept yet.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The worst kept (class, score) once K are kept: a new class must beat it to enter.
    fn threshold(&self) -> Option<(f32, u32)> {
        if self.heap.len() < self.k {
            return None;
        }
        self.heap.peek().map(|e| (e.score, e.class))
    }

    /// The worst kept score once K are kept (the score a new class must beat); `None` before.
    pub fn kth_score(&self) -> Option<f32> {
        self.threshold().map(|t| t.0)
    }

    /// Offers one class. NaN scores are ignored.
    pub fn offer(&mut self, class: u32, score: f32) {
        if score.is_nan() || self.k == 0 {
            return;
        }
        let entry = Entry {
            score: canonical(score),
            class,
        };
        if self.heap.len() < self.k {
            self.heap.push(entry);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && entry < *worst
        {
            *worst = entry;
        }
    }

    /// Offers `scores[i]` as class `class_start + i`, skipping the classes listed in `masked`
    /// (sorted ascending absolute class ids, e.g. a user's training items; ids outside this chunk
    /// are ignored). Scores whose class id would pass `u32::MAX` are ignored.
    ///
    /// Linear in the chunk: once K classes are kept, each score is one comparison against the
    /// current threshold unless it beats it.
    pub fn offer_chunk(&mut self, class_start: u32, scores: &[f32], masked: &[u32]) {
        let n_ids_left = u64::from(u32::MAX) - u64::from(class_start) + 1;
        let n_scores = usize::try_from(n_ids_left).map_or(scores.len(), |n| n.min(scores.len()));
        let scores = &scores[..n_scores];
        let mut next = 0usize; // first score not yet offered
        let first_mask = masked.partition_point(|&m| m < class_start);
        for &m in &masked[first_mask..] {
            let Some(offset) = m.checked_sub(class_start).map(|o| o as usize) else {
                continue; // only when `masked` is not sorted
            };
            if offset >= scores.len() {
                break;
            }
            if offset < next {
                continue; // a repeated (or out-of-order) mask id
            }
            self.offer_run(class_start + next as u32, &scores[next..offset]);
            next = offset + 1;
        }
        if next < scores.len() {
            self.offer_run(class_start + next as u32, &scores[next..]);
        }
    }

    /// Offers a run of consecutive classes with no masked id among them.
    fn offer_run(&mut self, class_start: u32, scores: &[f32]) {
        let mut i = 0;
        // Fill phase: take everything that is not NaN until K are kept.
        while i < scores.len() && self.heap.len() < self.k {
            self.offer(class_start + i as u32, scores[i]);
            i += 1;
        }
        let Some((mut worst_score, mut worst_class)) = self.threshold() else {
            return;
        };
        for (g, group) in scores[i..].chunks(SCAN_GROUP).enumerate() {
            // One vectorised test per group: once K are kept, nearly every group holds no
            // score that reaches the threshold (NaN never does).
            let mut reaches = false;
            for &score in group {
                reaches |= score >= worst_score;
            }
            if !reaches {
                continue;
            }
            let first = class_start + (i + g * SCAN_GROUP) as u32;
            for (j, &score) in group.iter().enumerate() {
                let class = first + j as u32;
                if !(score > worst_score || (score == worst_score && class < worst_class)) {
                    continue;
                }
                self.offer(class, score);
                if let Some(t) = self.threshold() {
                    (worst_score, worst_class) = t;
                }
            }
        }
    }

    /// Merges another selection's result (for instance a device's per-chunk top-K): parallel
    /// class and score arrays; pairs beyond the shorter array are ignored.
    pub fn merge(&mut self, classes: &[u32], scores: &[f32]) {
        for (&class, &score) in classes.iter().zip(scores) {
            self.offer(class, score);
        }
    }

    /// The kept (class, score) pairs, best first (ties: lower class id first).
    pub fn into_sorted(self) -> Vec<(u32, f32)> {
        // Ascending in `Entry`'s order is best first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|e| (e.class, e.score))
            .collect()
    }

    /// The kept class ids, best first.
    pub fn into_classes(self) -> Vec<u32> {
        self.into_sorted().into_iter().map(|(c, _)| c).collect()
    }
}

/// One [`RowTopK`] per row of a block of rows whose scores arrive as column chunks.
#[derive(Clone, Debug)]
pub struct TopKBatch {
    rows: Vec<RowTopK>,
}

impl TopKBatch {
    /// `n_rows` empty selections, each keeping the best `k` classes.
    pub fn new(n_rows: usize, k: usize) -> Self {
        Self {
            rows: vec![RowTopK::new(k); n_rows],
        }
    }

    /// The number of rows tracked.
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }

    /// One row's selection, if `row` is in range.
    pub fn row_mut(&mut self, row: usize) -> Option<&mut RowTopK> {
        self.rows.get_mut(row)
    }

    /// Offers a row-major `n_rows × n_cols` block whose column `j` is class `class_start + j`.
    /// `masks` is either empty (nothing masked) or one sorted list of masked class ids per row.
    pub fn offer_chunk(
        &mut self,
        row_major_scores: &[f32],
        n_rows: usize,
        n_cols: usize,
        class_start: u32,
        masks: &[&[u32]],
    ) -> Result<(), EvalError> {
        if n_rows != self.rows.len() {
            return Err(EvalError::RowCountMismatch {
                n_rows_expected: self.rows.len(),
                n_rows_given: n_rows,
            });
        }
        if n_rows.checked_mul(n_cols) != Some(row_major_scores.len()) {
            return Err(EvalError::ShapeMismatch {
                n_rows,
                n_cols,
                n_scores: row_major_scores.len(),
            });
        }
        if !masks.is_empty() && masks.len() != n_rows {
            return Err(EvalError::MaskCountMismatch {
                n_rows,
                n_masks: masks.len(),
            });
        }
        if n_cols == 0 {
            return Ok(());
        }
        for (r, (top, scores)) in self
            .rows
            .iter_mut()
            .zip(row_major_scores.chunks_exact(n_cols))
            .enumerate()
        {
            let mask = masks.get(r).copied().unwrap_or(&[]);
            top.offer_chunk(class_start, scores, mask);
        }
        Ok(())
    }

    /// Every row's kept (class, score) pairs, best first.
    pub fn into_sorted(self) -> Vec<Vec<(u32, f32)>> {
        self.rows.into_iter().map(RowTopK::into_sorted).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reference: sort every unmasked, non-NaN score (higher first, then lower class) and cut.
    fn brute(class_start: u32, scores: &[f32], masked: &[u32], k: usize) -> Vec<(u32, f32)> {
        let mut all: Vec<(u32, f32)> = scores
            .iter()
            .enumerate()
            .map(|(i, &s)| (class_start + i as u32, canonical(s)))
            .filter(|(c, s)| !s.is_nan() && !masked.contains(c))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    #[test]
    fn ties_rank_lower_class_first() {
        let mut t = RowTopK::new(3);
        t.offer_chunk(10, &[1.0, 2.0, 2.0, 1.0, 2.0], &[]);
        // Scores 2.0 at classes 11, 12, 14: all three tie, kept in id order.
        assert_eq!(t.into_sorted(), vec![(11, 2.0), (12, 2.0), (14, 2.0)]);
    }

    #[test]
    fn nan_is_never_taken_and_negative_zero_is_zero() {
        let mut t = RowTopK::new(4);
        t.offer_chunk(0, &[f32::NAN, -0.0, f32::NAN, 0.0, f32::NEG_INFINITY], &[]);
        t.offer(9, f32::NAN);
        // -0.0 == 0.0, so classes 1 and 3 tie (lower first); -inf is a score like any other.
        assert_eq!(
            t.into_sorted(),
            vec![(1, 0.0), (3, 0.0), (4, f32::NEG_INFINITY)]
        );
    }

    #[test]
    fn k_larger_than_classes_and_k_zero() {
        let mut t = RowTopK::new(100);
        t.offer_chunk(0, &[0.5, 0.7, 0.1], &[1]);
        assert_eq!(t.into_sorted(), vec![(0, 0.5), (2, 0.1)]);
        let mut z = RowTopK::new(0);
        z.offer_chunk(0, &[1.0, 2.0], &[]);
        z.merge(&[5], &[3.0]);
        assert!(z.is_empty());
        assert!(z.into_sorted().is_empty());
    }

    #[test]
    fn masks_outside_chunk_and_duplicates_are_harmless() {
        let mut t = RowTopK::new(2);
        // Chunk covers classes 5..9; masks 2 and 40 lie outside, 7 is repeated.
        t.offer_chunk(5, &[0.1, 0.2, 0.9, 0.3], &[2, 7, 7, 40]);
        assert_eq!(t.into_sorted(), vec![(8, 0.3), (6, 0.2)]);
    }

    #[test]
    fn chunk_at_the_end_of_the_id_space_does_not_overflow() {
        let mut t = RowTopK::new(5);
        t.offer_chunk(u32::MAX - 1, &[1.0, 2.0, 3.0, 4.0], &[u32::MAX]);
        // Only classes MAX-1 and MAX exist; MAX is masked.
        assert_eq!(t.into_sorted(), vec![(u32::MAX - 1, 1.0)]);
    }

    #[test]
    fn merging_chunk_results_equals_one_pass() {
        let scores: Vec<f32> = (0..50u32).map(|i| ((i * 37) % 11) as f32).collect();
        let mut whole = RowTopK::new(7);
        whole.offer_chunk(0, &scores, &[3, 20]);
        let mut merged = RowTopK::new(7);
        for (c, chunk) in scores.chunks(16).enumerate() {
            let mut part = RowTopK::new(7);
            part.offer_chunk(c as u32 * 16, chunk, &[3, 20]);
            let (cls, sc): (Vec<u32>, Vec<f32>) = part.into_sorted().into_iter().unzip();
            merged.merge(&cls, &sc);
        }
        assert_eq!(merged.into_sorted(), whole.into_sorted());
    }

    #[test]
    fn batch_checks_shapes_and_offers_each_row() {
        let mut b = TopKBatch::new(2, 1);
        let scores = [0.1, 0.9, 0.5, 0.8, 0.2, 0.3];
        assert_eq!(
            b.offer_chunk(&scores, 2, 4, 0, &[]),
            Err(EvalError::ShapeMismatch {
                n_rows: 2,
                n_cols: 4,
                n_scores: 6
            })
        );
        assert!(b.offer_chunk(&scores, 3, 2, 0, &[]).is_err());
        assert!(b.offer_chunk(&scores, 2, 3, 0, &[&[1]]).is_err());
        assert_eq!(b.offer_chunk(&[], 2, 0, 0, &[]), Ok(()));
        // Row 0 masks class 101 (its best), row 1 masks nothing.
        b.offer_chunk(&scores, 2, 3, 100, &[&[101], &[]]).unwrap();
        assert_eq!(b.into_sorted(), vec![vec![(102, 0.5)], vec![(100, 0.8)]]);
    }

    #[test]
    fn large_ascending_chunk_matches_brute_force() {
        // 40,000 scores rising with the class id (every score beats the threshold: the worst
        // case for the fast reject), a few masked ids, then falling (almost all rejected).
        let rising: Vec<f32> = (0..40_000u32).map(|i| i as f32 * 0.25).collect();
        let masked = [39_999, 39_990, 5];
        let mut sorted_masked = masked;
        sorted_masked.sort_unstable();
        let mut t = RowTopK::new(20);
        t.offer_chunk(0, &rising, &sorted_masked);
        assert_eq!(t.into_sorted(), brute(0, &rising, &sorted_masked, 20));
        let falling: Vec<f32> = rising.iter().rev().copied().collect();
        let mut f = RowTopK::new(20);
        f.offer_chunk(7, &falling, &[]);
        assert_eq!(f.into_sorted(), brute(7, &falling, &[], 20));
        // Unsorted masks are a caller error; they may be missed but never panic.
        let mut u = RowTopK::new(3);
        u.offer_chunk(10, &rising[..50], &masked);
    }

    fn arb_score() -> impl Strategy<Value = f32> {
        // Few distinct values so that ties are common; NaN and ±0 included.
        prop_oneof![
            8 => (-4i32..4).prop_map(|v| v as f32 * 0.5),
            1 => Just(f32::NAN),
            1 => Just(-0.0f32),
        ]
    }

    proptest! {
        #[test]
        fn offer_chunk_matches_brute_force(
            scores in proptest::collection::vec(arb_score(), 0..200),
            mut masked in proptest::collection::vec(0u32..260, 0..20),
            class_start in 0u32..60,
            k in 0usize..30,
        ) {
            masked.sort_unstable();
            let mut t = RowTopK::new(k);
            t.offer_chunk(class_start, &scores, &masked);
            let got = t.into_sorted();
            let want = brute(class_start, &scores, &masked, k);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.0, w.0);
                prop_assert_eq!(g.1.to_bits(), w.1.to_bits());
            }
        }
    }
}
