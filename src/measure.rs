//! Measured steps: a short run with the allocator read at every point of the ledger, for
//! `explain --measure`, its grid, and `plan --verify`/`--search`.

use anyhow::Context;
use widebag_model::{Compute, MeterMode, RunOptions, RunSummary, run_training_with};
use widebag_prepare::Prepared;

/// Runs `steps` steps (at least 2; the first a warm-up whose readings are dropped) reading the
/// allocator at every ledger point. Fails on a backend without allocator counters.
pub fn measure(prepared: Prepared, compute: &Compute, steps: usize) -> anyhow::Result<RunSummary> {
    let mut prepared = prepared;
    prepared.config.train.steps = steps.max(2);
    let options = RunOptions {
        meter: MeterMode::Detailed,
        warmup_steps: 1,
        detailed_steps: 0,
        profile_sync: true,
        ..RunOptions::default()
    };
    let summary =
        run_training_with(prepared, compute, options, |_| {}).context("running the step")?;
    if summary.peak_in_use_bytes.is_none() {
        anyhow::bail!(
            "the {:?} backend reports no allocator counters: --measure needs wgpu",
            compute.backend
        );
    }
    Ok(summary)
}
