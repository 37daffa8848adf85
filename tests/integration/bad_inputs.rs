//! The bad-input corpus in `tests/data/bad/`: every file is refused with exit code 2 and a
//! message naming the file and the place in it (line and column; member and byte for npz);
//! nothing panics.

use std::path::Path;
use std::process::Command;

fn stats(path: &Path, format: &str, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_widebag"))
        .args(["data", "stats"])
        .arg(path)
        .args(["--format", format, "--json", "--no-save"])
        .args(extra)
        .output()
        .expect("runs the binary")
}

#[test]
fn every_bad_file_is_refused_with_file_line_and_column() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        let format = match ext {
            "libsvm" | "lightgcn" | "npz" | "text" => ext,
            "index" => "dictd",
            _ => continue,
        };
        let mut expected_path = path.clone().into_os_string();
        expected_path.push(".expected");
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("{} has an .expected file", path.display()));
        let out = stats(&path, format, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", path.display());
        assert!(!stderr.contains("panicked"), "{}: {stderr}", path.display());
        for want in expected.lines().filter(|l| !l.is_empty()) {
            assert!(
                stderr.contains(want),
                "{}: `{want}` not in: {stderr}",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 19, "only {checked} bad files found");
}

#[test]
fn skip_bad_lines_counts_instead_of_failing() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad/nan_value.libsvm");
    let out = stats(&path, "libsvm", &["--skip-bad-lines"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped 1 bad lines"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"], 1);
}

/// A width the file claims but does not hold (an id of 4,294,967,295; a header's `width=2^60` is
/// a bad file, refused above) costs memory in proportion to the file: `data stats` runs under a
/// 4 GiB address-space cap (a width-sized count array would need 32 GiB), and `train` is
/// refused by the ledger before anything is allocated.
#[test]
fn a_huge_claimed_width_costs_only_what_the_file_holds() {
    let (name, width) = ("huge_id.libsvm", 4_294_967_295u64);
    // A copy, so that `train`'s statistics sidecar lands beside it, not in the repository.
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/huge")
            .join(name),
        &path,
    )
    .unwrap();
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 4194304; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_widebag"))
        .args(["data", "stats"])
        .arg(&path)
        .args(["--json", "--no-save"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["width"], width, "{name}");
    let out = Command::new(env!("CARGO_BIN_EXE_widebag"))
        .args([
            "train",
            "--device",
            "cpu",
            "--set",
            "data.format=libsvm",
            "--set",
        ])
        .arg(format!("data.path={}", path.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{name}: {stderr}");
    assert!(
        stderr.contains("does not fit: the ledger predicts a peak of")
            && !stderr.contains("panicked"),
        "{name}: {stderr}"
    );
}
