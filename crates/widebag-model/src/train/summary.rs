//! What a run measured: its summary (throughput, losses, memory, evaluations), with what each
//! rank of a run across ranks measured of its part; each built whole from the finished run's
//! record ([`RunRecord`]).

use std::collections::BTreeMap;

use serde::Serialize;
use widebag_config::{Config, Layout};
use widebag_eval::EvalReport;
use widebag_prepare::{BandReport, DataSummary};

use crate::device::{BackendKind, Compute};
use crate::layout::LayoutFacts;
use crate::model::SparseModel;
use crate::probe::StepProbe;
use crate::probe::profile::ProfileReport;
use crate::probe::{Phase, Point};
use crate::train::position::epoch_of;

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub backend: BackendKind,
    pub adapter: String,
    /// The shader language wgpu's kernels were compiled to (`"spirv"` or `"wgsl"`); absent on
    /// flex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiler: Option<String>,
    pub width: usize,
    pub n_classes: usize,
    pub dim: usize,
    pub hidden: Vec<usize>,
    pub batch_size: usize,
    pub steps: usize,
    pub layout: Layout,
    pub table_optimizer: widebag_config::TableOptim,
    /// The table is the output layer's weight (`model.tie_output`): `dense_optimizer` updates it.
    pub tied_output: bool,
    pub dense_optimizer: widebag_config::DenseOptim,
    /// Examples per second (global, across ranks) over the steps after the first (the first compiles kernels), or
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
    /// Detailed metering: the process's anonymous memory (`RssAnon`) at each point, its largest
    /// reading over the steps after the warm-up.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub point_anon_rss_bytes: BTreeMap<Point, u64>,
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
    pub bands: Vec<BandReport>,
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
    /// The step whose evaluation reached the stop target (`train.stop_at_*`), ending the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_reached_at: Option<u64>,
    /// The global batch's loss at every step this run took (after `resumed_from`).
    pub losses: Vec<f32>,
    /// What a run across ranks measured on this rank (absent for one process).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub across: Option<AcrossRanks>,
}

/// What one rank of a run across ranks measured (rank 0 reports it).
#[derive(Clone, Debug, Serialize)]
pub struct AcrossRanks {
    pub ranks: usize,
    pub rank: usize,
    /// Rows of each band this rank owns.
    pub owned_rows: Vec<usize>,
    /// Classes of the full softmax this rank owns.
    pub owned_classes: usize,
    /// Mean bytes this rank sent to the other ranks per step, by collective.
    pub sent_bytes_per_step: BTreeMap<String, f64>,
    /// Mean bytes per step the row exchange (ids, rows, row gradients) would have sent as
    /// pooled partial sums instead (TorchRec's pooled embeddings), on the same batches (the
    /// first `POOLED_SAMPLED_STEPS` steps).
    pub pooled_alternative_bytes_per_step: f64,
    /// With [`crate::RunOptions::measure`]: the heap's peak bytes in use at each point read,
    /// over the steps after the first (the process's heap: all ranks' when they are threads).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub measured_point_bytes: BTreeMap<Point, u64>,
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
    /// Seconds from the start of the run's set-up (the model built, after the data was read) to
    /// the end of this evaluation: how long the run took to reach this result.
    pub elapsed_s: f64,
    /// Seconds this evaluation took.
    pub eval_s: f64,
}

impl Evaluation {
    /// The evaluation that ended now, begun at `began` (the run set up from `run_start`).
    pub fn new(
        step: u64,
        epoch: Option<u64>,
        report: EvalReport,
        run_start: std::time::Instant,
        began: std::time::Instant,
    ) -> Self {
        Self {
            step,
            epoch,
            line: report.line(),
            report,
            elapsed_s: run_start.elapsed().as_secs_f64(),
            eval_s: began.elapsed().as_secs_f64(),
        }
    }
}

