//! One budget's row of a frontier (also its `row.json`, which resuming reads back): what the
//! solver chose for it, what the run measured, and the task's metric; written as results.csv
//! and results.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use widebag_config::units::format_bytes;
use widebag_eval::EvalReport;

use crate::commands::sweep::results::{Status, csv_field, opt};
use crate::plan::report::{Report, optimizers};

/// One budget of a frontier.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrontierRow {
    /// The budget as typed, and in bytes.
    pub budget: String,
    pub budget_bytes: u64,
    pub status: Status,
    /// What the solver chose (when nothing fits: its cheapest candidate).
    pub batch_size: usize,
    pub optimizers: String,
    /// The layout remedies the plan takes, in the solver's order: `name: value`.
    pub remedies: Vec<String>,
    /// Whether a remedy taken changes what the model can learn (head/tail input, the adaptive
    /// softmax).
    pub costs_accuracy: bool,
    pub predicted_peak_bytes: u64,
    /// The run's peak bytes in use: the device allocator's on wgpu, the heap's on flex (each
    /// run is its own process, read at the phase ends of every step).
    pub measured_peak_bytes: Option<u64>,
    /// Values of the input side (tables, projections) and of the output layer.
    pub table_parameters: Option<u64>,
    pub output_parameters: Option<u64>,
    /// Seconds from the run's start to its exit (data, setup, training, evaluation).
    pub wall_s: Option<f64>,
    /// Seconds of the training steps alone.
    pub train_s: Option<f64>,
    pub examples_per_s: Option<f64>,
    /// Mean training loss of the last 10 steps.
    pub final_loss: Option<f32>,
    /// Loss on the held-out rows.
    pub eval_loss: Option<f64>,
    /// The last evaluation's metrics.
    pub eval: Option<EvalReport>,
    /// The quality this frontier plots: the task's metric (Recall@20, accuracy, perplexity),
    /// else the held-out loss, else the training loss.
    pub quality: Option<Quality>,
    pub error: Option<String>,
}

/// A value the frontier plots, with its name and direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    pub name: String,
    pub value: f64,
    pub higher_is_better: bool,
}

/// The fields of a run's `summary.json` a row reads.
#[derive(Deserialize)]
pub struct Trained {
    pub peak_in_use_bytes: Option<u64>,
    pub examples_per_s: f64,
    pub final_loss_mean10: f32,
    pub eval_loss: Option<f64>,
    pub table_parameters: u64,
    pub output_parameters: u64,
    pub train_s: f64,
    pub eval: Option<EvalReport>,
}

impl FrontierRow {
    /// The row of a planned budget, not yet run (refused when the plan does not fit).
    pub fn planned(budget: &str, report: &Report) -> Self {
        let plan = &report.plan;
        Self {
            budget: budget.to_string(),
            budget_bytes: report.budget_bytes,
            status: match report.fits {
                true => Status::Failed,
                false => Status::Refused,
            },
            batch_size: report.batch_size,
            optimizers: optimizers(plan.layout, plan.chosen.table, plan.chosen.dense),
            remedies: plan
                .remedies
                .iter()
                .map(|r| format!("{}: {}", r.remedy.name(), r.to))
                .collect(),
            costs_accuracy: report.fits && plan.remedies.iter().any(|r| r.remedy.costs_accuracy()),
            predicted_peak_bytes: report.predicted_peak_bytes,
            measured_peak_bytes: None,
            table_parameters: None,
            output_parameters: None,
            wall_s: None,
            train_s: None,
            examples_per_s: None,
            final_loss: None,
            eval_loss: None,
            eval: None,
            quality: None,
            error: (!report.fits).then(|| plan.refusal()),
        }
    }

    /// The row completed by a finished run's summary.
    pub fn trained(mut self, t: Trained, wall_s: f64) -> Self {
        self.status = Status::Ok;
        self.measured_peak_bytes = t.peak_in_use_bytes;
        self.table_parameters = Some(t.table_parameters);
        self.output_parameters = Some(t.output_parameters);
        self.wall_s = Some(wall_s);
        self.train_s = Some(t.train_s);
        self.examples_per_s = Some(t.examples_per_s);
        self.final_loss = Some(t.final_loss_mean10);
        self.eval_loss = t.eval_loss;
        let headline = t.eval.as_ref().and_then(|e| e.headline());
        self.quality = Some(match (headline, t.eval_loss) {
            (Some((m, higher)), _) => Quality {
                name: m.name.clone(),
                value: m.value,
                higher_is_better: higher,
            },
            (None, Some(loss)) => Quality {
                name: "held-out loss".into(),
                value: loss,
                higher_is_better: false,
            },
            (None, None) => Quality {
                name: "training loss".into(),
                value: t.final_loss_mean10 as f64,
                higher_is_better: false,
            },
        });
        self.eval = t.eval;
        self
    }

