//! Full-ranking recommendation metrics (Recall, NDCG, Precision and Hit at several K), averaged
//! over users, with LightGCN's reference definitions.
//!
//! For a user with test set `T` (deduplicated) and a ranked list `r` (best first, training items
//! already masked), with `hit_i = 1` when `r[i] ∈ T` (a class repeated in `r` counts once):
//!
//! - `recall@K    = Σ_{i<K} hit_i / |T|` (LightGCN, kuandeng/LightGCN and
//!   gusye1234/LightGCN-PyTorch) or `/ min(K, |T|)` (Mult-VAE, dawenl/vae_cf);
//! - `ndcg@K      = DCG / IDCG`, `DCG = Σ_{i<K} hit_i / log2(i + 2)`,
//!   `IDCG = Σ_{i < min(|T|, K)} 1 / log2(i + 2)` (binary relevance);
//! - `precision@K = Σ_{i<K} hit_i / K` and `hit@K = 1` when any of the first K is a hit.
//!
//! A ranked list shorter than K counts its missing positions as misses. Users without a test item
//! are skipped and counted apart. Every sum is kept in `f64`.

use serde::{Deserialize, Serialize};

use crate::error::EvalError;
use crate::report::{EvalReport, Metric, Task};

/// Which denominator recall uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecallConvention {
    /// `hits / |T|` (LightGCN and NGCF papers and code).
    #[default]
    #[serde(rename = "lightgcn")]
    LightGcn,
    /// `hits / min(K, |T|)` (Mult-VAE, dawenl/vae_cf), so a perfect ranking scores 1 at every K.
    #[serde(rename = "multvae")]
    MultVae,
}

impl RecallConvention {
    /// The name a report carries: `"lightgcn"` or `"multvae"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::LightGcn => "lightgcn",
            Self::MultVae => "multvae",
        }
    }
}

/// Per-K sums of the per-user metric values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct CutoffSums {
    recall: f64,
    ndcg: f64,
    precision: f64,
    hit: f64,
}

/// Accumulates ranking metrics over users; [`merge`](Self::merge) combines partial accumulators.
#[derive(Clone, Debug, PartialEq)]
pub struct RankingMetrics {
    /// Sorted ascending, unique, all above zero.
    ks: Vec<usize>,
    convention: RecallConvention,
    sums: Vec<CutoffSums>,
    n_users: usize,
    n_skipped: usize,
}

impl RankingMetrics {
    /// An empty accumulator for the cut-offs `ks` (any order; repeats collapse). Rejects an empty
    /// list and a K of 0.
    pub fn new(ks: &[usize], convention: RecallConvention) -> Result<Self, EvalError> {
        if ks.is_empty() {
            return Err(EvalError::NoCutoffs);
        }
        if ks.contains(&0) {
            return Err(EvalError::ZeroCutoff);
        }
        let mut ks = ks.to_vec();
        ks.sort_unstable();
        ks.dedup();
        Ok(Self {
            sums: vec![CutoffSums::default(); ks.len()],
            ks,
            convention,
            n_users: 0,
            n_skipped: 0,
        })
    }

    /// The cut-offs, ascending.
    pub fn ks(&self) -> &[usize] {
        &self.ks
    }

    /// The largest K: how long a ranked list needs to be.
    pub fn max_k(&self) -> usize {
        self.ks.last().copied().unwrap_or(0)
    }

    pub fn convention(&self) -> RecallConvention {
        self.convention
    }

    /// Users counted so far (those with at least one test item).
    pub fn n_users(&self) -> usize {
        self.n_users
    }

    /// Users skipped because they had no test item.
    pub fn n_skipped(&self) -> usize {
        self.n_skipped
    }

