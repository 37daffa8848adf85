//! The training loop: batches (synthetic or from a data file) assembled on a background thread,
//! one training step of the configured layout ([`TrainLayout`]) per batch, and a summary with
//! throughput and measured memory.

pub(crate) mod batches;
pub mod progress;
pub mod ranks;

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use widebag_data::DataPosition;
use widebag_prepare::{DataSummary, Prepared};

use widebag_config::Layout;

use crate::checkpoint::{self, RunPoint};
use crate::eval::{EvalSet, eval_spec, evaluate};
use crate::layout::{self, TrainLayout};
use crate::model::StepStats;
use crate::step::memory::{MemoryMeter, MeterMode, Phase, Point, Stage, StepProfile};
use crate::step::profile::ProfileReport;
use crate::train::batches::{InputTransform, prefetch};
use crate::{BackendKind, Compute, ModelError};
use widebag_eval::EvalReport;

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub backend: BackendKind,
    pub adapter: String,
    pub width: usize,
    pub n_classes: usize,
    pub dim: usize,
    pub hidden: Vec<usize>,
    pub batch_size: usize,
    pub steps: usize,
    pub layout: Layout,
    pub table_optimizer: widebag_config::TableOptim,
    pub dense_optimizer: widebag_config::DenseOptim,
    /// Examples per second over the steps after the first (the first compiles kernels), or
    /// after the detailed steps (`RunOptions::detailed_steps`).
    pub examples_per_s: f64,
    pub first_loss: f32,
    pub final_loss: f32,
    /// Mean loss over the last `min(10, steps)` steps.
    pub final_loss_mean10: f32,
    pub table_bytes: u64,
    pub parameter_bytes: u64,
    pub table_shards: usize,
    pub class_chunks: usize,
    pub max_buffer_bytes: u64,
    /// Peak bytes in live allocations (with alignment padding), read at the ledger's points of
    /// every step (`None` on backends without allocator counters, e.g. flex).
    pub peak_in_use_bytes: Option<u64>,
    /// Peak bytes reserved by the allocator at the same samples.
    pub peak_reserved_bytes: Option<u64>,
    /// Sum over the dynamic pools of their page high-water marks.
    pub pool_high_water_bytes: Option<u64>,
    pub phase_peak_in_use_bytes: BTreeMap<Phase, u64>,
    pub point_peak_in_use_bytes: BTreeMap<Point, u64>,
    pub setup_s: f64,
    pub train_s: f64,
    /// `model.output`.
    pub output: widebag_config::OutputKind,
    /// Mean loss over the held-out rows after training (`train.eval_rows`).
    pub eval_loss: Option<f64>,
    pub eval_rows: usize,
    /// Values of the input side (band tables and projections) and of the output layer.
    pub table_parameters: u64,
    pub output_parameters: u64,
    /// Bytes of band tables and their optimizer state kept in host memory.
    pub host_bytes: u64,
    /// Mean bytes host bands sent to the device and took back per step.
    pub host_to_device_bytes_per_step: f64,
    pub device_to_host_bytes_per_step: f64,
    /// The head/tail bands of each split side.
    pub bands: Vec<widebag_prepare::BandReport>,
    /// The process's peak resident memory (Linux `VmHWM`, data included): the measured peak on
    /// backends without allocator counters (flex).
    pub peak_rss_bytes: Option<u64>,
    /// The data file trained on (absent for synthetic data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<DataSummary>,
    /// Passes over the data file's rows started (absent for synthetic data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
    /// Where the timed steps' time went, by stage of the step.
    pub profile: ProfileReport,
    /// The last evaluation's metrics (held-out rows: `train.eval_rows` or `data.test_path`).
    pub eval: Option<EvalReport>,
    /// Every evaluation of the run (`train.eval_every`, and the end).
    pub evaluations: Vec<Evaluation>,
    /// The checkpoint step this run continued from (`--resume`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<u64>,
}

/// Fault injection for the tests: with `WIDEBAG_FAULT_DEVICE_OOM_AT_STEP=N`, step N panics as
/// burn does when wgpu reports that the device is out of memory (a real refusal cannot be caused
/// on demand: lavapipe computes in overcommitted system memory).
fn fault_device_refusal() {
    let at = std::env::var("WIDEBAG_FAULT_DEVICE_OOM_AT_STEP").ok();
    if at.and_then(|v| v.parse::<u64>().ok()) == Some(progress::now().0) {
        panic!("wgpu error: Out of Memory (simulated by WIDEBAG_FAULT_DEVICE_OOM_AT_STEP)");
    }
}

/// The process's peak resident set size (`VmHWM` in `/proc/self/status`), where Linux has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Where and how often a run writes checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointPlan {
    /// The run directory's `checkpoints/`.
    pub root: std::path::PathBuf,
    /// Every this many steps (0: only at the end); always after the last step.
    pub every: u64,
}

impl CheckpointPlan {
    /// Whether a checkpoint follows step `done` of `total`.
    pub(crate) fn due(&self, done: u64, total: u64) -> bool {
        (self.every > 0 && done.is_multiple_of(self.every)) || done == total
    }
}

