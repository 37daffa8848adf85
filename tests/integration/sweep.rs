//! `widebag sweep` end to end on the CPU: a grid with an exclude runs every point into its own
//! directory, results.csv has one row per run with the swept keys, a failed run is recorded and
//! does not stop the sweep, and a second invocation skips what finished and retries what failed;
//! `bench sparse-vs-dense` reports both layouts and marks what it did not run.

use crate::common;

use std::path::{Path, PathBuf};

use common::widebag;

fn setup(name: &str, sweep: &str) -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sweep-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sweep.toml");
    std::fs::write(&file, sweep).unwrap();
    (file, dir.join("runs"))
}

const SWEEP: &str = r#"
set = ["data.width=600", "data.n_classes=600", "model.dim=8", "model.hidden=[16]", "train.steps=4"]
[grid]
"train.batch_size" = [16, 48]
"optim.dense" = ["sgd", "adam"]
"model.layout" = ["sparse", "dense"]
[[exclude]]
"model.layout" = "dense"
"optim.dense" = "sgd"
"#;

fn run(file: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = common::sweep_args(file, out).to_vec();
    args.extend_from_slice(extra);
    widebag(&args)
}

#[test]
fn a_sweep_writes_run_directories_results_and_plots_and_resumes() {
    let (file, out) = setup("ok", SWEEP);
    let first = run(&file, &out, &[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    for col in [
        "run",
        "status",
        "predicted_peak_bytes",
        "measured_peak_bytes",
        "examples_per_s",
        "final_loss",
        "model.layout",
        "optim.dense",
        "train.batch_size",
    ] {
        assert!(header.split(',').any(|c| c == col), "{col} in {header}");
    }
    let rows: Vec<&str> = lines.collect();
    assert_eq!(
        rows.len(),
        8 - 2,
        "2 × 2 × 2 minus the excluded dense+sgd pair"
    );
    assert!(rows.iter().all(|r| r.contains(",ok,")), "{csv}");
    for file in ["results.md", "memory.svg", "loss.svg", "throughput.svg"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let run_dir = out.join("layout=sparse__dense=adam__batch_size=48");
    for file in [
        "config.toml",
        "ledger.json",
        "plan.json",
        "metrics.jsonl",
        "summary.json",
        "row.json",
    ] {
        assert!(run_dir.join(file).is_file(), "{file}");
    }
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 4, "one line per step");
    let line: serde_json::Value = serde_json::from_str(metrics.lines().last().unwrap()).unwrap();
    for key in ["step", "loss", "examples_per_s", "step_s"] {
        assert!(line.get(key).is_some(), "{key} in {line}");
    }
    let config = std::fs::read_to_string(run_dir.join("config.toml")).unwrap();
    assert!(config.contains("batch_size = 48"), "{config}");
    // Again: every run is skipped.
    let second = run(&file, &out, &[]);
    assert!(second.status.success());
    let log = String::from_utf8_lossy(&second.stderr);
    assert_eq!(log.matches("skipped").count(), 6, "{log}");
}

#[test]
fn a_failed_run_is_recorded_and_retried_on_resume() {
    // A data file that exists only for the second invocation: the first fails every run (exit 1
    // at the end, rows recorded), the second retries them.
    let (file, out) = setup(
        "failed",
        r#"
set = ["data.format=\"libsvm\"", "train.steps=2", "model.dim=4", "model.hidden=[8]"]
[grid]
"train.batch_size" = [4, 8]
"#,
    );
    let data = file.parent().unwrap().join("rows.libsvm");
    let data_arg = format!("data.path=\"{}\"", data.display());
    let first = run(&file, &out, &["--set", &data_arg]);
    assert_eq!(first.status.code(), Some(1));
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.matches(",failed,").count(), 2, "{csv}");
    assert!(
        csv.contains("rows.libsvm"),
        "the error names the file: {csv}"
    );
    let rows: String = (0..40)
        .map(|i| format!("{} {}:1 {}:2\n", i % 5, i % 7, 7 + i % 3))
        .collect();
    std::fs::write(&data, rows).unwrap();
    let second = run(&file, &out, &["--set", &data_arg]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.matches(",ok,").count(), 2, "{csv}");
}

#[test]
fn a_bad_sweep_file_exits_2_naming_file_and_key() {
    let (file, out) = setup("bad", "[grid]\n\"optim.dens\" = [\"sgd\"]\n");
    let r = run(&file, &out, &[]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("sweep.toml") && err.contains("optim.dense"),
        "{err}"
    );
}

#[test]
fn bench_sparse_vs_dense_reports_all_three_layouts() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-sparse-vs-dense");
    let _ = std::fs::remove_dir_all(&out);
    let r = widebag(&[
        "bench",
        "sparse-vs-dense",
        "--device",
        "cpu",
        "--widths",
        "500,900",
        "--steps",
        "5",
        "--set",
        "model.dim=8",
        "--set",
        "model.hidden=[16]",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let rows = common::json(&r);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2 * 3, "two widths × dense, sparse, head/tail");
    for r in rows {
        // flex has no allocator counters: examples/s is measured, memory is predicted only.
        assert!(r["predicted_peak_bytes"].as_u64().is_some(), "{r}");
        assert!(r["examples_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["measured_peak_bytes"].is_null(), "{r}");
        assert!(
            r["note"].as_str().unwrap().contains("memory not measured"),
            "{r}"
        );
    }
    for width in [500, 900] {
        let peak = |layout: &str| {
            rows.iter()
                .find(|r| r["width"] == width && r["layout"] == layout)
                .unwrap()["predicted_peak_bytes"]
                .as_u64()
                .unwrap()
        };
        // Bands cut the tables and the output layer: the head/tail layout predicts the least.
        assert!(peak("head/tail") < peak("sparse"), "width {width}");
        let ht = rows
            .iter()
            .find(|r| r["width"] == width && r["layout"] == "head/tail")
            .unwrap();
        assert!(
            ht["note"].as_str().unwrap().contains("input cutoffs"),
            "{ht}"
        );
    }
    for file in ["bench.md", "bench.json", "bench.svg"] {
        assert!(out.join(file).is_file(), "{file}");
    }
}

#[test]
fn a_sweep_plans_like_plan_with_its_calibration_and_the_data_rows() {
    // Each run is planned as `plan` would plan it: with `--calibration`'s throughput model (a
    // flat 0.5 s per step here, so batch 8 predicts 16 examples/s) and `plan.max_batch` capped at
    // the data file's 40 rows.
    let (file, out) = setup(
        "plan",
        r#"
set = ["data.format=\"libsvm\"", "train.steps=2", "model.dim=4", "model.hidden=[8]"]
[grid]
"train.batch_size" = [8]
"#,
    );
    let dir = file.parent().unwrap();
    let data = dir.join("rows.libsvm");
    let rows: String = (0..40)
        .map(|i| format!("{} {}:1 {}:2\n", i % 5, i % 7, 7 + i % 3))
        .collect();
    std::fs::write(&data, rows).unwrap();
    let calibration = dir.join("cal.json");
    std::fs::write(
        &calibration,
        r#"{"overhead_s": 0.5, "s_per_gflop": 0.0, "s_per_gb": 0.0, "measured_on": "test"}"#,
    )
    .unwrap();
    let data_arg = format!("data.path=\"{}\"", data.display());
    let r = run(
        &file,
        &out,
        &[
            "--set",
            &data_arg,
            "--calibration",
            calibration.to_str().unwrap(),
        ],
    );
    let log = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{log}");
    // Every knob is pinned, so the capped range shows in the log rather than in the plan.
    assert!(
        log.contains("plan.max_batch 4096 capped at the data's 40 rows"),
        "{log}"
    );
    let text = std::fs::read_to_string(out.join("batch_size=8").join("plan.json")).unwrap();
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let predicted = plan["plan"]["chosen"]["predicted_examples_per_s"]
        .as_f64()
        .unwrap();
    assert!((predicted - 16.0).abs() < 1e-6, "{predicted}");
}

#[test]
fn a_sweep_of_50_runs_completes_then_resumes_as_a_no_op() {
    let (file, out) = setup(
        "fifty",
        r#"
set = ["data.width=2000", "data.n_classes=2000", "model.dim=16", "train.steps=20"]
[grid]
"train.batch_size" = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80]
"optim.lr" = [0.0005, 0.001, 0.002, 0.004, 0.008]
"#,
    );
    let o = run(&file, &out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.contains(",ok,")).count(), 50);
    let metrics = |out: &Path| -> Vec<std::time::SystemTime> {
        let mut v: Vec<_> = std::fs::read_dir(out)
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.unwrap().path().join("metrics.jsonl")).ok())
            .map(|m| m.modified().unwrap())
            .collect();
        v.sort();
        v
    };
    let before = metrics(&out);
    assert_eq!(before.len(), 50);
    let o = run(&file, &out, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("(done before, skipped)").count(),
        50,
        "{stderr}"
    );
    assert_eq!(metrics(&out), before, "no run was trained again");
    assert_eq!(
        std::fs::read_to_string(out.join("results.csv")).unwrap(),
        csv
    );
}
