//! The solver's orchestration: the layouts compared (the configured one and each rung of
//! remedies), and per layout the batch range, the candidate pairs, the search for the chosen
//! plan and its runner-ups, and the suggestions when nothing fits; then the best layout's plan.

use std::cmp::Ordering;

use widebag_config::{Config, Objective, bands};

use crate::enumerate::{capability, cheapest, pairs};
use crate::estimate::{Estimator, Variant};
use crate::problem::{Problem, SolverError, slack_bytes};
use crate::remedy::{
    Change, LayoutOption, Remedy, RemedyTaken, bands_of, effective_chunk, ladder,
    with_input_budget, with_output_budget, with_remedies,
};
use crate::report::{Plan, over_budget};
use crate::search::{Search, choose, largest_batch};
use crate::suggest::suggestions;

/// Plans the run: the batch size, optimizers and layout remedies that fit
/// `problem.budget_bytes`. Each layout of the ladder is planned alone; the best plan wins by the
/// objective (fits, then the largest batch and the most capable optimizers, or the highest
/// predicted throughput), ties to the fewer remedies. The winner's remedies are then pruned to
/// those that change the answer, and a narrower class chunk is widened as far as the plan
/// allows. When no layout fits, the plan is the most remedied layout's (its suggestions name
/// what would still be needed).
pub fn solve(problem: &Problem) -> Result<Plan, SolverError> {
    let n_bands = problem.bands.input.len().max(1);
    let device_bf16 = problem.device.bf16;
    // A host tier saves nothing where the device computes in the host's memory (flex).
    let ladder_pins = crate::problem::Pins {
        placement: problem.pins.placement || problem.device.host_memory,
        ..problem.pins
    };
    let rungs = ladder(problem.config, n_bands, ladder_pins, device_bf16);
    let mut evaluations = 0;
    let mut plan_of = |config: &Config| -> Result<Plan, SolverError> {
        let bands = bands_of(config, problem.bands);
        let p = solve_layout(&Problem {
            config,
            bands: &bands,
            device: problem.device,
            budget_bytes: problem.budget_bytes,
            sample: problem.sample,
            pins: problem.pins,
            calibration: problem.calibration,
            ranks: problem.ranks,
        })?;
        evaluations += p.evaluations;
        Ok(p)
    };
    // Under the batch objective no rung can beat one at the largest batch with the most capable
    // optimizers: the rungs after it are not planned.
    let objective = problem.config.plan.objective;
    let (_, max_batch) = problem.batch_range()?;
    let top = pairs(problem.config, problem.pins)
        .into_iter()
        .map(|(t, d)| capability(problem.config.model.layout, t, d))
        .max();
    let mut plans = Vec::with_capacity(rungs.len());
    for (_, config) in &rungs {
        let p = plan_of(config)?;
        let c = &p.chosen;
        let unbeatable = objective == Objective::Batch
            && p.fits
            && c.batch_size == max_batch
            && Some(capability(p.layout, c.table, c.dense)) == top;
        plans.push(p);
        if unbeatable {
            break;
        }
    }
    let rungs = &rungs[..plans.len()];
    let mut best = 0;
    for i in 1..plans.len() {
        if better(&plans[i], &plans[best], objective) == Ordering::Greater {
            best = i;
        }
    }
    if !plans[best].fits {
        best = plans.len() - 1;
    }
    let (mut set, mut config, mut plan) = (
        rungs[best].0.clone(),
        rungs[best].1.clone(),
        plans[best].clone(),
    );
    if plan.fits {
        // A layout is as good when the chosen batch and optimizers still fit there: removing a
        // remedy or widening the chunk only adds memory (and saves time).
        let est = Estimator::new(problem);
        let (batch, t, d) = (plan.chosen.batch_size, plan.chosen.table, plan.chosen.dense);
        let still_fits = |c: &Config| {
            let bands = bands_of(c, problem.bands);
            let v = Variant {
                config: c,
                bands: &bands,
            };
            est.fits_with(v, batch, t, d)
        };
        // Drop each remedy (last first) the chosen plan does not need.
        for r in set.clone().into_iter().rev() {
            let fewer: Vec<Remedy> = set.iter().copied().filter(|&x| x != r).collect();
            if let Some(c) = with_remedies(problem.config, &fewer, n_bands, device_bf16)
                && still_fits(&c)
            {
                (set, config) = (fewer, c);
            }
        }
        // The widest chunk at which it still fits.
        if set.contains(&Remedy::NarrowChunk) {
            let (lo, hi) = (config.model.class_chunk, effective_chunk(problem.config));
            let at = |chunk: usize| {
                let mut c = config.clone();
                c.model.class_chunk = chunk;
                c
            };
            if let Some(w) = largest_batch(lo, hi.saturating_sub(1).max(lo), |w| still_fits(&at(w)))
            {
                config = at(w);
            }
        }
        // The largest side budgets (the largest heads) at which it still fits.
        if set.contains(&Remedy::HeadTailInput) {
            let full = bands::input_side_bytes(problem.config, &[]);
            let cuts = config.model.input_bands.cutoffs.ids();
            let lo = bands::input_side_bytes(&config, cuts);
            let at = |c: &Config, b: u64| with_input_budget(c, b);
            config = widest(&config, (lo, full), at, &still_fits);
        }
        if set.contains(&Remedy::AdaptiveOutput) {
            let full = bands::output_side_bytes(problem.config, &[]);
            let cuts = config.model.output_bands.cutoffs.ids();
            let lo = bands::output_side_bytes(&config, cuts);
            let at = |c: &Config, b: u64| with_output_budget(c, b);
            config = widest(&config, (lo, full), at, &still_fits);
        }
        let extra = est.evaluations();
        plan = plan_of(&config)?;
        evaluations += extra;
    }
    let layouts: Vec<LayoutOption> = plans
        .iter()
        .zip(rungs)
        .filter(|(_, (remedies, _))| *remedies != set)
        .map(|(p, (remedies, _))| layout_option(p, remedies, &plan, objective))
        .collect();
    let remedies = taken(problem, &set, &config, &plan);
    plan.evaluations = evaluations;
    plan.remedies = remedies;
    plan.layouts = layouts;
    Ok(plan)
}

