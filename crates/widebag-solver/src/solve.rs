//! The solver's orchestration: the layouts compared (the configured one and each rung of
//! remedies), and per layout the batch range, the candidate pairs, the search for the chosen
//! plan and its runner-ups, and the suggestions when nothing fits; then the best layout's plan.

use std::cmp::Ordering;

use widebag_config::Objective;

use crate::enumerate::{capability, cheapest, pairs};
use crate::estimate::{Estimator, Variant};
use crate::remedy::{Change, LayoutOption, Remedy, RemedyTaken, ladder};
use crate::report::over_budget;
use crate::search::{Search, choose, largest_batch};
use crate::suggest::suggestions;
use crate::{Plan, Problem, SolverError, slack_bytes};

/// Plans the run: the batch size, optimizers and layout remedies that fit
/// `problem.budget_bytes`. Each layout of the ladder is planned alone; the best plan wins by the
/// objective (fits, then the largest batch and the most capable optimizers, or the highest
/// predicted throughput), ties to the fewer remedies. When no layout fits, the plan is the most
/// remedied layout's (its suggestions name what would still be needed).
pub fn solve(problem: &Problem) -> Result<Plan, SolverError> {
    let n_bands = problem.bands.input.len().max(1);
    let rungs = ladder(
        problem.config,
        n_bands,
        problem.pins,
        problem.device.host_threads,
    );
    let mut plans = Vec::with_capacity(rungs.len());
    for (_, config) in &rungs {
        let p = Problem {
            config,
            bands: problem.bands,
            device: problem.device,
            budget_bytes: problem.budget_bytes,
            sample: problem.sample,
            pins: problem.pins,
            calibration: problem.calibration,
        };
        plans.push(solve_layout(&p)?);
    }
    let objective = problem.config.plan.objective;
    let mut best = 0;
    for i in 1..plans.len() {
        if better(&plans[i], &plans[best], objective) == Ordering::Greater {
            best = i;
        }
    }
    if !plans[best].fits {
        best = plans.len() - 1;
    }
    let evaluations: usize = plans.iter().map(|p| p.evaluations).sum();
    let layouts: Vec<LayoutOption> = plans
        .iter()
        .zip(&rungs)
        .enumerate()
        .filter(|&(i, _)| i != best)
        .map(|(i, (p, (remedies, _)))| layout_option(p, remedies, &plans[best], i < best))
        .collect();
    let remedies = taken(problem, &rungs, best, &plans[best]);
    let mut plan = plans.swap_remove(best);
    plan.evaluations = evaluations;
    plan.remedies = remedies;
    plan.layouts = layouts;
    Ok(plan)
}

/// How `a` compares with `b` under the objective: fitting first, then the largest batch and the
/// most capable optimizers, or the highest predicted throughput.
fn better(a: &Plan, b: &Plan, objective: Objective) -> Ordering {
    let (ca, cb) = (&a.chosen, &b.chosen);
    a.fits.cmp(&b.fits).then_with(|| match objective {
        Objective::Batch => ca.batch_size.cmp(&cb.batch_size).then(
            capability(a.layout, ca.table, ca.dense).cmp(&capability(b.layout, cb.table, cb.dense)),
        ),
        Objective::Throughput => ca
            .predicted_examples_per_s
            .total_cmp(&cb.predicted_examples_per_s),
    })
}

/// The remedies of rung `best`, each with the bytes it saves at the chosen batch and optimizers
/// (the rung before it against its own).
fn taken(
    problem: &Problem,
    rungs: &[(Vec<Remedy>, widebag_config::Config)],
    best: usize,
    plan: &Plan,
) -> Vec<RemedyTaken> {
    let est = Estimator::new(problem);
    let n_bands = problem.bands.input.len().max(1);
    let (batch, t, d) = (plan.chosen.batch_size, plan.chosen.table, plan.chosen.dense);
    let peak = |k: usize| {
        let v = Variant {
            config: &rungs[k].1,
            bands: problem.bands,
        };
        est.candidate_with(v, batch, t, d).predicted_peak_bytes as i64
    };
    (1..=best)
        .map(|k| {
            let r = *rungs[k]
                .0
                .last()
                .expect("a rung past the first adds a remedy");
            RemedyTaken {
                remedy: r,
                key: r.key(),
                from: r.value(&rungs[k - 1].1, n_bands),
                to: r.value(&rungs[k].1, n_bands),
                cost: r.cost(),
                saves_bytes: peak(k - 1) - peak(k),
                change: Change::of(r, &rungs[k].1),
            }
        })
        .collect()
}

/// Another layout's best plan, and why the chosen one beat it.
fn layout_option(p: &Plan, remedies: &[Remedy], chosen: &Plan, fewer: bool) -> LayoutOption {
    let c = &p.chosen;
    let verdict = if !p.fits {
        "nothing fits".to_string()
    } else if fewer {
        format!(
            "fits at batch {} with {} + {}: below the chosen plan",
            c.batch_size,
            c.table.name(),
            c.dense.name()
        )
    } else if (c.batch_size, c.table, c.dense)
        == (
            chosen.chosen.batch_size,
            chosen.chosen.table,
            chosen.chosen.dense,
        )
    {
        "the same plan with more remedies".to_string()
    } else {
        format!("fits at batch {}: no better", c.batch_size)
    };
    LayoutOption {
        remedies: remedies.to_vec(),
        fits: p.fits,
        batch_size: c.batch_size,
        table: c.table,
        dense: c.dense,
        predicted_peak_bytes: c.predicted_peak_bytes,
        predicted_examples_per_s: c.predicted_examples_per_s,
        verdict,
    }
}

/// Plans one layout: the batch size and optimizers that fit `problem.budget_bytes`.
fn solve_layout(problem: &Problem) -> Result<Plan, SolverError> {
    let (min_batch, max_batch) = problem.batch_range()?;
    let est = Estimator::new(problem);
    let pairs = pairs(problem.config, problem.pins);
    let (ct, cd) = cheapest(&pairs);
    let best_batch = largest_batch(min_batch, max_batch, |b| est.fits(b, ct, cd));
    let search = Search {
        pairs: &pairs,
        cheapest: (ct, cd),
        min_batch,
        max_batch,
        best_batch,
    };
    let (chosen, mut runner_ups) = choose(&est, &search);
    if chosen.fits && chosen.batch_size < max_batch {
        let mut bigger = est.candidate(chosen.batch_size + 1, chosen.table, chosen.dense);
        bigger.verdict = over_budget(&bigger, problem);
        runner_ups.push(bigger);
    }
    let suggestions = if chosen.fits {
        Vec::new()
    } else {
        suggestions(&est, min_batch, (ct, cd), &chosen)
    };
    Ok(Plan {
        fits: chosen.fits,
        objective: problem.config.plan.objective,
        layout: problem.config.model.layout,
        budget_bytes: problem.budget_bytes,
        slack_bytes: slack_bytes(problem.budget_bytes),
        max_buffer_bytes: problem.device.max_buffer_bytes,
        pinned: problem.pins.keys(),
        min_batch,
        max_batch,
        chosen,
        runner_ups,
        suggestions,
        remedies: Vec::new(),
        layouts: Vec::new(),
        evaluations: est.evaluations(),
    })
}

#[cfg(test)]
#[path = "solve_tests.rs"]
mod tests;
