//! The training loop of one rank of a multi-process run (`mpirun -np N widebag train`, or
//! `--ranks N` as threads): every rank reads only its rows of each global batch
//! (`BatchSource::next_batch_part` with `widebag_collective::partition::local_rows`: disjoint,
//! and together the single process's batch), trains them with its block of every table and a
//! replica of the dense layers ([`WideModel::train_step_ranks`]), evaluates every
//! `train.eval_every` steps and at the end (the held-out loss and the task's metrics), and can
//! be measured on its own heap (`explain --measure` under `mpirun`).
//!
//! Checkpoints are per rank: rank R of N writes its own blocks and state under
//! `checkpoints/rank-R-of-N/step-…` (each atomic, as one process's). A run continues from the
//! newest step that every rank has a good checkpoint of, so a rank that died while writing
//! costs the others their newest one, never a usable one; at another N it is refused.

use std::time::Instant;

use serde::Serialize;
use widebag_collective::Collective;
use widebag_config::Layout;
use widebag_prepare::Prepared;

use crate::ModelError;
use crate::checkpoint::{self, Manifest, RunPoint};
use crate::device::Compute;
use crate::model::{Ranks, StepStats, WideModel};
use crate::step::memory::{MemoryMeter, MeterMode, Stage};
use crate::train::CheckpointPlan;
use crate::train::batches::{InputTransform, prefetch_part};

/// What one rank's run measured (rank 0 reports it).
#[derive(Clone, Debug, Serialize)]
pub struct RanksSummary {
    pub ranks: usize,
    pub rank: usize,
    pub steps: usize,
    /// The global batch (the sum of the ranks' local batches).
    pub batch_size: usize,
    pub table_optimizer: widebag_config::TableOptim,
    pub dense_optimizer: widebag_config::DenseOptim,
    /// The global batch's loss at every step.
    pub losses: Vec<f32>,
    pub first_loss: f32,
    pub final_loss: f32,
    pub final_loss_mean10: f32,
    /// Global examples per second after the first step.
    pub examples_per_s: f64,
    /// Mean loss over the held-out rows after training (`train.eval_rows` or `data.test_path`).
    pub eval_loss: Option<f64>,
    /// The task's metrics over the held-out rows after training (Recall@K and NDCG, accuracy or
    /// perplexity), as one process computes them; rank 0's summary only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<widebag_eval::EvalReport>,
    /// Rows of each band this rank owns.
    pub owned_rows: Vec<usize>,
    /// Classes of the full softmax this rank owns.
    pub owned_classes: usize,
    /// Mean bytes this rank sent to the other ranks per step, by collective.
    pub sent_bytes_per_step: std::collections::BTreeMap<String, f64>,
    /// Mean bytes per step the row exchange (ids, rows, row gradients) would have sent as
    /// pooled partial sums instead (TorchRec's pooled embeddings), on the same batches (the
    /// first `POOLED_SAMPLED_STEPS` steps).
    pub pooled_alternative_bytes_per_step: f64,
    /// This process's peak resident memory (all ranks' when they are threads of one process).
    pub peak_rss_bytes: Option<u64>,
    pub train_s: f64,
    /// The checkpoint step this run continued from (`--resume`); `losses` are the steps after it.
    pub resumed_from: Option<u64>,
    /// With [`RanksOptions::measure`]: the heap's peak bytes in use at each point read, over
    /// the steps after the first (the process's heap: all ranks' when they are threads).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub measured_point_bytes: std::collections::BTreeMap<crate::step::memory::Point, u64>,
}

/// How a run across ranks is kept.
#[derive(Clone, Debug, Default)]
pub struct RanksOptions {
    /// Checkpoints to write: each rank under its own directory of `root` ([`rank_dir`]).
    pub checkpoints: Option<CheckpointPlan>,
    /// Continue from the newest step every rank has a good checkpoint of under the
    /// checkpoints' root.
    pub resume: bool,
    /// Read this process's heap at every point of every step after the first (a warm-up),
    /// relative to the heap before the model was built (`explain --measure` under `mpirun`:
    /// one process per rank). An error when the binary registered no heap counter.
    pub measure: bool,
}

