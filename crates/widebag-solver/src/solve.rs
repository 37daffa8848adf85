//! The search over batch sizes and optimizer pairs, the runner-ups, and the suggestions when
//! nothing fits.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use widebag_config::units::format_bytes;
use widebag_config::{Config, DenseOptim, Layout, Objective, TableOptim};
use widebag_ledger::step::{BatchFacts, DeviceFacts, StepSpec};
use widebag_ledger::{Placement, Point};

use crate::{Calibration, RowSample};

/// Why planning could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SolverError {
    #[error("plan.min_batch {min_batch} is above plan.max_batch {max_batch}")]
    BatchRange { min_batch: usize, max_batch: usize },
    #[error(
        "the batch sample holds {sampled} rows per batch, fewer than the largest batch planned ({wanted})"
    )]
    SampleTooSmall { sampled: usize, wanted: usize },
}

/// The part of the budget the solver keeps free: 0.25 % of the budget plus 16 KiB. The ledger
/// under-predicts by a few KiB of kernel metadata and scalars it does not model (at most 3.4 KiB,
/// 0.12 %, on the solver's grid; its own accuracy grid's worst error is 0.13 % above 1 MiB).
pub fn slack_bytes(budget_bytes: u64) -> u64 {
    budget_bytes / 400 + (16 << 10)
}

/// What the default budget leaves to the driver, other processes and the allocator's page
/// rounding: 10 % of the device's memory, at least 512 MiB.
pub fn reserve_bytes(device_memory_bytes: u64) -> u64 {
    (device_memory_bytes / 10).max(512 << 20)
}

/// The budget when none is given: the device's memory minus [`reserve_bytes`], when the device
/// reports its memory.
pub fn default_budget_bytes(device_memory_bytes: Option<u64>) -> Option<u64> {
    device_memory_bytes.map(|m| m.saturating_sub(reserve_bytes(m)))
}

/// Knobs the solver must keep at the config's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pins {
    pub batch_size: bool,
    pub table: bool,
    pub dense: bool,
}

impl Pins {
    /// Pins from knob keys (`train.batch_size`, `optim.table`, `optim.dense`); others are ignored.
    pub fn from_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut pins = Self::default();
        for k in keys {
            match k {
                "train.batch_size" => pins.batch_size = true,
                "optim.table" => pins.table = true,
                "optim.dense" => pins.dense = true,
                _ => {}
            }
        }
        pins
    }

    pub fn keys(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.batch_size {
            out.push("train.batch_size");
        }
        if self.table {
            out.push("optim.table");
        }
        if self.dense {
            out.push("optim.dense");
        }
        out
    }
}

/// Everything the solver reads.
pub struct Problem<'a> {
    /// The configured run: model, layout, the optimizers' and batch size's pinned values, and
    /// `[plan]` (objective, min and max batch).
    pub config: &'a Config,
    pub device: DeviceFacts,
    pub budget_bytes: u64,
    pub sample: &'a RowSample,
    pub pins: Pins,
    pub calibration: &'a Calibration,
}

/// Capability rank of an optimizer pair (higher is more capable): the table's rank plus the
/// dense part's, ties to the table. Table: SGD 0 < momentum 1 < row-wise Adagrad 2 < Adam 3
/// (per-row adaptive steps are what sparse rows need; Adagrad's one value per row is TorchRec's
/// default); dense: SGD 0 < momentum 1 < Adam/AdamW 2.
pub fn capability(layout: Layout, table: TableOptim, dense: DenseOptim) -> (u32, u32) {
    let t = match (layout, table) {
        (Layout::Dense, _) => 0,
        (_, TableOptim::Sgd) => 0,
        (_, TableOptim::Momentum) => 1,
        (_, TableOptim::RowwiseAdagrad) => 2,
        (_, TableOptim::Adam | TableOptim::AdamW) => 3,
    };
    let d = match dense {
        DenseOptim::Sgd => 0,
        DenseOptim::Momentum => 1,
        DenseOptim::Adam | DenseOptim::AdamW => 2,
    };
    (t + d, t)
}

