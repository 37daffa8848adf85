//! The accuracy bars `explain --measure` judges the ledger by, and the error they are read in.

/// The device's bar: |predicted − measured| ≤ 3 % of measured, at the peak.
pub const BAR_PCT: f64 = 3.0;

/// The host side's bar against the process's anonymous memory, in %: wider than the device's,
/// for what no ledger itemizes (the allocator's free lists, the transients inside an operation).
pub const HOST_BAR_PCT: f64 = 10.0;

/// |predicted − measured| as a % of measured.
pub fn pct(predicted: u64, measured: u64) -> f64 {
    (predicted as f64 - measured as f64).abs() / (measured.max(1) as f64) * 100.0
}
