//! The solver's orchestration: the layouts compared (the configured one and each rung of
//! remedies), and per layout the batch range, the candidate pairs, the search for the chosen
//! plan and its runner-ups, and the suggestions when nothing fits; then the best layout's plan.

use std::cmp::Ordering;

use widebag_config::{Config, Objective, bands};

use crate::enumerate::{capability, cheapest, pairs};
use crate::estimate::{Estimator, Variant};
use crate::problem::{Pins, Problem, SolverError, slack_bytes};
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
    if problem.config.plan.objective == Objective::Throughput && problem.calibration.is_none() {
        return Err(SolverError::NoCalibration);
    }
    let n_bands = problem.bands.input.len().max(1);
    let device_bf16 = problem.device.bf16;
    // A host tier saves nothing where the device computes in the host's memory (flex).
    let ladder_pins = Pins {
        placement: problem.pins.placement || problem.device.host_memory,
        ..problem.pins
    };
    let rungs = ladder(problem.config, n_bands, ladder_pins, device_bf16);
    let plans = plan_rungs(problem, &rungs)?;
    let rungs = &rungs[..plans.len()];
    let objective = problem.config.plan.objective;
    let best = best_rung(&plans, objective);
    let mut evaluations: usize = plans.iter().map(|p| p.evaluations).sum();
    let (mut set, mut config, mut plan) = (
        rungs[best].0.clone(),
        rungs[best].1.clone(),
        plans[best].clone(),
    );
    if plan.fits {
        let est = Estimator::new(problem);
        (set, config) = prune(problem, &est, &plan, set, config);
        plan = plan_layout(problem, &config)?;
        evaluations += plan.evaluations;
        if let Some((choice, c)) = crate::logits::choose(problem, &est, &plan, &config) {
            if c.model.logits != config.model.logits {
                config = c;
                plan = plan_layout(problem, &config)?;
                evaluations += plan.evaluations;
            }
            plan.logits = Some(choice);
        }
        evaluations += est.evaluations();
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

/// `problem` planned in the layout of `config` alone.
fn plan_layout(problem: &Problem, config: &Config) -> Result<Plan, SolverError> {
    let bands = bands_of(config, problem.bands);
    solve_layout(&Problem {
        config,
        bands: &bands,
        device: problem.device,
        budget_bytes: problem.budget_bytes,
        sample: problem.sample,
        pins: problem.pins,
        calibration: problem.calibration,
        ranks: problem.ranks,
    })
}

/// The ladder's rungs planned in order. Under the batch objective no rung can beat one at the
/// largest batch with the most capable optimizers: the rungs after it are not planned.
fn plan_rungs(
    problem: &Problem,
    rungs: &[(Vec<Remedy>, Config)],
) -> Result<Vec<Plan>, SolverError> {
    let objective = problem.config.plan.objective;
    let (_, max_batch) = problem.batch_range()?;
    let top = pairs(problem.config, problem.pins)
        .into_iter()
        .map(|(t, d)| capability(problem.config.model.layout, t, d))
        .max();
    let mut plans = Vec::with_capacity(rungs.len());
    for (_, config) in rungs {
        let p = plan_layout(problem, config)?;
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
    Ok(plans)
}

/// The best plan by the objective, ties to the earlier rung (fewer remedies); the last, most
/// remedied rung when none fits (its suggestions name what would still be needed).
fn best_rung(plans: &[Plan], objective: Objective) -> usize {
    let mut best = 0;
    for i in 1..plans.len() {
        if better(&plans[i], &plans[best], objective) == Ordering::Greater {
            best = i;
        }
    }
    if !plans[best].fits {
        best = plans.len() - 1;
    }
    best
}

/// The winning layout's remedies `set` pruned to those the chosen batch and optimizers need,
/// and a narrower chunk or a cut side widened as far as they still fit there: removing a remedy
/// or widening only adds memory. Under the throughput objective a remedy also stays where the
/// throughput model says it is faster without it than with it (the adaptive softmax: fewer
/// flops), so the pruned plan is no slower than the rung that won.
fn prune(
    problem: &Problem,
    est: &Estimator,
    plan: &Plan,
    mut set: Vec<Remedy>,
    mut config: Config,
) -> (Vec<Remedy>, Config) {
    let n_bands = problem.bands.input.len().max(1);
    let (batch, t, d) = (plan.chosen.batch_size, plan.chosen.table, plan.chosen.dense);
    let still_fits = |c: &Config| {
        let bands = bands_of(c, problem.bands);
        let v = Variant {
            config: c,
            bands: &bands,
        };
        est.fits_with(v, batch, t, d)
    };
    let examples_per_s = |c: &Config| {
        let bands = bands_of(c, problem.bands);
        let v = Variant {
            config: c,
            bands: &bands,
        };
        est.candidate_with(v, batch, t, d).predicted_examples_per_s
    };
    let throughput = problem.config.plan.objective == Objective::Throughput;
    // Drop each remedy (last first) the chosen plan does not need.
    for r in set.clone().into_iter().rev() {
        let fewer: Vec<Remedy> = set.iter().copied().filter(|&x| x != r).collect();
        if let Some(c) = with_remedies(problem.config, &fewer, n_bands, problem.device.bf16)
            && still_fits(&c)
            && (!throughput || examples_per_s(&c) >= examples_per_s(&config))
        {
            (set, config) = (fewer, c);
        }
    }
    let config = widen(problem, &set, config, &still_fits);
    (set, config)
}

/// `config` with the widest class chunk, and the largest side budgets (the largest heads), at
/// which it still fits.
fn widen(
    problem: &Problem,
    set: &[Remedy],
    mut config: Config,
    still_fits: &impl Fn(&Config) -> bool,
) -> Config {
    if set.contains(&Remedy::NarrowChunk) {
        let (lo, hi) = (config.model.class_chunk, effective_chunk(problem.config));
        let at = |chunk: usize| {
            let mut c = config.clone();
            c.model.class_chunk = chunk;
            c
        };
        if let Some(w) = largest_batch(lo, hi.saturating_sub(1).max(lo), |w| still_fits(&at(w))) {
            config = at(w);
        }
    }
    if set.contains(&Remedy::HeadTailInput) {
        let full = bands::input_side_bytes(problem.config, &[]);
        let cuts = config.model.input_bands.cutoffs.ids();
        let lo = bands::input_side_bytes(&config, cuts);
        let at = |c: &Config, b: u64| with_input_budget(c, b);
        config = widest(&config, (lo, full), at, still_fits);
    }
    if set.contains(&Remedy::AdaptiveOutput) {
        let full = bands::output_side_bytes(problem.config, &[]);
        let cuts = config.model.output_bands.cutoffs.ids();
        let lo = bands::output_side_bytes(&config, cuts);
        let at = |c: &Config, b: u64| with_output_budget(c, b);
        config = widest(&config, (lo, full), at, still_fits);
    }
    config
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
        predicted_step_s: c.predicted_step_s,
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
        logits: None,
        evaluations: est.evaluations(),
        ranks,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    //! Tests of the solver: fit and one row more, the optimizer and the layout remedies as the
    //! budget grows, suggestions that each fit, pins respected, determinism, and the property
    //! tests.

    use super::*;
    use proptest::prelude::*;
    use widebag_config::bands::ModelBands;
    use widebag_config::{
        BandPlacement, Config, DenseOptim, Objective, Precision, TableOptim, load,
    };
    use widebag_data::{BatchSource, SyntheticSpec, SyntheticStream};
    use widebag_ledger::step::DeviceFacts;

    use crate::enumerate::capability;
    use crate::problem::Pins;
    use crate::sample::RowSample;
    use crate::throughput::Calibration;

    const LAVAPIPE: DeviceFacts = DeviceFacts {
        max_buffer_bytes: 128 << 20,
        alignment_bytes: 32,
        host_threads: 0,
        bf16: false,
        host_memory: false,
    };

    pub(crate) fn config(sets: &[&str]) -> Config {
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

    pub(crate) fn sample(c: &Config) -> RowSample {
        let spec = SyntheticSpec {
            width: c.data.width,
            n_classes: c.data.n_classes(),
            seed: c.train.seed,
            ..SyntheticSpec::default()
        };
        let source = BatchSource::Synthetic(SyntheticStream::new(spec).unwrap());
        RowSample::collect(&source, c.data.width, c.plan.max_batch, 8).unwrap()
    }

    pub(crate) fn plan(c: &Config, rows: &RowSample, budget: u64, pins: Pins) -> Plan {
        let calibration = Calibration::lavapipe_2core();
        let bands = ModelBands::resolve(c).unwrap();
        solve(&Problem {
            config: c,
            bands: &bands,
            device: LAVAPIPE,
            budget_bytes: budget,
            sample: rows,
            pins,
            calibration: Some(&calibration),
            ranks: 1,
        })
        .unwrap()
    }

    #[test]
    fn chosen_fits_and_one_more_row_does_not() {
        let c = config(&[]);
        let rows = sample(&c);
        // The configured layout (the remedies' knobs pinned): the batch alone meets the budget.
        let layout = Pins {
            placement: true,
            table_dtype: true,
            state_dtype: true,
            class_chunk: true,
            ..Pins::default()
        };
        let p = plan(&c, &rows, 4 << 20, layout);
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
        let c = logits_bound();
        let rows = sample(&c);
        let pins = Pins::ALL;
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
        // Logits bound: a narrower class chunk is a remedy that keeps the model and optimizers.
        assert!(
            rest.iter().any(|s| s.key == "model.class_chunk"),
            "{rest:?}"
        );
        // Each suggestion, applied alone, fits.
        for sug in rest {
            let mut changed = c.clone();
            let mut pins = pins;
            match sug.key.as_str() {
                "optim.table" => changed.optim.table = serde_plain(&sug.to),
                "train.batch_size" => changed.train.batch_size = sug.to.parse().unwrap(),
                "model.dim" => changed.model.dim = sug.to.parse().unwrap(),
                "model.class_chunk" => changed.model.class_chunk = sug.to.parse().unwrap(),
                "model.input_bands.placement" => {
                    changed.model.input_bands.placement = vec![BandPlacement::Host]
                }
                "model.input_bands.dtype" => changed.model.input_bands.dtype = vec![Precision::F16],
                "optim.state_dtype" => changed.optim.state_dtype = Precision::Bf16,
                "optim.dense" | "optim" => continue,
                other => panic!("unexpected {other}"),
            }
            pins.batch_size = true;
            assert!(plan(&changed, &rows, 3 << 20, pins).fits, "{}", sug.text);
        }
        let budget: u64 = p.budget_bytes + last.frees_bytes;
        assert!(plan(&c, &rows, budget, pins).fits, "{}", last.text);
    }

    #[test]
    fn a_table_bound_run_is_offered_the_host_tier_and_half_tables() {
        // 100,000 × 16 rows with lazy Adam (19.2 MB with their moments), few classes.
        let c = table_bound();
        let rows = sample(&c);
        let pins = Pins::ALL;
        let budget = 18 << 20;
        let p = plan(&c, &rows, budget, pins);
        assert!(!p.fits);
        let fits_with = |edit: &dyn Fn(&mut Config)| {
            let mut changed = c.clone();
            edit(&mut changed);
            plan(&changed, &rows, budget, pins).fits
        };
        let key = |k: &str| p.suggestions.iter().find(|s| s.key == k).cloned();
        let host = key("model.input_bands.placement").expect("the host tier");
        assert_eq!(host.to, "[\"host\"]");
        assert!(fits_with(
            &|c| c.model.input_bands.placement = vec![BandPlacement::Host]
        ));
        let half = key("model.input_bands.dtype").expect("f16 tables");
        assert!(fits_with(
            &|c| c.model.input_bands.dtype = vec![Precision::F16]
        ));
        // Both keep the model and the optimizers, so they rank before the narrower embedding,
        // and the smaller change (f16 frees less than moving the table off the device) first.
        let at = |k: &str| p.suggestions.iter().position(|s| s.key == k);
        assert!(half.frees_bytes < host.frees_bytes);
        assert!(at("model.input_bands.dtype") < at("model.input_bands.placement"));
        if let Some(dim) = at("model.dim") {
            assert!(at("model.input_bands.placement").unwrap() < dim);
        }
        // bf16 moments are offered only on a device that has bf16 (lavapipe has none).
        assert!(key("optim.state_dtype").is_none());
    }

    /// The logits-bound model: batch 1024 over 2,000 classes, Adam on both parts.
    pub(crate) fn logits_bound() -> Config {
        config(&[
            "train.batch_size=1024",
            "optim.table=adam",
            "optim.dense=adam",
        ])
    }

    /// The batch and both optimizers pinned, the layout free.
    const RUN_PINNED: Pins = Pins {
        batch_size: true,
        table: true,
        dense: true,
        placement: false,
        table_dtype: false,
        state_dtype: false,
        class_chunk: false,
        checkpointing: false,
        logits: false,
        input_cutoffs: false,
        output_bands: false,
    };

    /// The table-bound model: 100,000 × 16 rows with lazy Adam, few classes, batch 32.
    fn table_bound() -> Config {
        config(&[
            "data.width=100000",
            "data.n_classes=100",
            "train.batch_size=32",
            "optim.table=adam",
            "optim.dense=adam",
            "plan.max_batch=256",
        ])
    }

    #[test]
    fn the_solver_takes_remedies_in_order_and_keeps_adam() {
        let c = table_bound();
        let rows = sample(&c);
        let pins = RUN_PINNED;
        let p = plan(&c, &rows, 18 << 20, pins);
        assert!(p.fits, "{:?}", p.chosen.verdict);
        assert_eq!(
            (p.chosen.table, p.chosen.dense),
            (TableOptim::Adam, DenseOptim::Adam)
        );
        // The host tier (time, the numbers unchanged) suffices: the narrower chunk, tried first,
        // does not help a table-bound run and is pruned.
        let keys: Vec<&str> = p.remedies.iter().map(|r| r.key).collect();
        assert_eq!(keys, ["model.input_bands.placement"]);
        assert!(p.remedies[0].saves_bytes > 0);
        assert_eq!(p.remedies[0].to, "[\"host\"]");
        // The configured layout is listed as the one that lost; rungs with the host tier as no
        // better (they take more remedies).
        assert!(!p.layouts[0].fits && p.layouts[0].remedies.is_empty());
        let with_host = p
            .layouts
            .iter()
            .filter(|l| l.remedies.contains(&Remedy::HostTier));
        assert!(
            with_host
                .clone()
                .all(|l| l.verdict.contains("fewer remedies"))
        );
        // With the placement pinned, f16 tables are taken instead.
        let pins = Pins {
            placement: true,
            ..pins
        };
        let p = plan(&c, &rows, 18 << 20, pins);
        assert!(p.fits);
        let keys: Vec<&str> = p.remedies.iter().map(|r| r.key).collect();
        assert_eq!(keys, ["model.input_bands.dtype"]);
        // Every knob pinned: the configured layout, which does not fit.
        assert!(!plan(&c, &rows, 18 << 20, Pins::ALL).fits);
    }

    /// On a device that computes in the host's memory (flex) a host tier saves nothing: the solver
    /// takes f16 tables instead and suggests no placement.
    #[test]
    fn a_host_tier_is_not_offered_where_the_device_is_the_host() {
        let c = table_bound();
        let rows = sample(&c);
        let calibration = Calibration::lavapipe_2core();
        let bands = ModelBands::resolve(&c).unwrap();
        let solve_on = |budget: u64| {
            solve(&Problem {
                config: &c,
                bands: &bands,
                device: DeviceFacts {
                    host_memory: true,
                    ..LAVAPIPE
                },
                budget_bytes: budget,
                sample: &rows,
                pins: RUN_PINNED,
                calibration: Some(&calibration),
                ranks: 1,
            })
            .unwrap()
        };
        let p = solve_on(18 << 20);
        assert!(p.fits, "{:?}", p.chosen.verdict);
        let keys: Vec<&str> = p.remedies.iter().map(|r| r.key).collect();
        assert_eq!(keys, ["model.input_bands.dtype"]);
        assert!(
            p.layouts
                .iter()
                .all(|l| !l.remedies.contains(&Remedy::HostTier))
        );
        let refused = solve_on(1 << 20);
        assert!(!refused.fits);
        assert!(
            refused
                .suggestions
                .iter()
                .all(|s| s.key != "model.input_bands.placement"),
            "{:?}",
            refused.suggestions
        );
    }

    #[test]
    fn a_logits_bound_run_takes_the_widest_class_chunk_that_fits() {
        // Batch 1024 over 2,000 classes with Adam pinned: the logits are what does not fit.
        let c = logits_bound();
        let rows = sample(&c);
        let pins = RUN_PINNED;
        let budget = 3 << 20;
        assert!(!plan(&c, &rows, budget, Pins::ALL).fits);
        let p = plan(&c, &rows, budget, pins);
        assert!(p.fits, "{}", p.chosen.verdict);
        let keys: Vec<&str> = p.remedies.iter().map(|r| r.key).collect();
        assert_eq!(keys, ["model.class_chunk"]);
        let chunk: usize = p.remedies[0].to.parse().unwrap();
        assert!(chunk > crate::remedy::narrowest_chunk(2000) && chunk < 2000);
        // The widest: one class more per chunk does not fit.
        let mut wider = c.clone();
        wider.model.class_chunk = chunk + 1;
        assert!(!plan(&wider, &rows, budget, Pins::ALL).fits);
        let mut exact = c.clone();
        exact.model.class_chunk = chunk;
        assert!(plan(&exact, &rows, budget, Pins::ALL).fits);
    }

    /// Priced per device: where a chunk costs a GPU's launches, the throughput objective plans
    /// the output in one chunk at a smaller batch; where chunks cost nothing, it takes the
    /// narrower chunk and the larger batch.
    #[test]
    fn the_throughput_objective_pays_for_class_chunks_where_the_device_does() {
        let c = config(&[
            "plan.objective=\"throughput\"",
            "optim.table=adam",
            "optim.dense=adam",
        ]);
        let rows = sample(&c);
        // The adaptive softmax left out (it is faster still, under either model).
        let pins = Pins {
            table: true,
            dense: true,
            output_bands: true,
            ..Pins::default()
        };
        let bands = ModelBands::resolve(&c).unwrap();
        let solve_pinned = |calibration: &Calibration, pins: Pins| {
            solve(&Problem {
                config: &c,
                bands: &bands,
                device: LAVAPIPE,
                budget_bytes: 3 << 20,
                sample: &rows,
                pins,
                calibration: Some(calibration),
                ranks: 1,
            })
            .unwrap()
        };
        let solve_with = |calibration: &Calibration| solve_pinned(calibration, pins);
        let chunked = |p: &Plan| p.remedies.iter().any(|r| r.key == "model.class_chunk");
        let free = Calibration {
            s_per_chunk: 0.0,
            ..Calibration::lavapipe_2core()
        };
        let costly = Calibration {
            s_per_chunk: 0.05,
            ..Calibration::lavapipe_2core()
        };
        let (cheap, dear) = (solve_with(&free), solve_with(&costly));
        assert!(cheap.fits && dear.fits);
        assert!(chunked(&cheap), "{:?}", cheap.remedies);
        assert!(!chunked(&dear), "{:?}", dear.remedies);
        assert!(dear.chosen.batch_size < cheap.chosen.batch_size);
        // Each plan's predicted step is its own model's: the chosen is the fastest it had.
        for p in [&cheap, &dear] {
            assert!(p.chosen.predicted_step_s > 0.0);
            let eps = p.chosen.batch_size as f64 / p.chosen.predicted_step_s;
            assert!((eps - p.chosen.predicted_examples_per_s).abs() < 1e-6 * eps);
            for l in p.layouts.iter().filter(|l| l.fits) {
                assert!(l.predicted_examples_per_s <= p.chosen.predicted_examples_per_s);
            }
        }
        // The adaptive softmax offered too: the fastest rung is its, and the remedies pruned
        // from it keep it (it saves time, not only memory), so the plan is still the fastest
        // (to 0.5 %: its head is then widened as far as it fits, a few more flops for a head
        // closer to the full softmax).
        let all = solve_pinned(
            &costly,
            Pins {
                output_bands: false,
                ..pins
            },
        );
        assert!(
            all.remedies.iter().any(|r| r.key == "model.output_bands"),
            "{:?}",
            all.remedies
        );
        for l in all.layouts.iter().filter(|l| l.fits) {
            assert!(
                l.predicted_examples_per_s <= 1.005 * all.chosen.predicted_examples_per_s,
                "{l:?} against {:?}",
                all.chosen
            );
        }
    }

    #[test]
    fn the_throughput_objective_without_a_calibration_is_refused() {
        let c = config(&["plan.objective=\"throughput\""]);
        let rows = sample(&c);
        let bands = ModelBands::resolve(&c).unwrap();
        let err = solve(&Problem {
            config: &c,
            bands: &bands,
            device: LAVAPIPE,
            budget_bytes: 6 << 20,
            sample: &rows,
            pins: Pins::default(),
            calibration: None,
            ranks: 1,
        })
        .unwrap_err();
        assert!(err.to_string().contains("plan --calibrate"), "{err}");
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
        fn with_remedies_a_larger_budget_never_gives_a_worse_plan_and_pins_hold(
            a in (4u64 << 20)..(40u64 << 20),
            extra in 0u64..(24u64 << 20),
            pin_bits in 0u16..1024,
        ) {
            let c = table_bound();
            let rows = sample(&c);
            let bit = |i: u16| pin_bits & (1 << i) != 0;
            let pins = Pins {
                batch_size: bit(0),
                table: bit(1),
                dense: bit(2),
                placement: bit(3),
                table_dtype: bit(4),
                state_dtype: bit(5),
                class_chunk: bit(6),
                checkpointing: bit(7),
                input_cutoffs: bit(8),
                output_bands: bit(9),
                logits: bit(10),
            };
            let small = plan(&c, &rows, a, pins);
            let large = plan(&c, &rows, a + extra, pins);
            prop_assert!(better(&large, &small, c.plan.objective) != Ordering::Less);
            for p in [&small, &large] {
                for r in &p.remedies {
                    prop_assert!(!pins.keys().contains(&r.key), "{} is pinned", r.key);
                }
                if pins.batch_size {
                    prop_assert_eq!(p.chosen.batch_size, c.train.batch_size);
                }
                if pins.table {
                    prop_assert_eq!(p.chosen.table, c.optim.table);
                }
                if pins.dense {
                    prop_assert_eq!(p.chosen.dense, c.optim.dense);
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
            let pins = Pins { batch_size: false, table: true, dense: true, ..Pins::default() };
            let pinned = plan(&c, &rows, budget, pins);
            if pinned.fits {
                prop_assert!(free.fits);
                prop_assert!(pinned.chosen.batch_size <= free.chosen.batch_size);
            }
        }
    }
}