/// One batch size and optimizer pair, costed by the ledger.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    pub batch_size: usize,
    pub table: TableOptim,
    pub dense: DenseOptim,
    pub predicted_peak_bytes: u64,
    pub peak_point: Point,
    /// Category → bytes alive at the peak.
    pub categories: BTreeMap<String, u64>,
    pub largest_allocation_bytes: u64,
    pub fits: bool,
    /// The largest batch this optimizer pair fits at (within the batch range), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch_size: Option<usize>,
    pub predicted_examples_per_s: f64,
    /// Why this candidate was chosen or rejected.
    pub verdict: String,
}

/// A single change that would make the run fit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suggestion {
    /// The key to change (`optim.table`, `train.batch_size`, `model.layout`, `model.dim`,
    /// `budget`).
    pub key: String,
    pub from: String,
    pub to: String,
    /// Predicted bytes the change frees (for `budget`: the bytes it adds).
    pub frees_bytes: u64,
    /// The change in words, e.g. "optim.table adam → rowwise_adagrad frees 1.84 GiB".
    pub text: String,
}

/// The solver's answer. Deterministic: the same problem gives the same plan, byte for byte.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub fits: bool,
    pub objective: Objective,
    pub layout: Layout,
    pub budget_bytes: u64,
    pub slack_bytes: u64,
    pub max_buffer_bytes: u64,
    pub pinned: Vec<&'static str>,
    pub min_batch: usize,
    pub max_batch: usize,
    /// The chosen plan, or, when nothing fits, the cheapest candidate (`fits: false`).
    pub chosen: Candidate,
    /// Every other optimizer pair at the chosen batch, and the chosen pair one batch larger.
    pub runner_ups: Vec<Candidate>,
    /// When nothing fits: single changes that would, smallest first.
    pub suggestions: Vec<Suggestion>,
    /// Ledger evaluations the search made.
    pub evaluations: usize,
}

struct Solver<'a> {
    p: &'a Problem<'a>,
    facts: RefCell<HashMap<usize, BatchFacts>>,
    evaluations: RefCell<usize>,
}

impl<'a> Solver<'a> {
    fn facts(&self, batch: usize) -> BatchFacts {
        *self
            .facts
            .borrow_mut()
            .entry(batch)
            .or_insert_with(|| self.p.sample.facts(batch))
    }

