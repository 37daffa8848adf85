//! The host side in `explain`'s report: the process's own memory besides the device's tensors
//! (`widebag_ledger::host_side`), and, measured on a device that computes in the host's memory
//! (flex), the process's anonymous memory beside the prediction, point by point.

use serde::Serialize;
use widebag_ledger::Point;
use widebag_ledger::host_side::HostSide;
use widebag_model::RunSummary;

use super::bar::pct;

/// The host side, predicted and (on flex, when measured) read.
#[derive(Clone, Debug, Serialize)]
pub struct HostReport {
    /// The host side's own peak (without the device's tensors).
    pub predicted_host_bytes: u64,
    /// The process's predicted anonymous memory at its peak, and where: the host side, and the
    /// device's tensors when they are on the same heap.
    pub predicted_anonymous_bytes: u64,
    pub predicted_anonymous_point: Point,
    /// Each part at that peak, largest first.
    pub parts: Vec<(String, u64)>,
    /// Measured on flex: the largest `RssAnon` among the points read, and where.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_anonymous_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_anonymous_point: Option<Point>,
    /// |predicted − measured| / measured, against the prediction at the points read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_pct: Option<f64>,
    pub side: HostSide,
}

/// The host report of `side`, with `measured`'s anonymous memory where the device's tensors are
/// on the host (elsewhere a driver's memory is in it, which no ledger predicts).
pub fn host_report(side: HostSide, measured: Option<&RunSummary>) -> HostReport {
    let (predicted, point) = side.anonymous_peak();
    let reading = measured
        .filter(|_| side.device_on_host)
        .and_then(|m| m.point_anon_rss_bytes.iter().max_by_key(|(_, b)| **b))
        .map(|(&p, &b)| (b, p));
    let sampled = side.anonymous_peak().0;
    HostReport {
        predicted_host_bytes: side.host_peak_bytes(),
        predicted_anonymous_bytes: predicted,
        predicted_anonymous_point: point,
        parts: side.parts_at_peak(),
        measured_anonymous_bytes: reading.map(|r| r.0),
        measured_anonymous_point: reading.map(|r| r.1),
        error_pct: reading.map(|r| pct(sampled, r.0)),
        side,
    }
}
