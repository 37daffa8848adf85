//! The training loop: batches (synthetic or from a data file) assembled on a background thread,
//! one training step of the configured layout ([`TrainLayout`]) per batch, and a summary with
//! throughput and measured memory.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Instant;

use serde::Serialize;
use widebag_csr::CsrBatch;
use widebag_data::{BatchSource, DataError};
use widebag_prepare::{DataSummary, Prepared};

use widebag_config::Layout;

use crate::layout::{self, TrainLayout};
use crate::memory::{MemoryMeter, MeterMode, Phase, Point, Stage, StepProfile};
use crate::model::StepStats;
use crate::profile::ProfileReport;
use crate::{BackendKind, Compute, ModelError};

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
}

/// The process's peak resident set size (`VmHWM` in `/proc/self/status`), where Linux has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Streams `steps` batches from a background thread (two in flight).
fn prefetch(
    mut stream: BatchSource,
    batch_size: usize,
    steps: usize,
) -> mpsc::Receiver<Result<CsrBatch, DataError>> {
    let (tx, rx) = mpsc::sync_channel(2);
    std::thread::spawn(move || {
        for _ in 0..steps {
            if tx.send(stream.next_batch(batch_size)).is_err() {
                break;
            }
        }
    });
    rx
}

/// How a run is watched.
#[derive(Clone, Copy, Debug, Default)]
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

    let batches = prefetch(stream, config.train.batch_size, config.train.steps);
    let train_start = Instant::now();
    let mut warm_start = train_start;
    let mut losses = Vec::with_capacity(config.train.steps);
    let (mut rows_seen, mut first_rows) = (0usize, 0usize);
    for step in 0..config.train.steps {
        meter.profile.start();
        let batch = batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        meter.lap(Stage::Data);
        rows_seen += batch.n_rows();
        if step > 0 && step == options.detailed_steps {
            meter.mode = options.meter;
        }
        if step > 0 && step == options.warmup_steps {
            meter.reset();
        }
        let step_start = Instant::now();
        let mut stats = model.train_step(&batch, &mut meter)?;
        meter.profile.end_step();
        stats.step_s = step_start.elapsed().as_secs_f64();
        stats.peak_in_use_bytes = meter.available().then_some(meter.peak_in_use_bytes);
        if !stats.loss.is_finite() {
            return Err(ModelError::Execution(format!(
                "loss became {} at step {}",
                stats.loss, stats.step
            )));
        }
        losses.push(stats.loss);
        on_step(&stats);
        if step == timed_after {
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
        rows_seen as f64 / train_s
    };
    let tail = &losses[losses.len().saturating_sub(10)..];
    let has_counters = meter.available();
    // The training steps' sizes and traffic; then the updates still deferred land before the
    // weights are read.
    let facts = model.facts();
    model.flush_deferred()?;
    let steps = config.train.steps.max(1) as f64;
    let eval_loss = model.eval_loss(&eval)?;
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
        eval_rows: eval.iter().map(|b| b.n_rows()).sum(),
        table_parameters: facts.table_parameters,
        output_parameters: facts.output_parameters,
        host_bytes: facts.host_bytes,
        host_to_device_bytes_per_step: facts.to_device_bytes as f64 / steps,
        device_to_host_bytes_per_step: facts.to_host_bytes as f64 / steps,
        bands,
        peak_rss_bytes: peak_rss_bytes(),
        // Batches never straddle epochs, so the epochs started follow from the rows seen.
        epochs: data
            .as_ref()
            .map(|d| (rows_seen as u64).div_ceil(d.rows.max(1) as u64)),
        data,
        profile: meter.profile.report(),
    })
}