    fn spec(
        &self,
        config: &Config,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> StepSpec {
        let mut spec = StepSpec::from_config(config, self.p.device, self.facts(batch));
        spec.table_optim = table;
        spec.dense_optim = dense;
        spec
    }

    /// Peak, peak point, largest allocation and whether it fits, for a config variant.
    fn cost_with(
        &self,
        config: &Config,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> (StepSpec, widebag_ledger::Ledger, bool) {
        *self.evaluations.borrow_mut() += 1;
        let spec = self.spec(config, batch, table, dense);
        let ledger = widebag_ledger::step::ledger(&spec);
        let peak = ledger.peak(Placement::Device).bytes;
        let largest = ledger.largest_allocation().map_or(0, |(_, b)| b);
        let fits = largest <= spec.device.max_buffer_bytes
            && peak.saturating_add(slack_bytes(self.p.budget_bytes)) <= self.p.budget_bytes;
        (spec, ledger, fits)
    }

    fn fits(&self, batch: usize, table: TableOptim, dense: DenseOptim) -> bool {
        self.cost_with(self.p.config, batch, table, dense).2
    }

    fn candidate(&self, batch: usize, table: TableOptim, dense: DenseOptim) -> Candidate {
        self.candidate_with(self.p.config, batch, table, dense)
    }

    fn candidate_with(
        &self,
        config: &Config,
        batch: usize,
        table: TableOptim,
        dense: DenseOptim,
    ) -> Candidate {
        let (spec, ledger, fits) = self.cost_with(config, batch, table, dense);
        let peak = ledger.peak(Placement::Device);
        Candidate {
            batch_size: batch,
            table,
            dense,
            predicted_peak_bytes: peak.bytes,
            peak_point: peak.point,
            categories: ledger
                .categories_at(Placement::Device, peak.point)
                .into_iter()
                .map(|(c, b)| (c.name().to_string(), b))
                .collect(),
            largest_allocation_bytes: ledger.largest_allocation().map_or(0, |(_, b)| b),
            fits,
            max_batch_size: None,
            predicted_examples_per_s: self.p.calibration.examples_per_s(&spec),
            verdict: String::new(),
        }
    }

    /// The largest batch in `[lo, hi]` at which `fits(batch)` holds, by bisection (the ledger's
    /// peak grows with the batch); `None` when `lo` does not fit.
    fn largest_batch(&self, lo: usize, hi: usize, fits: impl Fn(usize) -> bool) -> Option<usize> {
        if !fits(lo) {
            return None;
        }
        if fits(hi) {
            return Some(hi);
        }
        let (mut good, mut bad) = (lo, hi);
        while bad - good > 1 {
            let mid = good + (bad - good) / 2;
            if fits(mid) {
                good = mid;
            } else {
                bad = mid;
            }
        }
        Some(good)
    }
}

/// The optimizer pairs the solver may choose, most capable first.
fn pairs(config: &Config, pins: Pins) -> Vec<(TableOptim, DenseOptim)> {
    let tables: Vec<TableOptim> = if pins.table || config.model.layout == Layout::Dense {
        vec![config.optim.table]
    } else {
        // The Adam tier: lazy AdamW when the config asks for it, else lazy Adam.
        let adam = match config.optim.table {
            TableOptim::AdamW => TableOptim::AdamW,
            _ => TableOptim::Adam,
        };
        vec![
            TableOptim::Sgd,
            TableOptim::Momentum,
            TableOptim::RowwiseAdagrad,
            adam,
        ]
    };
    let adam = match config.optim.dense {
        DenseOptim::AdamW => DenseOptim::AdamW,
        _ => DenseOptim::Adam,
    };
    let denses: Vec<DenseOptim> = if pins.dense {
        vec![config.optim.dense]
    } else {
        vec![DenseOptim::Sgd, DenseOptim::Momentum, adam]
    };
    let layout = config.model.layout;
    let mut out: Vec<(TableOptim, DenseOptim)> = tables
        .iter()
        .flat_map(|&t| denses.iter().map(move |&d| (t, d)))
        .collect();
    out.sort_by_key(|&(t, d)| std::cmp::Reverse(capability(layout, t, d)));
    out
}

/// The pair with the least memory: SGD keeps no state, momentum one copy, Adam two.
fn cheapest(pairs: &[(TableOptim, DenseOptim)]) -> (TableOptim, DenseOptim) {
    let cost = |t: TableOptim, d: DenseOptim| {
        let t = match t {
            TableOptim::Sgd => 0,
            TableOptim::RowwiseAdagrad => 1,
            TableOptim::Momentum => 2,
            TableOptim::Adam | TableOptim::AdamW => 3,
        };
        (t, d.state_per_weight())
    };
    *pairs
        .iter()
        .min_by_key(|&&(t, d)| cost(t, d))
        .expect("at least one pair")
}

fn pair_name(layout: Layout, t: TableOptim, d: DenseOptim) -> String {
    match layout {
        Layout::Sparse => format!("table {} + dense {}", t.name(), d.name()),
        Layout::Dense => format!("dense {}", d.name()),
    }
}

/// Plans the run: the batch size and optimizers that fit `problem.budget_bytes`.
pub fn solve(problem: &Problem) -> Result<Plan, SolverError> {
    let config = problem.config;
    let plan = &config.plan;
    let (min_batch, max_batch) = if problem.pins.batch_size {
        (config.train.batch_size, config.train.batch_size)
    } else {
        (plan.min_batch, plan.max_batch)
    };
    if min_batch > max_batch {
        return Err(SolverError::BatchRange {
            min_batch,
            max_batch,
        });
    }
    if problem.sample.max_batch() < max_batch {
        return Err(SolverError::SampleTooSmall {
            sampled: problem.sample.max_batch(),
            wanted: max_batch,
        });
    }
    let s = Solver {
        p: problem,
        facts: RefCell::new(HashMap::new()),
        evaluations: RefCell::new(0),
    };
    let layout = config.model.layout;
    let pairs = pairs(config, problem.pins);
    let (ct, cd) = cheapest(&pairs);
    let best_batch = s.largest_batch(min_batch, max_batch, |b| s.fits(b, ct, cd));

    let (chosen, mut runner_ups) = match (best_batch, plan.objective) {
        (None, _) => {
            let mut c = s.candidate(min_batch, ct, cd);
            c.verdict = format!(
                "nothing fits: even {} at batch {min_batch} needs {} (+ {} slack) of {}",
                pair_name(layout, ct, cd),
                format_bytes(c.predicted_peak_bytes),
                format_bytes(slack_bytes(problem.budget_bytes)),
                format_bytes(problem.budget_bytes)
            );
            if c.largest_allocation_bytes > problem.device.max_buffer_bytes {
                c.verdict = format!(
                    "nothing fits: one tensor needs a {} buffer, over the device's largest buffer of {}",
                    format_bytes(c.largest_allocation_bytes),
                    format_bytes(problem.device.max_buffer_bytes)
                );
            }
            (c, Vec::new())
        }
        (Some(batch), Objective::Batch) => {
            // The largest batch, then the most capable pair that fits at it.
            let mut all: Vec<Candidate> = pairs
                .iter()
                .map(|&(t, d)| s.candidate(batch, t, d))
                .collect();
            let pick = all.iter().position(|c| c.fits).expect("the cheapest fits");
            let mut chosen = all.remove(pick);
            chosen.verdict = format!(
                "{}; the most capable optimizers that fit at it",
                batch_limit(&s, batch, max_batch, (ct, cd))
            );
            for c in all.iter_mut() {
                c.verdict = if c.fits {
                    "fits, less capable than the chosen optimizers".to_string()
                } else {
                    over_budget(c, problem)
                };
                if !c.fits
                    && capability(layout, c.table, c.dense)
                        > capability(layout, chosen.table, chosen.dense)
                {
                    c.max_batch_size =
                        s.largest_batch(min_batch, batch, |b| s.fits(b, c.table, c.dense));
                    if let Some(m) = c.max_batch_size {
                        c.verdict.push_str(&format!("; fits up to batch {m}"));
                    }
                }
            }
            (chosen, all)
        }
        (Some(_), Objective::Throughput) => {
            // Each pair at its own largest batch; the highest predicted examples/s wins.
            let mut all: Vec<Candidate> = pairs
                .iter()
                .filter_map(|&(t, d)| {
                    let b = s.largest_batch(min_batch, max_batch, |b| s.fits(b, t, d))?;
                    let mut c = s.candidate(b, t, d);
                    c.max_batch_size = Some(b);
                    Some(c)
                })
                .collect();
            let pick = (0..all.len())
                .max_by(|&i, &j| {
                    all[i]
                        .predicted_examples_per_s
                        .total_cmp(&all[j].predicted_examples_per_s)
                        .then(j.cmp(&i))
                })
                .expect("the cheapest fits");
            let mut chosen = all.remove(pick);
            chosen.verdict = format!(
                "the highest predicted throughput ({:.1} examples/s) at this pair's largest batch",
                chosen.predicted_examples_per_s
            );
            for c in all.iter_mut() {
                c.verdict = format!(
                    "{:.1} examples/s predicted at its largest batch",
                    c.predicted_examples_per_s
                );
            }
            let mut rejected: Vec<Candidate> = pairs
                .iter()
                .filter(|&&(t, d)| {
                    !all.iter().any(|c| (c.table, c.dense) == (t, d))
                        && (t, d) != (chosen.table, chosen.dense)
                })
                .map(|&(t, d)| {
                    let mut c = s.candidate(min_batch, t, d);
                    c.verdict = over_budget(&c, problem);
                    c
                })
                .collect();
            all.append(&mut rejected);
            (chosen, all)
        }
    };
    if chosen.fits && chosen.batch_size < max_batch {
        let mut bigger = s.candidate(chosen.batch_size + 1, chosen.table, chosen.dense);
        bigger.verdict = over_budget(&bigger, problem);
        runner_ups.push(bigger);
    }
    let suggestions = if chosen.fits {
        Vec::new()
    } else {
        suggestions(&s, min_batch, (ct, cd), &chosen)
    };
    let evaluations = *s.evaluations.borrow();
    Ok(Plan {
        fits: chosen.fits,
        objective: plan.objective,
        layout,
        budget_bytes: problem.budget_bytes,
        slack_bytes: slack_bytes(problem.budget_bytes),
        max_buffer_bytes: problem.device.max_buffer_bytes,
        pinned: problem.pins.keys(),
        min_batch,
        max_batch,
        chosen,
        runner_ups,
        suggestions,
        evaluations,
    })
}

/// What stops the batch at `batch`: the pin, `plan.max_batch`, the budget or the buffer limit.
fn batch_limit(
    s: &Solver,
    batch: usize,
    max_batch: usize,
    (ct, cd): (TableOptim, DenseOptim),
) -> String {
    let p = s.p;
    if p.pins.batch_size {
        return "the pinned batch".to_string();
    }
    if batch == max_batch {
        return format!("the largest batch allowed (plan.max_batch = {max_batch})");
    }
    let layout = p.config.model.layout;
    let (_, ledger, _) = s.cost_with(p.config, batch + 1, ct, cd);
    match ledger.largest_allocation() {
        Some((name, bytes)) if bytes > p.device.max_buffer_bytes => format!(
            "the largest batch whose tensors fit the device's largest buffer (at batch {}, `{name}` \
             needs {bytes} B > {} B)",
            batch + 1,
            p.device.max_buffer_bytes
        ),
        _ => format!(
            "the largest batch within the budget (batch {} needs {} with {}, the least memory)",
            batch + 1,
            format_bytes(ledger.peak(Placement::Device).bytes + slack_bytes(p.budget_bytes)),
            pair_name(layout, ct, cd)
        ),
    }
}

fn over_budget(c: &Candidate, p: &Problem) -> String {
    if c.largest_allocation_bytes > p.device.max_buffer_bytes {
        return format!(
            "a {} tensor is over the device's largest buffer ({})",
            format_bytes(c.largest_allocation_bytes),
            format_bytes(p.device.max_buffer_bytes)
        );
    }
    if c.fits {
        return "fits".to_string();
    }
    let need = c.predicted_peak_bytes + slack_bytes(p.budget_bytes);
    format!(
        "over budget by {} ({} peak at {})",
        format_bytes(need.saturating_sub(p.budget_bytes)),
        format_bytes(c.predicted_peak_bytes),
        c.peak_point.name()
    )
}

/// Single changes that would make the run fit, ranked: the optimizer or batch changes first (the
/// model stays), then the sparse layout, then both optimizers at once, then a narrower embedding,
/// each group by the bytes it frees (the smallest sufficient change first); a larger budget last.
/// Per optimizer knob only the most capable alternative that fits is listed.
fn suggestions(
    s: &Solver,
    min_batch: usize,
    (ct, cd): (TableOptim, DenseOptim),
    base: &Candidate,
) -> Vec<Suggestion> {
    let p = s.p;
    let config = p.config;
    let layout = config.model.layout;
    let mut out: Vec<(u8, Suggestion)> = Vec::new();
    let mut push = |tier: u8, key: &str, from: String, to: String, c: &Candidate| -> bool {
        if !c.fits {
            return false;
        }
        let frees = base
            .predicted_peak_bytes
            .saturating_sub(c.predicted_peak_bytes);
        let effect = if c.predicted_peak_bytes <= base.predicted_peak_bytes {
            format!("frees {}", format_bytes(frees))
        } else {
            format!(
                "fits ({} peak, no tensor over the largest buffer)",
                format_bytes(c.predicted_peak_bytes)
            )
        };
        out.push((
            tier,
            Suggestion {
                key: key.to_string(),
                text: format!("{key} {from} → {to} {effect}"),
                from,
                to,
                frees_bytes: frees,
            },
        ));
        true
    };
    let mut single_optimizer = false;
    // A weaker table optimizer (when pinned): the most capable one that fits.
    if p.pins.table && layout == Layout::Sparse {
        for t in [
            TableOptim::RowwiseAdagrad,
            TableOptim::Momentum,
            TableOptim::Sgd,
        ] {
            if capability(layout, t, cd) < capability(layout, ct, cd) {
                let c = s.candidate(min_batch, t, cd);
                if push(0, "optim.table", ct.name().into(), t.name().into(), &c) {
                    single_optimizer = true;
                    break;
                }
            }
        }
    }
    // A weaker dense optimizer (when pinned).
    if p.pins.dense {
        for d in [DenseOptim::Momentum, DenseOptim::Sgd] {
            if d.state_per_weight() < cd.state_per_weight() {
                let c = s.candidate(min_batch, ct, d);
                if push(0, "optim.dense", cd.name().into(), d.name().into(), &c) {
                    single_optimizer = true;
                    break;
                }
            }
        }
    }
    // A smaller batch.
    if min_batch > 1
        && let Some(b) = s.largest_batch(1, min_batch - 1, |b| s.fits(b, ct, cd))
    {
        let c = s.candidate(b, ct, cd);
        let key = if p.pins.batch_size {
            "train.batch_size"
        } else {
            "plan.min_batch"
        };
        push(0, key, min_batch.to_string(), b.to_string(), &c);
    }
    // The sparse layout, with the most capable table optimizer that fits.
    if layout == Layout::Dense {
        let mut sparse = config.clone();
        sparse.model.layout = Layout::Sparse;
        let tables: &[TableOptim] = if p.pins.table {
            &[ct]
        } else {
            &[
                TableOptim::Adam,
                TableOptim::RowwiseAdagrad,
                TableOptim::Momentum,
                TableOptim::Sgd,
            ]
        };
        for &t in tables {
            let c = s.candidate_with(&sparse, min_batch, t, cd);
            let to = format!("sparse (table {})", t.name());
            if push(1, "model.layout", "dense".into(), to, &c) {
                break;
            }
        }
    }
    // Both optimizers to SGD, when both are pinned and neither alone is enough.
    if p.pins.table
        && p.pins.dense
        && !single_optimizer
        && layout == Layout::Sparse
        && (ct, cd) != (TableOptim::Sgd, DenseOptim::Sgd)
    {
        let c = s.candidate(min_batch, TableOptim::Sgd, DenseOptim::Sgd);
        push(
            2,
            "optim",
            format!("{}/{}", ct.name(), cd.name()),
            "sgd/sgd".into(),
            &c,
        );
    }
    // A narrower embedding.
    if config.model.dim > 1 {
        let fits_dim = |dim: usize| {
            let mut narrower = config.clone();
            narrower.model.dim = dim;
            s.cost_with(&narrower, min_batch, ct, cd).2
        };
        if let Some(dim) = s.largest_batch(1, config.model.dim - 1, fits_dim) {
            let mut narrower = config.clone();
            narrower.model.dim = dim;
            let c = s.candidate_with(&narrower, min_batch, ct, cd);
            push(
                3,
                "model.dim",
                config.model.dim.to_string(),
                dim.to_string(),
                &c,
            );
        }
    }
    out.sort_by(|(ta, a), (tb, b)| {
        ta.cmp(tb)
            .then(a.frees_bytes.cmp(&b.frees_bytes))
            .then(a.key.cmp(&b.key))
    });
    let mut out: Vec<Suggestion> = out.into_iter().map(|(_, s)| s).collect();
    // A larger budget, when buffers allow.
    if base.largest_allocation_bytes <= p.device.max_buffer_bytes {
        let budget = round_up_mib(needed_budget(base.predicted_peak_bytes)).max(p.budget_bytes + 1);
        out.push(Suggestion {
            key: "budget".into(),
            from: format_bytes(p.budget_bytes),
            to: format_bytes(budget),
            frees_bytes: budget - p.budget_bytes,
            text: format!(
                "budget {} → {} (adds {})",
                format_bytes(p.budget_bytes),
                format_bytes(budget),
                format_bytes(budget - p.budget_bytes)
            ),
        });
    }
    out
}

/// The smallest budget `b` with `peak + slack_bytes(b) ≤ b`.
fn needed_budget(peak: u64) -> u64 {
    // b − b/400 ≥ peak + 16 KiB  ⇐  b ≥ (peak + 16 KiB) · 400/399, plus one for rounding.
    ((peak + (16 << 10)) as u128 * 400 / 399 + 1) as u64
}

fn round_up_mib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20) << 20
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use widebag_config::load;
    use widebag_data::{BatchSource, SyntheticSpec, SyntheticStream};

