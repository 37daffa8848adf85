//! What a run is asked besides its config: how it is watched ([`Watch`]: the instruments'
//! settings, from which [`crate::train::instruments::Instruments`] is built once), where it
//! writes checkpoints ([`CheckpointPlan`]), where it continues from ([`Resume`]) and whether it
//! saves its initial weights, and the flag that asks it to stop ([`StopRequest`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::probe::ProbeMode;

/// Where and how often a run writes checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointPlan {
    /// The run directory's `checkpoints/`.
    pub root: PathBuf,
    /// Every this many steps (0: only at the end); always after the last step.
    pub every: u64,
}

impl CheckpointPlan {
    /// Whether a checkpoint follows step `done` of `total`.
    pub(crate) fn due(&self, done: u64, total: u64) -> bool {
        (self.every > 0 && done.is_multiple_of(self.every)) || done == total
    }
}

/// How a run is watched: the settings its instruments are built from.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// How closely the probe reads the allocator after the detailed steps.
    pub probe: ProbeMode,
    /// Steps whose memory readings are discarded (the first steps compile kernels and create
    /// lazily allocated state).
    pub warmup_steps: usize,
    /// The first steps read the allocator at every point (`ProbeMode::Detailed`), the rest as
    /// `probe` says; examples/s is then timed after them. 0: `probe` throughout.
    pub detailed_steps: usize,
    /// Whether each stage boundary of the profile waits for the device (exact stage times on
    /// wgpu, at some cost in throughput; flex is exact without it).
    pub profile_sync: bool,
    /// Read this process's heap at every point of every step (the first steps' readings
    /// dropped as `warmup_steps` says), relative to the heap before the model was built, with
    /// every batch read first (`explain --measure` under `mpirun`: one process per rank). An
    /// error when the binary registered no heap counter.
    pub measure: bool,
    /// One process on a backend without allocator counters (flex, whose tensors live on the
    /// heap): read the heap's live bytes at the probe's points instead (relative to the heap
    /// before the model was built; the step's host buffers and the batch read ahead count with
    /// the tensors), so the summary's `peak_in_use_bytes` is measured there too.
    pub heap_probe: bool,
}

/// What a run is asked besides its config.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// How it is watched.
    pub watch: Watch,
    /// Checkpoints to write (across ranks, each rank under its own directory of the root:
    /// [`crate::train::group::rank_dir`]).
    pub checkpoints: Option<CheckpointPlan>,
    /// Where to continue from.
    pub resume: Option<Resume>,
    /// Write the initial weights (before the first step; a fresh run of one process) to this
    /// safetensors file, as a checkpoint names them: a peer can start from the same numbers.
    pub save_init: Option<PathBuf>,
    /// Raised from outside (Ctrl-C in Python): the run stops at the next step boundary, with a
    /// checkpoint of that step where it writes checkpoints ([`crate::ModelError::Stopped`]).
    pub stop: Option<StopRequest>,
}

/// A request, from another thread or a signal, that a run stop at its next step boundary.
#[derive(Clone, Debug, Default)]
pub struct StopRequest(Arc<AtomicBool>);

impl StopRequest {
    /// Asks the run to stop.
    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was asked.
    pub fn raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Where a run continues from.
#[derive(Clone, Debug)]
pub enum Resume {
    /// This checkpoint directory (one process).
    Checkpoint(PathBuf),
    /// The newest step every rank has a good checkpoint of under the checkpoints' root.
    NewestCommon,
}
