//! A run across ranks kept like one process's (issue 18's interface): `train --ranks N --out`
//! writes the run directory from rank 0 and checkpoints per rank; `--resume` continues at the
//! same N from the newest step every rank has a good checkpoint of, with the losses of the run
//! that never stopped; another N is refused naming the one that wrote it; `--budget` plans each
//! rank's part; each rank reads only its rows of a data file's batches (epochs, short batches,
//! input dropout) and trains as one process; over a `blocks` shuffle's streams each reads only
//! its streams' blocks.

use crate::common::{json, widebag};

const SETS: [&str; 11] = [
    "data.width=3000",
    "data.n_classes=900",
    "data.nnz=12.0",
    "model.dim=16",
    "model.hidden=[24]",
    "train.batch_size=40",
    "train.steps=6",
    "train.checkpoint_every=3",
    "optim.table=\"adamw\"",
    "optim.dense=\"adam\"",
    "train.device=\"cpu\"",
];

fn train(extra: &[&str]) -> std::process::Output {
    let mut a = vec!["train", "--json"];
    for s in &SETS {
        a.extend(["--set", s]);
    }
    a.extend_from_slice(extra);
    widebag(&a)
}

/// `widebag train --json` of a run directory (its own config).
fn resume(ranks: &str, run: &str) -> std::process::Output {
    widebag(&["train", "--json", "--ranks", ranks, "--resume", run])
}

use crate::common::losses;

