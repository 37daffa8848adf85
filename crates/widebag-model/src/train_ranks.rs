//! The training loop of one rank of a multi-process run (`mpirun -np N widebag train`, or
//! `--ranks N` as threads): every rank reads the same global batches and trains on its rows of
//! each (`widebag_collective::partition::local_rows`), its block of every table and a replica
//! of the dense layers ([`WideModel::train_step_ranks`]), then the held-out loss. Run
//! directories and checkpoints are not yet available across ranks and are refused before the
//! run.

use std::time::Instant;

use serde::Serialize;
use widebag_collective::Collective;
use widebag_config::Layout;
use widebag_prepare::Prepared;

use crate::ModelError;
use crate::device::Compute;
use crate::memory::{MemoryMeter, Stage};
use crate::model::{Ranks, WideModel};
use crate::train::{InputTransform, prefetch};

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
    /// Mean loss over the held-out rows after training (`train.eval_rows` or `data.test_path`;
    /// the task's metrics are not yet computed across ranks).
    pub eval_loss: Option<f64>,
    /// Rows of each band this rank owns.
    pub owned_rows: Vec<usize>,
    /// Classes of the full softmax this rank owns.
    pub owned_classes: usize,
    /// Mean bytes this rank sent to the other ranks per step, by collective.
    pub sent_bytes_per_step: std::collections::BTreeMap<String, f64>,
    /// This process's peak resident memory (all ranks' when they are threads of one process).
    pub peak_rss_bytes: Option<u64>,
    pub train_s: f64,
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
) -> Result<RanksSummary, ModelError> {
    let config = &prepared.config;
    if let Some((key, message)) = refused_across_ranks(config) {
        return Err(ModelError::Unsupported { key, message });
    }
    let ranks = Ranks {
        rank: comm.rank(),
        size: comm.size(),
    };
    let mut model = WideModel::new_rank(config, &prepared.model_bands, compute, ranks)?;
    // Refused before the first step (`auto` may have opened a GPU).
    model.check_rank_kernels(&compute.adapter)?;
    let mut meter = MemoryMeter::new(&compute.device);
    let (steps, b) = (config.train.steps, config.train.batch_size);
    let batches = prefetch(
        prepared.batches,
        b,
        1..=steps as u64,
        InputTransform::of(config),
    );
    let start = Instant::now();
    let mut warm = start;
    let mut losses = Vec::with_capacity(steps);
    for step in 0..steps {
        meter.profile.start();
        let (global, _) = batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        meter.lap(Stage::Data);
        fault_rank_exit(ranks.rank, step as u64 + 1);
        let stats = model.train_step_ranks(&global, comm, &mut meter)?;
        losses.push(stats.loss);
        if step == 0 {
            warm = Instant::now();
        }
    }
    let transform = InputTransform::of(config);
    let eval: Vec<_> = prepared
        .eval
        .into_iter()
        .map(|b| transform.eval(b))
        .collect();
    let eval_loss = model.eval_loss_ranks(&eval, comm)?;
    let timed = steps.saturating_sub(1).max(1) as f64;
    let warm_s = warm.elapsed().as_secs_f64().max(1e-9);
    let last = &losses[losses.len().saturating_sub(10)..];
    Ok(RanksSummary {
        ranks: ranks.size,
        rank: ranks.rank,
        steps,
        batch_size: b,
        table_optimizer: config.optim.table,
        dense_optimizer: config.optim.dense,
        first_loss: losses.first().copied().unwrap_or(f32::NAN),
        final_loss: losses.last().copied().unwrap_or(f32::NAN),
        final_loss_mean10: last.iter().sum::<f32>() / last.len().max(1) as f32,
        losses,
        examples_per_s: timed * b as f64 / warm_s,
        eval_loss,
        owned_rows: model.bands.iter().map(|band| band.table.n_rows()).collect(),
        owned_classes: model.chunks.iter().map(|c| c.n).sum(),
        sent_bytes_per_step: model
            .sent_bytes
            .iter()
            .map(|(k, v)| (k.to_string(), *v as f64 / steps.max(1) as f64))
            .collect(),
        peak_rss_bytes: crate::train::peak_rss_bytes(),
        train_s: start.elapsed().as_secs_f64(),
    })
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
