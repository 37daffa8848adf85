//! The training loop, for one process or for each rank of many (one process is the one-rank
//! case: `widebag_collective::local::Local`): batches (synthetic or from a data file)
//! assembled on a background thread (whole, or this rank's rows of each global batch), one
//! training step of the configured layout ([`TrainLayout`]) per batch, evaluations and
//! checkpoints on schedule, and a summary with throughput and measured memory.

pub(crate) mod batches;
pub mod group;
pub mod progress;
pub mod summary;

use std::time::Instant;

use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_data::DataPosition;
use widebag_prepare::{DataSummary, Prepared};

use crate::checkpoint::{self, RunPoint};
use crate::eval::{EvalSet, eval_spec, evaluate_part};
use crate::layout::{self, TrainLayout};
use crate::model::{Ranks, StepStats};
use crate::step::memory::{MemoryMeter, MeterMode, Point, Stage, StepProfile};
use crate::train::batches::{InputTransform, prefetch};
use crate::{BackendKind, Compute, ModelError};

pub use summary::{AcrossRanks, Evaluation, RunSummary};

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
    /// Checkpoints to write (across ranks, each rank under its own directory of the root:
    /// [`group::rank_dir`]).
    pub checkpoints: Option<CheckpointPlan>,
    /// Where to continue from.
    pub resume: Option<Resume>,
    /// Read this process's heap at every point of every step (the first steps' readings
    /// dropped as `warmup_steps` says), relative to the heap before the model was built, with
    /// every batch read first (`explain --measure` under `mpirun`: one process per rank). An
    /// error when the binary registered no heap counter.
    pub measure: bool,
    /// Write the initial weights (before the first step; a fresh run of one process) to this
    /// safetensors file, as a checkpoint names them: a peer can start from the same numbers.
    pub save_init: Option<std::path::PathBuf>,
    /// One process on a backend without allocator counters (flex, whose tensors live on the
    /// heap): read the heap's live bytes at the meter's points instead (relative to the heap
    /// before the model was built; the step's host buffers and the batch read ahead count with
    /// the tensors), so the summary's `peak_in_use_bytes` is measured there too.
    pub heap_meter: bool,
}

/// Where a run continues from.
#[derive(Clone, Debug)]
pub enum Resume {
    /// This checkpoint directory (one process).
    Checkpoint(std::path::PathBuf),
    /// The newest step every rank has a good checkpoint of under the checkpoints' root.
    NewestCommon,
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
    on_step: impl FnMut(&StepStats),
) -> Result<RunSummary, ModelError> {
    run_training_in(prepared, compute, &Local, options, on_step)
}

