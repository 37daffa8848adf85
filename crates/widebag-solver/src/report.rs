//! What the solver answers: the [`Plan`] with its chosen [`Candidate`], the runner-ups and the
//! [`Suggestion`]s, and the verdicts that explain a candidate.

use std::collections::BTreeMap;

use serde::Serialize;
use widebag_config::units::format_bytes;
use widebag_config::{Config, DenseOptim, Layout, Logits, Objective, TableOptim};
use widebag_ledger::Point;

use crate::problem::{Problem, slack_bytes};
use crate::remedy::{LayoutOption, RemedyTaken};

/// One batch size and optimizer pair, costed by the ledger.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    pub batch_size: usize,
    pub table: TableOptim,
    pub dense: DenseOptim,
    pub predicted_peak_bytes: u64,
    pub peak_point: Point,
    /// Category → bytes alive at the peak.
    pub categories: BTreeMap<String, u64>,
    pub largest_allocation_bytes: u64,
    pub fits: bool,
    /// The largest batch this optimizer pair fits at (within the batch range), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch_size: Option<usize>,
    /// The throughput model's examples/s (0 where the device has no calibration).
    pub predicted_examples_per_s: f64,
    /// The throughput model's seconds a step (0 where the device has no calibration).
    pub predicted_step_s: f64,
    /// Why this candidate was chosen or rejected.
    pub verdict: String,
}

/// A single change that would make the run fit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suggestion {
    /// The key to change (`optim.table`, `train.batch_size`, `model.layout`, `model.dim`,
    /// `budget`).
    pub key: String,
    pub from: String,
    pub to: String,
    /// Predicted bytes the change frees (for `budget`: the bytes it adds).
    pub frees_bytes: u64,
    /// The change in words, e.g. "optim.table adam → rowwise_adagrad frees 1.84 GiB".
    pub text: String,
}

/// The solver's answer. Deterministic: the same problem gives the same plan, byte for byte.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub fits: bool,
    pub objective: Objective,
    pub layout: Layout,
    pub budget_bytes: u64,
    pub slack_bytes: u64,
    pub max_buffer_bytes: u64,
    pub pinned: Vec<&'static str>,
    pub min_batch: usize,
    pub max_batch: usize,
    /// `plan.keep_accuracy`: no remedy that costs accuracy was considered.
    pub keep_accuracy: bool,
    /// The chosen plan, or, when nothing fits, the cheapest candidate (`fits: false`).
    pub chosen: Candidate,
    /// Every other optimizer pair at the chosen batch, and the chosen pair one batch larger.
    pub runner_ups: Vec<Candidate>,
    /// When nothing fits: single changes that would, smallest first.
    pub suggestions: Vec<Suggestion>,
    /// The layout remedies the chosen plan takes (in their order), each with what it saves;
    /// when nothing fits, every remedy tried.
    pub remedies: Vec<RemedyTaken>,
    /// The other layouts compared (the configured one and each rung of remedies), each with its
    /// best plan and why it lost.
    pub layouts: Vec<LayoutOption>,
    /// The full softmax's logits chosen by time (the throughput objective, `model.logits`
    /// unpinned, where its forms differ): every form weighed and the one taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits: Option<LogitsChoice>,
    /// Ledger evaluations the search made.
    pub evaluations: usize,
    /// Across ranks (`Problem::ranks` > 1): every rank's part of the chosen plan.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankPlan>,
}

/// One form of the logits, priced at the batch and optimizers the plan chose with the configured
/// form.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogitsOption {
    pub logits: Logits,
    pub fits: bool,
    pub predicted_peak_bytes: u64,
    pub predicted_examples_per_s: f64,
}

/// The logits' form the plan takes, and every form it weighed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogitsChoice {
    pub chosen: Logits,
    pub configured: Logits,
    pub options: Vec<LogitsOption>,
}

impl Plan {
    /// When nothing fits: the smallest budget at which the cheapest run of the most remedied
    /// layout considered would (the `budget` suggestion), where no tensor is over the largest
    /// buffer.
    pub fn smallest_budget_bytes(&self) -> Option<u64> {
        self.suggestions
            .iter()
            .find(|s| s.key == "budget")
            .map(|s| self.budget_bytes + s.frees_bytes)
    }

    /// Why nothing fits, in a sentence for the refusal: the smallest change, or with
    /// `keep_accuracy` the smallest budget that needs no remedy costing accuracy.
    pub fn refusal(&self) -> String {
        let budget = format_bytes(self.budget_bytes);
        match (self.keep_accuracy, self.smallest_budget_bytes()) {
            (true, Some(b)) => format!(
                "nothing fits the {budget} budget without a remedy that costs accuracy \
                 (--keep-accuracy: no head/tail input, no adaptive softmax); the smallest budget \
                 that fits without them is {}",
                format_bytes(b)
            ),
            (true, None) => format!(
                "nothing fits the {budget} budget without a remedy that costs accuracy \
                 (--keep-accuracy), at any budget: a tensor is over the largest buffer"
            ),
            (false, _) => {
                format!(
                    "nothing fits the {budget} budget: {}",
                    self.suggestions.first().map_or(
                        "no single change fits".to_string(),
                        |s| format!("smallest change: {}", s.text)
                    )
                )
            }
        }
    }

    /// `config` with the plan's choices applied: batch, optimizers, layout remedies and the
    /// logits' form.
    pub fn apply_to(&self, config: &Config) -> Config {
        let mut c = config.clone();
        c.train.batch_size = self.chosen.batch_size;
        for r in &self.remedies {
            r.apply(&mut c);
        }
        if let Some(choice) = &self.logits {
            c.model.logits = choice.chosen;
        }
        c.optim.table = self.chosen.table;
        c.optim.dense = self.chosen.dense;
        c
    }
}

/// One rank's part of a plan across ranks: its rows of the batch, its block of each table and of
/// the classes, its predicted peak with the categories alive there (the communication buffers
/// among them), and the bytes it sends per step by collective.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankPlan {
    pub rank: usize,
    pub batch_rows: usize,
    /// Rows of each input band's table this rank owns.
    pub table_rows: Vec<usize>,
    /// Classes of the output layer it holds: its block of the full softmax (all of them for the
    /// adaptive softmax, which is data-parallel).
    pub classes: usize,
    pub predicted_peak_bytes: u64,
    pub peak_point: Point,
    pub categories: BTreeMap<String, u64>,
    pub traffic: Vec<widebag_ledger::step::Traffic>,
}

/// Why a candidate does not fit (or `fits`): a tensor over the largest buffer, or the bytes it
/// is over the budget by.
pub(crate) fn over_budget(c: &Candidate, p: &Problem) -> String {
    if c.largest_allocation_bytes > p.device.max_buffer_bytes {
        return format!(
            "a {} tensor is over the device's largest buffer ({})",
            format_bytes(c.largest_allocation_bytes),
            format_bytes(p.device.max_buffer_bytes)
        );
    }
    if c.fits {
        return "fits".to_string();
    }
    let need = c.predicted_peak_bytes + slack_bytes(p.budget_bytes);
    format!(
        "over budget by {} ({} peak at {})",
        format_bytes(need.saturating_sub(p.budget_bytes)),
        format_bytes(c.predicted_peak_bytes),
        c.peak_point.name()
    )
}
