//! `plan --host-budget`: the chosen plan's host side (`widebag_ledger::host_side`: the data's
//! rows, order and batches, the host tier, the process's measured baseline, and on flex the
//! device's tensors on the same heap) priced against the host's memory for the process; a plan
//! over it is refused with exit 3, naming its largest parts.

use std::fmt::Write;

use serde::Serialize;
use widebag_config::units::format_bytes;
use widebag_ledger::Point;
use widebag_ledger::host_side::HostSide;

/// The plan's host side against `--host-budget`.
#[derive(Clone, Debug, Serialize)]
pub struct HostCheck {
    pub budget_bytes: u64,
    /// `--host-budget` as typed.
    pub budget_source: String,
    /// The process's anonymous memory at its predicted peak, and where.
    pub predicted_bytes: u64,
    pub predicted_point: Point,
    /// Each part at that peak, largest first.
    pub parts: Vec<(String, u64)>,
    pub fits: bool,
}

impl HostCheck {
    /// The plan's host side `side` against `budget` (as typed, in bytes).
    pub fn of(side: &HostSide, (text, budget_bytes): &(String, u64)) -> Self {
        let (predicted_bytes, predicted_point) = side.anonymous_peak();
        Self {
            budget_bytes: *budget_bytes,
            budget_source: text.clone(),
            predicted_bytes,
            predicted_point,
            parts: side.parts_at_peak(),
            fits: predicted_bytes <= *budget_bytes,
        }
    }

    /// The largest parts, in words.
    fn largest(&self) -> String {
        let parts: Vec<String> = (self.parts.iter().take(4))
            .map(|(name, b)| format!("{name} {}", format_bytes(*b)))
            .collect();
        parts.join(", ")
    }

    /// Why the plan is refused, with the ledger's numbers.
    pub fn refusal(&self) -> String {
        format!(
            "does not fit the host: the plan's host side needs {} of the process's memory at \
             `{}` ({}), over --host-budget {} ({}); pack the data (`widebag data pack`, read \
             through a memory map) or give the host more memory",
            format_bytes(self.predicted_bytes),
            self.predicted_point.name(),
            self.largest(),
            self.budget_source,
            format_bytes(self.budget_bytes)
        )
    }

    /// The plan report's line.
    pub fn write(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "  host side   {} of a {} host budget ({}): {}",
            format_bytes(self.predicted_bytes),
            format_bytes(self.budget_bytes),
            if self.fits { "fits" } else { "over" },
            self.largest()
        )
    }
}
