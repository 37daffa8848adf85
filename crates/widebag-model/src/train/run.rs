//! One run on its way through the loop ([`Run`]): set up from the prepared data and the options
//! (the model built, or resumed from a checkpoint; the batches streaming; the held-out set; the
//! instruments), then asked, step by step, for the next batch, the step, the evaluations and
//! checkpoints that are due, and at the end for its summary.

use std::sync::mpsc::Receiver;
use std::time::Instant;

use widebag_collective::Collective;
use widebag_config::{Config, OptimConfig};
use widebag_csr::CsrBatch;
use widebag_data::DataPosition;
use widebag_prepare::{BandReport, DataSummary, Prepared};

use crate::checkpoint::{self, RunPoint};
use crate::device::Compute;
use crate::error::ModelError;
use crate::eval::{EvalSet, EvalSpec, eval_spec, evaluate_part};
use crate::input::InputTransform;
use crate::layout::{self, Trainable};
use crate::optim::scheduled;
use crate::params::init::Init;
use crate::probe::{Point, Stage, progress};
use crate::ranks::Ranks;
use crate::step::done::StepDone;
use crate::train::batches::{Fetched, prefetch, read_all};
use crate::train::group;
use crate::train::instruments::Instruments;
use crate::train::options::{CheckpointPlan, Resume, RunOptions};
use crate::train::position::{epoch_of, eval_interval, rows_before};
use crate::train::stats::{StepStats, StepTiming};
use crate::train::summary::{AcrossRanks, Evaluation, RunRecord, RunSummary};

/// Fault injection for the tests: with `WIDEBAG_FAULT_DEVICE_OOM_AT_STEP=N`, step N panics as
/// burn does when wgpu reports that the device is out of memory (a real refusal cannot be caused
/// on demand: lavapipe computes in overcommitted system memory).
fn fault_device_refusal() {
    let at = std::env::var("WIDEBAG_FAULT_DEVICE_OOM_AT_STEP").ok();
    if at.and_then(|v| v.parse::<u64>().ok()) == Some(progress::now().0) {
        panic!("wgpu error: Out of Memory (simulated by WIDEBAG_FAULT_DEVICE_OOM_AT_STEP)");
    }
}

/// A run between its set-up and its summary.
pub(crate) struct Run<'c> {
    pub config: Config,
    pub model: Box<dyn Trainable>,
    pub comm: &'c dyn Collective,
    pub ranks: Ranks,
    pub instruments: Instruments,
    /// Steps taken before this run (a resumed run's checkpoint), and the run's last step.
    pub start: u64,
    pub total: u64,
    /// The last step taken (`total`, unless an evaluation reached the stop target before).
    pub taken: u64,
    pub resumed_from: Option<u64>,
    pub data: Option<DataSummary>,
    pub bands: Vec<BandReport>,
    pub eval: EvalSet,
    pub losses: Vec<f32>,
    pub evaluations: Vec<Evaluation>,
    /// Training rows drawn so far (global, across ranks).
    pub rows_seen: usize,
    pub setup_start: Instant,
    pub setup_s: f64,
    batches: Receiver<Fetched>,
    transform: InputTransform,
    eval_spec: EvalSpec,
    eval_every: u64,
    rates: OptimConfig,
    checkpoints: Option<CheckpointPlan>,
}

