//! Every README headline figure has its raw output: each row of README.md's "Headline figures"
//! table links to a folder under `docs/results/`, the folder's `README.md` says how it was
//! measured (the command, the machine, the binary's commit), and every figure the row gives in
//! bold appears, as written, in one of the folder's files.

use std::path::{Path, PathBuf};

use crate::common::repo_root;

/// The rows of README.md's headline table: each row's text.
fn headline_rows(readme: &str) -> Vec<String> {
    readme
        .lines()
        .skip_while(|l| !l.starts_with("## Headline figures"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with('|') && !l.starts_with("| figure") && !l.starts_with("|---"))
        .map(str::to_string)
        .collect()
}

/// The `docs/results/…` folders a row links to.
fn results_folders(row: &str) -> Vec<String> {
    row.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|link| link.starts_with("docs/results/"))
        .map(|link| {
            let mut parts: Vec<&str> = link.split('/').take(3).collect();
            parts.retain(|p| !p.is_empty() && !p.contains('#'));
            parts.join("/")
        })
        .collect()
}

/// The figures a row gives in bold (`**1.49×**` → `1.49×`).
fn bold_figures(row: &str) -> Vec<String> {
    row.split("**")
        .skip(1)
        .step_by(2)
        .map(|f| f.trim().to_string())
        .filter(|f| f.chars().any(|c| c.is_ascii_digit()))
        .collect()
}

/// The text of every file under `dir`.
fn texts(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            texts(&path, out);
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, text));
        }
    }
}

#[test]
fn every_readme_headline_figure_is_in_its_raw_output() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("reads README.md");
    let rows = headline_rows(&readme);
    assert!(
        (4..=8).contains(&rows.len()),
        "the README's headline table has {} rows (at most eight)",
        rows.len()
    );
    let mut missing = Vec::new();
    for row in &rows {
        let folders = results_folders(row);
        let figures = bold_figures(row);
        let head: String = row.chars().take(60).collect();
        if folders.is_empty() || figures.is_empty() {
            missing.push(format!("{head}…: no docs/results/ link or no bold figure"));
            continue;
        }
        let mut files = Vec::new();
        for f in &folders {
            let dir = repo_root().join(f);
            let about = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
            for key in ["command", "machine", "commit"] {
                if !about.to_lowercase().contains(key) {
                    missing.push(format!("{f}/README.md does not say the {key}"));
                }
            }
            texts(&dir, &mut files);
        }
        for fig in figures {
            if !files.iter().any(|(_, text)| text.contains(&fig)) {
                missing.push(format!("{head}…: `{fig}` is in none of {folders:?}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "headline figures without their raw output:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn figures_links_and_rows_are_read_from_the_table() {
    let readme = "intro\n## Headline figures\n\n| figure | on | where |\n|---|---|---|\n\
        | x **1.49×** and **0.1748** | m | [t](docs/results/ttr/summary.md), [g](docs/results/gow/) |\n\
        \n## Guides\n| not | a | row |\n";
    let rows = headline_rows(readme);
    assert_eq!(rows.len(), 1);
    assert_eq!(bold_figures(&rows[0]), ["1.49×", "0.1748"]);
    assert_eq!(
        results_folders(&rows[0]),
        ["docs/results/ttr", "docs/results/gow"]
    );
}