/// How a run is watched.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub meter: MeterMode,
    /// Steps whose memory readings are discarded (the first steps compile kernels and create
    /// lazily allocated state).
    pub warmup_steps: usize,
    /// The first steps read the allocator at every point (`MeterMode::Detailed`), the rest as
    /// `meter` says; examples/s is then timed after them. 0: `meter` throughout.
    pub detailed_steps: usize,
    /// Whether each stage boundary of the profile waits for the device (exact stage times on
    /// wgpu, at some cost in throughput; flex is exact without it).
    pub profile_sync: bool,
    /// Checkpoints to write.
    pub checkpoints: Option<CheckpointPlan>,
    /// A checkpoint directory to continue from.
    pub resume: Option<std::path::PathBuf>,
}

/// Trains the configured model on the prepared batches. `on_step` sees every step's stats.
pub fn run_training(
    prepared: Prepared,
    compute: &Compute,
    on_step: impl FnMut(&StepStats),
) -> Result<RunSummary, ModelError> {
    run_training_with(prepared, compute, RunOptions::default(), on_step)
}

/// [`run_training`] with a chosen meter mode and warm-up.
pub fn run_training_with(
    prepared: Prepared,
    compute: &Compute,
    options: RunOptions,
    mut on_step: impl FnMut(&StepStats),
) -> Result<RunSummary, ModelError> {
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
    let config = &config;
    let first_mode = if options.detailed_steps > 0 {
        MeterMode::Detailed
    } else {
        options.meter
    };
    let mut meter = MemoryMeter::with_mode(&compute.device, first_mode);
    meter.profile = StepProfile::new(
        &compute.device,
        options.profile_sync && compute.backend == BackendKind::Wgpu,
    );
    // Examples/s is timed from the end of this step (the first compiles kernels; detailed
    // steps drain the fusion queue more often).
    let timed_after = if config.train.steps > options.detailed_steps.max(1) {
        options.detailed_steps.max(1) - 1
    } else {
        0
    };
    let mut model: Box<dyn TrainLayout> = layout::build(config, &model_bands, compute)?;
    meter.sample(Point::Setup);
    let setup_s = setup_start.elapsed().as_secs_f64();
    let transform = InputTransform::of(config);
    let eval = EvalSet {
        batches: eval.into_iter().map(|b| transform.eval(b)).collect(),
        seen: eval_seen,
    };
    let eval_spec = eval_spec(config);
    let total = config.train.steps as u64;
    let rates = crate::model::scheduled(config);
    let every = eval_interval(config);
    let mut evaluations = Vec::new();

    let mut stream = stream;
    let mut start = 0u64;
    let mut resumed_from = None;
    if let Some(dir) = &options.resume {
        let m = checkpoint::load(model.as_mut(), dir, config, checkpoint::Match::SameRun)?;
        stream.seek(m.position)?;
        start = m.step;
        resumed_from = Some(m.step);
    }
    let mut rows_seen = rows_before(&stream.position(), &data);
    let batches = prefetch(
        stream,
        config.train.batch_size,
        start + 1..=total,
        transform,
    );
    let train_start = Instant::now();
    let mut warm_start = train_start;
    let mut losses = Vec::with_capacity(config.train.steps);
    let mut first_rows = rows_seen;
    let run_rows_start = rows_seen;
    let timed_after = timed_after + start as usize;
    for step in start as usize..config.train.steps {
        progress::start_step(step as u64 + 1);
        meter.profile.start();
        let (batch, position) = batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        meter.lap(Stage::Data);
        rows_seen += batch.n_rows();
        let step = step - start as usize;
        if step > 0 && step == options.detailed_steps {
            meter.mode = options.meter;
        }
        if step > 0 && step == options.warmup_steps {
            meter.reset();
        }
        let step_start = Instant::now();
        fault_device_refusal();
        let mut stats = model.train_step(&batch, &mut meter)?;
        meter.profile.end_step();
        stats.step_s = step_start.elapsed().as_secs_f64();
        stats.peak_in_use_bytes = meter.available().then_some(meter.peak_in_use_bytes);
        stats.lr = rates.lr_at(stats.step);
        stats.epoch = epoch_of(&data, rows_seen);
        stats.check_finite()?;
        losses.push(stats.loss);
        let done = stats.step;
        if every > 0 && done % every == 0 && done < total && !eval.batches.is_empty() {
            let report = evaluate(model.as_mut(), &eval, &eval_spec, compute.backend)?;
            evaluations.push(Evaluation::new(done, stats.epoch, report.clone()));
            stats.eval = Some(report);
        }
        let checkpoint = options.checkpoints.as_ref().filter(|p| p.due(done, total));
        // The step's metrics reach the log before the checkpoint that covers them exists.
        stats.checkpoint_due = checkpoint.is_some();
        on_step(&stats);
        if let Some(plan) = checkpoint {
            let point = RunPoint {
                step: done,
                epoch: stats.epoch,
                position,
            };
            checkpoint::save(model.as_mut(), point, config, &plan.root)?;
        }
        if step + start as usize == timed_after {
            warm_start = Instant::now();
            first_rows = rows_seen;
            meter.profile.reset();
        }
    }
    let train_s = train_start.elapsed().as_secs_f64();
    let warm_steps = config.train.steps.saturating_sub(timed_after + 1);
    let examples_per_s = if warm_steps > 0 {
        (rows_seen - first_rows) as f64 / warm_start.elapsed().as_secs_f64()
    } else {
        (rows_seen - run_rows_start) as f64 / train_s
    };
    if losses.is_empty() {
        return Err(ModelError::Execution(format!(
            "nothing to train: the checkpoint is at step {start} of {total}"
        )));
    }
    let tail = &losses[losses.len().saturating_sub(10)..];
    let has_counters = meter.available();
    // The training steps' sizes and traffic; then the updates still deferred land before the
    // weights are read.
    let facts = model.facts();
    model.flush_deferred()?;
    let steps = config.train.steps.max(1) as f64;
    let eval_loss = model.eval_loss(&eval.batches)?;
    if !eval.batches.is_empty() {
        let report = evaluate(model.as_mut(), &eval, &eval_spec, compute.backend)?;
        let epoch = epoch_of(&data, rows_seen);
        evaluations.push(Evaluation::new(total, epoch, report));
    }
    Ok(RunSummary {
        backend: compute.backend,
        adapter: compute.adapter.clone(),
        width: config.data.width,
        n_classes: config.data.n_classes(),
        dim: config.model.dim,
        hidden: config.model.hidden.clone(),
        batch_size: config.train.batch_size,
        steps: config.train.steps,
        layout: config.model.layout,
        table_optimizer: config.optim.table,
        dense_optimizer: config.optim.dense,
        examples_per_s,
        first_loss: losses[0],
        final_loss: *losses.last().expect("steps >= 1"),
        final_loss_mean10: tail.iter().sum::<f32>() / tail.len() as f32,
        table_bytes: facts.table_bytes,
        parameter_bytes: facts.parameter_bytes,
        table_shards: facts.table_shards,
        class_chunks: facts.class_chunks,
        max_buffer_bytes: facts.max_buffer_bytes,
        peak_in_use_bytes: has_counters.then_some(meter.peak_in_use_bytes),
        peak_reserved_bytes: has_counters.then_some(meter.peak_reserved_bytes),
        pool_high_water_bytes: meter.pool_high_water_bytes(),
        phase_peak_in_use_bytes: meter.phase_peak_in_use_bytes.clone(),
        point_peak_in_use_bytes: meter.point_peak_in_use_bytes.clone(),
        setup_s,
        train_s,
        output: config.model.output,
        eval_loss,
        eval_rows: eval.batches.iter().map(|b| b.n_rows()).sum(),
        table_parameters: facts.table_parameters,
        output_parameters: facts.output_parameters,
        host_bytes: facts.host_bytes,
        host_to_device_bytes_per_step: facts.to_device_bytes as f64 / steps,
        device_to_host_bytes_per_step: facts.to_host_bytes as f64 / steps,
        bands,
        peak_rss_bytes: peak_rss_bytes(),
        // Batches never straddle epochs, so the epochs started follow from the rows seen.
        epochs: epoch_of(&data, rows_seen),
        data,
        profile: meter.profile.report(),
        eval: evaluations.last().map(|e| e.report.clone()),
        resumed_from,
        evaluations,
    })
}

