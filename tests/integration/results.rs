//! Training to a result, end to end: resume after SIGKILL (in mid-run and in mid-checkpoint
//! write) gives the uninterrupted run's losses and weights bit for bit on the CPU backend;
//! damaged checkpoints are refused; evaluation on wgpu equals the CPU's; the exported files
//! load with the safetensors crate and hold what the trainer computes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{self, widebag};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-results-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small synthetic run with dropout, a cosine schedule and lazy AdamW (whose catch-up is
/// flushed at every checkpoint).
const RUN: &[&str] = &[
    "--device",
    "cpu",
    "--set",
    "data.width=20000",
    "--set",
    "data.n_classes=500",
    "--set",
    "model.input_dropout=0.2",
    "--set",
    "optim.table=\"adamw\"",
    "--set",
    "optim.schedule=\"cosine\"",
    "--set",
    "optim.warmup_steps=20",
    "--set",
    "train.eval_rows=128",
    "--set",
    "train.eval_every=100",
];

fn train_args(out: &Path, steps: usize, every: usize) -> Vec<String> {
    let mut a: Vec<String> = vec!["train".into(), "--out".into(), out.display().to_string()];
    a.extend(RUN.iter().map(|s| s.to_string()));
    a.extend([
        "--set".into(),
        format!("train.steps={steps}"),
        "--set".into(),
        format!("train.checkpoint_every={every}"),
    ]);
    a
}

