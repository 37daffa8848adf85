//! Where the training loop is — the step under way and the last stage of it that ended — kept in
//! atomics so that a failure report can name it without allocating (a refused allocation is
//! reported from inside the allocator; a device error from a panic that unwinds out of burn).

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::probe::profile::Stage;

/// The step under way, 1-based; 0 before the first.
static STEP: AtomicU64 = AtomicU64::new(0);
/// `Stage as u8 + 1` of the last stage that ended in this step; 0 at its start.
static STAGE: AtomicU8 = AtomicU8::new(0);

/// Marks the start of step `step` (1-based).
pub fn start_step(step: u64) {
    STEP.store(step, Ordering::Relaxed);
    STAGE.store(0, Ordering::Relaxed);
}

/// Marks the end of `stage`.
pub fn ended(stage: Stage) {
    STAGE.store(stage as u8 + 1, Ordering::Relaxed);
}

/// The step under way (0 before the first, as while building the model) and the stage it is in:
/// the one after the last that ended.
pub fn now() -> (u64, Option<Stage>) {
    decode(STEP.load(Ordering::Relaxed), STAGE.load(Ordering::Relaxed))
}

fn decode(step: u64, ended: u8) -> (u64, Option<Stage>) {
    let i = (ended as usize).min(Stage::ALL.len() - 1);
    (step, (step > 0).then(|| Stage::ALL[i]))
}

/// `step 12, stage `output_forward``, or `set-up` before the first step; no allocation beyond the
/// caller's formatter.
pub fn describe(f: &mut dyn std::fmt::Write) -> std::fmt::Result {
    describe_at(now(), f)
}

fn describe_at(at: (u64, Option<Stage>), f: &mut dyn std::fmt::Write) -> std::fmt::Result {
    match at {
        (0, _) => f.write_str("set-up (before step 1)"),
        (step, Some(stage)) => write!(f, "step {step}, stage `{}`", stage.name()),
        (step, None) => write!(f, "step {step}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // On the decoding only: the statics are shared with the other tests' training loops.
    #[test]
    fn names_the_stage_after_the_last_one_that_ended() {
        assert_eq!(decode(7, 0), (7, Some(Stage::Data)));
        let after = decode(7, Stage::OutputForward as u8 + 1);
        assert_eq!(after, (7, Some(Stage::OutputBackward)));
        let last = decode(7, Stage::DenseUpdate as u8 + 1);
        assert_eq!(last, (7, Some(Stage::DenseUpdate)));
        assert_eq!(decode(0, 3), (0, None));
        let mut s = String::new();
        describe_at(last, &mut s).unwrap();
        assert_eq!(s, "step 7, stage `dense_update`");
        s.clear();
        describe_at((0, None), &mut s).unwrap();
        assert!(s.starts_with("set-up"));
    }
}
