//! A table of rows a command prints (Markdown, or the rows as JSON with `--json`) and keeps as
//! `DIR/STEM.md` and `DIR/STEM.json`: the explain and plan grids and the bench.

use std::path::Path;

use anyhow::Context;

use crate::failure::Failure;

/// Prints the rows (JSON) or their table (Markdown), and keeps both in `out` when given.
pub fn emit_rows<T: serde::Serialize>(
    rows: &[T],
    md: &str,
    json: bool,
    out: Option<&Path>,
    stem: &str,
) -> Result<(), Failure> {
    if json {
        println!("{}", serde_json::to_string(rows).expect("rows serialise"));
    } else {
        print!("{md}");
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(dir.join(format!("{stem}.md")), md))
            .and_then(|_| {
                std::fs::write(
                    dir.join(format!("{stem}.json")),
                    serde_json::to_string_pretty(rows).expect("rows serialise"),
                )
            })
            .with_context(|| format!("writing {}", dir.display()))
            .map_err(Failure::run)?;
    }
    Ok(())
}