    /// Adds one user: `ranked` is its class ranking, best first, with training items already
    /// removed; `test_items` its held-out items in any order (repeats collapse). A user with no
    /// test item is skipped (counted in [`n_skipped`](Self::n_skipped)).
    pub fn add_user(&mut self, ranked: &[u32], test_items: &[u32]) {
        let mut test = test_items.to_vec();
        test.sort_unstable();
        test.dedup();
        if test.is_empty() {
            self.n_skipped += 1;
            return;
        }
        let n_test = test.len();
        let mut already_hit = vec![false; n_test];
        let max_k = self.max_k();
        // Walk the list once, recording the running hits and DCG at each cut-off.
        let mut n_hits = 0usize;
        let mut dcg = 0.0f64;
        let mut cut = 0usize; // index into `ks` of the next cut-off to record
        let convention = self.convention;
        let record = |n_hits: usize, dcg: f64, k: usize, sums: &mut CutoffSums| {
            let hits = n_hits as f64;
            let recall_denominator = match convention {
                RecallConvention::LightGcn => n_test,
                RecallConvention::MultVae => n_test.min(k),
            };
            sums.recall += hits / recall_denominator as f64;
            sums.ndcg += dcg / ideal_dcg(n_test.min(k));
            sums.precision += hits / k as f64;
            sums.hit += if n_hits > 0 { 1.0 } else { 0.0 };
        };
        for (position, class) in ranked.iter().take(max_k).enumerate() {
            if let Ok(t) = test.binary_search(class)
                && !already_hit[t]
            {
                already_hit[t] = true;
                n_hits += 1;
                dcg += discount(position);
            }
            // `position + 1` items have been seen; record every cut-off equal to that.
            while cut < self.ks.len() && self.ks[cut] == position + 1 {
                record(n_hits, dcg, self.ks[cut], &mut self.sums[cut]);
                cut += 1;
            }
        }
        // Cut-offs beyond the ranked list's length: the missing positions are misses.
        while cut < self.ks.len() {
            record(n_hits, dcg, self.ks[cut], &mut self.sums[cut]);
            cut += 1;
        }
        self.n_users += 1;
    }

    /// Adds another accumulator's users. Both must have the same cut-offs and convention.
    pub fn merge(&mut self, other: &Self) -> Result<(), EvalError> {
        if self.ks != other.ks || self.convention != other.convention {
            return Err(EvalError::IncompatibleMerge(format!(
                "cut-offs {:?} ({}) vs {:?} ({})",
                self.ks,
                self.convention.name(),
                other.ks,
                other.convention.name()
            )));
        }
        for (mine, theirs) in self.sums.iter_mut().zip(&other.sums) {
            mine.recall += theirs.recall;
            mine.ndcg += theirs.ndcg;
            mine.precision += theirs.precision;
            mine.hit += theirs.hit;
        }
        self.n_users += other.n_users;
        self.n_skipped += other.n_skipped;
        Ok(())
    }

    /// The means over counted users: `recall@K`, `ndcg@K`, `precision@K`, `hit@K` for each K
    /// ascending. Empty when no user was counted.
    pub fn metrics(&self) -> Vec<Metric> {
        if self.n_users == 0 {
            return Vec::new();
        }
        let n_users = self.n_users as f64;
        let mut out = Vec::with_capacity(4 * self.ks.len());
        for (k, s) in self.ks.iter().zip(&self.sums) {
            out.push(Metric::new(format!("recall@{k}"), s.recall / n_users));
            out.push(Metric::new(format!("ndcg@{k}"), s.ndcg / n_users));
            out.push(Metric::new(format!("precision@{k}"), s.precision / n_users));
            out.push(Metric::new(format!("hit@{k}"), s.hit / n_users));
        }
        out
    }

    /// The report: [`metrics`](Self::metrics), the user counts and the recall convention's name.
    pub fn report(&self) -> EvalReport {
        EvalReport {
            task: Task::Recommendation,
            n_rows: self.n_users,
            n_skipped: self.n_skipped,
            metrics: self.metrics(),
            convention: Some(self.convention.name().to_owned()),
        }
    }
}

/// The gain discount at 0-based `position`: `1 / log2(position + 2)`.
fn discount(position: usize) -> f64 {
    1.0 / ((position + 2) as f64).log2()
}

