//! Measured steps: a short run with the allocator read at every point of the ledger, for
//! `explain --measure`, its grid, and `plan --verify`/`--search`. On flex, whose tensors live on
//! the heap, the heap's live bytes are read instead, with the run's batches read ahead so that
//! the counter sees only the step.

use anyhow::Context;
use widebag_collective::local::Local;
use widebag_model::{BackendKind, Compute, ProbeMode, RunOptions, RunSummary, Watch, train};
use widebag_prepare::Prepared;

/// Runs `steps` steps (at least 2; the first a warm-up whose readings are dropped) reading the
/// allocator at every ledger point. Fails on a backend without allocator counters.
pub fn measure(prepared: Prepared, compute: &Compute, steps: usize) -> anyhow::Result<RunSummary> {
    let mut prepared = prepared;
    prepared.config.train.steps = steps.max(2);
    // What predicting freed (sampled batches) is not the run's.
    crate::heap::give_back_freed();
    let on_heap = reads_the_heap(compute);
    let options = RunOptions {
        watch: Watch {
            probe: ProbeMode::Detailed,
            warmup_steps: 1,
            detailed_steps: 0,
            profile_sync: true,
            measure: on_heap,
            heap_probe: on_heap,
        },
        ..RunOptions::default()
    };
    let summary = train(prepared, compute, &Local, options, |_| {}).context("running the step")?;
    if summary.peak_in_use_bytes.is_none() {
        anyhow::bail!(
            "the {:?} backend reports no allocator counters: --measure needs wgpu or flex",
            compute.backend
        );
    }
    Ok(summary)
}

/// Whether a measured run on `compute` reads the heap (flex) rather than the device's pools;
/// such a run reads all of its batches ahead.
pub fn reads_the_heap(compute: &Compute) -> bool {
    compute.backend == BackendKind::Flex
}