/// Trains rank `comm.rank()` of `comm.size()` on the prepared run: every rank reads only its
/// rows of each global batch (`BatchSource::next_batch_part`: disjoint, and together the single
/// process's batch), trains them with its block of every table and a replica of the dense
/// layers, evaluates every `train.eval_every` steps and at the end (rank 0 gets the metrics).
/// A single process is the one-rank case.
pub fn run_training_in(
    prepared: Prepared,
    compute: &Compute,
    comm: &dyn Collective,
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
    let ranks = Ranks {
        rank: comm.rank(),
        size: comm.size(),
    };
    let alone = ranks.size == 1;
    if let Some((key, message)) = group::refused_across_ranks(config, ranks.size).filter(|_| !alone)
    {
        return Err(ModelError::Unsupported { key, message });
    }
    let transform = InputTransform::of(config);
    let (total, b) = (config.train.steps as u64, config.train.batch_size);
    let mut stream = stream;
    // Measured, every batch is read first: no producer thread allocates during the readings;
    // the baseline is the heap once the backend's own lasting state (its threads' scratch)
    // exists, as a GPU's context does before its pools.
    let mut read_ahead = None;
    if options.measure {
        if options.resume.is_some() {
            return Err(ModelError::Execution(
                "a measured run does not resume".into(),
            ));
        }
        let part = (ranks.rank, ranks.size);
        let producer = prefetch(stream.clone(), b, 1..=total, transform, part);
        let (tx, rx) = std::sync::mpsc::channel();
        for fetched in producer.iter() {
            let _ = tx.send(fetched);
        }
        read_ahead = Some(rx);
        group::prime_backend(&compute.device);
    }
    let first_mode = if options.detailed_steps > 0 {
        MeterMode::Detailed
    } else {
        options.meter
    };
    let mut meter = match options.measure {
        true => MemoryMeter::on_heap(&compute.device, MeterMode::Detailed)
            .ok_or_else(|| ModelError::Execution("no heap counter to measure with".into()))?,
        false => {
            let meter = MemoryMeter::with_mode(&compute.device, first_mode);
            match options.heap_meter && alone && !meter.available() {
                // The baseline is taken once the backend's lasting state (its threads'
                // matrix-product scratch) exists, as a measured run takes it: that state is
                // the process's, as a GPU's context is, not the step's.
                true => {
                    group::prime_backend(&compute.device);
                    MemoryMeter::on_heap(&compute.device, first_mode).unwrap_or(meter)
                }
                false => meter,
            }
        }
    };
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
    if !alone {
        group::agree_on_config(config, comm)?;
    }
    let mut model: Box<dyn TrainLayout> = layout::build_rank(config, &model_bands, compute, ranks)?;
    if let Some(wide) = model.wide().filter(|_| !alone) {
        // Refused before the first step (`auto` may have opened a GPU).
        wide.check_rank_kernels(&compute.adapter)?;
    }
    if let Some(path) = &options.save_init {
        if !alone || options.resume.is_some() {
            return Err(ModelError::Execution(
                "the initial weights are saved by a fresh run of one process".into(),
            ));
        }
        checkpoint::save_weights(model.as_mut(), path)?;
    }
    meter.sample(Point::Setup);
    let setup_s = setup_start.elapsed().as_secs_f64();
    let eval = EvalSet {
        batches: eval.into_iter().map(|b| transform.eval(b)).collect(),
        seen: eval_seen,
    };
    let eval_spec = eval_spec(config);
    let rates = crate::model::scheduled(config);
    let every = eval_interval(config);
    let mut evaluations = Vec::new();

    let mut start = 0u64;
    let mut resumed_from = None;
    let resume_dir = match &options.resume {
        None => None,
        Some(Resume::Checkpoint(dir)) => Some(dir.clone()),
        Some(Resume::NewestCommon) => {
            let root = options.checkpoints.as_ref().map(|p| p.root.clone());
            let root = root.ok_or_else(|| ModelError::Checkpoint("resume without a run".into()))?;
            Some(group::resume_point(&root, ranks, comm)?)
        }
    };
    if let Some(dir) = &resume_dir {
        let m = checkpoint::load(model.as_mut(), dir, config, checkpoint::Match::SameRun)?;
        stream.seek(m.position)?;
        start = m.step;
        resumed_from = Some(m.step);
    }
    let mut rows_seen = rows_before(&stream.position(), &data);
    let batches = match read_ahead {
        Some(rx) => rx,
        None => prefetch(
            stream,
            b,
            start + 1..=total,
            transform,
            (ranks.rank, ranks.size),
        ),
    };
    let train_start = Instant::now();
    let mut warm_start = train_start;
    let mut losses = Vec::with_capacity(config.train.steps);
    let mut first_rows = rows_seen;
    let run_rows_start = rows_seen;
    let timed_after = timed_after + start as usize;
    for step in start as usize..config.train.steps {
        progress::start_step(step as u64 + 1);
        meter.profile.start();
        let (batch, global_rows, position) = batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        // Across ranks, dropout keys each entry by its place in the global batch: after the
        // lower ranks' (one process drops whole batches as they are assembled).
        let batch = match !alone && transform.drops() {
            true => {
                let nnz = comm.all_to_all_u32(vec![vec![batch.nnz() as u32]; ranks.size])?;
                let before: usize = nnz[..ranks.rank].iter().map(|v| v[0] as usize).sum();
                transform.dropout_part(batch, step as u64 + 1, before)
            }
            false => batch,
        };
        meter.lap(Stage::Data);
        rows_seen += global_rows;
        let step = step - start as usize;
        if step > 0 && step == options.detailed_steps {
            meter.mode = options.meter;
        }
        if step > 0 && step == options.warmup_steps {
            meter.reset();
        }
        let step_start = Instant::now();
        fault_device_refusal();
        if !alone {
            group::fault_rank_exit(ranks.rank, (step + start as usize) as u64 + 1);
        }
        let mut stats = model.train_step_part(&batch, global_rows, comm, &mut meter)?;
        meter.profile.end_step();
        stats.n_rows = global_rows;
        stats.step_s = step_start.elapsed().as_secs_f64();
        stats.peak_in_use_bytes = meter.available().then_some(meter.peak_in_use_bytes);
        stats.lr = rates.lr_at(stats.step);
        stats.epoch = epoch_of(&data, rows_seen);
        stats.check_finite()?;
        losses.push(stats.loss);
        let done = stats.step;
        // Held-out metrics (across ranks, rank 0 gets them; all take part).
        if every > 0 && done % every == 0 && done < total && !eval.batches.is_empty() {
            let began = Instant::now();
            let report = evaluate_part(model.as_mut(), &eval, &eval_spec, compute.backend, comm)?;
            if let Some(report) = report {
                let e = Evaluation::new(done, stats.epoch, report.clone(), setup_start, began);
                evaluations.push(e);
                stats.eval = Some(report);
            }
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
            let dir = group::rank_dir(&plan.root, ranks);
            checkpoint::save(model.as_mut(), point, config, &dir)?;
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
    let eval_loss = model.held_out_loss(&eval.batches, comm)?;
    if !eval.batches.is_empty() {
        let began = Instant::now();
        let report = evaluate_part(model.as_mut(), &eval, &eval_spec, compute.backend, comm)?;
        if let Some(report) = report {
            let epoch = epoch_of(&data, rows_seen);
            evaluations.push(Evaluation::new(total, epoch, report, setup_start, began));
        }
    }
    let across = match model.wide().filter(|_| !alone) {
        None => None,
        Some(m) => Some(AcrossRanks {
            ranks: ranks.size,
            rank: ranks.rank,
            owned_rows: m.bands.iter().map(|band| band.table.n_rows()).collect(),
            owned_classes: m.chunks.iter().map(|c| c.n).sum(),
            pooled_alternative_bytes_per_step: m.pooled_bytes as f64 / m.pooled_steps.max(1) as f64,
            sent_bytes_per_step: m
                .sent_bytes
                .iter()
                .map(|(k, v)| (k.to_string(), *v as f64 / losses.len() as f64))
                .collect(),
            measured_point_bytes: match options.measure {
                true => meter.point_peak_in_use_bytes.clone(),
                false => Default::default(),
            },
        }),
    };
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
        table_optimizer: config.table_optim(),
        tied_output: config.model.tie_output,
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
        point_anon_rss_bytes: meter.point_anon_rss_bytes.clone(),
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
        losses,
        across,
    })
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
