//! Language-model metrics: mean negative log-likelihood per token, perplexity and bits per token,
//! from summed NLL and token counts (never an average of per-batch perplexities).

use crate::report::{EvalReport, Metric, Task};

/// Accumulates Σ NLL (nats) and the token count; perplexity is `exp(Σ NLL / Σ tokens)`, as in
/// burn-train's `PerplexityMetric` and fairseq.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerplexityMetrics {
    sum_nll_nats: f64,
    n_tokens: usize,
}

impl PerplexityMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens counted so far.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Adds one predicted token's negative log-likelihood in nats (`−ln p(true token)`). A NaN is
    /// treated as probability 0 (infinite NLL), so the result never turns NaN.
    pub fn add_token(&mut self, nll_nats: f64) {
        self.add_batch(nll_nats, 1);
    }

    /// Adds a batch: the SUM of its tokens' NLL in nats, and how many tokens it covers. An empty
    /// batch (`n_tokens = 0`) adds nothing; a NaN sum counts as infinite.
    pub fn add_batch(&mut self, sum_nll_nats: f64, n_tokens: usize) {
        if n_tokens == 0 {
            return;
        }
        self.sum_nll_nats += if sum_nll_nats.is_nan() {
            f64::INFINITY
        } else {
            sum_nll_nats
        };
        self.n_tokens += n_tokens;
    }

    /// Adds another accumulator's tokens.
    pub fn merge(&mut self, other: &Self) {
        self.sum_nll_nats += other.sum_nll_nats;
        self.n_tokens += other.n_tokens;
    }

    /// `nll` (mean nats per token), `perplexity` and `bits_per_token`; empty when no token counted.
    pub fn metrics(&self) -> Vec<Metric> {
        if self.n_tokens == 0 {
            return Vec::new();
        }
        let mean_nll_nats = self.sum_nll_nats / self.n_tokens as f64;
        vec![
            Metric::new("nll", mean_nll_nats),
            Metric::new("perplexity", mean_nll_nats.exp()),
            Metric::new("bits_per_token", mean_nll_nats / std::f64::consts::LN_2),
        ]
    }

    /// The report; its `n_rows` is the token count (one row per predicted token).
    pub fn report(&self) -> EvalReport {
        EvalReport {
            task: Task::LanguageModel,
            n_rows: self.n_tokens,
            n_skipped: 0,
            metrics: self.metrics(),
            convention: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_over_four_classes_is_perplexity_four() {
        let mut m = PerplexityMetrics::new();
        // Each token has p = 1/4: NLL ln 4; perplexity exp(ln 4) = 4; bits 2.
        for _ in 0..3 {
            m.add_token(4f64.ln());
        }
        let r = m.report();
        assert_eq!(r.n_rows, 3);
        assert!((r.get("perplexity").unwrap() - 4.0).abs() < 1e-12);
        assert!((r.get("bits_per_token").unwrap() - 2.0).abs() < 1e-12);
        assert!((r.get("nll").unwrap() - 4f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn pooled_not_averaged_across_batches() {
        let mut m = PerplexityMetrics::new();
        // Batch A: 1 token, NLL ln 2 (its own perplexity 2). Batch B: 3 tokens, NLL 3 ln 8
        // (perplexity 8). Pooled: exp((ln 2 + 9 ln 2) / 4) = 2^2.5 = 5.65685, not (2 + 8) / 2 = 5.
        m.add_batch(2f64.ln(), 1);
        let mut b = PerplexityMetrics::new();
        b.add_batch(3.0 * 8f64.ln(), 3);
        b.add_batch(123.0, 0); // empty batch: ignored
        m.merge(&b);
        let ppl = m.report().get("perplexity").unwrap();
        assert!((ppl - 2f64.powf(2.5)).abs() < 1e-12, "{ppl}");
        // bits per token: 10 bits over 4 tokens = 2.5.
        assert!((m.report().get("bits_per_token").unwrap() - 2.5).abs() < 1e-12);
    }

    #[test]
    fn empty_and_degenerate_inputs() {
        assert!(PerplexityMetrics::new().report().metrics.is_empty());
        let mut m = PerplexityMetrics::new();
        m.add_token(f64::NAN);
        m.add_token(1.0);
        assert_eq!(m.report().get("perplexity"), Some(f64::INFINITY));
    }
}