impl<'c> Run<'c> {
    /// The run `prepared` describes, on `compute`, as rank `comm.rank()` of `comm.size()`, set up
    /// as `options` ask: the model built (or read from the checkpoint it resumes), its
    /// batches streaming from the position it starts at.
    pub fn set_up(
        prepared: Prepared,
        compute: &Compute,
        comm: &'c dyn Collective,
        options: &RunOptions,
    ) -> Result<Self, ModelError> {
        let setup_start = Instant::now();
        let Prepared {
            config,
            batches: stream,
            data,
            eval,
            eval_seen,
            bands,
            model_bands,
            ..
        } = prepared;
        let ranks = Ranks::of(comm);
        let alone = ranks.size == 1;
        if let Some((key, message)) =
            group::refused_across_ranks(&config, ranks.size).filter(|_| !alone)
        {
            return Err(ModelError::Unsupported { key, message });
        }
        let transform = InputTransform::of(&config);
        let (total, batch_size) = (config.train.steps as u64, config.train.batch_size);
        // Measured, every batch is read first: no producer thread allocates during the readings;
        // the baseline is the heap once the backend's own lasting state (its threads' scratch)
        // exists, as a GPU's context does before its pools. The stream itself is read, not a
        // clone: it is gone before the baseline (a synthetic stream's sampling tables are 2 MB at
        // width 240,000; freed after it, every reading would fall short by them).
        let rows_at_start = rows_before(&stream.position(), &data);
        let (read_ahead, mut stream) = match options.watch.measure {
            true if options.resume.is_some() => {
                return Err(ModelError::Execution(
                    "a measured run does not resume".into(),
                ));
            }
            true => {
                let part = (ranks.rank, ranks.size);
                let all = read_all(stream, batch_size, 1..=total, transform, part);
                crate::probe::prime_backend(&compute.device);
                (Some(all), None)
            }
            false => (None, Some(stream)),
        };
        let mut instruments = Instruments::new(&options.watch, compute, alone, config.train.steps)?;
        if !alone {
            group::agree_on_config(&config, comm)?;
        }
        let mut model = layout::build(&config, &model_bands, compute, ranks, Init::Seeded)?;
        if let Some(sparse) = model.sparse().filter(|_| !alone) {
            // Refused before the first step (`auto` may have opened a GPU).
            sparse.check_rank_kernels(&compute.adapter)?;
        }
        if let Some(path) = &options.save_init {
            if !alone || options.resume.is_some() {
                return Err(ModelError::Execution(
                    "the initial weights are saved by a fresh run of one process".into(),
                ));
            }
            checkpoint::save_weights(model.as_mut(), path)?;
        }
        instruments.probe.sample(Point::Setup);
        let setup_s = setup_start.elapsed().as_secs_f64();
        let eval = EvalSet {
            batches: eval.into_iter().map(|b| transform.eval(b)).collect(),
            seen: eval_seen,
        };
        let resume_dir = resume_dir(options, ranks, comm)?;
        let mut start = 0;
        if let (Some(dir), Some(stream)) = (&resume_dir, stream.as_mut()) {
            let m = checkpoint::load(model.as_mut(), dir, &config, checkpoint::Match::SameRun)?;
            stream.seek(m.position)?;
            start = m.step;
        }
        let rows_seen = stream
            .as_ref()
            .map_or(rows_at_start, |s| rows_before(&s.position(), &data));
        let batches = match (read_ahead, stream) {
            (Some(rx), _) => rx,
            (None, Some(stream)) => prefetch(
                stream,
                batch_size,
                start + 1..=total,
                transform,
                (ranks.rank, ranks.size),
            ),
            (None, None) => return Err(ModelError::Execution("no batches to train on".into())),
        };
        instruments.start_training(start as usize, rows_seen);
        Ok(Self {
            eval_spec: eval_spec(&config),
            eval_every: eval_interval(&config),
            rates: scheduled(&config),
            checkpoints: options.checkpoints.clone(),
            resumed_from: resume_dir.map(|_| start),
            losses: Vec::with_capacity(config.train.steps),
            evaluations: Vec::new(),
            config,
            model,
            comm,
            ranks,
            instruments,
            start,
            total,
            taken: start,
            data,
            bands,
            eval,
            rows_seen,
            setup_start,
            setup_s,
            batches,
            transform,
        })
    }

    /// Step `step`'s batch (1-based): this rank's rows of the global batch, how many rows the
    /// global batch has, and where the data stands after it. Across ranks, dropout keys each
    /// entry by its place in the global batch: after the lower ranks' (one process drops whole
    /// batches as they are assembled).
    pub fn next_batch(&mut self, step: u64) -> Result<(CsrBatch, usize, DataPosition), ModelError> {
        progress::start_step(step);
        self.instruments.probe.profile.start();
        let (batch, global_rows, position) = self
            .batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        let batch = match self.ranks.size > 1 && self.transform.drops() {
            true => {
                let nnz = self
                    .comm
                    .all_to_all_u32(vec![vec![batch.nnz() as u32]; self.ranks.size])?;
                let before: usize = nnz[..self.ranks.rank].iter().map(|v| v[0] as usize).sum();
                self.transform.dropout_part(batch, step, before)
            }
            false => batch,
        };
        self.instruments.probe.lap(Stage::Data);
        self.rows_seen += global_rows;
        Ok((batch, global_rows, position))
    }