/// Rank `rank` of `size`'s checkpoint directory under a run's `checkpoints/`.
pub fn rank_dir(root: &std::path::Path, ranks: Ranks) -> std::path::PathBuf {
    root.join(format!("rank-{}-of-{}", ranks.rank, ranks.size))
}

/// The checkpoint every rank continues from: the newest step each rank holds a good checkpoint
/// of (every rank calls it and reaches the same answer). An error naming the rank counts the
/// checkpoints were written by when they are another N's.
fn resume_point(
    root: &std::path::Path,
    ranks: Ranks,
    comm: &dyn Collective,
) -> Result<std::path::PathBuf, ModelError> {
    let mine = rank_dir(root, ranks);
    let good: Vec<u32> = checkpoint::list(&mine)
        .into_iter()
        .filter(|(_, dir)| Manifest::read_verified(dir).is_ok())
        .map(|(step, _)| step as u32)
        .collect();
    let all = comm.all_to_all_u32(vec![good.clone(); ranks.size])?;
    let common = good
        .iter()
        .rev()
        .find(|s| all.iter().all(|l| l.contains(s)));
    match common {
        Some(&step) => Ok(mine.join(checkpoint::step_dir_name(step as u64))),
        None => {
            let mut written: Vec<String> = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("rank-"))
                .collect();
            written.sort();
            Err(ModelError::Checkpoint(format!(
                "{}: no step that all {} ranks have a good checkpoint of (found: {}); a run \
                 continues at the number of ranks that wrote it",
                root.display(),
                ranks.size,
                match written.is_empty() {
                    true => "nothing".to_string(),
                    false => written.join(", "),
                }
            )))
        }
    }
}

/// Why a configuration cannot train across ranks yet, naming the key; `None` when it can.
pub fn refused_across_ranks(config: &widebag_config::Config) -> Option<(&'static str, String)> {
    if config.model.layout != Layout::Sparse {
        return Some((
            "model.layout",
            "training across ranks needs the sparse layout".into(),
        ));
    }
    if config.train.cpu_kernels != widebag_config::CpuKernels::Host
        || config.train.device == widebag_config::DeviceChoice::Wgpu
    {
        return Some((
            "train.device",
            "training across ranks runs on the CPU backend with its host kernels for now \
             (--device cpu)"
                .into(),
        ));
    }
    None
}

