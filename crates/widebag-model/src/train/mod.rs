//! The training loop ([`train`]), for one process or for each rank of many (one process is the
//! one-rank case: `widebag_collective::local::Local`): batches (synthetic or from a data file)
//! assembled on a background thread (whole, or this rank's rows of each global batch), one
//! training step of the configured layout ([`crate::layout::Trainable`]) per batch, evaluations
//! and checkpoints on schedule, and a summary with throughput and measured memory. The run's
//! state is [`run::Run`]; its instruments, built once from the options, [`instruments`].

pub(crate) mod batches;
pub mod group;
pub(crate) mod instruments;
pub mod options;
pub(crate) mod position;
pub(crate) mod run;
pub mod stats;
pub mod summary;

use widebag_collective::Collective;
use widebag_prepare::Prepared;

use crate::device::Compute;
use crate::error::ModelError;
use crate::train::run::Run;
use crate::train::stats::StepStats;

pub use options::{CheckpointPlan, Resume, RunOptions, StopRequest, Watch};
pub use summary::{AcrossRanks, Evaluation, RunSummary};

/// Trains rank `comm.rank()` of `comm.size()` on the prepared run (a single process is the
/// one-rank case): every rank reads only its rows of each global batch
/// (`BatchSource::next_batch_part`: disjoint, and together the single process's batch), trains
/// them with its block of every table and a replica of the dense layers, evaluates every
/// `train.eval_every` steps and at the end (rank 0 gets the metrics) and checkpoints as
/// `options` say. `on_step` sees every step's stats before the checkpoint that covers it. A
/// raised `options.stop` ends the run after the step it sees, checkpointed where the run
/// writes checkpoints ([`ModelError::Stopped`]); an evaluation that reaches the config's stop
/// target (`train.stop_at_metric`, `train.stop_at_value`) ends it there, with its summary.
pub fn train(
    prepared: Prepared,
    compute: &Compute,
    comm: &dyn Collective,
    options: RunOptions,
    mut on_step: impl FnMut(&StepStats),
) -> Result<RunSummary, ModelError> {
    let mut run = Run::set_up(prepared, compute, comm, &options)?;
    for step in run.start + 1..=run.total {
        let (batch, global_rows, position) = run.next_batch(step)?;
        let (done, timing) = run.step(step, &batch, global_rows)?;
        let eval = run.evaluate_if_due(step, timing.epoch, compute)?;
        let reached = run.target_reached(step, eval.as_ref())?;
        let checkpoint = match reached {
            true => run.checkpoint_dir(),
            false => run.checkpoint_due(step),
        };
        let stats = StepStats::new(done, global_rows, timing, eval, checkpoint.is_some());
        // The step's metrics reach the log before the checkpoint that covers them exists.
        on_step(&stats);
        let stopping = options.stop.as_ref().is_some_and(StopRequest::raised);
        let checkpoint = match (checkpoint, stopping) {
            (None, true) => run.checkpoint_dir(),
            (due, _) => due,
        };
        if let Some(dir) = &checkpoint {
            run.save(dir, &stats, position)?;
        }
        if stopping {
            return Err(ModelError::Stopped { step, checkpoint });
        }
        run.instruments.after_step(step as usize - 1, run.rows_seen);
        if reached {
            break;
        }
    }
    run.finish(compute)
}