#[test]
fn a_run_across_ranks_resumes_exactly_from_the_newest_common_checkpoint() {
    let tmp = std::env::temp_dir().join(format!("widebag-ranks-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let run = tmp.join("run");
    let run_s = run.to_str().unwrap();
    let straight = train(&["--ranks", "2"]);
    assert!(
        straight.status.success(),
        "{}",
        String::from_utf8_lossy(&straight.stderr)
    );
    let straight = losses(&json(&straight));

    let first = train(&["--ranks", "2", "--out", run_s]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(losses(&json(&first)), straight);
    for f in ["config.toml", "metrics.jsonl", "summary.json"] {
        assert!(run.join(f).exists(), "{f}");
    }
    let lines = || {
        std::fs::read_to_string(run.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(lines(), 6);
    for rank in ["rank-0-of-2", "rank-1-of-2"] {
        for step in ["step-00000003", "step-00000006"] {
            let dir = run.join("checkpoints").join(rank).join(step);
            assert!(dir.join("state.json").exists(), "{}", dir.display());
        }
    }
    // Rank 1 never finished its step-6 checkpoint: both ranks continue from step 3.
    std::fs::remove_file(run.join("checkpoints/rank-1-of-2/step-00000006/state.json")).unwrap();
    let resumed = resume("2", run_s);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let resumed = json(&resumed);
    assert_eq!(resumed["resumed_from"], 3);
    assert_eq!(
        losses(&resumed),
        straight[3..],
        "the losses of the run that never stopped"
    );
    assert_eq!(lines(), 6, "the log cut back to step 3, then steps 4–6");

    // Another number of ranks is refused before training, naming the one that wrote the run.
    let other = resume("3", run_s);
    assert_eq!(other.status.code(), Some(2));
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("2 ranks"), "{err}");
    // And a run directory is never overwritten.
    let again = train(&["--ranks", "2", "--out", run_s]);
    assert_eq!(again.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn budget_across_ranks_plans_each_rank() {
    let small = train(&[
        "--ranks",
        "2",
        "--budget",
        "64KiB",
        "--set",
        "train.steps=2",
    ]);
    assert_eq!(
        small.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&small.stderr)
    );
    let fits = train(&[
        "--ranks",
        "2",
        "--budget",
        "16MiB",
        "--set",
        "train.steps=2",
    ]);
    assert!(
        fits.status.success(),
        "{}",
        String::from_utf8_lossy(&fits.stderr)
    );
    let err = String::from_utf8_lossy(&fits.stderr);
    assert!(err.contains("per rank across 2"), "{err}");
}

/// `train --json`'s first, final and last-10 mean losses, one process or `ranks`.
fn run_losses(sets: &[String], ranks: Option<&str>) -> Vec<f64> {
    let mut a: Vec<&str> = vec!["train", "--json", "--device", "cpu"];
    for s in sets {
        a.extend(["--set", s.as_str()]);
    }
    if let Some(n) = ranks {
        a.extend(["--ranks", n]);
    }
    let o = widebag(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    ["first_loss", "final_loss", "final_loss_mean10"]
        .iter()
        .map(|k| v[k].as_f64().unwrap())
        .collect()
}

#[test]
fn each_rank_reads_its_rows_of_a_file_and_drops_out_as_one_process() {
    let dir = std::env::temp_dir().join(format!("widebag-ranks-shards-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rows.svm");
    let made = widebag(&[
        "data",
        "synth",
        "--rows",
        "150",
        "--set",
        "data.width=400",
        "--set",
        "data.n_classes=30",
        "--to",
        "libsvm",
        file.to_str().unwrap(),
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // 150 rows in batches of 40: every epoch ends with a short batch of 30, split unevenly.
    let sets: Vec<String> = [
        format!("data.path=\"{}\"", file.display()),
        "data.format=\"libsvm\"".into(),
        "model.dim=8".into(),
        "model.hidden=[6]".into(),
        "train.batch_size=40".into(),
        "train.steps=9".into(),
        "model.input_dropout=0.3".into(),
        "optim.table=\"adam\"".into(),
    ]
    .into();
    let one = run_losses(&sets, None);
    for n in ["2", "3"] {
        let many = run_losses(&sets, Some(n));
        assert_eq!(many.len(), one.len());
        for (a, b) in many.iter().zip(&one) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{n} ranks: {many:?} against {one:?}"
            );
        }
    }
    // Packed, shuffled in blocks over 6 streams: each rank reads only its streams' blocks and
    // the run is the single process's with the same streams, at 2, 3 and 6 ranks.
    let packed = dir.join("rows.wbp");
    let o = widebag(&[
        "data",
        "pack",
        file.to_str().unwrap(),
        packed.to_str().unwrap(),
        "--format",
        "libsvm",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut sets = sets;
    sets[0] = format!("data.path=\"{}\"", packed.display());
    sets.remove(1);
    sets.extend([
        "data.shuffle=\"blocks\"".into(),
        "data.shuffle_block_rows=8".into(),
        "data.shuffle_rows=16".into(),
        "data.shuffle_streams=6".into(),
    ]);
    let one = run_losses(&sets, None);
    for n in ["2", "3", "6"] {
        let many = run_losses(&sets, Some(n));
        assert_eq!(many.len(), one.len(), "{n} ranks over 6 streams");
        for (a, b) in many.iter().zip(&one) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{n} ranks over 6 streams: {many:?} against {one:?}"
            );
        }
    }
    // Four ranks cannot share six streams: refused by key before anything runs.
    let mut a: Vec<&str> = vec!["train", "--device", "cpu", "--ranks", "4"];
    for s in &sets {
        a.extend(["--set", s.as_str()]);
    }
    let o = widebag(&a);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("data.shuffle_streams") && err.contains("divide"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn evaluations_during_a_run_across_ranks_are_the_single_processs() {
    let dir = std::env::temp_dir().join(format!("widebag-ranks-evals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let evals = |ranks: Option<&str>, name: &str| -> Vec<serde_json::Value> {
        let out = dir.join(name);
        let mut a = vec!["train", "--json", "--out", out.to_str().unwrap()];
        for s in ["train.steps=4", "train.eval_every=2", "train.eval_rows=64"] {
            a.extend(["--set", s]);
        }
        for s in &SETS[..5] {
            a.extend(["--set", s]);
        }
        a.extend(["--set", "train.device=\"cpu\""]);
        if let Some(n) = ranks {
            a.extend(["--ranks", n]);
        }
        let o = widebag(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v.get("eval").is_some())
            .map(|v| v["eval"]["metrics"].clone())
            .collect()
    };
    let one = evals(None, "one");
    assert_eq!(one.len(), 1, "an evaluation at step 2: {one:?}");
    for n in ["2", "3"] {
        let many = evals(Some(n), n);
        assert_eq!(many.len(), 1, "{n} ranks: {many:?}");
        assert_eq!(
            many[0].as_array().unwrap().len(),
            one[0].as_array().unwrap().len(),
            "{n} ranks: {many:?} against {one:?}"
        );
        for (a, b) in many[0]
            .as_array()
            .unwrap()
            .iter()
            .zip(one[0].as_array().unwrap())
        {
            assert_eq!(a["name"], b["name"], "{n} ranks");
            let (x, y) = (a["value"].as_f64().unwrap(), b["value"].as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{n} ranks: {a} against {b}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_that_would_not_fit_this_machine_are_refused_before_they_start() {
    // Each rank holds half of a 20,000,000 × 1,024 table and its two Adam moments: 123 GB.
    let o = widebag(&[
        "train",
        "--device",
        "cpu",
        "--ranks",
        "2",
        "--set",
        "data.width=20000000",
        "--set",
        "model.dim=1024",
        "--set",
        "optim.table=\"adam\"",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 ranks on this machine") && err.contains("GiB"),
        "{err}"
    );
}

#[test]
fn eval_and_export_read_a_run_trained_across_ranks() {
    let dir = std::env::temp_dir().join(format!("widebag-ranks-saved-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let full: &[&str] = &[];
    let adaptive_bands: &[&str] = &[
        "model.output=\"adaptive\"",
        "model.output_bands.cutoffs=[10, 300]",
        "model.input_bands.cutoffs=[200, 1000]",
        "model.input_bands.placement=[\"device\", \"host\"]",
    ];
    for (ranks, extra) in [("2", full), ("3", adaptive_bands)] {
        let run = dir.join(format!("run-{ranks}"));
        let run_s = run.to_str().unwrap();
        let mut a = vec!["train", "--json", "--ranks", ranks, "--out", run_s];
        for s in SETS
            .iter()
            .chain(["train.eval_rows=80"].iter())
            .chain(extra)
        {
            a.extend(["--set", s]);
        }
        let trained = widebag(&a);
        assert!(
            trained.status.success(),
            "{}",
            String::from_utf8_lossy(&trained.stderr)
        );
        let want = json(&trained)["eval"]["metrics"].clone();
        let eval = widebag(&["eval", run_s, "--device", "cpu", "--json"]);
        assert!(
            eval.status.success(),
            "{}",
            String::from_utf8_lossy(&eval.stderr)
        );
        let got = json(&eval)["report"]["metrics"].clone();
        let (got, want) = (got.as_array().unwrap(), want.as_array().unwrap());
        assert_eq!(
            got.len(),
            want.len(),
            "{ranks} ranks: {got:?} against {want:?}"
        );
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["name"], w["name"], "{ranks} ranks");
            let (x, y) = (g["value"].as_f64().unwrap(), w["value"].as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{ranks} ranks: {g} against {w}"
            );
        }
        let out = dir.join(format!("export-{ranks}"));
        let export = widebag(&["export", run_s, "--to", out.to_str().unwrap()]);
        assert!(
            export.status.success(),
            "{}",
            String::from_utf8_lossy(&export.stderr)
        );
        assert!(out.join("model.safetensors").exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