    /// Step `step` (1-based) on `batch`, this rank's rows of a global batch of `global_rows`:
    /// the model's step, an error unless its loss is finite, and the loop's figures of it (its
    /// time, the peak so far, the learning rate, the epoch).
    pub fn step(
        &mut self,
        step: u64,
        batch: &CsrBatch,
        global_rows: usize,
    ) -> Result<(StepDone, StepTiming), ModelError> {
        self.instruments
            .before_step((step - 1 - self.start) as usize);
        let step_start = Instant::now();
        fault_device_refusal();
        if self.ranks.size > 1 {
            group::fault_rank_exit(self.ranks.rank, step);
        }
        let probe = &mut self.instruments.probe;
        let done = self
            .model
            .train_step_on_rank(batch, global_rows, self.comm, probe)?;
        probe.profile.end_step();
        let timing = StepTiming {
            step_s: step_start.elapsed().as_secs_f64(),
            peak_in_use_bytes: probe.available().then_some(probe.peak_in_use_bytes),
            lr: self.rates.lr_at(done.step),
            epoch: epoch_of(&self.data, self.rows_seen),
        };
        done.check_finite()?;
        self.taken = step;
        self.losses.push(done.loss);
        Ok((done, timing))
    }

    /// The held-out metrics after step `done` (of `epoch`) when an evaluation is due there
    /// (every `train.eval_every`, the last step's aside: the summary's), recorded; across ranks
    /// rank 0 gets them, every rank takes part.
    pub fn evaluate_if_due(
        &mut self,
        done: u64,
        epoch: Option<u64>,
        compute: &Compute,
    ) -> Result<Option<widebag_eval::EvalReport>, ModelError> {
        if !self.eval_due(done) {
            return Ok(None);
        }
        Ok(self.evaluate(done, epoch, compute)?.map(|e| e.report))
    }

    /// Whether an evaluation is due after step `done` (the last step's aside: the summary's).
    fn eval_due(&self, done: u64) -> bool {
        let every = self.eval_every;
        every > 0
            && done.is_multiple_of(every)
            && done < self.total
            && !self.eval.batches.is_empty()
    }

    /// Whether the evaluation after step `done` (rank 0's `report`) reaches the config's stop
    /// target; across ranks, rank 0's answer, agreed by all.
    pub fn target_reached(
        &self,
        done: u64,
        report: Option<&widebag_eval::EvalReport>,
    ) -> Result<bool, ModelError> {
        let train = &self.config.train;
        let Some(metric) = train.stop_at_metric.as_deref() else {
            return Ok(false);
        };
        if !self.eval_due(done) {
            return Ok(false);
        }
        let value = report.and_then(|r| r.get(metric));
        let mut reached = [f32::from(u8::from(
            value.is_some_and(|v| train.reaches_stop(metric, v)),
        ))];
        if self.ranks.size > 1 {
            self.comm.all_reduce_sum(&mut reached)?;
        }
        Ok(reached[0] > 0.0)
    }

    /// The held-out metrics now, after step `step` (of `epoch`), recorded with the run's time to
    /// them.
    pub fn evaluate(
        &mut self,
        step: u64,
        epoch: Option<u64>,
        compute: &Compute,
    ) -> Result<Option<Evaluation>, ModelError> {
        let began = Instant::now();
        let report = evaluate_part(
            self.model.as_mut(),
            &self.eval,
            &self.eval_spec,
            compute.backend,
            self.comm,
        )?;
        Ok(report.map(|report| {
            let e = Evaluation::new(step, epoch, report, self.setup_start, began);
            self.evaluations.push(e.clone());
            e
        }))
    }