/// `config` re-cut by `at` at the largest side budget in `lo..full` (bytes of its current cut,
/// and of the unsplit side), to 1/256 of the range, at which it still `fits`.
fn widest(
    config: &Config,
    (lo, full): (u64, u64),
    at: impl Fn(&Config, u64) -> Option<Config>,
    fits: &impl Fn(&Config) -> bool,
) -> Config {
    // Searched in steps of 1/256 of the range: a side budget is a knob, not a byte count.
    let step = (full.saturating_sub(lo) / 256).max(1);
    let steps = (full.saturating_sub(1).saturating_sub(lo) / step) as usize;
    let fits_at = |k: usize| at(config, lo + k as u64 * step).is_some_and(|c| fits(&c));
    largest_batch(0, steps, fits_at)
        .and_then(|k| at(config, lo + k as u64 * step))
        .unwrap_or_else(|| config.clone())
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

/// The remedies `set` of the chosen `config`, each with the bytes it saves at the chosen batch
/// and optimizers: the config with the remedies before it against the config with it too.
fn taken(problem: &Problem, set: &[Remedy], config: &Config, plan: &Plan) -> Vec<RemedyTaken> {
    let est = Estimator::new(problem);
    let n_bands = problem.bands.input.len().max(1);
    let (batch, t, d) = (plan.chosen.batch_size, plan.chosen.table, plan.chosen.dense);
    // Configs along the way: the configured one, then each remedy's key set as `config` has it.
    let mut steps = vec![problem.config.clone()];
    for &r in set {
        let mut next = steps.last().expect("the configured config").clone();
        Change::of(r, config).apply_to(&mut next);
        steps.push(next);
    }
    let peak = |c: &Config| {
        let bands = bands_of(c, problem.bands);
        let v = Variant {
            config: c,
            bands: &bands,
        };
        est.candidate_with(v, batch, t, d).predicted_peak_bytes as i64
    };
    set.iter()
        .enumerate()
        .map(|(k, &r)| RemedyTaken {
            remedy: r,
            key: r.key(),
            from: r.value(&steps[k], n_bands),
            to: r.value(&steps[k + 1], n_bands),
            cost: r.cost(),
            saves_bytes: peak(&steps[k]) - peak(&steps[k + 1]),
            change: Change::of(r, config),
            reference: r.reference(),
        })
        .collect()
}

/// Another layout's best plan, and why the chosen one beat it.
fn layout_option(
    p: &Plan,
    remedies: &[Remedy],
    chosen: &Plan,
    objective: Objective,
) -> LayoutOption {
    let c = &p.chosen;
    let verdict = if !p.fits {
        "nothing fits".to_string()
    } else if better(p, chosen, objective) == Ordering::Less {
        "fits, below the chosen plan".to_string()
    } else {
        "as good: the chosen plan needs fewer remedies".to_string()
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
    let ranks = est.rank_plans(chosen.batch_size, chosen.table, chosen.dense);
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
        keep_accuracy: problem.config.plan.keep_accuracy,
        chosen,
        runner_ups,
        suggestions,
        remedies: Vec::new(),
        layouts: Vec::new(),
        evaluations: est.evaluations(),
        ranks,
    })
}

#[cfg(test)]
#[path = "solve_tests.rs"]
pub(crate) mod tests;
