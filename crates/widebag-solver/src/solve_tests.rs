//! Tests of the solver: fit and one row more, the optimizer and the layout remedies as the budget
//! grows, suggestions that each fit, pins respected, determinism, and the property tests.

use super::*;
use proptest::prelude::*;
use widebag_config::bands::ModelBands;
use widebag_config::{BandPlacement, Config, DenseOptim, Objective, Precision, TableOptim, load};
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
        calibration: &calibration,
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
            calibration: &calibration,
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
