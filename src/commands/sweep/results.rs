//! A sweep's results as tables: one row per run (`RunRow`, also each run's `row.json`),
//! written as results.csv and results.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use widebag_config::units::format_bytes;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Refused before it started: it does not fit (the ledger's numbers are in `error`).
    Refused,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Refused => "refused",
            Status::Failed => "failed",
        }
    }
}

/// One run's row of the results (also its `row.json`, which resuming reads back).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRow {
    pub run: String,
    pub status: Status,
    /// Swept key → value.
    pub values: BTreeMap<String, String>,
    pub batch_size: usize,
    /// The ledger's predicted peak (device bytes in use).
    pub predicted_peak_bytes: Option<u64>,
    /// The allocator's peak bytes in use over the run after the first step (every point of the
    /// step read in steps 2 and 3, the phase ends after).
    pub measured_peak_bytes: Option<u64>,
    pub examples_per_s: Option<f64>,
    pub final_loss: Option<f32>,
    /// Ledger category → predicted bytes at the peak.
    pub categories: BTreeMap<String, u64>,
    /// Loss per step.
    pub losses: Vec<f32>,
    pub error: Option<String>,
}

impl RunRow {
    /// A run not (yet) measured, with the point's values.
    pub fn new(
        run: &str,
        status: Status,
        values: &BTreeMap<String, String>,
        batch_size: usize,
    ) -> Self {
        Self {
            run: run.to_string(),
            status,
            values: values.clone(),
            batch_size,
            predicted_peak_bytes: None,
            measured_peak_bytes: None,
            examples_per_s: None,
            final_loss: None,
            categories: BTreeMap::new(),
            losses: Vec::new(),
            error: None,
        }
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a newline.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A value, or an empty field.
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// One row per run: run, status, the swept keys, then the measurements.
pub fn csv(rows: &[RunRow], keys: &[String]) -> String {
    let mut s = String::from("run,status");
    for k in keys {
        s.push(',');
        s.push_str(&csv_field(k));
    }
    s.push_str(
        ",batch_size,predicted_peak_bytes,measured_peak_bytes,examples_per_s,final_loss,error\n",
    );
    for r in rows {
        let mut line = vec![csv_field(&r.run), r.status.name().to_string()];
        for k in keys {
            line.push(csv_field(r.values.get(k).map_or("", String::as_str)));
        }
        line.push(r.batch_size.to_string());
        line.push(opt(r.predicted_peak_bytes));
        line.push(opt(r.measured_peak_bytes));
        line.push(
            r.examples_per_s
                .map_or(String::new(), |x| format!("{x:.3}")),
        );
        line.push(r.final_loss.map_or(String::new(), |x| format!("{x:.6}")));
        line.push(csv_field(r.error.as_deref().unwrap_or("")));
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

/// The same table in Markdown.
pub fn markdown(rows: &[RunRow], keys: &[String], adapter: &str) -> String {
    let bytes = |b: Option<u64>| b.map_or("-".into(), format_bytes);
    let mut s = format!(
        "Measured on {adapter}. Memory: the ledger's predicted peak and the allocator's peak \
         bytes in use after the first step; loss: mean of the last 10 steps.\n\n| run | status |"
    );
    for k in keys {
        s.push_str(&format!(" {k} |"));
    }
    s.push_str(" predicted peak | measured peak | examples/s | final loss |\n|---|---|");
    s.push_str(&"---|".repeat(keys.len() + 4));
    s.push('\n');
    for (i, r) in rows.iter().enumerate() {
        s.push_str(&format!("| {} | {} |", i + 1, r.status.name()));
        for k in keys {
            s.push_str(&format!(
                " {} |",
                r.values.get(k).map_or("", String::as_str).trim_matches('"')
            ));
        }
        s.push_str(&format!(
            " {} | {} | {} | {} |\n",
            bytes(r.predicted_peak_bytes),
            bytes(r.measured_peak_bytes),
            r.examples_per_s.map_or("-".into(), |x| format!("{x:.1}")),
            r.final_loss.map_or("-".into(), |x| format!("{x:.4}")),
        ));
    }
    s
}
