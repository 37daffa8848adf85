//! The estimate of a candidate: its step's ledger (the only place the solver builds one), read
//! for the peak, the categories alive at it, the largest allocation and whether it fits.

use std::cell::Cell;
use std::collections::BTreeMap;

use widebag_config::bands::ModelBands;
use widebag_config::{Config, DenseOptim, TableOptim};
use widebag_ledger::step::{BatchFacts, StepSpec};
use widebag_ledger::{Ledger, Placement};

use crate::problem::{Problem, slack_bytes};
use crate::report::{Candidate, RankPlan};
use crate::throughput::StepWork;

/// The model a cost is taken of: the problem's own, or a changed copy (a suggestion's) with its
/// bands.
#[derive(Clone, Copy)]
pub(crate) struct Variant<'a> {
    pub(crate) config: &'a Config,
    pub(crate) bands: &'a ModelBands,
}

/// What stops a batch: the largest allocation (its entry's name and bytes) and the peak.
pub(crate) struct Limit {
    pub(crate) largest: Option<(String, u64)>,
    pub(crate) peak_bytes: u64,
}

/// Costs candidates of one problem by the ledger (the sample caches the batch statistics per
/// batch size, for every estimator of the plan) and counts the ledger evaluations.
pub(crate) struct Estimator<'a> {
    pub(crate) p: &'a Problem<'a>,
    evaluations: Cell<usize>,
}

impl<'a> Estimator<'a> {
    pub(crate) fn new(p: &'a Problem<'a>) -> Self {
        Self {
            p,
            evaluations: Cell::new(0),
        }
    }

    /// The problem's own model.
    pub(crate) fn base(&self) -> Variant<'a> {
        Variant {
            config: self.p.config,
            bands: self.p.bands,
        }
    }

    /// Ledger evaluations so far.
    pub(crate) fn evaluations(&self) -> usize {
        self.evaluations.get()
    }

    fn facts(&self, batch: usize) -> BatchFacts {
        self.p.sample.facts(batch)
    }

    /// The step of a candidate: rank 0's across ranks (the largest blocks and the most rows).
    fn spec(&self, v: Variant, batch: usize, table: TableOptim, dense: DenseOptim) -> StepSpec {
        self.spec_on_rank(v, batch, (table, dense), 0)
    }

    fn spec_on_rank(
        &self,
        v: Variant,
        batch: usize,
        (table, dense): (TableOptim, DenseOptim),
        rank: usize,
    ) -> StepSpec {
        let mut spec = StepSpec::from_config(v.config, v.bands, self.p.device, self.facts(batch));
        spec.table_optim = table;
        spec.dense_optim = dense;
        match self.p.ranks {
            0 | 1 => spec,
            n => {
                let local = widebag_collective::partition::local_rows(batch, rank, n).len();
                spec.on_rank(rank as u64, n as u64, self.facts(local))
            }
        }
    }

    /// Every rank's part of the problem's model at `batch` with the pair (empty for one
    /// process): what it holds at its peak and the bytes it sends per step.
    pub(crate) fn rank_plans(
        &self,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> Vec<RankPlan> {
        if self.p.ranks <= 1 {
            return Vec::new();
        }
        (0..self.p.ranks)
            .map(|rank| {
                let spec = self.spec_on_rank(self.base(), batch, (table, dense), rank);
                let ledger = widebag_ledger::step::ledger(&spec);
                let peak = ledger.peak(Placement::Device);
                let rows = |b: &widebag_config::bands::Band| {
                    let n = b.n_rows();
                    widebag_collective::partition::BlockSharding::new(n, self.p.ranks)
                        .rows_of(rank)
                        .len()
                };
                let classes = match spec.adaptive() {
                    true => spec.n_classes as usize,
                    false => {
                        let n = spec.n_classes as usize;
                        widebag_collective::partition::class_block(n, rank, self.p.ranks).len()
                    }
                };
                RankPlan {
                    rank,
                    batch_rows: spec.batch.n_rows as usize,
                    table_rows: spec.bands().iter().map(|(b, _)| rows(b)).collect(),
                    classes,
                    predicted_peak_bytes: peak.bytes,
                    peak_point: peak.point,
                    categories: categories_at(&ledger, peak.point),
                    traffic: widebag_ledger::step::traffic(&spec),
                }
            })
            .collect()
    }

    /// The step, its ledger and whether it fits, for a model variant.
    fn cost(
        &self,
        v: Variant,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> (StepSpec, Ledger, bool) {
        self.evaluations.set(self.evaluations.get() + 1);
        let spec = self.spec(v, batch, table, dense);
        let ledger = widebag_ledger::step::ledger(&spec);
        let peak = ledger.peak(Placement::Device).bytes;
        let largest = ledger.largest_allocation().map_or(0, |(_, b)| b);
        let fits = largest <= spec.device.max_buffer_bytes
            && peak.saturating_add(slack_bytes(self.p.budget_bytes)) <= self.p.budget_bytes;
        (spec, ledger, fits)
    }

    /// Whether the problem's model fits at `batch` with the pair.
    pub(crate) fn fits(&self, batch: usize, table: TableOptim, dense: DenseOptim) -> bool {
        self.fits_with(self.base(), batch, table, dense)
    }

    /// Whether a model variant fits at `batch` with the pair.
    pub(crate) fn fits_with(
        &self,
        v: Variant,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> bool {
        self.cost(v, batch, table, dense).2
    }

    /// The largest allocation and the peak of the problem's model at `batch` with the pair.
    pub(crate) fn limit(&self, batch: usize, table: TableOptim, dense: DenseOptim) -> Limit {
        let (_, ledger, _) = self.cost(self.base(), batch, table, dense);
        Limit {
            largest: ledger
                .largest_allocation()
                .map(|(name, bytes)| (name.to_string(), bytes)),
            peak_bytes: ledger.peak(Placement::Device).bytes,
        }
    }

    /// The problem's model at `batch` with the pair, as a candidate (no verdict yet).
    pub(crate) fn candidate(
        &self,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> Candidate {
        self.candidate_with(self.base(), batch, table, dense)
    }

    /// A model variant at `batch` with the pair, as a candidate (no verdict yet).
    pub(crate) fn candidate_with(
        &self,
        v: Variant,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> Candidate {
        let (spec, ledger, fits) = self.cost(v, batch, table, dense);
        let peak = ledger.peak(Placement::Device);
        Candidate {
            batch_size: batch,
            table,
            dense,
            predicted_peak_bytes: peak.bytes,
            peak_point: peak.point,
            categories: categories_at(&ledger, peak.point),
            largest_allocation_bytes: ledger.largest_allocation().map_or(0, |(_, b)| b),
            fits,
            max_batch_size: None,
            predicted_examples_per_s: self.p.calibration.map_or(0.0, |c| c.examples_per_s(&spec)),
            predicted_step_s: self
                .p
                .calibration
                .map_or(0.0, |c| c.step_s(&StepWork::of(&spec))),
            verdict: String::new(),
        }
    }
}

/// The device's bytes alive at `point`, by category name.
fn categories_at(ledger: &Ledger, point: widebag_ledger::Point) -> BTreeMap<String, u64> {
    ledger
        .categories_at(Placement::Device, point)
        .into_iter()
        .map(|(c, b)| (c.name().to_string(), b))
        .collect()
}
