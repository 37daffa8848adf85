//! Tidy checks over the source tree: every Rust file opens with a `//!` line naming its job, and
//! a module's tests live in it (or in a `tests.rs` of its own folder), never in a `*_tests.rs`
//! sibling. Files are cut by concept, not by a line count: there is no cap.

use std::path::{Path, PathBuf};

use crate::common::{repo_relative, repo_root};

/// Every `.rs` file under `dir`, skipping build outputs and hidden directories.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("reads a directory entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The crates' directories, `crates/*`.
fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("crates"))
        .expect("reads crates/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The library and binary source files: `src/` and `crates/*/src/`.
fn source_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&repo_root().join("src"), &mut files);
    for dir in crate_dirs() {
        rust_files(&dir.join("src"), &mut files);
    }
    files.sort();
    files
}

#[test]
fn every_rust_file_opens_with_a_module_doc_line() {
    let mut files = source_files();
    rust_files(&repo_root().join("tests"), &mut files);
    rust_files(&repo_root().join("benches"), &mut files);
    for dir in crate_dirs() {
        for sub in ["tests", "benches", "examples"] {
            rust_files(&dir.join(sub), &mut files);
        }
    }
    files.sort();
    files.dedup();
    assert!(files.len() > 20, "found only {} files", files.len());
    let bad: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).expect("reads a source file");
            !text.lines().next().is_some_and(|l| l.starts_with("//!"))
        })
        .map(|f| repo_relative(f))
        .collect();
    assert!(
        bad.is_empty(),
        "these files do not open with a `//!` line saying what they hold:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn tests_live_in_their_modules_not_in_siblings_named_for_them() {
    let siblings: Vec<String> = source_files()
        .iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("_tests.rs"))
        })
        .map(|f| repo_relative(f))
        .collect();
    assert!(
        siblings.is_empty(),
        "`*_tests.rs` siblings (fold them into their module's `mod tests`, or a `tests.rs` in \
         the module's own folder):\n  {}",
        siblings.join("\n  ")
    );
}