/// One evaluation of a run: after which step (and epoch), and its metrics.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluation {
    pub step: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    #[serde(flatten)]
    pub report: EvalReport,
    /// The report in one line.
    pub line: String,
}

impl Evaluation {
    pub fn new(step: u64, epoch: Option<u64>, report: EvalReport) -> Self {
        Self {
            step,
            epoch,
            line: report.line(),
            report,
        }
    }
}

/// Training rows drawn before `position` (epochs before it times the data's rows, plus its
/// place in the current one; the synthetic stream's row index).
fn rows_before(position: &DataPosition, data: &Option<DataSummary>) -> usize {
    match position {
        DataPosition::Synthetic { next_row } => *next_row as usize,
        DataPosition::Rows { epoch, next } => {
            let rows = data.as_ref().map_or(0, |d| d.train_rows);
            *epoch as usize * rows + next
        }
    }
}

/// Epochs started after `rows_seen` training rows (batches never straddle epochs).
fn epoch_of(data: &Option<DataSummary>, rows_seen: usize) -> Option<u64> {
    data.as_ref()
        .map(|d| (rows_seen as u64).div_ceil(d.train_rows.max(1) as u64))
}

/// Steps between evaluations: `train.eval_every` steps, or epochs when `train.epochs` is set
/// (0: at the end only).
pub(crate) fn eval_interval(config: &widebag_config::Config) -> u64 {
    let every = config.train.eval_every as u64;
    match config.train.epochs {
        Some(e) if e > 0 => every * (config.train.steps as u64 / e as u64),
        _ => every,
    }
}
