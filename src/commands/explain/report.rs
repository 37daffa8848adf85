//! What `explain` reports: the ledger's prediction point by point and per phase, and, when a run
//! was measured, the allocator's readings beside it (the `--json` object).

use std::collections::BTreeMap;

use serde::Serialize;
use widebag_ledger::step::StepSpec;
use widebag_ledger::{Ledger, Phase, Placement, Point};
use widebag_model::RunSummary;

use super::bar::pct;

/// One point of the step, predicted and (when measured) read.
#[derive(Clone, Debug, Serialize)]
pub struct PointRow {
    pub point: Point,
    pub phase: Phase,
    pub predicted_bytes: u64,
    pub measured_bytes: Option<u64>,
    pub error_pct: Option<f64>,
}

/// One phase's peak, predicted and (when measured) read.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PhasePeak {
    /// The largest prediction among all the phase's points.
    pub predicted_bytes: u64,
    /// The largest reading among its points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_bytes: Option<u64>,
    /// The largest prediction among the points that were read (what the reading is compared
    /// with).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_read_bytes: Option<u64>,
}

impl PhasePeak {
    /// |predicted − measured| / measured at the phase's read points, in %.
    pub fn error_pct(&self) -> Option<f64> {
        Some(pct(self.predicted_read_bytes?, self.measured_bytes?))
    }
}

/// What `explain` reports (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub layout: widebag_config::Layout,
    /// `model.tie_output`: the table is the output layer's weight (no optimizer of its own).
    pub tied_output: bool,
    pub adapter: String,
    pub spec: StepSpec,
    pub predicted_peak_bytes: u64,
    pub predicted_peak_point: Point,
    pub predicted_peak_phase: Phase,
    /// The predicted peak among the points the trainer reads (what a measurement is compared
    /// with): with a measurement, the points that have a reading; without one, those the ledger
    /// expects to be read. Equal to `predicted_peak_bytes` unless the peak falls at a point the
    /// step cannot read (inside autodiff's backward, or inside a host kernel).
    pub predicted_sampled_peak_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_point: Option<Point>,
    /// |predicted − measured| / measured of the peaks at the readable points, in %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_pct: Option<f64>,
    /// Category → bytes alive at the predicted peak.
    pub categories: BTreeMap<String, u64>,
    pub points: Vec<PointRow>,
    /// Phase → its peak bytes: predicted at all its points, and, when measured, read and
    /// predicted at the points that were read.
    pub phases: BTreeMap<String, PhasePeak>,
    /// The allocator's reservation: estimated from the ledger, and read (pages at their peak).
    pub reserved_estimate_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_reserved_peak_bytes: Option<u64>,
    /// The largest single allocation and the device's limit.
    pub largest_allocation_bytes: u64,
    pub max_buffer_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_steps: Option<usize>,
    /// Where the measured steps' time went, by stage (each boundary waited for the device).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<widebag_model::ProfileReport>,
    /// What an evaluation pass (top-20 ranking) holds: less than a step, as a rule.
    pub eval: widebag_ledger::step::EvalPeak,
    /// What `model.checkpointing` saves (sparse layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpointing: Option<widebag_ledger::step::CheckpointEffect>,
    /// The host side: the process's own memory (set where the data is at hand).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<super::host::HostReport>,
    pub ledger: Ledger,
}

impl Report {
    /// Whether `row`'s point counts as read: with a measurement, when it has a reading (which
    /// points a step can read depends on its kernels); without one, when the ledger expects it.
    pub fn is_read(&self, row: &PointRow) -> bool {
        match self.measured_peak_bytes {
            Some(_) => row.measured_bytes.is_some(),
            None => !self.ledger.unsampled.contains(&row.point),
        }
    }

    /// Bytes the ledger places in host memory at its host peak.
    pub fn ledger_host_bytes(&self) -> u64 {
        self.ledger.peak(Placement::Host).bytes
    }
}

/// Builds the report from the ledger and, when given, a measured run on `adapter`.
pub fn report(
    spec: StepSpec,
    ledger: Ledger,
    adapter: &str,
    measured: Option<&RunSummary>,
) -> Report {
    let peak = ledger.peak(Placement::Device);
    let sampled = ledger.sampled_peak(Placement::Device);
    let reading = |p: Point| measured.and_then(|m| m.point_peak_in_use_bytes.get(&p).copied());
    let points: Vec<PointRow> = ledger
        .points
        .iter()
        .map(|&point| {
            let predicted_bytes = ledger.live_bytes(Placement::Device, point);
            let measured_bytes = reading(point);
            PointRow {
                point,
                phase: point.phase(),
                predicted_bytes,
                measured_bytes,
                error_pct: measured_bytes.map(|m| pct(predicted_bytes, m)),
            }
        })
        .collect();
    let mut phases: BTreeMap<String, PhasePeak> = BTreeMap::new();
    for row in &points {
        let e = phases.entry(row.phase.name().to_string()).or_default();
        e.predicted_bytes = e.predicted_bytes.max(row.predicted_bytes);
        if let Some(m) = row.measured_bytes {
            e.measured_bytes = Some(e.measured_bytes.unwrap_or(0).max(m));
            e.predicted_read_bytes =
                Some(e.predicted_read_bytes.unwrap_or(0).max(row.predicted_bytes));
        }
    }
    let measured_peak = points
        .iter()
        .filter_map(|r| r.measured_bytes.map(|m| (m, r.point)))
        .max_by_key(|&(m, _)| m);
    // A measurement is compared with the prediction at the points it read: which points a step
    // can read depends on its kernels (a host kernel's inside is as closed as autodiff's).
    let sampled_bytes = match measured_peak {
        Some(_) => points
            .iter()
            .filter(|r| r.measured_bytes.is_some())
            .map(|r| r.predicted_bytes)
            .max()
            .unwrap_or(0),
        None => sampled.bytes,
    };
    let categories = ledger
        .categories_at(Placement::Device, peak.point)
        .into_iter()
        .map(|(c, b)| (c.name().to_string(), b))
        .collect();
    let (_, largest) = ledger.largest_allocation().unwrap_or(("", 0));
    Report {
        layout: spec.layout,
        tied_output: false,
        adapter: adapter.to_string(),
        predicted_peak_bytes: peak.bytes,
        predicted_peak_point: peak.point,
        predicted_peak_phase: peak.phase,
        predicted_sampled_peak_bytes: sampled_bytes,
        measured_peak_bytes: measured_peak.map(|(m, _)| m),
        measured_peak_point: measured_peak.map(|(_, p)| p),
        error_pct: measured_peak.map(|(m, _)| pct(sampled_bytes, m)),
        categories,
        points,
        phases,
        reserved_estimate_bytes: widebag_ledger::reserved::reserved_estimate_bytes(
            &ledger,
            spec.device.max_buffer_bytes,
        ),
        measured_reserved_peak_bytes: measured.and_then(|m| m.peak_reserved_bytes),
        largest_allocation_bytes: largest,
        max_buffer_bytes: spec.device.max_buffer_bytes,
        measured_steps: measured.map(|m| m.steps),
        profile: measured.map(|m| m.profile.clone()),
        eval: widebag_ledger::step::eval_peak(&spec, &ledger, 20),
        checkpointing: widebag_ledger::step::checkpoint_effect(&spec),
        host: None,
        spec,
        ledger,
    }
}
