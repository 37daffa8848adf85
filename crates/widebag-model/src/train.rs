//! The training loop: batches (synthetic or from a data file) assembled on a background thread,
//! one [`WideModel::train_step`] per batch, and a summary with throughput and measured memory.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Instant;

use serde::Serialize;
use widebag_config::{DataSummary, Prepared};
use widebag_csr::CsrBatch;
use widebag_data::{BatchSource, DataError};

use crate::memory::{MemoryMeter, Phase};
use crate::model::{StepStats, WideModel};
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
    pub table_optimizer: widebag_config::TableOptim,
    pub dense_optimizer: widebag_config::DenseOptim,
    /// Examples per second over the steps after the first (the first compiles kernels).
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
    /// Peak bytes in live allocations, sampled after forward, backward and update of every step
    /// (`None` on backends without allocator counters, e.g. flex).
    pub peak_in_use_bytes: Option<u64>,
    /// Peak bytes reserved by the allocator at the same samples.
    pub peak_reserved_bytes: Option<u64>,
    /// Sum over the dynamic pools of their page high-water marks.
    pub pool_high_water_bytes: Option<u64>,
    pub phase_peak_in_use_bytes: BTreeMap<Phase, u64>,
    pub setup_s: f64,
    pub train_s: f64,
    /// The data file trained on (absent for synthetic data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<DataSummary>,
    /// Passes over the data file's rows started (absent for synthetic data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
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

/// Trains the configured model on the prepared batches. `on_step` sees every step's stats.
pub fn run_training(
    prepared: Prepared,
    compute: &Compute,
    mut on_step: impl FnMut(&StepStats),
) -> Result<RunSummary, ModelError> {
    let setup_start = Instant::now();
    let Prepared {
        config,
        batches: stream,
        data,
        ..
    } = prepared;
    let config = &config;
    let mut model = WideModel::new(config, compute);
    let mut meter = MemoryMeter::new(&compute.device);
    meter.sample(Phase::Setup);
    let setup_s = setup_start.elapsed().as_secs_f64();

    let batches = prefetch(stream, config.train.batch_size, config.train.steps);
    let train_start = Instant::now();
    let mut warm_start = train_start;
    let mut losses = Vec::with_capacity(config.train.steps);
    let (mut rows_seen, mut first_rows) = (0usize, 0usize);
    for step in 0..config.train.steps {
        let batch = batches
            .recv()
            .map_err(|_| ModelError::Execution("batch producer stopped".into()))??;
        rows_seen += batch.n_rows();
        let stats = model.train_step(&batch, &mut meter)?;
        if !stats.loss.is_finite() {
            return Err(ModelError::Execution(format!(
                "loss became {} at step {}",
                stats.loss, stats.step
            )));
        }
        losses.push(stats.loss);
        on_step(&stats);
        if step == 0 {
            warm_start = Instant::now();
            first_rows = rows_seen;
        }
    }
    let train_s = train_start.elapsed().as_secs_f64();
    let warm_steps = config.train.steps.saturating_sub(1);
    let examples_per_s = if warm_steps > 0 {
        (rows_seen - first_rows) as f64 / warm_start.elapsed().as_secs_f64()
    } else {
        rows_seen as f64 / train_s
    };
    let tail = &losses[losses.len().saturating_sub(10)..];
    let has_counters = meter.available();
    Ok(RunSummary {
        backend: compute.backend,
        adapter: compute.adapter.clone(),
        width: model.spec.width,
        n_classes: model.spec.n_classes,
        dim: model.spec.dim,
        hidden: model.spec.hidden.clone(),
        batch_size: config.train.batch_size,
        steps: config.train.steps,
        table_optimizer: config.optim.table,
        dense_optimizer: config.optim.dense,
        examples_per_s,
        first_loss: losses[0],
        final_loss: *losses.last().expect("steps >= 1"),
        final_loss_mean10: tail.iter().sum::<f32>() / tail.len() as f32,
        table_bytes: model.table.bytes(),
        parameter_bytes: model.parameter_bytes(),
        table_shards: model.table.n_shards(),
        class_chunks: model.chunks.len(),
        max_buffer_bytes: model.spec.max_buffer_bytes,
        peak_in_use_bytes: has_counters.then_some(meter.peak_in_use_bytes),
        peak_reserved_bytes: has_counters.then_some(meter.peak_reserved_bytes),
        pool_high_water_bytes: meter.pool_high_water_bytes(),
        phase_peak_in_use_bytes: meter.phase_peak_in_use_bytes.clone(),
        setup_s,
        train_s,
        // Batches never straddle epochs, so the epochs started follow from the rows seen.
        epochs: data
            .as_ref()
            .map(|d| (rows_seen as u64).div_ceil(d.rows.max(1) as u64)),
        data,
    })
}