/// The process's peak resident set size (`VmHWM` in `/proc/self/status`), where Linux has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What a finished run hands to its summary.
pub(crate) struct RunRecord<'a> {
    pub config: &'a Config,
    pub compute: &'a Compute,
    /// The training steps' sizes and traffic.
    pub facts: LayoutFacts,
    pub probe: &'a StepProbe,
    pub examples_per_s: f64,
    pub setup_s: f64,
    pub train_s: f64,
    pub losses: Vec<f32>,
    pub evaluations: Vec<Evaluation>,
    pub eval_loss: Option<f64>,
    pub eval_rows: usize,
    pub data: Option<DataSummary>,
    pub bands: Vec<BandReport>,
    pub rows_seen: usize,
    pub resumed_from: Option<u64>,
    pub target_reached_at: Option<u64>,
    pub across: Option<AcrossRanks>,
}

impl RunSummary {
    /// The summary of the finished run `r` (at least one step taken).
    pub(crate) fn new(r: RunRecord<'_>) -> Self {
        let (config, facts, probe) = (r.config, r.facts, r.probe);
        let tail = &r.losses[r.losses.len().saturating_sub(10)..];
        let has_counters = probe.available();
        let steps = config.train.steps.max(1) as f64;
        Self {
            backend: r.compute.backend,
            adapter: r.compute.adapter.clone(),
            compiler: r.compute.compiler.clone(),
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
            examples_per_s: r.examples_per_s,
            first_loss: r.losses[0],
            final_loss: *r.losses.last().expect("steps >= 1"),
            final_loss_mean10: tail.iter().sum::<f32>() / tail.len() as f32,
            table_bytes: facts.table_bytes,
            parameter_bytes: facts.parameter_bytes,
            table_shards: facts.table_shards,
            class_chunks: facts.class_chunks,
            max_buffer_bytes: facts.max_buffer_bytes,
            peak_in_use_bytes: has_counters.then_some(probe.peak_in_use_bytes),
            peak_reserved_bytes: has_counters.then_some(probe.peak_reserved_bytes),
            pool_high_water_bytes: probe.pool_high_water_bytes(),
            phase_peak_in_use_bytes: probe.phase_peak_in_use_bytes.clone(),
            point_peak_in_use_bytes: probe.point_peak_in_use_bytes.clone(),
            point_anon_rss_bytes: probe.point_anon_rss_bytes.clone(),
            setup_s: r.setup_s,
            train_s: r.train_s,
            output: config.model.output,
            eval_loss: r.eval_loss,
            eval_rows: r.eval_rows,
            table_parameters: facts.table_parameters,
            output_parameters: facts.output_parameters,
            host_bytes: facts.host_bytes,
            host_to_device_bytes_per_step: facts.to_device_bytes as f64 / steps,
            device_to_host_bytes_per_step: facts.to_host_bytes as f64 / steps,
            bands: r.bands,
            peak_rss_bytes: peak_rss_bytes(),
            // Batches never straddle epochs, so the epochs started follow from the rows seen.
            epochs: epoch_of(&r.data, r.rows_seen),
            data: r.data,
            profile: probe.profile.report(),
            eval: r.evaluations.last().map(|e| e.report.clone()),
            resumed_from: r.resumed_from,
            target_reached_at: r.target_reached_at,
            evaluations: r.evaluations,
            losses: r.losses,
            across: r.across,
        }
    }
}

impl AcrossRanks {
    /// What rank `model.ranks()` of a run across ranks measured over its `steps` steps (with
    /// `measured`, the heap's peak at each point read).
    pub(crate) fn of(model: &SparseModel, steps: usize, measured: BTreeMap<Point, u64>) -> Self {
        let traffic = &model.traffic;
        Self {
            ranks: model.ranks.size,
            rank: model.ranks.rank,
            owned_rows: model.bands.iter().map(|band| band.table.n_rows()).collect(),
            owned_classes: model.output.class_chunks().iter().map(|c| c.n).sum(),
            pooled_alternative_bytes_per_step: traffic.pooled_bytes as f64
                / traffic.pooled_steps.max(1) as f64,
            sent_bytes_per_step: traffic
                .sent_bytes
                .iter()
                .map(|(k, v)| (k.to_string(), *v as f64 / steps as f64))
                .collect(),
            measured_point_bytes: measured,
        }
    }
}
