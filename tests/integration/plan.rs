//! The budget solver end to end: `widebag plan` answers from the ledger (deterministic JSON, units,
//! pins, exit 3 with ranked suggestions) and `widebag train --budget` trains with the plan or
//! refuses. The solver's grid on wgpu is in `accuracy_grids`.

use crate::common;

use common::{has_wgpu, json, widebag};

/// The seed model planned for a lavapipe-like device without opening one.
const SEED: [&str; 6] = [
    "plan",
    "--config",
    "configs/seed-sparse.toml",
    "--max-buffer",
    "128MiB",
    "--json",
];

fn plan(extra: &[&str]) -> std::process::Output {
    let mut args: Vec<&str> = SEED.to_vec();
    args.extend_from_slice(extra);
    widebag(&args)
}

#[test]
fn plan_json_is_deterministic_with_the_headline_keys() {
    let a = plan(&["--budget", "8GiB", "--alignment", "32"]);
    let b = plan(&["--budget", "8GiB", "--alignment", "32"]);
    assert_eq!(a.stdout, b.stdout, "byte-identical --json");
    let v = json(&a);
    assert_eq!(v["fits"], true);
    assert_eq!(v["budget_bytes"], 8u64 << 30);
    assert_eq!(v["batch_size"], 4096);
    assert_eq!(v["optimizer"]["table"], "adam");
    assert_eq!(v["optimizer"]["dense"], "adam");
    let peak = v["predicted_peak_bytes"].as_u64().unwrap();
    assert!(peak + v["slack_bytes"].as_u64().unwrap() <= 8 << 30);
    assert!(!v["plan"]["runner_ups"].as_array().unwrap().is_empty());
}

/// `--pin` for the seven layout knobs: the configured layout, as before the solver chose it.
const LAYOUT_PINNED: [&str; 14] = [
    "--pin",
    "model.input_bands.placement",
    "--pin",
    "model.input_bands.dtype",
    "--pin",
    "optim.state_dtype",
    "--pin",
    "model.class_chunk",
    "--pin",
    "model.checkpointing",
    "--pin",
    "model.input_bands.cutoffs",
    "--pin",
    "model.output_bands",
];

