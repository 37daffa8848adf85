//! What `plan --verify` and `plan --search` measured on the device, as the plan's report carries
//! it (`commands::plan::search` runs them).

use serde::Serialize;
use widebag_config::{DenseOptim, TableOptim};

/// `--verify`: the plan run on the device.
#[derive(Clone, Debug, Serialize)]
pub struct Verify {
    pub steps: usize,
    pub predicted_peak_bytes: u64,
    pub measured_peak_bytes: u64,
    pub measured_reserved_peak_bytes: Option<u64>,
    pub under_budget: bool,
}

/// One real run of `--search`.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub batch_size: usize,
    /// `None`: refused before running (a tensor over the device's largest buffer).
    pub measured_peak_bytes: Option<u64>,
    pub runs_under_budget: bool,
}

/// `--search`: the largest batch that ran under the budget, by bisection on measured peaks.
#[derive(Clone, Debug, Serialize)]
pub struct Search {
    /// The largest batch measured under the budget (`None`: not even the smallest).
    pub batch_size: Option<usize>,
    /// The smallest batch measured over it (`None`: the largest allowed ran under it).
    pub first_over: Option<usize>,
    pub table: TableOptim,
    pub dense: DenseOptim,
    pub probes: Vec<Probe>,
    /// The analytic plan's batch over the search's, in %.
    pub plan_vs_search_pct: Option<f64>,
}
