//! The `widebag` binary end to end: bad configuration exits 2 naming the key; `--json` prints
//! the summary fields.

use crate::common;

use common::widebag;

fn assert_config_error(args: &[&str], key: &str) {
    let out = widebag(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {stderr}");
    assert!(
        stderr.contains(key),
        "{args:?}: stderr does not name {key}: {stderr}"
    );
}

#[test]
fn bad_config_exits_2_naming_the_key() {
    assert_config_error(&["train", "--set", "train.batchsize=4"], "train.batchsize");
    assert_config_error(
        &["train", "--set", "train.batch_size=0"],
        "train.batch_size",
    );
    assert_config_error(&["train", "--set", "data.width=0"], "data.width");
    assert_config_error(&["train", "--set", "model.dim=abc"], "model.dim");
    assert_config_error(&["train", "--set", "optim.lr=fast"], "optim.lr");
    assert_config_error(&["train", "--set", "nonsense"], "nonsense");
}

#[test]
fn bad_config_file_names_file_line_and_key() {
    let dir = std::env::temp_dir().join(format!("widebag-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[train]\nsteps = 2\n[data]\nwidht = 10\n").unwrap();
    let out = widebag(&["train", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.toml:4"), "{stderr}");
    assert!(
        stderr.contains("data.widht") && stderr.contains("data.width"),
        "{stderr}"
    );
    let out = widebag(&["train", "--config", "/nonexistent/widebag.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/widebag.toml"));
}

#[test]
fn json_summary_has_the_documented_fields_on_cpu() {
    let out = widebag(&[
        "train",
        "--device",
        "cpu",
        "--json",
        "--set",
        "train.steps=3",
        "--set",
        "data.width=2000",
        "--set",
        "train.batch_size=8",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "backend",
        "adapter",
        "width",
        "dim",
        "batch_size",
        "steps",
        "examples_per_s",
        "final_loss",
        "table_bytes",
        "peak_in_use_bytes",
        "peak_reserved_bytes",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["backend"], "flex");
    assert_eq!(v["width"], 2000);
    assert_eq!(v["steps"], 3);
    assert_eq!(v["table_bytes"], 2000 * 32 * 4);
}

#[test]
fn json_summary_on_wgpu_reports_measured_peaks() {
    if !common::has_wgpu("json_summary_on_wgpu_reports_measured_peaks") {
        return;
    }
    let out = widebag(&[
        "train",
        "--device",
        "wgpu",
        "--json",
        "--set",
        "train.steps=3",
        "--set",
        "data.width=5000",
        "--set",
        "train.batch_size=16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["backend"], "wgpu");
    let peak = v["peak_in_use_bytes"].as_u64().expect("measured on wgpu");
    assert!(peak >= v["table_bytes"].as_u64().unwrap());
    assert!(v["peak_reserved_bytes"].as_u64().unwrap() >= peak);
}

#[test]
fn json_errors_are_one_json_object_with_the_exit_code() {
    for (args, code) in [
        (&["train", "--json", "--set", "model.no_such_key=1"][..], 2),
        (&["train", "--json", "--no-such-flag"][..], 2),
        (
            &["plan", "--json", "--budget", "10KiB", "--device", "cpu"][..],
            3,
        ),
    ] {
        let out = widebag(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(
            lines.len(),
            1,
            "{args:?}: not one JSON line on stdout: {text}"
        );
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
        if code == 3 {
            // plan prints its own report (fits: false) as the one object.
            assert_eq!(v["fits"], false, "{args:?}: {v}");
        } else {
            assert_eq!(v["status"], "error", "{args:?}: {v}");
            assert_eq!(v["exit_code"], code, "{args:?}: {v}");
            assert_eq!(
                v["meaning"], "usage or configuration error",
                "{args:?}: {v}"
            );
            assert!(!v["error"].as_str().unwrap_or_default().is_empty(), "{v}");
        }
    }
}
