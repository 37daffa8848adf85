//! `widebag frontier` end to end on the CPU: each budget planned, trained in its own process and
//! evaluated; every run that trained fits its budget (predicted and measured), a budget nothing
//! fits is refused with the plan's reason, the table, CSV and plot are written, a second
//! invocation reruns nothing, and another configuration in the same directory is refused.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use common::widebag;

/// A small synthetic language model (perplexity on 512 held-out rows).
const MODEL: [&str; 14] = [
    "--set",
    "data.width=60000",
    "--set",
    "data.n_classes=20000",
    "--set",
    "model.dim=64",
    "--set",
    "model.hidden=[128]",
    "--set",
    "train.steps=8",
    "--set",
    "train.eval_rows=512",
    "--set",
    "train.batch_size=128",
];

fn frontier(out: &Path, budgets: &str, extra: &[&str]) -> std::process::Output {
    let out = out.to_str().unwrap();
    let mut args = vec![
        "frontier",
        "--device",
        "cpu",
        "--budgets",
        budgets,
        "--out",
        out,
        "--json",
        "--jobs",
        "2",
    ];
    args.extend_from_slice(&MODEL);
    args.extend_from_slice(extra);
    widebag(&args)
}

fn modified(path: PathBuf) -> SystemTime {
    std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_frontier_trains_each_budget_within_it_writes_its_results_and_resumes() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("frontier");
    let _ = std::fs::remove_dir_all(&out);
    let budgets = "100MiB,2MiB,12MiB,30MiB";
    let first = frontier(&out, budgets, &[]);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    let rows = common::json(&first);
    let rows = rows.as_array().unwrap();
    let budget: Vec<&str> = rows.iter().map(|r| r["budget"].as_str().unwrap()).collect();
    assert_eq!(
        budget,
        ["2MiB", "12MiB", "30MiB", "100MiB"],
        "smallest first"
    );
    // Nothing fits 2 MiB: refused before anything ran, with the plan's reason.
    assert_eq!(rows[0]["status"], "refused", "{}", rows[0]);
    assert!(rows[0]["error"].as_str().unwrap().contains("nothing fits"));
    assert!(
        !out.join("budget-2MiB/run").exists(),
        "a refused budget runs nothing"
    );
    for r in &rows[1..] {
        assert_eq!(r["status"], "ok", "{r}");
        let budget = r["budget_bytes"].as_u64().unwrap();
        let predicted = r["predicted_peak_bytes"].as_u64().unwrap();
        let measured = r["measured_peak_bytes"]
            .as_u64()
            .expect("flex's heap, measured");
        assert!(predicted <= budget, "{r}");
        assert!(
            measured <= budget,
            "measured {measured} B over the budget: {r}"
        );
        assert_eq!(r["batch_size"], 128, "the batch is pinned: {r}");
        // The child planned its budget as the frontier did (with the threads it ran on): the
        // row's plan is the one that ran.
        let dir = out.join(format!("budget-{}/run", r["budget"].as_str().unwrap()));
        let ran: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        let optimizers = format!(
            "table {} + dense {}",
            ran["table_optimizer"].as_str().unwrap(),
            ran["dense_optimizer"].as_str().unwrap()
        );
        assert_eq!(r["optimizers"], optimizers.as_str(), "{r}");
        assert_eq!(r["quality"]["name"], "perplexity", "{r}");
        assert!(r["quality"]["value"].as_f64().unwrap().is_finite());
        assert!(r["table_parameters"].as_u64().unwrap() > 0);
    }
    // The smallest budget that trains cuts the model; the largest trains it whole.
    let values = |r: &serde_json::Value| {
        r["table_parameters"].as_u64().unwrap() + r["output_parameters"].as_u64().unwrap()
    };
    assert!(rows[1]["costs_accuracy"].as_bool().unwrap(), "{}", rows[1]);
    assert!(
        rows[3]["remedies"].as_array().unwrap().is_empty(),
        "{}",
        rows[3]
    );
    assert!(values(&rows[1]) < values(&rows[3]));
    for file in ["config.toml", "results.csv", "results.md", "frontier.svg"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4, "{csv}");
    assert!(
        csv.lines().next().unwrap().contains(",perplexity,"),
        "{csv}"
    );
    let svg = std::fs::read_to_string(out.join("frontier.svg")).unwrap();
    assert!(
        svg.contains("perplexity") && svg.contains("30MiB"),
        "the plot's axis and labels"
    );
    for dir in ["budget-12MiB", "budget-100MiB"] {
        for file in [
            "plan.json",
            "row.json",
            "train.log",
            "run/summary.json",
            "run/config.toml",
        ] {
            assert!(out.join(dir).join(file).is_file(), "{dir}/{file}");
        }
    }

    // Again: every budget is done, nothing runs, the same rows come back.
    let summary = out.join("budget-30MiB/run/summary.json");
    let before = modified(summary.clone());
    let again = frontier(&out, budgets, &[]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("done before, skipped").count(),
        4,
        "{stderr}"
    );
    assert_eq!(modified(summary), before, "a finished run is not run again");
    assert_eq!(common::json(&again), common::json(&first));

    // Another configuration into the same directory is refused (exit 2), the rows kept.
    let other = frontier(&out, budgets, &["--set", "model.dim=32"]);
    assert_eq!(other.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&other.stderr).contains("another configuration"));
    assert!(out.join("budget-30MiB/row.json").is_file());
}
