//! What a run measured: its summary (throughput, losses, memory, evaluations), with what each
//! rank of a run across ranks measured of its part.

use std::collections::BTreeMap;

use serde::Serialize;
use widebag_config::Layout;
use widebag_eval::EvalReport;
use widebag_prepare::DataSummary;

use crate::BackendKind;
use crate::step::memory::{Phase, Point};
use crate::step::profile::ProfileReport;

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
