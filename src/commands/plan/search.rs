//! The plan checked on the device: `--verify` runs it and compares the measured peak with the
//! budget; `--search` finds the true largest batch from real runs' measured peaks.

use anyhow::Context;
use widebag_config::Config;
use widebag_model::Compute;
use widebag_prepare::Prepared;
use widebag_solver::Plan;

use super::bracket::{BatchRange, Bracket, bracket};
use crate::measure::measure;
use crate::plan::measured::{Probe, Search, Verify};
use crate::preflight::{check_fits, device_facts, predict};

/// The measured peak (bytes in use at the step's readable points, after a warm-up step, and the
/// reservation) of `config`, or `None` when the step is refused for the buffer limit.
fn measured_peak(
    prepared: &Prepared,
    config: &Config,
    compute: &Compute,
    steps: usize,
) -> anyhow::Result<Option<(u64, Option<u64>)>> {
    let cut = |c: &Config| {
        (
            c.model.input_bands.cutoffs.clone(),
            c.model.output_bands.clone(),
        )
    };
    if cut(config) != cut(&prepared.config) {
        // The plan cut a side into bands: they and the numbering come from preparing it again.
        let again = widebag_prepare::open_data(config, &widebag_prepare::PrepareOptions::TRAIN)?;
        return measured_peak(&again, config, compute, steps);
    }
    let probe = Prepared {
        config: config.clone(),
        batches: prepared.batches.clone(),
        data: prepared.data.clone(),
        warnings: Vec::new(),
        eval: Vec::new(),
        eval_seen: Vec::new(),
        eval_users: None,
        bands: prepared.bands.clone(),
        model_bands: prepared.model_bands.clone(),
        relabel: prepared.relabel.clone(),
        vocabulary: None,
        labels: None,
        user_columns: prepared.user_columns,
    };
    let (spec, ledger) = predict(&probe, device_facts(compute))?;
    if check_fits(&ledger, &spec).is_err() {
        return Ok(None);
    }
    let summary = measure(probe, compute, steps)?;
    let in_use = summary
        .peak_in_use_bytes
        .context("the backend reports no allocator counters: --verify and --search need wgpu")?;
    Ok(Some((in_use, summary.peak_reserved_bytes)))
}

/// Runs the plan for `steps` steps and checks the measured peak against the budget.
pub fn verify(
    prepared: &Prepared,
    plan: &Plan,
    compute: &Compute,
    steps: usize,
) -> anyhow::Result<Verify> {
    let config = plan.apply_to(&prepared.config);
    let (measured, reserved) = measured_peak(prepared, &config, compute, steps)?
        .context("the plan's step has a tensor over the device's largest buffer")?;
    Ok(Verify {
        steps: steps.max(2),
        predicted_peak_bytes: plan.chosen.predicted_peak_bytes,
        measured_peak_bytes: measured,
        measured_reserved_peak_bytes: reserved,
        under_budget: measured <= plan.budget_bytes,
    })
}

/// The ground truth: the largest batch whose run's measured peak stays under the budget, bracketed
/// from the plan's own batch (or `plan.min_batch` when nothing fits) and bisected until the
/// bracket is within `tolerance_pct` of the batch (one row at most when 0); see [`bracket`].
/// Uses the plan's optimizers and its layout remedies (host tier, half tables, cut bands), so it
/// measures what the plan chose.
pub fn search(
    prepared: &Prepared,
    plan: &Plan,
    compute: &Compute,
    steps: usize,
    tolerance_pct: f64,
    mut progress: impl FnMut(&Probe),
) -> anyhow::Result<Search> {
    let (table, dense) = (plan.chosen.table, plan.chosen.dense);
    let mut probes = Vec::new();
    let run = |batch: usize| -> anyhow::Result<bool> {
        // The plan's layout (its remedies) and optimizers, at this batch.
        let mut config = plan.apply_to(&prepared.config);
        config.train.batch_size = batch;
        let measured = measured_peak(prepared, &config, compute, steps)?;
        let probe = Probe {
            batch_size: batch,
            measured_peak_bytes: measured.map(|m| m.0),
            runs_under_budget: measured.is_some_and(|m| m.0 <= plan.budget_bytes),
        };
        progress(&probe);
        let ok = probe.runs_under_budget;
        probes.push(probe);
        Ok(ok)
    };
    let start = if plan.fits {
        plan.chosen.batch_size
    } else {
        plan.min_batch
    };
    let Bracket { good, bad } = bracket(
        BatchRange {
            min_batch: plan.min_batch,
            max_batch: plan.max_batch,
            start_batch: start,
        },
        tolerance_pct,
        run,
    )?;
    Ok(Search {
        batch_size: good,
        first_over: bad,
        table,
        dense,
        plan_vs_search_pct: good
            .filter(|_| plan.fits)
            .map(|g| plan.chosen.batch_size as f64 / g as f64 * 100.0),
        probes,
    })
}
