//! The run's instruments, built once from its [`Watch`]: the step probe (memory readings at the
//! ledger's points and the stage profile), when it reads in detail and when its warm-up readings
//! are dropped, and the clocks the run's time and examples/s are read from.

use std::time::Instant;

use crate::device::{BackendKind, Compute};
use crate::error::ModelError;
use crate::probe::profile::StepProfile;
use crate::probe::{ProbeMode, StepProbe, prime_backend};
use crate::train::options::Watch;

/// The probe and the clocks of one run.
pub(crate) struct Instruments {
    pub probe: StepProbe,
    watch: Watch,
    /// Examples/s is timed from the end of this step (0-based, of the whole run): the first
    /// compiles kernels, detailed steps drain the fusion queue more often.
    timed_after: usize,
    train_start: Instant,
    warm_start: Instant,
    /// Rows drawn when the timed steps began, and when this run's first step began.
    first_rows: usize,
    run_rows_start: usize,
}

impl Instruments {
    /// The instruments `watch` asks for on `compute`, for a run of `steps` steps (one process
    /// when `alone`). Built before the model, so a heap probe's baseline is the heap without it
    /// (and with the backend's lasting state: its threads' scratch, primed first).
    pub fn new(
        watch: &Watch,
        compute: &Compute,
        alone: bool,
        steps: usize,
    ) -> Result<Self, ModelError> {
        let first_mode = match watch.detailed_steps > 0 {
            true => ProbeMode::Detailed,
            false => watch.probe,
        };
        let mut probe = match watch.measure {
            true => StepProbe::on_heap(&compute.device, ProbeMode::Detailed)
                .ok_or_else(|| ModelError::Execution("no heap counter to measure with".into()))?,
            false => {
                let probe = StepProbe::with_mode(&compute.device, first_mode);
                match watch.heap_probe && alone && !probe.available() {
                    // The baseline is taken once the backend's lasting state (its threads'
                    // matrix-product scratch) exists, as a measured run takes it: that state is
                    // the process's, as a GPU's context is, not the step's.
                    true => {
                        prime_backend(&compute.device);
                        StepProbe::on_heap(&compute.device, first_mode).unwrap_or(probe)
                    }
                    false => probe,
                }
            }
        };
        probe.profile = StepProfile::new(
            &compute.device,
            watch.profile_sync && compute.backend == BackendKind::Wgpu,
        );
        let first_timed = watch.detailed_steps.max(1);
        let now = Instant::now();
        Ok(Self {
            probe,
            watch: watch.clone(),
            timed_after: if steps > first_timed {
                first_timed - 1
            } else {
                0
            },
            train_start: now,
            warm_start: now,
            first_rows: 0,
            run_rows_start: 0,
        })
    }

    /// Training starts after the `start` steps a resumed run had taken, with `rows_seen` rows
    /// drawn.
    pub fn start_training(&mut self, start: usize, rows_seen: usize) {
        self.timed_after += start;
        self.train_start = Instant::now();
        self.warm_start = self.train_start;
        self.first_rows = rows_seen;
        self.run_rows_start = rows_seen;
    }

    /// Before this run's `i`-th step (0-based): the detailed steps end, the warm-up's readings
    /// are dropped.
    pub fn before_step(&mut self, i: usize) {
        if i > 0 && i == self.watch.detailed_steps {
            self.probe.mode = self.watch.probe;
        }
        if i > 0 && i == self.watch.warmup_steps {
            self.probe.reset();
        }
    }

    /// After step `step` (0-based, of the whole run) with `rows_seen` rows drawn: the timed
    /// steps begin after the first ones.
    pub fn after_step(&mut self, step: usize, rows_seen: usize) {
        if step == self.timed_after {
            self.warm_start = Instant::now();
            self.first_rows = rows_seen;
            self.probe.profile.reset();
        }
    }

    /// Seconds since training started.
    pub fn train_s(&self) -> f64 {
        self.train_start.elapsed().as_secs_f64()
    }

    /// Examples per second over the timed steps of a run of `steps` steps, `rows_seen` rows
    /// drawn (over every step of this run when none was timed), training `train_s` seconds.
    pub fn examples_per_s(&self, steps: usize, rows_seen: usize, train_s: f64) -> f64 {
        let warm_steps = steps.saturating_sub(self.timed_after + 1);
        match warm_steps > 0 {
            true => (rows_seen - self.first_rows) as f64 / self.warm_start.elapsed().as_secs_f64(),
            false => (rows_seen - self.run_rows_start) as f64 / train_s,
        }
    }

    /// Whether the run reads the heap at every point ([`Watch::measure`]).
    pub fn measures(&self) -> bool {
        self.watch.measure
    }
}
