//! Single-label classification metrics: top-1 accuracy, top-5 accuracy and log-loss (mean
//! negative log-likelihood of the true class), accumulated row by row.

use crate::report::{EvalReport, Metric, Task};

/// How many of a row's ranked classes count for top-5 accuracy.
const TOP_N: usize = 5;

/// Accumulates classification metrics; [`merge`](Self::merge) combines partial accumulators.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassMetrics {
    n_rows: usize,
    n_top1_correct: usize,
    n_top5_correct: usize,
    /// Σ −log p(true class), in nats.
    sum_nll_nats: f64,
}

impl ClassMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows counted so far.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Adds one row: its true class, the model's natural-log probability of that class, and the
    /// model's ranked classes, best first (only the first 5 are read; fewer are fine).
    ///
    /// A log-probability of `-inf` (probability 0) makes the log-loss infinite, as it should be;
    /// it is kept, not clipped. A NaN log-probability is treated the same way (probability 0), so
    /// the result never turns NaN.
    pub fn add_row(&mut self, true_class: u32, log_prob: f64, ranked: &[u32]) {
        let top = &ranked[..ranked.len().min(TOP_N)];
        if top.first() == Some(&true_class) {
            self.n_top1_correct += 1;
        }
        if top.contains(&true_class) {
            self.n_top5_correct += 1;
        }
        self.sum_nll_nats += if log_prob.is_nan() {
            f64::INFINITY
        } else {
            -log_prob
        };
        self.n_rows += 1;
    }

    /// Adds another accumulator's rows.
    pub fn merge(&mut self, other: &Self) {
        self.n_rows += other.n_rows;
        self.n_top1_correct += other.n_top1_correct;
        self.n_top5_correct += other.n_top5_correct;
        self.sum_nll_nats += other.sum_nll_nats;
    }

    /// `accuracy`, `top5_accuracy` and `log_loss` (nats) over the rows; empty when none counted.
    pub fn metrics(&self) -> Vec<Metric> {
        if self.n_rows == 0 {
            return Vec::new();
        }
        let n_rows = self.n_rows as f64;
        vec![
            Metric::new("accuracy", self.n_top1_correct as f64 / n_rows),
            Metric::new("top5_accuracy", self.n_top5_correct as f64 / n_rows),
            Metric::new("log_loss", self.sum_nll_nats / n_rows),
        ]
    }

    pub fn report(&self) -> EvalReport {
        EvalReport {
            task: Task::Classification,
            n_rows: self.n_rows,
            n_skipped: 0,
            metrics: self.metrics(),
            convention: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LN2: f64 = std::f64::consts::LN_2;

    #[test]
    fn four_rows_by_hand() {
        let mut m = ClassMetrics::new();
        // Row 0: true 3, p = 1/2, ranked first: top-1 and top-5 correct.
        m.add_row(3, 0.5f64.ln(), &[3, 1, 2, 0, 4]);
        // Row 1: true 1, p = 1/4, ranked second: top-5 only.
        m.add_row(1, 0.25f64.ln(), &[3, 1, 2, 0, 4]);
        // Row 2: true 7, p = 1/8, ranked sixth: neither (only the first 5 count).
        m.add_row(7, 0.125f64.ln(), &[0, 1, 2, 3, 4, 7]);
        // Row 3: true 2, p = 1/2, a one-class ranking: both.
        m.add_row(2, 0.5f64.ln(), &[2]);
        let r = m.report();
        assert_eq!(r.n_rows, 4);
        // accuracy 2/4; top-5 3/4; log-loss (ln2 + 2 ln2 + 3 ln2 + ln2) / 4 = 7/4 ln2 = 1.21301.
        assert_eq!(r.get("accuracy"), Some(0.5));
        assert_eq!(r.get("top5_accuracy"), Some(0.75));
        let log_loss = r.get("log_loss").unwrap();
        assert!((log_loss - 1.75 * LN2).abs() < 1e-12, "{log_loss}");
    }

    #[test]
    fn zero_probability_gives_infinite_log_loss_and_nan_too() {
        let mut m = ClassMetrics::new();
        m.add_row(0, 0.0, &[0]);
        m.add_row(1, f64::NEG_INFINITY, &[]);
        assert_eq!(m.report().get("log_loss"), Some(f64::INFINITY));
        let mut n = ClassMetrics::new();
        n.add_row(0, f64::NAN, &[0]);
        assert_eq!(n.report().get("log_loss"), Some(f64::INFINITY));
        assert_eq!(n.report().get("accuracy"), Some(1.0));
    }

    #[test]
    fn empty_and_merge() {
        assert!(ClassMetrics::new().report().metrics.is_empty());
        let mut a = ClassMetrics::new();
        a.add_row(1, -1.0, &[1]);
        let mut b = ClassMetrics::new();
        b.add_row(2, -3.0, &[0, 2]);
        a.merge(&b);
        let r = a.report();
        // accuracy 1/2, top-5 2/2, log-loss (1 + 3) / 2 = 2.
        assert_eq!(r.get("accuracy"), Some(0.5));
        assert_eq!(r.get("top5_accuracy"), Some(1.0));
        assert_eq!(r.get("log_loss"), Some(2.0));
    }
}
