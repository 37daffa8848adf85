//! One held-out row's running state on the host (its top-K, log-sum-exp and targets' scores)
//! and how a run of its class scores folds into it, for the chunk path and the block path alike.

use widebag_csr::CsrBatch;
use widebag_eval::{RowTopK, Task};

/// What a scoring pass computes beyond each row's top-K classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreNeed {
    /// The top-K's order only (ranking metrics): no log-sum-exp and no targets' scores, so
    /// [`RowScores::top`] holds the layout's raw scores (logits or log-probabilities, in the
    /// same order as the log-probabilities) and `target_log_prob` is 0.
    Ranking,
    /// Log-probabilities: the top-K's and the targets' (perplexity, accuracy, predictions).
    LogProbs,
}

impl ScoreNeed {
    /// What the task's metrics read: a recommender's ranking metrics only the order.
    pub fn for_task(task: Task) -> Self {
        match task {
            Task::Recommendation => Self::Ranking,
            Task::Classification | Task::LanguageModel => Self::LogProbs,
        }
    }
}

/// One row's running state on the block path: its top-K (the same whatever order the blocks
/// come in) and, per block, its `(max, Σ exp(s − max))` and `Σ w · score` of its targets, summed
/// in block order at the end ([`RowState::sums`]) so that the result does not depend on which
/// thread finished first.
pub(super) struct RowState {
    pub(super) top: RowTopK,
    /// `(block, max, Σ exp(s − max), Σ w · score)` of each block that had any.
    pub(super) parts: Vec<(usize, f64, f64, f64)>,
}

impl RowState {
    /// `(lse, target)` started at `lse` and `target`, then each block's part in block order.
    pub(super) fn sums(mut self, lse: (f64, f64), target: f64) -> (RowTopK, (f64, f64), f64) {
        self.parts.sort_unstable_by_key(|p| p.0);
        let (mut lse, mut target) = (lse, target);
        for (_, m, s, t) in self.parts {
            target += t;
            if m > f64::NEG_INFINITY {
                let m_new = lse.0.max(m);
                lse = (m_new, lse.1 * (lse.0 - m_new).exp() + s * (m - m_new).exp());
            }
        }
        (self.top, lse, target)
    }
}

/// Folds one row's scores of the classes `start..start + row.len()` into its state: offered to
/// its top-K but for its `masked` classes, its targets' scores summed, its log-sum-exp updated
/// where the caller needs log-probabilities.
pub(super) fn fold_row(
    row: &[f32],
    start: usize,
    masked: &[u32],
    targets: &[(usize, f32)],
    need: ScoreNeed,
    (top, lse, target): (&mut RowTopK, &mut (f64, f64), &mut f64),
) {
    top.offer_chunk(start as u32, row, masked);
    for &(c, w) in targets {
        *target += w as f64 * row[c - start] as f64;
    }
    if need != ScoreNeed::LogProbs {
        return;
    }
    let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    if max > f64::NEG_INFINITY {
        let m_new = lse.0.max(max);
        let sum: f64 = row.iter().map(|&x| (x as f64 - m_new).exp()).sum();
        *lse = (m_new, lse.1 * (lse.0 - m_new).exp() + sum);
    }
}

/// Row `r`'s seen classes within `start..end` (absolute ids).
pub(super) fn masked_in(seen: &[Vec<u32>], r: usize, start: usize, end: usize) -> &[u32] {
    let Some(ids) = seen.get(r) else {
        return &[];
    };
    let a = ids.partition_point(|&i| (i as usize) < start);
    let b = ids.partition_point(|&i| (i as usize) < end);
    &ids[a..b]
}

/// Row `r`'s target entries within `start..end`: `(class, weight)`; none for a ranking.
pub(super) fn targets_in(
    batch: &CsrBatch,
    need: ScoreNeed,
    r: usize,
    start: usize,
    end: usize,
) -> Vec<(usize, f32)> {
    if need == ScoreNeed::Ranking {
        return Vec::new();
    }
    let t = batch.targets();
    (t.row_ptr[r]..t.row_ptr[r + 1])
        .filter(|&e| (start..end).contains(&(t.classes[e] as usize)))
        .map(|e| (t.classes[e] as usize, t.weights[e]))
        .collect()
}
