//! The serialisable result of one evaluation: the task, how many rows counted and were skipped,
//! and the named metric values.

use serde::{Deserialize, Serialize};

/// What kind of model was evaluated; decides which metrics a report holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Full-ranking recommendation (one row per user).
    Recommendation,
    /// Single-label classification (one row per example).
    Classification,
    /// Next-token prediction (one row per predicted token).
    LanguageModel,
}

/// One named value, e.g. `recall@20`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub value: f64,
}

impl Metric {
    pub fn new(name: impl Into<String>, value: f64) -> Self {
        Self {
            name: name.into(),
            value,
        }
    }
}

/// The result of one evaluation. `n_rows` counts the rows (users, examples, tokens) the metric
/// means are taken over; `n_skipped` those left out (users without a test item). `metrics` is
/// empty when no row counted. `convention` names the recall convention of a recommendation report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub task: Task,
    pub n_rows: usize,
    pub n_skipped: usize,
    pub metrics: Vec<Metric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convention: Option<String>,
}

impl EvalReport {
    /// The value of the metric called `name`, if the report holds one.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }

    /// The metric a task is judged by: Recall@20 (else the first recall) for recommendation,
    /// accuracy for classification, perplexity for a language model; with whether higher is
    /// better.
    pub fn headline(&self) -> Option<(&Metric, bool)> {
        let find = |name: &str| self.metrics.iter().find(|m| m.name == name);
        match self.task {
            Task::Recommendation => find("recall@20")
                .or_else(|| self.metrics.iter().find(|m| m.name.starts_with("recall@")))
                .map(|m| (m, true)),
            Task::Classification => find("accuracy").map(|m| (m, true)),
            Task::LanguageModel => find("perplexity").map(|m| (m, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json_with_snake_case_task() {
        let report = EvalReport {
            task: Task::LanguageModel,
            n_rows: 3,
            n_skipped: 0,
            metrics: vec![Metric::new("perplexity", 4.0)],
            convention: None,
        };
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.contains("\"language_model\""), "{json}");
        assert!(!json.contains("convention"), "{json}");
        let back: EvalReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        assert_eq!(back.get("perplexity"), Some(4.0));
        assert_eq!(back.get("nll"), None);
        let (m, higher) = back.headline().unwrap();
        assert_eq!((m.name.as_str(), higher), ("perplexity", false));
    }

    #[test]
    fn a_recommender_is_judged_by_recall_at_20_else_its_first_recall() {
        let mut report = EvalReport {
            task: Task::Recommendation,
            n_rows: 2,
            n_skipped: 0,
            metrics: vec![
                Metric::new("recall@10", 0.1),
                Metric::new("recall@20", 0.2),
                Metric::new("ndcg@20", 0.3),
            ],
            convention: None,
        };
        assert_eq!(report.headline().unwrap().0.value, 0.2);
        report.metrics.remove(1);
        assert_eq!(report.headline().unwrap().0.name, "recall@10");
        report.task = Task::Classification;
        assert!(report.headline().is_none(), "no accuracy in the report");
    }
}
