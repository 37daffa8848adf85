//! The one-line human summary of an [`EvalReport`], with its number formatting.

use crate::report::{EvalReport, Task};

impl EvalReport {
    /// A one-line summary of the report's headline metrics, for example
    /// `recall@20 0.1234 (lightgcn), ndcg@20 0.0987 over 29,858 users`,
    /// `accuracy 0.8123, top5 0.9500, log-loss 0.6512 over 500 rows` or
    /// `perplexity 123.4 (nll 4.8154 nats, 6.947 bits/token) over 8,192 rows`.
    pub fn line(&self) -> String {
        let unit = match self.task {
            Task::Recommendation => "users",
            Task::Classification | Task::LanguageModel => "rows",
        };
        let mut over = format!("over {} {unit}", thousands(self.n_rows));
        if self.n_skipped > 0 {
            over.push_str(&format!(" ({} skipped)", thousands(self.n_skipped)));
        }
        let parts = match self.task {
            Task::Recommendation => self.recommendation_parts(),
            Task::Classification => self.classification_parts(),
            Task::LanguageModel => self.language_model_parts(),
        };
        if parts.is_empty() {
            return format!("no metrics {over}");
        }
        format!("{} {over}", parts.join(", "))
    }

    /// `recall@K` and `ndcg@K` for every K, the recall convention after the first recall.
    fn recommendation_parts(&self) -> Vec<String> {
        let mut parts = Vec::new();
        let mut convention_shown = false;
        for m in &self.metrics {
            if m.name.starts_with("recall@") {
                let mut part = format!("{} {}", m.name, fixed4(m.value));
                if let Some(c) = self.convention.as_deref().filter(|_| !convention_shown) {
                    part.push_str(&format!(" ({c})"));
                    convention_shown = true;
                }
                parts.push(part);
            } else if m.name.starts_with("ndcg@") {
                parts.push(format!("{} {}", m.name, fixed4(m.value)));
            }
        }
        parts
    }

    fn classification_parts(&self) -> Vec<String> {
        [
            ("accuracy", "accuracy"),
            ("top5_accuracy", "top5"),
            ("log_loss", "log-loss"),
        ]
        .iter()
        .filter_map(|&(name, label)| self.get(name).map(|v| format!("{label} {}", fixed4(v))))
        .collect()
    }

    fn language_model_parts(&self) -> Vec<String> {
        let Some(perplexity) = self.get("perplexity") else {
            return Vec::new();
        };
        let mut part = format!("perplexity {}", significant4(perplexity));
        let details: Vec<String> = [
            self.get("nll").map(|v| format!("nll {} nats", fixed4(v))),
            self.get("bits_per_token")
                .map(|v| format!("{} bits/token", significant4(v))),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !details.is_empty() {
            part.push_str(&format!(" ({})", details.join(", ")));
        }
        vec![part]
    }
}

/// Four decimals, as for a rate in `[0, 1]`.
fn fixed4(value: f64) -> String {
    format!("{value:.4}")
}

/// Four significant digits (no exponent): `123.4`, `4.000`, `6.947`, `12346`.
fn significant4(value: f64) -> String {
    if !value.is_finite() || value == 0.0 {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor();
    // Finite and within f64's exponent range, so the cast is exact.
    let n_decimals = (3.0 - magnitude).clamp(0.0, 12.0) as usize;
    format!("{value:.n_decimals$}")
}

/// `29858` → `29,858`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Metric;

    fn report(task: Task, n_rows: usize, metrics: &[(&str, f64)]) -> EvalReport {
        EvalReport {
            task,
            n_rows,
            n_skipped: 0,
            metrics: metrics.iter().map(|&(n, v)| Metric::new(n, v)).collect(),
            convention: None,
        }
    }

    #[test]
    fn number_formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(8192), "8,192");
        assert_eq!(thousands(29_858), "29,858");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(significant4(123.4), "123.4");
        assert_eq!(significant4(4.0), "4.000");
        assert_eq!(significant4(12_345.6), "12346");
        assert_eq!(significant4(f64::INFINITY), "inf");
    }

    #[test]
    fn recommendation_line() {
        let mut r = report(
            Task::Recommendation,
            29_858,
            &[
                ("recall@20", 0.1234),
                ("ndcg@20", 0.0987),
                ("precision@20", 0.05),
                ("hit@20", 0.6),
            ],
        );
        r.convention = Some("lightgcn".into());
        assert_eq!(
            r.line(),
            "recall@20 0.1234 (lightgcn), ndcg@20 0.0987 over 29,858 users"
        );
        r.n_skipped = 12;
        r.metrics.clear();
        r.n_rows = 0;
        assert_eq!(r.line(), "no metrics over 0 users (12 skipped)");
    }

    #[test]
    fn classification_and_language_model_lines() {
        let c = report(
            Task::Classification,
            500,
            &[
                ("accuracy", 0.8123),
                ("top5_accuracy", 0.95),
                ("log_loss", 0.6512),
            ],
        );
        assert_eq!(
            c.line(),
            "accuracy 0.8123, top5 0.9500, log-loss 0.6512 over 500 rows"
        );
        let lm = report(
            Task::LanguageModel,
            8192,
            &[
                ("nll", 4.8154),
                ("perplexity", 123.4),
                ("bits_per_token", 6.9473),
            ],
        );
        assert_eq!(
            lm.line(),
            "perplexity 123.4 (nll 4.8154 nats, 6.947 bits/token) over 8,192 rows"
        );
    }
}
