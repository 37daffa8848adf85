//! Tidy checks over the source tree: every Rust file opens with a `//!` line naming its job, and
//! no library or binary source file grows past 500 lines, save the flat registries listed here.

use std::path::{Path, PathBuf};

use crate::common::{repo_relative, repo_root};

/// The most lines a file under `src/` or `crates/*/src/` may have.
const MAX_LINES: usize = 500;

/// Files allowed past [`MAX_LINES`], each as `(path, reason)`: only flat registries that read top
/// to bottom, where splitting would scatter one table over several files. Empty today (the config
/// schema, once 1,238 lines, is now split by concept); an entry that falls within the limit fails.
const LONG_FILES: &[(&str, &str)] = &[];

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

/// The source files the line limit applies to: `src/` and `crates/*/src/`.
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
fn no_source_file_is_over_500_lines_except_flat_registries() {
    let mut over = Vec::new();
    let mut listed_but_short = Vec::new();
    for file in source_files() {
        let rel = repo_relative(&file);
        let lines = std::fs::read_to_string(&file)
            .expect("reads a source file")
            .lines()
            .count();
        let allowed = LONG_FILES.iter().any(|(f, _)| *f == rel);
        if lines > MAX_LINES && !allowed {
            over.push(format!("{rel}: {lines} lines"));
        }
        if lines <= MAX_LINES && allowed {
            listed_but_short.push(format!("{rel}: {lines} lines"));
        }
    }
    for (file, reason) in LONG_FILES {
        assert!(
            repo_root().join(file).is_file(),
            "{file} is in LONG_FILES but does not exist"
        );
        assert!(!reason.is_empty(), "{file} needs a reason");
    }
    assert!(
        over.is_empty(),
        "over {MAX_LINES} lines (split by concept, or add a flat registry to LONG_FILES with its \
         reason):\n  {}",
        over.join("\n  ")
    );
    assert!(
        listed_but_short.is_empty(),
        "now within {MAX_LINES} lines, remove from LONG_FILES:\n  {}",
        listed_but_short.join("\n  ")
    );
}
