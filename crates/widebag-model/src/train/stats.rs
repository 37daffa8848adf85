//! What the loop reports of one training step ([`StepStats`]): the step's own figures
//! ([`StepDone`]) and the loop's — the global batch's rows, the step's time, the peak read so
//! far, the learning rate, the epoch, the evaluation after it and whether a checkpoint follows —
//! built whole once they are all known.

use serde::Serialize;

use crate::step::done::StepDone;

/// The loop's own figures of a step.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepTiming {
    /// Wall seconds of the step.
    pub step_s: f64,
    /// Peak bytes in use read so far in the run, after the warm-up (`None` without allocator
    /// counters).
    pub peak_in_use_bytes: Option<u64>,
    /// The dense layers' learning rate this step (the schedule's).
    pub lr: f64,
    /// The epoch this step belongs to (data files).
    pub epoch: Option<u64>,
}

/// What one training step did, as the loop reports it.
#[derive(Clone, Debug, Serialize)]
pub struct StepStats {
    pub step: u64,
    pub loss: f32,
    /// The global batch's rows (across ranks, every rank's).
    pub n_rows: usize,
    pub nnz: usize,
    pub n_unique: usize,
    /// Wall seconds of the step.
    pub step_s: f64,
    /// Peak bytes in use read so far in the run, after the warm-up (`None` without allocator
    /// counters).
    pub peak_in_use_bytes: Option<u64>,
    /// The dense layers' learning rate this step (the schedule's).
    pub lr: f64,
    /// The epoch this step belongs to (data files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The evaluation run after this step, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<widebag_eval::EvalReport>,
    /// Whether a checkpoint is written after this step (the loop writes it once the step's
    /// callback has returned).
    pub checkpoint_due: bool,
}

impl StepStats {
    /// Step `done` of a global batch of `global_rows` rows, with the loop's `timing`, the
    /// evaluation after it and whether a checkpoint follows.
    pub fn new(
        done: StepDone,
        global_rows: usize,
        timing: StepTiming,
        eval: Option<widebag_eval::EvalReport>,
        checkpoint_due: bool,
    ) -> Self {
        Self {
            step: done.step,
            loss: done.loss,
            n_rows: global_rows,
            nnz: done.nnz,
            n_unique: done.n_unique,
            step_s: timing.step_s,
            peak_in_use_bytes: timing.peak_in_use_bytes,
            lr: timing.lr,
            epoch: timing.epoch,
            eval,
            checkpoint_due,
        }
    }
}