    /// Table and output values together.
    pub fn values(&self) -> Option<u64> {
        Some(self.table_parameters? + self.output_parameters?)
    }

    /// Every metric of the last evaluation, by name.
    fn metrics(&self) -> BTreeMap<&str, f64> {
        self.eval
            .iter()
            .flat_map(|e| e.metrics.iter().map(|m| (m.name.as_str(), m.value)))
            .collect()
    }

    /// Short remedy names (`host tier, adaptive softmax`), `-` for none.
    fn remedy_names(&self) -> String {
        match self.remedies.is_empty() {
            true => "-".into(),
            false => self
                .remedies
                .iter()
                .map(|r| r.split(':').next().unwrap_or(r))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Every metric name any row reports, in order.
fn metric_names(rows: &[FrontierRow]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        for name in r.metrics().keys() {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// The rows' quality with its direction: `recall@20 (higher is better)`.
pub fn quality_label(rows: &[FrontierRow]) -> String {
    rows.iter()
        .find_map(|r| r.quality.as_ref())
        .map_or("quality".to_string(), |q| match q.higher_is_better {
            true => format!("{} (higher is better)", q.name),
            false => format!("{} (lower is better)", q.name),
        })
}

/// One row per budget: the plan, the measurements, then every metric.
pub fn csv(rows: &[FrontierRow]) -> String {
    let metrics = metric_names(rows);
    let mut s = String::from(
        "budget,budget_bytes,status,batch_size,optimizers,remedies,costs_accuracy,\
         predicted_peak_bytes,measured_peak_bytes,table_parameters,output_parameters,wall_s,\
         train_s,examples_per_s,final_loss,eval_loss,quality,quality_value",
    );
    for m in &metrics {
        s.push(',');
        s.push_str(&csv_field(m));
    }
    s.push_str(",error\n");
    for r in rows {
        let metric = r.metrics();
        let mut line = vec![
            csv_field(&r.budget),
            r.budget_bytes.to_string(),
            r.status.name().to_string(),
            r.batch_size.to_string(),
            csv_field(&r.optimizers),
            csv_field(&r.remedies.join("; ")),
            r.costs_accuracy.to_string(),
            r.predicted_peak_bytes.to_string(),
            opt(r.measured_peak_bytes),
            opt(r.table_parameters),
            opt(r.output_parameters),
            r.wall_s.map_or(String::new(), |x| format!("{x:.2}")),
            r.train_s.map_or(String::new(), |x| format!("{x:.2}")),
            r.examples_per_s
                .map_or(String::new(), |x| format!("{x:.3}")),
            r.final_loss.map_or(String::new(), |x| format!("{x:.6}")),
            r.eval_loss.map_or(String::new(), |x| format!("{x:.6}")),
            csv_field(r.quality.as_ref().map_or("", |q| q.name.as_str())),
            r.quality
                .as_ref()
                .map_or(String::new(), |q| format!("{:.6}", q.value)),
        ];
        for m in &metrics {
            line.push(
                metric
                    .get(m.as_str())
                    .map_or(String::new(), |v| format!("{v:.6}")),
            );
        }
        line.push(csv_field(r.error.as_deref().unwrap_or("")));
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

/// The same table in Markdown, with the refusals and failures below it.
pub fn markdown(rows: &[FrontierRow], adapter: &str) -> String {
    let bytes = |b: Option<u64>| b.map_or("-".into(), format_bytes);
    let quality = quality_label(rows);
    let mut s = format!(
        "Measured on {adapter}, each run in its own process. Memory: the ledger's predicted \
         peak and the peak bytes in use measured over every step (the allocator's on wgpu, the \
         heap's on flex); values: table and output values; time: the run's wall time.\n\n\
         | budget | status | batch | \
         optimizers | remedies | values | predicted peak | measured peak | time | {quality} |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        let accuracy = if r.costs_accuracy { " ⚠" } else { "" };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {}{accuracy} | {} | {} | {} | {} | {} |\n",
            r.budget,
            r.status.name(),
            r.batch_size,
            r.optimizers,
            r.remedy_names(),
            r.values()
                .map_or("-".into(), |v| format!("{:.2} M", v as f64 / 1e6)),
            format_bytes(r.predicted_peak_bytes),
            bytes(r.measured_peak_bytes),
            r.wall_s.map_or("-".into(), |x| format!("{x:.1} s")),
            r.quality
                .as_ref()
                .map_or("-".into(), |q| format!("{:.4}", q.value)),
        ));
    }
    if rows.iter().any(|r| r.costs_accuracy) {
        s.push_str("\n⚠ a remedy that costs accuracy (head/tail input, the adaptive or the sampled softmax).\n");
    }
    for r in rows.iter().filter(|r| r.error.is_some()) {
        s.push_str(&format!(
            "\n{} ({}): {}\n",
            r.budget,
            r.status.name(),
            r.error.as_deref().unwrap_or_default()
        ));
    }
    s
}
