//! Faults: a disk that fills during a write (a small tmpfs; the tests mount one and skip with a
//! notice where mounting is not allowed, or fail under `WIDEBAG_REQUIRE_TMPFS=1`) leaves a clear error and the previous files intact — a
//! statistics or vocabulary sidecar, a run's checkpoints, a sweep's results and run directories;
//! SIGKILL while a sidecar is written or a sweep runs leaves nothing that is trusted half-written.

use std::path::{Path, PathBuf};

use crate::common::disk::SmallDisk;
use crate::common::{self, sweep_args, widebag};

/// `data stats FILE` (plus `extra`) saves the sidecar `FILE.suffix`; the data changes (so it is
/// computed again), the disk fills, and the second save fails with `not_saved` and ENOSPC while
/// the first sidecar stays byte for byte, with no temporary file left.
fn a_full_disk_keeps_the_old_sidecar(
    test: &str,
    name: &str,
    (before, after): (&str, &str),
    extra: &[&str],
    suffix: &str,
    not_saved: &str,
) {
    let Some(disk) = SmallDisk::mount(test, 256) else {
        return;
    };
    let data = disk.0.join(name);
    let stats = || {
        let mut args = vec!["data", "stats", data.to_str().unwrap()];
        args.extend_from_slice(extra);
        widebag(&args)
    };
    std::fs::write(&data, before).unwrap();
    let out = stats();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sidecar = disk.0.join(format!("{name}.{suffix}"));
    let kept = std::fs::read_to_string(&sidecar).unwrap();
    std::fs::write(&data, after).unwrap();
    disk.fill();
    let out = stats();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(not_saved) && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let now = std::fs::read_to_string(&sidecar).unwrap();
    assert_eq!(now, kept, "the old sidecar is intact");
    let leftovers: Vec<_> = std::fs::read_dir(&disk.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_full_disk_while_saving_statistics_keeps_the_old_sidecar() {
    a_full_disk_keeps_the_old_sidecar(
        "a_full_disk_while_saving_statistics_keeps_the_old_sidecar",
        "d.svm",
        ("1 1:1 3:2\n0 2:1\n", "1 1:1 3:2\n0 2:1\n1 4:1\n"),
        &[],
        "stats.json",
        "statistics not saved",
    );
}

#[test]
fn a_full_disk_while_saving_a_vocabulary_keeps_the_old_one() {
    a_full_disk_keeps_the_old_sidecar(
        "a_full_disk_while_saving_a_vocabulary_keeps_the_old_one",
        "c.txt",
        (
            "the cat sat\nthe dog ran\n",
            "the cat sat\nthe dog ran\na bird flew\n",
        ),
        &["--format", "text"],
        "vocab.tsv",
        "vocabulary not saved",
    );
}

fn checkpoints(run: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_full_disk_during_a_checkpoint_fails_clearly_and_keeps_the_last_good_one() {
    let Some(disk) = SmallDisk::mount(
        "a_full_disk_during_a_checkpoint_fails_clearly_and_keeps_the_last_good_one",
        8192,
    ) else {
        return;
    };
    let run = disk.0.join("run");
    let args = [
        "train",
        "--device",
        "cpu",
        "--out",
        run.to_str().unwrap(),
        "--set",
        "data.width=4000",
        "--set",
        "data.n_classes=100",
        "--set",
        "model.dim=16",
        "--set",
        "model.hidden=[]",
        "--set",
        "train.steps=40",
        "--set",
        "train.checkpoint_every=10",
    ];
    // Leave room for the run's files and about one checkpoint.
    let out = widebag(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let one: u64 = std::fs::read_dir(run.join("checkpoints/step-00000040"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    std::fs::remove_dir_all(&run).unwrap();
    disk.fill_leaving(one * 3 / 2 + 64 * 1024);
    let out = widebag(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("No space left on device") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let kept = checkpoints(&run);
    assert_eq!(
        kept,
        vec!["step-00000010".to_string()],
        "no half-written directory is left"
    );
    // The checkpoint left behind is whole: it evaluates, and the run resumes from it once
    // there is room.
    disk.unfill();
    let out = widebag(&["train", "--resume", run.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("step 10"), "{stderr}");
}

/// A sweep over batch sizes `sizes` of a small model, `steps` steps each.
fn sweep_file(steps: usize, sizes: &str) -> String {
    format!(
        "set = [\"data.width=600\", \"data.n_classes=600\", \"model.dim=8\", \"train.steps={steps}\"]\n\
         [grid]\n\"train.batch_size\" = [{sizes}]\n"
    )
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-faults-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_kill_while_stats_are_saved_leaves_no_sidecar_that_is_trusted() {
    let dir = scratch("stats-kill");
    let data = dir.join("d.svm");
    std::fs::write(&data, "1 1:1 3:2\n0 2:1\n1 4:1\n").unwrap();
    let sidecar = dir.join("d.svm.stats.json");
    let pending = || {
        std::fs::read_dir(&dir).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".d.svm.stats.json.tmp")
        })
    };
    common::kill_when(
        &["data", "stats", data.to_str().unwrap()],
        &[("WIDEBAG_FAULT_RENAME_PAUSE_MS", "5000")],
        pending,
    );
    assert!(!sidecar.exists(), "the sidecar appears only whole");
    let out = widebag(&["data", "stats", data.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("statistics saved"),
        "computed again, not reused: {stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"], 3);
    serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&sidecar).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_sweep_killed_mid_run_resumes_and_completes() {
    let dir = scratch("sweep-kill");
    let file = dir.join("sweep.toml");
    std::fs::write(&file, sweep_file(300, "16, 32, 48")).unwrap();
    let out = dir.join("runs");
    let args = sweep_args(&file, &out);
    let rows = || -> usize {
        std::fs::read_dir(&out)
            .map(|d| {
                d.filter(|e| e.as_ref().unwrap().path().join("row.json").exists())
                    .count()
            })
            .unwrap_or(0)
    };
    common::kill_when(&args, &[], || rows() >= 1);
    assert!(rows() < 3);
    let o = widebag(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("skipped"), "{stderr}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(
        csv.lines().filter(|l| l.contains(",ok,")).count(),
        3,
        "{csv}"
    );
    // Once more: a no-op.
    let o = widebag(&args);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr)
            .matches("skipped")
            .count(),
        3
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_full_disk_during_a_sweep_keeps_its_results_and_the_sweep_resumes() {
    let Some(disk) = SmallDisk::mount(
        "a_full_disk_during_a_sweep_keeps_its_results_and_the_sweep_resumes",
        8192,
    ) else {
        return;
    };
    let file = disk.0.join("sweep.toml");
    let sweep = |sizes: &str| {
        std::fs::write(&file, sweep_file(20, sizes)).unwrap();
    };
    let out = disk.0.join("runs");
    let args = sweep_args(&file, &out);
    sweep("16, 32");
    let o = widebag(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows_before: Vec<String> = ["16", "32"]
        .iter()
        .map(|b| std::fs::read_to_string(out.join(format!("batch_size={b}/row.json"))))
        .collect::<Result<_, _>>()
        .unwrap();
    // The disk fills, and the sweep runs again: every run is skipped, so the write that fails is
    // results.csv's own.
    disk.fill();
    let o = widebag(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("results.csv") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("results.csv")).unwrap(),
        csv
    );
    disk.unfill();
    // A third point, then the disk fills: the new run cannot be written.
    sweep("16, 32, 48");
    disk.fill();
    let o = widebag(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("No space left on device") && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("results.csv")).unwrap(),
        csv,
        "the results of the finished runs are intact"
    );
    for (b, before) in ["16", "32"].iter().zip(&rows_before) {
        let now = std::fs::read_to_string(out.join(format!("batch_size={b}/row.json")));
        assert_eq!(now.as_ref().ok(), Some(before));
    }
    // Room again: the two finished runs are skipped, the third runs.
    disk.unfill();
    let o = widebag(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert_eq!(stderr.matches("skipped").count(), 2, "{stderr}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(
        csv.lines().filter(|l| l.contains(",ok,")).count(),
        3,
        "{csv}"
    );
}
