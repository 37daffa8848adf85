//! A training run as it goes: the progress bar rank 0 shows (steps, epoch, loss, examples/s,
//! the last evaluation) and the metrics log it writes into the run directory (`metrics.jsonl`,
//! one line per step; a resumed log cut back to the checkpoint's step when the first step
//! arrives).

use indicatif::{ProgressBar, ProgressStyle};
use widebag_model::StepStats;

use crate::run_dir::{MetricsLog, RunDir};

/// The progress bar of a run of `steps` steps (hidden on ranks other than 0).
pub struct Progress {
    bar: ProgressBar,
    started: std::time::Instant,
    examples: usize,
    last_eval: String,
}

impl Progress {
    pub fn new(visible: bool, steps: u64) -> Self {
        let bar = match visible {
            true => ProgressBar::new(steps),
            false => ProgressBar::hidden(),
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed}<{eta}]")
                .expect("valid template"),
        );
        Self {
            bar,
            started: std::time::Instant::now(),
            examples: 0,
            last_eval: String::new(),
        }
    }

    /// One step done.
    pub fn step(&mut self, s: &StepStats) {
        if self.bar.position() == 0 {
            self.bar.set_position(s.step - 1);
        }
        self.examples += s.n_rows;
        let rate = self.examples as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        if let Some(e) = &s.eval {
            self.last_eval = format!("  [{}]", e.line());
        }
        let epoch = s.epoch.map_or(String::new(), |e| format!("epoch {e}  "));
        self.bar.set_message(format!(
            "{epoch}loss {:.4}  {rate:.0} ex/s{}",
            s.loss, self.last_eval
        ));
        self.bar.inc(1);
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// The metrics log of a run directory, opened at the first step (a resumed log cut back to the
/// step before it); an error keeps until [`Self::finish`] reports it.
pub struct StepLog<'d> {
    dir: Option<&'d RunDir>,
    resuming: bool,
    log: Option<MetricsLog>,
    error: Option<anyhow::Error>,
}

impl<'d> StepLog<'d> {
    /// The log in `dir` (none without a run directory, or on ranks other than 0).
    pub fn new(dir: Option<&'d RunDir>, resuming: bool) -> Self {
        Self {
            dir,
            resuming,
            log: None,
            error: None,
        }
    }

    /// One step's line.
    pub fn step(&mut self, s: &StepStats) {
        let Some(d) = self.dir else { return };
        if self.log.is_none() && self.error.is_none() {
            match d.metrics(self.resuming.then(|| s.step - 1)) {
                Ok(m) => self.log = Some(m),
                Err(e) => self.error = Some(e),
            }
        }
        if let Some(m) = &mut self.log {
            m.step(s);
        }
    }

    /// The log synced, or the error that stopped it.
    pub fn finish(self) -> anyhow::Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        match self.log {
            Some(m) => m.finish(),
            None => Ok(()),
        }
    }
}
