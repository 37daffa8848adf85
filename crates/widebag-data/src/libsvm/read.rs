//! A libsvm file read whole: its lines parsed in parallel blocks, the index base detected (or
//! set, or taken from widebag's header), ids rebased and checked against the width and classes.

use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::libsvm::header::{MAX_WIDTH, read_header};
use crate::libsvm::line::{ParsedLine, parse_line};
use crate::lines::parse_lines;
use crate::options::ReadOptions;

/// A libsvm file's lines before ids are rebased or checked.
pub(crate) struct ParsedFile {
    /// The caller's options, unset ones filled from the file's widebag header.
    pub(crate) options: ReadOptions,
    /// `(line number, line)` of every non-blank line.
    pub(crate) lines: Vec<(usize, ParsedLine)>,
    /// Lines skipped as bad under `skip_bad_lines`.
    pub(crate) skipped: usize,
}

/// Parses every line of `path` (blocks in parallel), after its widebag header if any.
pub(crate) fn parse_file(path: &Path, options: &ReadOptions) -> Result<ParsedFile, DataError> {
    let header = read_header(path)?;
    let options = ReadOptions {
        zero_based: options.zero_based.or(header.zero_based),
        width: options.width.or(header.width),
        n_classes: options.n_classes.or(header.n_classes),
        skip_bad_lines: options.skip_bad_lines,
    };
    let (lines, skipped) = parse_lines(path, options.skip_bad_lines, |line| {
        if header.blank_lines_are_rows && line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Some(ParsedLine::default()));
        }
        parse_line(line)
    })?;
    Ok(ParsedFile {
        options,
        lines,
        skipped,
    })
}

/// Why raw id `id` is refused in a `base`-based file of `width` columns.
pub(crate) fn bad_id(id: u32, base: u32, width: usize) -> String {
    if id < base {
        "index 0 in a 1-based file (set the index base to 0)".to_string()
    } else {
        format!("index {id} is beyond the width {width} ({base}-based ids)")
    }
}

/// The note a read dataset carries about its index base.
pub(crate) fn base_note(zero_based: bool, set: bool) -> String {
    let how = if set { "set" } else { "detected" };
    format!("{}-based ids ({how})", u32::from(!zero_based))
}

/// Whether a dataset [`read_libsvm`] returned had 0-based ids (from its notes), or `None` for a
/// dataset without that note.
pub fn zero_based_of(dataset: &Dataset) -> Option<bool> {
    dataset
        .notes
        .iter()
        .find_map(|n| match n.split_once("-based ids (") {
            Some(("0", _)) => Some(true),
            Some(("1", _)) => Some(false),
            _ => None,
        })
}

/// Reads a libsvm file.
pub fn read_libsvm(path: &Path, options: &ReadOptions) -> Result<Dataset, DataError> {
    let ParsedFile {
        options,
        lines: parsed,
        mut skipped,
    } = parse_file(path, options)?;
    let options = &options;
    let min_id = parsed.iter().flat_map(|(_, p)| p.ids.iter()).min().copied();
    let zero_based = options.zero_based.unwrap_or(min_id == Some(0));
    let base = u32::from(!zero_based);
    let max_id = parsed.iter().flat_map(|(_, p)| p.ids.iter()).max().copied();
    let width = options
        .width
        .unwrap_or_else(|| max_id.map_or(0, |m| m as usize + 1 - base as usize));
    if width > MAX_WIDTH {
        // Only a 0-based id of 4,294,967,295 gets here: its width needs a 33rd bit.
        let (line, column) = parsed
            .iter()
            .find_map(|(line, p)| {
                let i = p.ids.iter().position(|&id| Some(id) == max_id)?;
                Some((*line, p.columns[i] as usize))
            })
            .unwrap_or((1, 1));
        return Err(DataError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: format!(
                "index {} makes the width {width}, more than 32-bit ids address \
                 (at most {MAX_WIDTH} columns)",
                max_id.unwrap_or(0)
            ),
        });
    }
    let mut rows = RowStore::new();
    let mut max_label = None;
    for (line, p) in &parsed {
        let bad = p
            .ids
            .iter()
            .zip(&p.columns)
            .find(|&(&id, _)| id < base || (id - base) as usize >= width);
        if let Some((&id, &column)) = bad {
            if options.skip_bad_lines {
                skipped += 1;
                continue;
            }
            let message = bad_id(id, base, width);
            return Err(DataError::Parse {
                path: path.to_path_buf(),
                line: *line,
                column: column as usize,
                message,
            });
        }
        let ids: Vec<u32> = p.ids.iter().map(|&i| i - base).collect();
        let ones = vec![1.0; p.labels.len()];
        rows.push(&ids, &p.values, &p.labels, &ones);
        max_label = max_label.max(p.labels.iter().max().copied());
    }
    let n_classes = options
        .n_classes
        .unwrap_or_else(|| max_label.map_or(0, |m| m as usize + 1));
    if let Some(r) = (0..rows.n_rows()).find(|&r| {
        rows.row_targets(r)
            .0
            .iter()
            .any(|&c| c as usize >= n_classes)
    }) {
        return Err(DataError::Parse {
            path: path.to_path_buf(),
            line: parsed[r].0,
            column: 1,
            message: format!("label beyond the number of classes {n_classes}"),
        });
    }
    if parsed.is_empty() && skipped == 0 {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(Dataset {
        source: path.to_path_buf(),
        width,
        n_classes,
        rows,
        skipped_lines: skipped,
        notes: vec![base_note(zero_based, options.zero_based.is_some())],
    })
}