#[test]
fn a_smaller_budget_trades_the_table_optimizer_first() {
    // At 4 GiB two Adam moments of the 240,000 × 1024 table do not fit on the device; with the
    // layout pinned row-wise Adagrad does.
    let mut args = vec!["--budget", "4GiB"];
    args.extend(LAYOUT_PINNED);
    let v = json(&plan(&args));
    assert_eq!(v["fits"], true);
    assert_eq!(v["batch_size"], 4096);
    assert_eq!(v["optimizer"]["table"], "rowwise_adagrad");
    assert_eq!(v["optimizer"]["dense"], "adam");
    let rejected = v["plan"]["runner_ups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["table"] == "adam" && c["dense"] == "adam")
        .unwrap();
    assert!(
        rejected["verdict"]
            .as_str()
            .unwrap()
            .starts_with("over budget by")
    );
    // Free to choose the layout, the solver keeps lazy Adam and moves the table to the host
    // tier (the first remedy: it costs time, not accuracy), saying what that saved.
    let v = json(&plan(&["--budget", "4GiB"]));
    assert_eq!(v["fits"], true);
    assert_eq!(v["optimizer"]["table"], "adam");
    let remedies = v["plan"]["remedies"].as_array().unwrap();
    assert_eq!(remedies.len(), 1, "{remedies:?}");
    assert_eq!(remedies[0]["key"], "model.input_bands.placement");
    assert_eq!(remedies[0]["cost"], "time");
    assert!(remedies[0]["saves_bytes"].as_i64().unwrap() > 2 << 30);
    // The configured layout is listed among the layouts compared.
    let layouts = v["plan"]["layouts"].as_array().unwrap();
    assert!(
        layouts
            .iter()
            .any(|l| l["remedies"].as_array().unwrap().is_empty())
    );
}

#[test]
fn budgets_take_units_and_bad_ones_exit_2() {
    let dec = json(&plan(&["--budget", "8GB"]));
    let raw = json(&plan(&["--budget", "8000000000"]));
    assert_eq!(dec["budget_bytes"], 8_000_000_000u64);
    assert_eq!(dec["budget_bytes"], raw["budget_bytes"]);
    let bad = plan(&["--budget", "8 gigs"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--budget") && err.contains("unknown unit"),
        "{err}"
    );
    let pin = plan(&["--budget", "8GiB", "--pin", "model.dim"]);
    assert_eq!(pin.status.code(), Some(2));
}

#[test]
fn the_budget_comes_from_the_config_or_the_devices_memory() {
    let v = json(&plan(&["--set", "plan.budget=\"6GiB\""]));
    assert_eq!(v["budget_bytes"], 6u64 << 30);
    assert_eq!(v["budget_source"], "plan.budget = \"6GiB\"");
    // flex computes in system memory, which it reports: the default is that minus the reserve.
    let v = json(&widebag(&["plan", "--device", "cpu", "--json"]));
    assert!(
        v["budget_source"]
            .as_str()
            .unwrap()
            .starts_with("device memory"),
        "{v}"
    );
}

/// The plan's step time comes from the planned device's own throughput model: flex's built-in
/// one when flex is opened, none for a device given only by its facts (no time predicted, and
/// the throughput objective refused, exit 2), `--calibration`'s whatever the device.
#[test]
fn the_predicted_step_time_is_the_devices_own() {
    let v = json(&widebag(&["plan", "--device", "cpu", "--json"]));
    let step_s = v["predicted_step_s"].as_f64().unwrap();
    assert!(step_s > 0.0, "{v}");
    assert!(
        v["calibration"]["measured_on"]
            .as_str()
            .unwrap()
            .starts_with("flex"),
        "{v}"
    );
    let chosen = &v["plan"]["chosen"];
    let eps = chosen["predicted_examples_per_s"].as_f64().unwrap();
    let batch = chosen["batch_size"].as_f64().unwrap();
    assert!((batch / step_s - eps).abs() < 1e-6 * eps, "{v}");
    let text = widebag(&["plan", "--device", "cpu"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("  time        predicted "), "{text}");
    assert!(text.contains("ms/step"), "{text}");

    // Another device, given by its facts: no model of it.
    let v = json(&plan(&["--budget", "8GiB"]));
    assert!(v["predicted_step_s"].is_null(), "{v}");
    assert!(v["calibration"].is_null(), "{v}");
    let refused = plan(&["--budget", "8GiB", "--objective", "throughput"]);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("plan --calibrate --out"), "{err}");

    // Its own model, measured there: at 10 ms a chunk after the first, 30 chunks cost 290 ms.
    let dir = std::env::temp_dir().join(format!("widebag-plan-cal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cal = dir.join("cal.json");
    let write = |s_per_chunk: f64| {
        std::fs::write(
            &cal,
            format!(
                r#"{{"overhead_s": 0.001, "s_per_gflop": 0.0001, "s_per_gb": 0.0002,
                    "s_per_chunk": {s_per_chunk}, "measured_on": "a test GPU"}}"#
            ),
        )
        .unwrap();
    };
    let step_of = |chunk: &str| {
        let set = format!("model.class_chunk={chunk}");
        let v = json(&plan(&[
            "--budget",
            "8GiB",
            "--calibration",
            cal.to_str().unwrap(),
            "--set",
            "train.batch_size=128",
            "--set",
            "data.n_classes=240000",
            "--set",
            &set,
        ]));
        v["predicted_step_s"].as_f64().unwrap()
    };
    // 4 chunks of 60,000 classes (the widest a 128 MiB buffer holds: a `[60,000, 512]` weight
    // chunk of 117 MiB) against 30 of 8,000: 26 chunks more, 0.26 s more.
    write(0.0);
    let (wide, narrow) = (step_of("60000"), step_of("8000"));
    write(0.01);
    let (wide_gpu, narrow_gpu) = (step_of("60000"), step_of("8000"));
    assert!((wide_gpu - wide - 0.03).abs() < 1e-9, "{wide} {wide_gpu}");
    assert!(
        (narrow_gpu - narrow - 0.29).abs() < 1e-9,
        "{narrow} {narrow_gpu}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nothing_fits_exits_3_with_ranked_changes() {
    // Adam pinned for both parts (with --set) at 3 GiB: the moments alone are 2.75 GiB.
    let seed = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--config",
            "configs/seed-sparse.toml",
            "--max-buffer",
            "128MiB",
            "--budget",
            "3GiB",
        ];
        args.extend(LAYOUT_PINNED);
        args.extend_from_slice(extra);
        widebag(&args)
    };
    let out = seed(&[
        "--set",
        "optim.table=\"adam\"",
        "--set",
        "optim.dense=\"adam\"",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("does not fit"), "{text}");
    assert!(text.contains("smallest changes that fit"), "{text}");
    assert!(
        text.contains("optim.table adam → rowwise_adagrad frees"),
        "{text}"
    );
    assert!(text.contains("budget 3.00 GiB →"), "{text}");
    // The same as JSON: fits false; the optimizer change first (only the most capable table
    // optimizer that fits), the budget last.
    let out = seed(&["--pin", "optim.table", "--pin", "optim.dense", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fits"], false);
    let s = v["plan"]["suggestions"].as_array().unwrap();
    assert!(s.len() >= 2);
    assert_eq!(s.last().unwrap()["key"], "budget");
    // Changes that keep the model first (optimizers, batch, layout remedies), the smallest
    // sufficient first; only the most capable table optimizer that fits.
    let tables: Vec<_> = s.iter().filter(|x| x["key"] == "optim.table").collect();
    assert_eq!(tables.len(), 1);
    assert_eq!(tables[0]["to"], "rowwise_adagrad");
    assert!(tables[0]["frees_bytes"].as_u64().unwrap() > 1 << 30);
    let dim = s.iter().position(|x| x["key"] == "model.dim");
    let keeps = s.iter().rposition(|x| {
        x["key"].as_str().unwrap().starts_with("optim") || x["key"] == "model.input_bands.dtype"
    });
    if let (Some(d), Some(k)) = (dim, keeps) {
        assert!(k < d, "{s:?}");
    }
}

#[test]
fn train_with_a_budget_runs_the_plan_or_refuses() {
    let model = [
        "--device",
        "cpu",
        "--set",
        "data.width=2000",
        "--set",
        "data.n_classes=2000",
        "--set",
        "model.dim=16",
        "--set",
        "model.hidden=[32]",
        "--set",
        "train.steps=2",
        "--set",
        "plan.max_batch=1024",
    ];
    let mut args = vec!["plan", "--budget", "6MiB", "--json"];
    args.extend_from_slice(&model);
    let planned = json(&widebag(&args));
    let mut args = vec!["train", "--budget", "6MiB", "--json"];
    args.extend_from_slice(&model);
    let trained = json(&widebag(&args));
    assert_eq!(trained["batch_size"], planned["batch_size"]);
    assert_eq!(
        trained["table_optimizer"], planned["optimizer"]["table"],
        "the plan's optimizers"
    );
    assert_eq!(trained["dense_optimizer"], planned["optimizer"]["dense"]);
    // (At 256 KiB the host tier and an adaptive softmax now fit it, at batch 9.)
    let mut args = vec!["train", "--budget", "64KiB"];
    args.extend_from_slice(&model);
    let refused = widebag(&args);
    assert_eq!(refused.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("smallest changes that fit"));
}

#[test]
fn train_with_a_budget_cuts_the_output_to_keep_adam_and_runs_it_under_the_budget() {
    // 20,000 classes on a 64-wide last layer at batch 32 with Adam: the output layer with its
    // moments (20.5 MB) does not fit 12 MiB; the plan keeps Adam with an adaptive softmax, and
    // train prepares the cut (classes renumbered by frequency) and runs it.
    let model = [
        "--set",
        "data.width=2000",
        "--set",
        "data.n_classes=20000",
        "--set",
        "model.dim=16",
        "--set",
        "model.hidden=[64]",
        "--set",
        "train.batch_size=32",
        "--set",
        "optim.table=\"adam\"",
        "--set",
        "optim.dense=\"adam\"",
        "--set",
        "train.steps=3",
        "--set",
        "train.eval_rows=64",
        "--set",
        "plan.pin=[\"train.batch_size\"]",
        "--budget",
        "12MiB",
        "--json",
    ];
    let mut args = vec!["plan", "--device", "cpu"];
    args.extend_from_slice(&model);
    let planned = json(&widebag(&args));
    assert_eq!(planned["optimizer"]["dense"], "adam");
    let remedies = planned["plan"]["remedies"].as_array().unwrap();
    let keys: Vec<&str> = remedies
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["model.output_bands"]);
    for device in ["cpu", "wgpu"] {
        if device == "wgpu" && !has_wgpu("train_with_a_budget_cuts_the_output") {
            continue;
        }
        let mut args = vec!["train", "--device", device];
        args.extend_from_slice(&model);
        let trained = json(&widebag(&args));
        assert_eq!(trained["dense_optimizer"], "adam");
        assert_eq!(trained["output"], "adaptive", "{device}");
        assert!(trained["eval_loss"].as_f64().unwrap().is_finite());
        if device == "wgpu" {
            let peak = trained["peak_in_use_bytes"].as_u64().unwrap();
            assert!(peak <= 12 << 20, "measured {peak} B over the budget");
        }
    }
}

#[test]
fn grid_and_calibrate_refuse_the_other_plan_flags() {
    // Both run fixed models at fixed budgets: a flag that shapes one plan would be ignored.
    for (args, flag) in [
        (
            &["plan", "--grid", "small", "--budget", "8GiB"][..],
            "--budget",
        ),
        (&["plan", "--grid", "small", "--verify"], "--verify"),
        (
            &["plan", "--grid", "small", "--set", "model.dim=8"],
            "--set",
        ),
        (&["plan", "--calibrate", "--json"], "--json"),
        (&["plan", "--calibrate", "--min-batch", "4"], "--min-batch"),
        (
            &["plan", "--calibrate", "--objective", "throughput"],
            "--objective",
        ),
    ] {
        let out = widebag(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(args[1]) && stderr.contains(flag),
            "{args:?}: names both flags: {stderr}"
        );
    }
}

/// `--keep-accuracy`: the solver takes no remedy that costs accuracy. A budget the seed model
/// meets only with head/tail input or the adaptive softmax is refused (exit 3), naming the
/// smallest budget that needs neither; that budget fits without them, one MiB less does not.
/// `train --budget` refuses the same way before training.
#[test]
fn keep_accuracy_refuses_a_budget_that_needs_head_tail_and_names_the_smallest_that_does_not() {
    let accuracy = |v: &serde_json::Value| -> Vec<String> {
        v["plan"]["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["cost"] == "accuracy")
            .map(|r| r["key"].as_str().unwrap().to_string())
            .collect()
    };
    let free = json(&plan(&["--budget", "400MB"]));
    assert_eq!(free["fits"], true);
    assert!(!accuracy(&free).is_empty(), "400 MB needs head/tail");

    let kept = plan(&["--budget", "400MB", "--keep-accuracy"]);
    assert_eq!(kept.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&kept.stdout).unwrap();
    assert_eq!(v["plan"]["keep_accuracy"], true);
    let tried = v["plan"]["layouts"].as_array().unwrap();
    assert!(tried.iter().all(|l| {
        l["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r != "head_tail_input" && r != "adaptive_output")
    }));
    let budget = v["plan"]["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "budget")
        .expect("a budget suggestion");
    let smallest = v["budget_bytes"].as_u64().unwrap() + budget["frees_bytes"].as_u64().unwrap();
    let err = String::from_utf8_lossy(&kept.stderr);
    assert!(
        err.contains("--keep-accuracy") && err.contains("the smallest budget that fits without"),
        "{err}"
    );
    assert_eq!(smallest % (1 << 20), 0, "whole MiB: {smallest}");
    let at = |bytes: u64| plan(&["--budget", &bytes.to_string(), "--keep-accuracy"]);
    let fits = json(&at(smallest));
    assert_eq!(fits["fits"], true);
    assert!(accuracy(&fits).is_empty(), "{:?}", accuracy(&fits));
    assert_eq!(at(smallest - (1 << 20)).status.code(), Some(3));

    let train = widebag(&[
        "train",
        "--config",
        "configs/seed-sparse.toml",
        "--device",
        "cpu",
        "--budget",
        "400MB",
        "--keep-accuracy",
    ]);
    assert_eq!(train.status.code(), Some(3));
    let err = String::from_utf8_lossy(&train.stderr);
    assert!(err.contains("--keep-accuracy"), "{err}");
}