/// Trains rank `comm.rank()` of `comm.size()` on the prepared run.
pub fn run_training_ranks(
    prepared: Prepared,
    compute: &Compute,
    comm: &dyn Collective,
    options: RanksOptions,
    mut on_step: impl FnMut(&StepStats),
) -> Result<RanksSummary, ModelError> {
    let config = &prepared.config;
    if let Some((key, message)) = refused_across_ranks(config) {
        return Err(ModelError::Unsupported { key, message });
    }
    let ranks = Ranks {
        rank: comm.rank(),
        size: comm.size(),
    };
    // A measuring meter's baseline is the heap before the model exists, once the backend's own
    // lasting state (its threads' scratch) exists, as a GPU's context does before its pools.
    let (steps, b) = (config.train.steps, config.train.batch_size);
    // Measured, every batch is read first: no producer thread allocates during the readings.
    let mut stream = prepared.batches;
    let mut read_ahead = None;
    if options.measure {
        if options.resume {
            return Err(ModelError::Execution(
                "a measured run does not resume".into(),
            ));
        }
        let producer = prefetch_part(
            stream.clone(),
            b,
            1..=steps as u64,
            InputTransform::of(config),
            (ranks.rank, ranks.size),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        for fetched in producer.iter() {
            let _ = tx.send(fetched);
        }
        read_ahead = Some(rx);
        prime_backend(&compute.device);
    }
    let mut meter = match options.measure {
        true => MemoryMeter::on_heap(&compute.device, MeterMode::Detailed).ok_or_else(|| {
            ModelError::Execution("no heap counter to measure the ranks with".into())
        })?,
        false => MemoryMeter::new(&compute.device),
    };
    agree_on_config(config, comm)?;
    let mut model = WideModel::new_rank(config, &prepared.model_bands, compute, ranks)?;
    // Refused before the first step (`auto` may have opened a GPU).
    model.check_rank_kernels(&compute.adapter)?;
    let mut resumed_from = None;
    if options.resume {
        let root = options.checkpoints.as_ref().map(|p| p.root.clone());
        let root = root.ok_or_else(|| ModelError::Checkpoint("resume without a run".into()))?;
        let dir = resume_point(&root, ranks, comm)?;
        let m = checkpoint::load(&mut model, &dir, config, checkpoint::Match::SameRun)?;
        stream.seek(m.position)?;
        resumed_from = Some(m.step);
    }
    let first = resumed_from.unwrap_or(0);
    let batches = match read_ahead {
        Some(rx) => rx,
        None => prefetch_part(
            stream,
            b,
            first + 1..=steps as u64,
            InputTransform::of(config),
            (ranks.rank, ranks.size),
        ),
    };
    let transform = InputTransform::of(config);
    let set = crate::eval::EvalSet {
        batches: prepared
            .eval
            .into_iter()
            .map(|b| transform.eval(b))
            .collect(),
        seen: prepared.eval_seen,
    };
    let (spec, every) = (
        crate::eval::eval_spec(config),
        crate::train::eval_interval(config),
    );
    let rates = crate::model::scheduled(config);
    let start = Instant::now();
    let mut warm = start;
    let mut losses = Vec::with_capacity(steps);
    for step in first as usize..steps {
        meter.profile.start();
        let step_start = Instant::now();
        let (part, global_rows, position) = batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        // Dropout keys each entry by its place in the global batch: after the lower ranks'.
        let part = match transform.drops() {
            true => {
                let nnz = comm.all_to_all_u32(vec![vec![part.nnz() as u32]; ranks.size])?;
                let before: usize = nnz[..ranks.rank].iter().map(|v| v[0] as usize).sum();
                transform.dropout_part(part, step as u64 + 1, before)
            }
            false => part,
        };
        meter.lap(Stage::Data);
        fault_rank_exit(ranks.rank, step as u64 + 1);
        let mut stats = model.train_step_ranks(&part, global_rows, comm, &mut meter)?;
        stats.n_rows = global_rows;
        stats.step_s = step_start.elapsed().as_secs_f64();
        stats.lr = rates.lr_at(stats.step);
        stats.check_finite()?;
        losses.push(stats.loss);
        let done = stats.step;
        // Held-out metrics every `train.eval_every` steps (rank 0 gets them; all take part).
        if every > 0 && done % every == 0 && done < steps as u64 && !set.batches.is_empty() {
            stats.eval = model.evaluate_ranks(&set, &spec, comm)?;
        }
        let due = options
            .checkpoints
            .as_ref()
            .filter(|p| p.due(done, steps as u64));
        stats.checkpoint_due = due.is_some();
        on_step(&stats);
        if let Some(plan) = due {
            let point = RunPoint {
                step: done,
                epoch: None,
                position,
            };
            checkpoint::save(&mut model, point, config, &rank_dir(&plan.root, ranks))?;
        }
        if step == first as usize {
            warm = Instant::now();
            // The first step is a warm-up: its readings are dropped.
            meter.reset();
        }
    }
    let eval_loss = model.eval_loss_ranks(&set.batches, comm)?;
    let eval = match set.batches.is_empty() {
        true => None,
        false => model.evaluate_ranks(&set, &spec, comm)?,
    };
    let n_steps = losses.len();
    let timed = n_steps.saturating_sub(1).max(1) as f64;
    let warm_s = warm.elapsed().as_secs_f64().max(1e-9);
    let last = &losses[losses.len().saturating_sub(10)..];
    Ok(RanksSummary {
        ranks: ranks.size,
        rank: ranks.rank,
        steps: n_steps,
        batch_size: b,
        table_optimizer: config.optim.table,
        dense_optimizer: config.optim.dense,
        first_loss: losses.first().copied().unwrap_or(f32::NAN),
        final_loss: losses.last().copied().unwrap_or(f32::NAN),
        final_loss_mean10: last.iter().sum::<f32>() / last.len().max(1) as f32,
        losses,
        examples_per_s: timed * b as f64 / warm_s,
        eval_loss,
        eval,
        owned_rows: model.bands.iter().map(|band| band.table.n_rows()).collect(),
        owned_classes: model.chunks.iter().map(|c| c.n).sum(),
        pooled_alternative_bytes_per_step: model.pooled_bytes as f64
            / model.pooled_steps.max(1) as f64,
        sent_bytes_per_step: model
            .sent_bytes
            .iter()
            .map(|(k, v)| (k.to_string(), *v as f64 / n_steps.max(1) as f64))
            .collect(),
        peak_rss_bytes: crate::train::peak_rss_bytes(),
        train_s: start.elapsed().as_secs_f64(),
        resumed_from,
        measured_point_bytes: match options.measure {
            true => meter.point_peak_in_use_bytes.clone(),
            false => Default::default(),
        },
    })
}

/// Small forward and backward passes (matrix products, autodiff) on this thread and on every
/// thread of the pool, so the state the backend keeps once it has run is allocated before a heap
/// baseline is read: the thread pools, and each thread's matrix-product scratch (the `gemm`
/// crate keeps an L2-sized buffer per thread that has multiplied, about 1 MiB here; with one
/// pool thread, products of the step run on the pool's thread that the caller's never reach).
fn prime_backend(device: &burn::tensor::Device) {
    let products = |device: &burn::tensor::Device| {
        for (n, k, m) in [
            (64, 64, 64),
            (512, 512, 512),
            (1024, 64, 256),
            (64, 1024, 512),
        ] {
            let a = crate::tensors::floats(vec![0.5; n * k], [n, k], device)
                .autodiff()
                .require_grad();
            let b = crate::tensors::floats(vec![0.25; k * m], [k, m], device)
                .autodiff()
                .require_grad();
            let _ = burn::tensor::activation::relu(a.matmul(b)).sum().backward();
        }
    };
    products(device);
    rayon::broadcast(|_| products(device));
}

/// An error on every rank unless all ranks prepared the same run (the config's hash, the data's
/// width and classes filled in): ranks that disagree would exchange mismatched shapes.
fn agree_on_config(
    config: &widebag_config::Config,
    comm: &dyn Collective,
) -> Result<(), ModelError> {
    let hash = u32::from_str_radix(&checkpoint::config_hash(config), 16).unwrap_or(0);
    let all = comm.all_to_all_u32(vec![vec![hash]; comm.size()])?;
    let differ: Vec<usize> = (0..all.len())
        .filter(|&r| all[r].first() != Some(&hash))
        .collect();
    match differ.is_empty() {
        true => Ok(()),
        false => Err(ModelError::Unsupported {
            key: "config",
            message: format!(
                "rank {} prepared a different run from ranks {differ:?} (config hash {hash:08x}): \
                 every rank must read the same config and data",
                comm.rank()
            ),
        }),
    }
}

/// Fault injection for the tests: with `WIDEBAG_FAULT_RANK_EXIT=R:S` rank R's process exits (code
/// 1) as step S starts, as a rank that dies mid-run; the others must not hang.
fn fault_rank_exit(rank: usize, step: u64) {
    let Ok(v) = std::env::var("WIDEBAG_FAULT_RANK_EXIT") else {
        return;
    };
    let parsed = v
        .split_once(':')
        .and_then(|(r, s)| Some((r.parse().ok()?, s.parse().ok()?)));
    if parsed == Some((rank, step)) {
        eprintln!("widebag: rank {rank} exits at step {step} (WIDEBAG_FAULT_RANK_EXIT)");
        std::process::exit(1);
    }
}