fn losses(run: &Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("loss").is_some())
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].to_string()))
        .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn same_losses(got: &[(u64, String)], want: &[(u64, String)], what: &str) {
    let steps = |v: &[(u64, String)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(steps(got), steps(want), "{what}: steps logged");
    if let Some((g, w)) = got.iter().zip(want).find(|(g, w)| g != w) {
        panic!(
            "{what}: step {} loss {} (uninterrupted: step {} loss {})",
            g.0, g.1, w.0, w.1
        );
    }
}

/// A copy of the finished run `whole` cut back to before its checkpoint at `last`, resumed
/// with `extra` flags; returns the copy.
fn resume_cut_copy(whole: &Path, name: &str, last: u64, extra: &[&str]) -> PathBuf {
    let cut = tmp(name);
    std::fs::remove_dir_all(&cut).unwrap();
    Command::new("cp")
        .args(["-r", whole.to_str().unwrap(), cut.to_str().unwrap()])
        .status()
        .unwrap();
    std::fs::remove_dir_all(final_checkpoint(&cut, last)).unwrap();
    let mut args = vec!["train", "--resume", cut.to_str().unwrap()];
    args.extend(extra);
    let o = widebag(&args);
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    cut
}

fn final_checkpoint(run: &Path, step: u64) -> PathBuf {
    run.join("checkpoints").join(format!("step-{step:08}"))
}

fn same_files(a: &Path, b: &Path) {
    for f in ["weights.safetensors", "optimizer.safetensors"] {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert!(
            x == y,
            "{f} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

#[test]
fn resume_after_sigkill_is_bit_for_bit_the_uninterrupted_run() {
    let (steps, every) = (1200, 100);
    let whole = tmp("whole");
    let out = widebag(&strs(&train_args(&whole, steps, every)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = losses(&whole);
    assert_eq!(want.len(), steps);

    // Killed in mid-run, once a checkpoint exists.
    let cut = tmp("cut");
    let args = train_args(&cut, steps, every);
    let ck = final_checkpoint(&cut, 300);
    common::kill_when(&strs(&args), &[], || ck.join("state.json").exists());
    let resumed = widebag(&[
        "train",
        "--resume",
        cut.to_str().unwrap(),
        "--device",
        "cpu",
    ]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    same_losses(&losses(&cut), &want, "after a kill in mid-run");
    same_files(
        &final_checkpoint(&whole, steps as u64),
        &final_checkpoint(&cut, steps as u64),
    );

    // Killed in mid-checkpoint-write: the half-written directory is never trusted.
    let mid = tmp("mid");
    let args = train_args(&mid, steps, every);
    let pending = mid.join("checkpoints").join(".step-00000200.tmp");
    common::kill_when(
        &strs(&args),
        &[("WIDEBAG_FAULT_CHECKPOINT_PAUSE_MS", "3000")],
        || pending.join("weights.safetensors").exists(),
    );
    assert!(final_checkpoint(&mid, 100).join("state.json").exists());
    assert!(!final_checkpoint(&mid, 200).exists());
    let resumed = widebag(&[
        "train",
        "--resume",
        mid.to_str().unwrap(),
        "--device",
        "cpu",
    ]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains("step 100"),
        "resumed from the last good checkpoint: {stderr}"
    );
    same_losses(&losses(&mid), &want, "after a kill in mid-write");
    same_files(
        &final_checkpoint(&whole, steps as u64),
        &final_checkpoint(&mid, steps as u64),
    );
    for d in [whole, cut, mid] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn damaged_checkpoints_are_refused_naming_the_file() {
    let run = tmp("damaged");
    let out = widebag(&strs(&train_args(&run, 20, 10)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = final_checkpoint(&run, 20);
    let weights = last.join("weights.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    // Truncated: the newest is skipped with its reason, the one before is used.
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let out = widebag(&["eval", run.to_str().unwrap(), "--device", "cpu", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("weights.safetensors") && stderr.contains("truncated or altered"),
        "{stderr}"
    );
    assert_eq!(common::json(&out)["step"], 10);
    // Named directly, a damaged checkpoint is an error naming the file, not a panic.
    let out = widebag(&[
        "eval",
        run.to_str().unwrap(),
        "--checkpoint",
        last.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("weights.safetensors") && !stderr.contains("panicked"),
        "{stderr}"
    );
    // A manifest of another format version, and garbage, are refused.
    let state = final_checkpoint(&run, 10).join("state.json");
    let text = std::fs::read_to_string(&state).unwrap();
    std::fs::write(&state, text.replace("\"version\": 1", "\"version\": 9")).unwrap();
    let out = widebag(&["eval", run.to_str().unwrap(), "--device", "cpu"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("version 9") && !stderr.contains("panicked"),
        "{stderr}"
    );
    std::fs::write(&state, "{\"format\": ").unwrap();
    let out = widebag(&["eval", run.to_str().unwrap(), "--device", "cpu"]);
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(run);
}

#[test]
fn resume_on_wgpu_is_the_uninterrupted_run_within_1e_5() {
    if !common::has_wgpu("resume_on_wgpu") {
        return;
    }
    let args = |out: &Path| -> Vec<String> {
        let mut a = train_args(out, 30, 10);
        let at = a.iter().position(|s| s == "cpu").unwrap();
        a[at] = "wgpu".into();
        a
    };
    let whole = tmp("wgpu-whole");
    let o = widebag(&strs(&args(&whole)));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The run stopped after step 20: its later checkpoint and log lines are gone.
    let cut = resume_cut_copy(&whole, "wgpu-cut", 30, &["--device", "wgpu"]);
    let (a, b) = (losses(&whole), losses(&cut));
    assert_eq!(a.len(), b.len());
    for ((s, x), (_, y)) in a.iter().zip(&b) {
        let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
            "step {s}: {x} vs {y}"
        );
    }
    let (w1, w2) = (final_checkpoint(&whole, 30), final_checkpoint(&cut, 30));
    for f in ["weights.safetensors"] {
        let read = |p: &Path| common::safetensors_f32(&p.join(f));
        let (whole, cut) = (read(&w1), read(&w2));
        assert_eq!(
            whole.keys().collect::<Vec<_>>(),
            cut.keys().collect::<Vec<_>>(),
            "{f}: the same tensors"
        );
        assert!(!whole.is_empty(), "{f}: no tensor");
        for (n, (shape, x)) in &whole {
            let (cut_shape, y) = &cut[n];
            assert_eq!(shape, cut_shape, "{n}");
            common::assert_close(n, y, x, 1e-5, 1e-5);
        }
    }
    for d in [whole, cut] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A packed dataset read in place resumes where it stopped, in either shuffle: the position in
/// the epoch's order (a window of shuffled blocks, for `blocks`) is found again from the seed.
#[test]
fn a_packed_dataset_resumes_bit_for_bit_in_either_shuffle() {
    let dir = tmp("packed");
    let (svm, packed) = (dir.join("d.svm"), dir.join("d.wbp"));
    let synth = [
        "data",
        "synth",
        "--rows",
        "700",
        "--set",
        "data.width=3000",
        "--set",
        "data.n_classes=50",
        "--to",
        "libsvm",
    ];
    let o = widebag(&[&synth[..], &[svm.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pack = ["data", "pack", svm.to_str().unwrap(), "--block-rows", "64"];
    let o = widebag(&[&pack[..], &[packed.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for shuffle in ["rows", "blocks"] {
        let whole = dir.join(format!("{shuffle}-whole"));
        let sets = [
            format!("data.path={}", packed.display()),
            "data.format=\"libsvm\"".into(),
            format!("data.shuffle=\"{shuffle}\""),
            "data.shuffle_rows=128".into(),
            "data.shuffle_block_rows=64".into(),
            "train.steps=40".into(),
            "train.checkpoint_every=20".into(),
            "train.batch_size=48".into(),
            "train.eval_rows=50".into(),
            "train.eval_every=20".into(),
            "optim.table=\"adamw\"".into(),
        ];
        let mut args = vec!["train", "--device", "cpu", "--out", whole.to_str().unwrap()];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let o = widebag(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let cut = resume_cut_copy(&whole, &format!("packed-{shuffle}-cut"), 40, &[]);
        same_losses(&losses(&cut), &losses(&whole), shuffle);
        same_files(&final_checkpoint(&whole, 40), &final_checkpoint(&cut, 40));
        let _ = std::fs::remove_dir_all(cut);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_layout_and_state_resumes_bit_for_bit() {
    let cases: &[(&str, &[&str])] = &[
        (
            "hosttails",
            &[
                "model.output=\"adaptive\"",
                "model.input_bands.cutoffs=[500, 4000]",
                "model.output_bands.cutoffs=[100]",
                "model.input_bands.placement=[\"device\", \"host\"]",
                "model.max_buffer_mib=1",
            ],
        ),
        (
            "dense",
            &["model.layout=\"dense\"", "optim.dense=\"momentum\""],
        ),
        (
            "adagrad",
            &["optim.table=\"rowwise_adagrad\"", "optim.dense=\"sgd\""],
        ),
        (
            "momentum",
            &["optim.table=\"momentum\"", "optim.dense=\"adamw\""],
        ),
        (
            // Half tables and moments with stochastic rounding: the rounding's random bits are
            // a function of the step, so a resumed run rounds as the whole one did.
            "half",
            &[
                "model.input_bands.cutoffs=[500]",
                "model.input_bands.dtype=[\"f16\", \"bf16\"]",
                "model.input_bands.placement=[\"device\", \"host\"]",
                "optim.state_dtype=\"bf16\"",
                "optim.table=\"adamw\"",
            ],
        ),
    ];
    for (name, sets) in cases {
        let whole = tmp(&format!("{name}-whole"));
        let mut args = train_args(&whole, 40, 20);
        for s in *sets {
            args.extend(["--set".to_string(), s.to_string()]);
        }
        let o = widebag(&strs(&args));
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let cut = resume_cut_copy(&whole, &format!("{name}-cut"), 40, &[]);
        same_losses(&losses(&cut), &losses(&whole), name);
        same_files(&final_checkpoint(&whole, 40), &final_checkpoint(&cut, 40));
        // A finished run resumes as a no-op.
        let o = widebag(&["train", "--resume", cut.to_str().unwrap()]);
        assert!(o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("is complete"));
        // With --json it says so in one JSON object, the run's own summary inside.
        let o = widebag(&["train", "--json", "--resume", cut.to_str().unwrap()]);
        assert!(o.status.success());
        let v = one_json_object(&o.stdout);
        assert_eq!(v["status"], "complete", "{name}: {v}");
        assert_eq!(v["last_checkpoint_step"], 40, "{name}: {v}");
        assert!(v["summary"]["final_loss"].is_number(), "{name}: {v}");
        for d in [whole, cut] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// `stdout` as exactly one JSON object (one line, nothing else printed).
fn one_json_object(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one JSON line on stdout: {text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
    assert!(v.is_object(), "{v}");
    v
}

/// A run trained to its end and resumed for longer (`train --resume DIR --set train.steps=…`)
/// continues as the longer run: with a constant rate, loss for loss the run configured that long
/// from its start (checkpointed at the same steps: lazy AdamW's catch-up is flushed at each);
/// with a cosine schedule, its next step takes the longer schedule's rate (stretched). The
/// run's config.toml then holds the new length under a line saying what changed, and a key
/// that changes the model, the data or the optimizer is refused with exit 2, named.
#[test]
fn a_finished_run_resumed_for_longer_continues_as_the_longer_run() {
    let dir = tmp("longer");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["train", "--json", "--device", "cpu"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for kv in [
            "data.width=20000",
            "data.n_classes=500",
            "model.input_dropout=0.2",
            "optim.table=\"adamw\"",
            "train.checkpoint_every=10",
        ] {
            a.extend(["--set".to_string(), kv.to_string()]);
        }
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = widebag(&refs);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let (short, long) = (dir.join("short"), dir.join("long"));
    let at = |p: &Path| p.to_str().unwrap().to_string();
    run(args(&["--out", &at(&short), "--set", "train.steps=30"]));
    let resumed = widebag(&[
        "train",
        "--resume",
        &at(&short),
        "--set",
        "train.steps=60",
        "--json",
    ]);
    // `common::json` asserts the resumed run succeeded (its exit code and stderr).
    let fresh = run(args(&["--out", &at(&long), "--set", "train.steps=60"]));
    let (got, want) = (
        common::losses(&common::json(&resumed)),
        common::losses(&common::json(&fresh)),
    );
    assert_eq!(got.len(), 30);
    assert_eq!(
        got,
        want[30..],
        "steps 31-60 resumed for longer against a 60-step run"
    );
    let said = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        said.contains("lengthened at step 30: train.steps 30 → 60"),
        "{said}"
    );
    let config = std::fs::read_to_string(short.join("config.toml")).unwrap();
    assert!(config.starts_with("# lengthened at step 30"), "{config}");
    assert!(config.contains("steps = 60"), "{config}");
    // Again at the same settings: the run is complete.
    let again = widebag(&["train", "--resume", &at(&short)]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is complete"));
    // Anything but the run's length and timing is refused, named.
    for key in ["optim.lr=0.1", "model.dim=8", "data.width=100"] {
        let bad = widebag(&["train", "--resume", &at(&short), "--set", key]);
        let err = String::from_utf8_lossy(&bad.stderr);
        let name = key.split('=').next().unwrap();
        assert_eq!(bad.status.code(), Some(2), "{key}: {err}");
        assert!(err.contains(&format!("--set {name}")), "{key}: {err}");
    }
    // A cosine schedule spans the new end: step 31 takes the 60-step schedule's rate.
    let cos = dir.join("cosine");
    run(args(&[
        "--out",
        &at(&cos),
        "--set",
        "train.steps=30",
        "--set",
        "optim.schedule=\"cosine\"",
    ]));
    let more = widebag(&["train", "--resume", &at(&cos), "--set", "train.steps=60"]);
    assert!(
        more.status.success(),
        "{}",
        String::from_utf8_lossy(&more.stderr)
    );
    let log = std::fs::read_to_string(cos.join("metrics.jsonl")).unwrap();
    let lr_of = |step: u64| -> f64 {
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["step"].as_u64() == Some(step) && v.get("lr").is_some())
            .and_then(|v| v["lr"].as_f64())
            .unwrap()
    };
    let stretched = 0.001 * 0.5 * (1.0 + (std::f64::consts::PI * 30.0 / 60.0).cos());
    assert!(
        (lr_of(31) - stretched).abs() < 1e-12,
        "{} against {stretched}",
        lr_of(31)
    );
    let first = 0.001 * 0.5 * (1.0 + (std::f64::consts::PI * 29.0 / 30.0).cos());
    assert!(
        (lr_of(30) - first).abs() < 1e-12,
        "step 30 kept the 30-step schedule's rate"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_ends_at_the_first_evaluation_that_reaches_its_stop_target() {
    let dir = tmp("stop-at");
    let out = dir.join("run");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "train",
            "--device",
            "cpu",
            "--json",
            "--set",
            "data.width=3000",
            "--set",
            "data.n_classes=300",
            "--set",
            "train.steps=40",
            "--set",
            "train.eval_rows=128",
            "--set",
            "train.eval_every=5",
        ];
        a.extend_from_slice(extra);
        a
    };
    let full = common::json(&widebag(&args(&[])));
    // Perplexity (lower is better) is below 1e9 at the first evaluation: the run ends there,
    // checkpointed, summarised.
    let mut stopped_args = args(&[
        "--set",
        "train.stop_at_metric=\"perplexity\"",
        "--set",
        "train.stop_at_value=1e9",
        "--out",
    ]);
    let out_arg = out.to_str().unwrap().to_string();
    stopped_args.push(&out_arg);
    let stopped = common::json(&widebag(&stopped_args));
    assert_eq!(stopped["target_reached_at"], 5);
    assert_eq!(stopped["steps"], 5);
    let evals = stopped["evaluations"].as_array().unwrap();
    assert_eq!(
        evals.len(),
        1,
        "the evaluation at the target is the last: no second one"
    );
    assert_eq!(evals[0]["step"], 5);
    assert_eq!(
        common::losses(&stopped),
        common::losses(&full)[..5],
        "the same steps"
    );
    assert_eq!(
        full["evaluations"][0]["metrics"], evals[0]["metrics"],
        "the same evaluation at step 5"
    );
    assert!(
        out.join("checkpoints").read_dir().unwrap().next().is_some(),
        "a checkpoint there"
    );
    // A target no evaluation reaches leaves the run whole.
    let never = common::json(&widebag(&args(&[
        "--set",
        "train.stop_at_metric=\"perplexity\"",
        "--set",
        "train.stop_at_value=1.0",
    ])));
    assert_eq!(common::losses(&never), common::losses(&full));
    assert!(never.get("target_reached_at").is_none());
    for (set, key) in [
        ("train.stop_at_metric=\"accuracy\"", "train.stop_at_value"),
        ("train.stop_at_metric=\"recal@20\"", "train.stop_at_metric"),
    ] {
        let mut a = args(&["--set", set]);
        if key == "train.stop_at_metric" {
            a.extend_from_slice(&["--set", "train.stop_at_value=0.2"]);
        }
        let bad = widebag(&a);
        assert_eq!(bad.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&bad.stderr).contains(key), "{key}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
