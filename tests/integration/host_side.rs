//! The ledger's host side end to end: `explain` itemizes the process's own memory (the data's
//! rows when a file is read whole, none when it is packed and mapped), `--measure` on flex reads
//! the process's anonymous memory (`RssAnon`) beside the prediction within the host bar, and
//! `plan --host-budget` refuses a plan whose host side does not fit with exit 3.

use crate::common;

use common::{json, widebag};

/// A libsvm file of `rows` rows over 3,000 ids (0-based, 24 entries each) and 40 classes.
fn write_rows(path: &std::path::Path, rows: usize) {
    let mut text = String::from("# widebag libsvm: zero_based=true width=3000 n_classes=40\n");
    for r in 0..rows {
        text.push_str(&(r % 40).to_string());
        let mut ids: Vec<usize> = (0..24).map(|k| (r * 131 + k * k * 17 + k) % 3000).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            text.push_str(&format!(" {id}:1"));
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// A part's bytes in a host report's `parts`, by name (0 when absent).
fn part(host: &serde_json::Value, name: &str) -> u64 {
    host["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p[0] == name)
        .map_or(0, |p| p[1].as_u64().unwrap())
}

const FORMAT: &str = "data.format=\"libsvm\"";

const MODEL: [&str; 8] = [
    "--set",
    "model.dim=32",
    "--set",
    "model.hidden=[64]",
    "--set",
    "train.batch_size=256",
    "--set",
    "train.device=\"cpu\"",
];

#[test]
fn explain_prices_the_host_side_and_measures_it_on_flex() {
    let dir = std::env::temp_dir().join(format!("widebag-host-side-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (svm, packed) = (dir.join("rows.svm"), dir.join("rows.wbp"));
    write_rows(&svm, 300_000);
    let out = widebag(&["data", "pack", s(&svm), s(&packed)]);
    assert!(out.status.success(), "{out:?}");
    let mut measured = Vec::new();
    for data in [&svm, &packed] {
        let path = format!("data.path=\"{}\"", s(data));
        let mut args = vec![
            "explain",
            "--measure",
            "--json",
            "--set",
            &path,
            "--set",
            FORMAT,
        ];
        args.extend(MODEL);
        let svg = dir.join("chart.svg");
        args.extend(["--svg", s(&svg)]);
        let v = json(&widebag(&args));
        let host = &v["host"];
        assert_eq!(host["side"]["device_on_host"], true, "{host}");
        let rows = part(host, "training rows");
        // 300,000 rows × 24 entries: ids and values (8 bytes each) when read whole.
        match data == &svm {
            true => assert!(rows >= 300_000 * 20 * 8, "{rows}"),
            false => assert_eq!(rows, 0, "a packed file's rows are mapped, not on the heap"),
        }
        assert!(part(host, "process baseline") > 0);
        assert!(part(host, "device tensors (on the heap)") > 0);
        assert!(part(host, "batches in flight") > 0);
        let parts: u64 = (host["parts"].as_array().unwrap().iter())
            .map(|p| p[1].as_u64().unwrap())
            .sum();
        assert_eq!(parts, host["predicted_anonymous_bytes"].as_u64().unwrap());
        let m = host["measured_anonymous_bytes"].as_u64().expect("measured");
        let err = host["error_pct"].as_f64().unwrap();
        // Within the host bar (10 %), or within a few MiB: glibc's per-thread arenas leave an
        // absolute spread of that order whatever the process's size (the packed run here, about
        // 32 MiB, read 3.8–10.6 % over on the same input from run to run, and 11.1 % once
        // inside the whole parallel suite: 3.8 MiB).
        let off = m.abs_diff(host["predicted_anonymous_bytes"].as_u64().unwrap());
        assert!(
            err <= 10.0 || off <= 5 << 20,
            "{}: error {err:.2}% ({host})",
            s(data)
        );
        measured.push(m);
    }
    // The rows read whole are the difference the reader makes, measured as predicted.
    assert!(measured[0] > measured[1] + 300_000 * 20 * 8, "{measured:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn plan_refuses_a_plan_whose_host_side_does_not_fit() {
    let dir = std::env::temp_dir().join(format!("widebag-host-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svm = dir.join("rows.svm");
    write_rows(&svm, 100_000);
    let path = format!("data.path=\"{}\"", s(&svm));
    let plan = |host_budget: &str| {
        let mut args = vec![
            "plan",
            "--budget",
            "1GiB",
            "--host-budget",
            host_budget,
            "--set",
            &path,
            "--set",
            FORMAT,
        ];
        args.extend(MODEL);
        widebag(&args)
    };
    let fits = plan("8GiB");
    assert!(fits.status.success(), "{fits:?}");
    let text = String::from_utf8_lossy(&fits.stdout).to_string();
    assert!(
        text.contains("host side") && text.contains("fits"),
        "{text}"
    );
    let over = plan("4MiB");
    assert_eq!(over.status.code(), Some(3), "{over:?}");
    let err = String::from_utf8_lossy(&over.stderr).to_string();
    assert!(
        err.contains("does not fit the host")
            && err.contains("training rows")
            && err.contains("--host-budget 4MiB"),
        "{err}"
    );
    let bad = plan("lots");
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    std::fs::remove_dir_all(&dir).ok();
}