    /// Where the checkpoint after step `done` goes, when one is due there.
    pub fn checkpoint_due(&self, done: u64) -> Option<std::path::PathBuf> {
        let plan = self
            .checkpoints
            .as_ref()
            .filter(|p| p.due(done, self.total))?;
        Some(group::rank_dir(&plan.root, self.ranks))
    }

    /// Where this rank's checkpoints go, when the run writes them (a stop's checkpoint, due or
    /// not).
    pub fn checkpoint_dir(&self) -> Option<std::path::PathBuf> {
        let plan = self.checkpoints.as_ref()?;
        Some(group::rank_dir(&plan.root, self.ranks))
    }

    /// Writes the checkpoint after `stats`' step, the data at `position`, under `dir`.
    pub fn save(
        &mut self,
        dir: &std::path::Path,
        stats: &StepStats,
        position: DataPosition,
    ) -> Result<(), ModelError> {
        let point = RunPoint {
            step: stats.step,
            epoch: stats.epoch,
            position,
        };
        checkpoint::save(self.model.as_mut(), point, &self.config, dir).map(|_| ())
    }
}

impl Run<'_> {
    /// The finished run's summary: its timings and losses, the training steps' sizes and
    /// traffic, then (the deferred updates applied) the held-out loss and the last evaluation.
    pub fn finish(mut self, compute: &Compute) -> Result<RunSummary, ModelError> {
        let train_s = self.instruments.train_s();
        let target_reached_at = (self.taken < self.total).then_some(self.taken);
        if target_reached_at.is_some() {
            // The summary is of the steps taken.
            self.config.train.steps = self.taken as usize;
        }
        let steps = self.config.train.steps;
        let examples_per_s = self
            .instruments
            .examples_per_s(steps, self.rows_seen, train_s);
        if self.losses.is_empty() {
            return Err(ModelError::Execution(format!(
                "nothing to train: the checkpoint is at step {} of {}",
                self.start, self.total
            )));
        }
        // The training steps' sizes and traffic; then the updates still deferred land before
        // the weights are read.
        let facts = self.model.facts();
        self.model.flush_deferred()?;
        let eval_loss = self.model.held_out_loss(&self.eval.batches, self.comm)?;
        let evaluated = self
            .evaluations
            .last()
            .is_some_and(|e| e.step == self.taken);
        if !self.eval.batches.is_empty() && !evaluated {
            let epoch = epoch_of(&self.data, self.rows_seen);
            self.evaluate(self.taken, epoch, compute)?;
        }
        let measured = match self.instruments.measures() {
            true => self.instruments.probe.point_peak_in_use_bytes.clone(),
            false => Default::default(),
        };
        let n_losses = self.losses.len();
        let across = (self.model.sparse())
            .filter(|_| self.ranks.size > 1)
            .map(|m| AcrossRanks::of(m, n_losses, measured));
        Ok(RunSummary::new(RunRecord {
            config: &self.config,
            compute,
            facts,
            probe: &self.instruments.probe,
            examples_per_s,
            setup_s: self.setup_s,
            train_s,
            losses: self.losses,
            eval_rows: self.eval.batches.iter().map(|b| b.n_rows()).sum(),
            evaluations: self.evaluations,
            eval_loss,
            data: self.data,
            bands: self.bands,
            rows_seen: self.rows_seen,
            resumed_from: self.resumed_from,
            target_reached_at,
            across,
        }))
    }
}

/// The checkpoint directory a run resumes from: the one named, or across ranks the newest step
/// every rank holds.
fn resume_dir(
    options: &RunOptions,
    ranks: Ranks,
    comm: &dyn Collective,
) -> Result<Option<std::path::PathBuf>, ModelError> {
    Ok(match &options.resume {
        None => None,
        Some(Resume::Checkpoint(dir)) => Some(dir.clone()),
        Some(Resume::NewestCommon) => {
            let root = options.checkpoints.as_ref().map(|p| p.root.clone());
            let root = root.ok_or_else(|| ModelError::Checkpoint("resume without a run".into()))?;
            Some(group::resume_point(&root, ranks, comm)?)
        }
    })
}