/// The DCG of a ranking whose first `n_relevant` items are all hits.
fn ideal_dcg(n_relevant: usize) -> f64 {
    (0..n_relevant).map(discount).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topk::RowTopK;

    const EPS: f64 = 1e-12;

    fn close(report: &EvalReport, name: &str, want: f64) {
        let got = report.get(name).unwrap_or(f64::NAN);
        assert!((got - want).abs() < EPS, "{name}: got {got}, want {want}");
    }

    /// 1 / log2(3), 1 / log2(4) = 1/2, 1 / log2(5): the discounts at positions 1, 2, 3.
    fn d1() -> f64 {
        1.0 / 3f64.log2()
    }
    fn d3() -> f64 {
        1.0 / 5f64.log2()
    }

    #[test]
    fn rejects_bad_cutoffs_and_sorts_the_rest() {
        let conv = RecallConvention::LightGcn;
        assert_eq!(RankingMetrics::new(&[], conv), Err(EvalError::NoCutoffs));
        assert_eq!(
            RankingMetrics::new(&[5, 0], conv),
            Err(EvalError::ZeroCutoff)
        );
        let m = RankingMetrics::new(&[5, 1, 2, 5], conv).unwrap();
        assert_eq!(m.ks(), &[1, 2, 5]);
        assert_eq!(m.max_k(), 5);
    }

    #[test]
    fn one_user_by_hand_under_both_conventions() {
        // ranked [7, 3, 9, 4, 1], T = {3, 4, 8} (given unsorted, with a repeat): hits at 1 and 3.
        let ranked = [7, 3, 9, 4, 1];
        let test = [8, 4, 3, 4];
        let mut light = RankingMetrics::new(&[1, 2, 5], RecallConvention::LightGcn).unwrap();
        let mut vae = RankingMetrics::new(&[1, 2, 5], RecallConvention::MultVae).unwrap();
        light.add_user(&ranked, &test);
        vae.add_user(&ranked, &test);
        let (l, v) = (light.report(), vae.report());
        assert_eq!(l.convention.as_deref(), Some("lightgcn"));
        assert_eq!(v.convention.as_deref(), Some("multvae"));
        // K=1: position 0 (class 7) misses: everything 0.
        for name in ["recall@1", "ndcg@1", "precision@1", "hit@1"] {
            close(&l, name, 0.0);
            close(&v, name, 0.0);
        }
        // K=2: 1 hit. LightGCN recall 1/|T| = 1/3; Mult-VAE 1/min(2,3) = 1/2 (|T| > K: differ).
        close(&l, "recall@2", 1.0 / 3.0);
        close(&v, "recall@2", 0.5);
        // DCG = d1 = 0.63093; IDCG over min(3,2) = 2 positions = 1 + d1 = 1.63093; 0.38685.
        close(&l, "ndcg@2", d1() / (1.0 + d1()));
        close(&l, "precision@2", 0.5);
        close(&l, "hit@2", 1.0);
        // K=5: 2 hits; both recalls 2/3 since min(5,3) = 3 = |T|.
        close(&l, "recall@5", 2.0 / 3.0);
        close(&v, "recall@5", 2.0 / 3.0);
        // DCG = d1 + d3 = 0.63093 + 0.43068; IDCG over 3 = 1 + d1 + 1/2 = 2.13093; 0.49820.
        close(&l, "ndcg@5", (d1() + d3()) / (1.0 + d1() + 0.5));
        close(&v, "ndcg@5", (d1() + d3()) / (1.0 + d1() + 0.5));
        close(&l, "precision@5", 2.0 / 5.0);
        close(&l, "hit@5", 1.0);
    }

    #[test]
    fn masked_training_item_and_ties_through_topk() {
        // Classes 0..6; class 2 has the best score but is a training item (masked). Classes 1 and
        // 4 tie at 0.5: the lower id, 1, ranks first. Ranked: [1, 4, 3, 0, 5].
        let mut top = RowTopK::new(5);
        top.offer_chunk(0, &[0.1, 0.5, 0.9, 0.3, 0.5, 0.0], &[2]);
        let ranked = top.into_classes();
        assert_eq!(ranked, vec![1, 4, 3, 0, 5]);
        // T = {4}. K=1: class 1 misses. K=2: hit at position 1, DCG = d1, IDCG(min(1,2)=1) = 1.
        let mut m = RankingMetrics::new(&[1, 2, 5], RecallConvention::LightGcn).unwrap();
        m.add_user(&ranked, &[4]);
        let r = m.report();
        close(&r, "recall@1", 0.0);
        close(&r, "hit@1", 0.0);
        close(&r, "recall@2", 1.0);
        close(&r, "ndcg@2", d1());
        close(&r, "precision@2", 0.5);
        close(&r, "ndcg@5", d1());
        close(&r, "precision@5", 0.2);
    }

    #[test]
    fn fewer_test_items_than_k_and_a_skipped_user() {
        let mut m = RankingMetrics::new(&[1, 2, 5], RecallConvention::LightGcn).unwrap();
        // User A: T = {3}, ranked first: every recall/ndcg/hit is 1 (IDCG over min(1,K) = 1).
        m.add_user(&[3, 1, 2], &[3]);
        // User B: no test item: skipped, not in the means.
        m.add_user(&[0, 1], &[]);
        // User C: T = {6, 9}, ranked [9] only (shorter than K): hit at 0.
        //   K=1: recall 1/2, ndcg 1/1 = 1 (IDCG over min(2,1) = 1), precision 1.
        //   K=2: recall 1/2, ndcg 1 / (1 + d1), precision 1/2.
        //   K=5: recall 1/2, ndcg 1 / (1 + d1), precision 1/5.
        m.add_user(&[9], &[6, 9]);
        assert_eq!((m.n_users(), m.n_skipped()), (2, 1));
        let r = m.report();
        assert_eq!((r.n_rows, r.n_skipped), (2, 1));
        // Means over A and C.
        close(&r, "recall@1", (1.0 + 0.5) / 2.0);
        close(&r, "ndcg@1", (1.0 + 1.0) / 2.0);
        close(&r, "precision@1", (1.0 + 1.0) / 2.0);
        close(&r, "ndcg@2", (1.0 + 1.0 / (1.0 + d1())) / 2.0);
        // A at K=2: precision 1/2 (one hit in two slots).
        close(&r, "precision@2", (0.5 + 0.5) / 2.0);
        close(&r, "ndcg@5", (1.0 + 1.0 / (1.0 + d1())) / 2.0);
        close(&r, "precision@5", (0.2 + 0.2) / 2.0);
        close(&r, "hit@5", 1.0);
    }

    #[test]
    fn repeated_ranked_class_counts_once() {
        let mut m = RankingMetrics::new(&[2], RecallConvention::LightGcn).unwrap();
        // T = {5, 6}; ranked [5, 5]: one hit, not two.
        m.add_user(&[5, 5], &[5, 6]);
        let r = m.report();
        close(&r, "recall@2", 0.5);
        close(&r, "ndcg@2", 1.0 / (1.0 + d1()));
    }

    #[test]
    fn no_users_gives_no_metrics() {
        let mut m = RankingMetrics::new(&[20], RecallConvention::MultVae).unwrap();
        m.add_user(&[1, 2], &[]);
        let r = m.report();
        assert!(r.metrics.is_empty());
        assert_eq!((r.n_rows, r.n_skipped), (0, 1));
    }

    #[test]
    fn merge_equals_one_accumulator() {
        let users: [(&[u32], &[u32]); 4] = [
            (&[1, 2, 3, 4, 5], &[2, 5]),
            (&[9, 8, 7], &[7, 1, 2, 3]),
            (&[0], &[]),
            (&[4, 3, 2, 1, 0], &[0]),
        ];
        let conv = RecallConvention::MultVae;
        let mut whole = RankingMetrics::new(&[1, 2, 5], conv).unwrap();
        let mut left = RankingMetrics::new(&[1, 2, 5], conv).unwrap();
        let mut right = RankingMetrics::new(&[1, 2, 5], conv).unwrap();
        for (i, (ranked, test)) in users.iter().enumerate() {
            whole.add_user(ranked, test);
            let part = if i < 2 { &mut left } else { &mut right };
            part.add_user(ranked, test);
        }
        left.merge(&right).unwrap();
        assert_eq!(left.report(), whole.report());
        let other = RankingMetrics::new(&[1, 2, 5], RecallConvention::LightGcn).unwrap();
        assert!(matches!(
            left.merge(&other),
            Err(EvalError::IncompatibleMerge(_))
        ));
    }
}