    const LAVAPIPE: DeviceFacts = DeviceFacts {
        max_buffer_bytes: 128 << 20,
        alignment_bytes: 32,
    };

    fn config(sets: &[&str]) -> Config {
        let mut args: Vec<String> = [
            "data.width=2000",
            "data.n_classes=2000",
            "model.dim=16",
            "model.hidden=[32]",
            "plan.max_batch=2048",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(sets.iter().map(|s| s.to_string()));
        load(None, &args).unwrap()
    }

    fn sample(c: &Config) -> RowSample {
        let spec = SyntheticSpec {
            width: c.data.width,
            n_classes: c.data.n_classes(),
            seed: c.train.seed,
            ..SyntheticSpec::default()
        };
        let source = BatchSource::Synthetic(SyntheticStream::new(spec).unwrap());
        RowSample::collect(&source, c.data.width, c.plan.max_batch, 8).unwrap()
    }

    fn plan(c: &Config, rows: &RowSample, budget: u64, pins: Pins) -> Plan {
        let calibration = Calibration::lavapipe_2core();
        solve(&Problem {
            config: c,
            device: LAVAPIPE,
            budget_bytes: budget,
            sample: rows,
            pins,
            calibration: &calibration,
        })
        .unwrap()
    }

    #[test]
    fn chosen_fits_and_one_more_row_does_not() {
        let c = config(&[]);
        let rows = sample(&c);
        let p = plan(&c, &rows, 4 << 20, Pins::default());
        assert!(p.fits);
        let b = p.chosen.batch_size;
        assert!(b > 1 && b < 2048, "batch {b}");
        assert!(p.chosen.predicted_peak_bytes + p.slack_bytes <= p.budget_bytes);
        let bigger = p.runner_ups.last().unwrap();
        assert_eq!(bigger.batch_size, b + 1);
        assert!(!bigger.fits);
        assert!(p.suggestions.is_empty());
    }

    #[test]
    fn at_the_batch_cap_the_optimizer_improves_with_the_budget() {
        let c = config(&[]);
        let rows = sample(&c);
        let small = plan(&c, &rows, 6 << 20, Pins::default());
        let large = plan(&c, &rows, 64 << 20, Pins::default());
        assert_eq!(large.chosen.batch_size, 2048);
        assert_eq!(
            (large.chosen.table, large.chosen.dense),
            (TableOptim::Adam, DenseOptim::Adam)
        );
        assert!(small.chosen.batch_size <= large.chosen.batch_size);
    }

    #[test]
    fn infeasible_pins_get_ranked_suggestions_that_fit() {
        let c = config(&[
            "train.batch_size=1024",
            "optim.table=adam",
            "optim.dense=adam",
        ]);
        let rows = sample(&c);
        let pins = Pins {
            batch_size: true,
            table: true,
            dense: true,
        };
        let p = plan(&c, &rows, 3 << 20, pins);
        assert!(!p.fits);
        assert!(!p.suggestions.is_empty());
        let freed: Vec<u64> = p.suggestions.iter().map(|s| s.frees_bytes).collect();
        let (last, rest) = p.suggestions.split_last().unwrap();
        assert_eq!(last.key, "budget");
        // Optimizer and batch changes (the model stays) come before model changes.
        let first_model = rest.iter().position(|s| s.key.starts_with("model."));
        let last_knob = rest
            .iter()
            .rposition(|s| s.key.starts_with("optim") || s.key == "train.batch_size");
        if let (Some(m), Some(k)) = (first_model, last_knob) {
            assert!(k < m, "{freed:?}");
        }
        assert!(rest.iter().any(|s| s.key == "train.batch_size"));
        // Each suggestion, applied alone, fits.
        for sug in rest {
            let mut changed = c.clone();
            let mut pins = pins;
            match sug.key.as_str() {
                "optim.table" => changed.optim.table = serde_plain(&sug.to),
                "train.batch_size" => changed.train.batch_size = sug.to.parse().unwrap(),
                "model.dim" => changed.model.dim = sug.to.parse().unwrap(),
                "optim.dense" | "optim" => continue,
                other => panic!("unexpected {other}"),
            }
            pins.batch_size = true;
            assert!(plan(&changed, &rows, 3 << 20, pins).fits, "{}", sug.text);
        }
        let budget: u64 = p.budget_bytes + last.frees_bytes;
        assert!(plan(&c, &rows, budget, pins).fits, "{}", last.text);
    }

    fn serde_plain(name: &str) -> TableOptim {
        TableOptim::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .unwrap()
    }

    #[test]
    fn the_dense_seed_model_on_lavapipe_is_refused_for_its_buffer() {
        let c = config(&[
            "data.width=240000",
            "data.n_classes=240000",
            "model.layout=\"dense\"",
            "model.dim=1024",
            "model.hidden=[512]",
            "plan.max_batch=16",
        ]);
        let rows = sample(&c);
        let p = plan(&c, &rows, 16 << 30, Pins::default());
        assert!(!p.fits);
        assert!(
            p.chosen.verdict.contains("largest buffer"),
            "{}",
            p.chosen.verdict
        );
        assert!(p.suggestions.iter().any(|s| s.key == "model.layout"));
    }

    #[test]
    fn the_throughput_objective_takes_the_fastest_pair_at_its_largest_batch() {
        let c = config(&["plan.objective=\"throughput\""]);
        let rows = sample(&c);
        let p = plan(&c, &rows, 6 << 20, Pins::default());
        assert!(p.fits);
        assert_eq!(p.objective, Objective::Throughput);
        let best = p.chosen.predicted_examples_per_s;
        assert!(best > 0.0);
        for r in p.runner_ups.iter().filter(|r| r.fits) {
            assert!(r.predicted_examples_per_s <= best, "{r:?}");
        }
        // Each pair at its own largest batch: the chosen batch is where it stops fitting.
        assert_eq!(p.chosen.max_batch_size, Some(p.chosen.batch_size));
        assert!(
            !plan(&c, &rows, 6 << 20, Pins::default())
                .runner_ups
                .is_empty()
        );
    }

    #[test]
    fn default_budget_keeps_the_reserve() {
        assert_eq!(default_budget_bytes(None), None);
        assert_eq!(default_budget_bytes(Some(80 << 30)), Some(72 << 30));
        assert_eq!(default_budget_bytes(Some(2 << 30)), Some(1536 << 20));
    }

    #[test]
    fn plans_are_deterministic() {
        let c = config(&[]);
        let rows = sample(&c);
        assert_eq!(
            plan(&c, &rows, 5 << 20, Pins::default()),
            plan(&c, &rows, 5 << 20, Pins::default())
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn a_larger_budget_never_gives_a_smaller_batch_or_a_weaker_optimizer(
            a in (2u64 << 20)..(48u64 << 20),
            extra in 0u64..(32u64 << 20),
        ) {
            let c = config(&[]);
            let rows = sample(&c);
            let small = plan(&c, &rows, a, Pins::default());
            let large = plan(&c, &rows, a + extra, Pins::default());
            prop_assert!(large.fits || !small.fits);
            if small.fits {
                prop_assert!(large.chosen.batch_size >= small.chosen.batch_size);
                if large.chosen.batch_size == small.chosen.batch_size {
                    prop_assert!(
                        capability(c.model.layout, large.chosen.table, large.chosen.dense)
                            >= capability(c.model.layout, small.chosen.table, small.chosen.dense)
                    );
                }
            }
        }

        #[test]
        fn pinning_the_optimizer_never_gives_a_bigger_batch(
            budget in (2u64 << 20)..(48u64 << 20),
            t in 0usize..4,
            d in 0usize..4,
        ) {
            let mut c = config(&[]);
            c.optim.table = TableOptim::ALL[t];
            c.optim.dense = DenseOptim::ALL[d];
            let rows = sample(&c);
            let free = plan(&c, &rows, budget, Pins::default());
            let pinned = plan(&c, &rows, budget, Pins { batch_size: false, table: true, dense: true });
            if pinned.fits {
                prop_assert!(free.fits);
                prop_assert!(pinned.chosen.batch_size <= free.chosen.batch_size);
            }
        }
    }
}
