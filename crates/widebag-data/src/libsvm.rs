//! libsvm / svmlight reader and writer: `label[,label…] [qid:N] idx:val … [# comment]`.
//!
//! Blocks of lines are parsed in parallel with rayon. Labels are class ids (non-negative
//! integers; several, comma-separated, for multi-label rows). `qid:` is ignored and `#` comments
//! are stripped. Ids are 0- or 1-based: set, or detected as sklearn's `load_svmlight_file` does
//! (1-based unless some id is 0). The width is set or taken from the largest id.

use std::io::Write;
use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::lines::{LineError, parse_lines};
use crate::{DataError, ReadOptions};

/// One parsed line: class labels, raw (not yet rebased) ids and their values, and the byte
/// column where each id token starts (for error messages).
#[derive(Debug, Default, PartialEq)]
struct ParsedLine {
    labels: Vec<u32>,
    ids: Vec<u32>,
    values: Vec<f32>,
    columns: Vec<u32>,
}

fn parse_u32(tok: &[u8]) -> Option<u32> {
    if tok.is_empty() || tok.len() > 10 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in tok {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u64;
    }
    u32::try_from(v).ok()
}

fn parse_f32(tok: &[u8]) -> Option<f32> {
    std::str::from_utf8(tok).ok()?.parse::<f32>().ok()
}

fn parse_label(tok: &[u8]) -> Option<u32> {
    parse_u32(tok).or_else(|| {
        // Integral floats such as "3.0" are accepted.
        let v = std::str::from_utf8(tok).ok()?.parse::<f64>().ok()?;
        (v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64).then_some(v as u32)
    })
}

/// Parses one line; `Ok(None)` for a blank or comment-only line.
fn parse_line(line: &[u8]) -> Result<Option<ParsedLine>, LineError> {
    let content = match line.iter().position(|&c| c == b'#') {
        Some(i) => &line[..i],
        None => line,
    };
    let mut out = ParsedLine::default();
    let mut pos = 0;
    let mut first = true;
    let mut any = false;
    while pos < content.len() {
        while pos < content.len() && (content[pos] == b' ' || content[pos] == b'\t') {
            pos += 1;
        }
        if pos >= content.len() {
            break;
        }
        let start = pos;
        while pos < content.len() && content[pos] != b' ' && content[pos] != b'\t' {
            pos += 1;
        }
        let tok = &content[start..pos];
        let column = start + 1;
        any = true;
        let colon = tok.iter().position(|&c| c == b':');
        if first {
            first = false;
            if colon.is_none() {
                for lab in tok.split(|&c| c == b',') {
                    let l = parse_label(lab).ok_or_else(|| {
                        (
                            column,
                            format!(
                                "label `{}` is not a class id (a non-negative integer)",
                                String::from_utf8_lossy(lab)
                            ),
                        )
                    })?;
                    out.labels.push(l);
                }
                continue;
            }
        }
        let Some(c) = colon else {
            return Err((
                column,
                format!(
                    "token `{}` is not `index:value`",
                    String::from_utf8_lossy(tok)
                ),
            ));
        };
        let (key, val) = (&tok[..c], &tok[c + 1..]);
        if key == b"qid" {
            continue;
        }
        let id = parse_u32(key).ok_or_else(|| {
            (
                column,
                format!(
                    "index `{}` is not a non-negative 32-bit integer",
                    String::from_utf8_lossy(key)
                ),
            )
        })?;
        let value = parse_f32(val).ok_or_else(|| {
            (
                column + c + 1,
                format!("value `{}` is not a number", String::from_utf8_lossy(val)),
            )
        })?;
        if !value.is_finite() {
            return Err((column + c + 1, format!("value {value} is not finite")));
        }
        out.ids.push(id);
        out.values.push(value);
        out.columns.push(column as u32);
    }
    Ok(any.then_some(out))
}

/// Reads a libsvm file.
pub fn read_libsvm(path: &Path, options: &ReadOptions) -> Result<Dataset, DataError> {
    let (parsed, mut skipped) = parse_lines(path, options.skip_bad_lines, parse_line)?;
    let min_id = parsed.iter().flat_map(|(_, p)| p.ids.iter()).min().copied();
    let zero_based = options.zero_based.unwrap_or(min_id == Some(0));
    let base = u32::from(!zero_based);
    let max_id = parsed.iter().flat_map(|(_, p)| p.ids.iter()).max().copied();
    let width = options
        .width
        .unwrap_or_else(|| max_id.map_or(0, |m| (m + 1 - base) as usize));
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
            let message = if id < base {
                "index 0 in a 1-based file (set the index base to 0)".to_string()
            } else {
                format!(
                    "index {id} is beyond the width {width} ({}-based ids)",
                    base
                )
            };
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
        notes: vec![format!(
            "{}-based ids ({})",
            base,
            if options.zero_based.is_some() {
                "set"
            } else {
                "detected"
            }
        )],
    })
}

/// Writes a dataset as libsvm with 0-based ids (`zero_based = false` writes 1-based).
pub fn write_libsvm(dataset: &Dataset, path: &Path, zero_based: bool) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    let base = u32::from(!zero_based);
    for r in 0..dataset.n_rows() {
        let (labels, _) = dataset.rows.row_targets(r);
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        let mut line = labels.join(",");
        let (ids, values) = dataset.rows.row(r);
        for (id, v) in ids.iter().zip(values) {
            line.push_str(&format!(" {}:{}", id + base, v));
        }
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_qid_comments_and_pairs() {
        let p = parse_line(b"1,3 qid:7 4:0.5 10:2 # note").unwrap().unwrap();
        assert_eq!(p.labels, vec![1, 3]);
        assert_eq!(p.ids, vec![4, 10]);
        assert_eq!(p.values, vec![0.5, 2.0]);
        assert_eq!(p.columns, vec![11, 17]);
        assert!(parse_line(b"   # only a comment").unwrap().is_none());
        assert!(parse_line(b"").unwrap().is_none());
        let p = parse_line(b" 3:1").unwrap().unwrap();
        assert!(p.labels.is_empty());
    }

    #[test]
    fn errors_carry_columns() {
        assert_eq!(parse_line(b"1 4:x").unwrap_err().0, 5);
        assert_eq!(parse_line(b"1 4:1 junk").unwrap_err().0, 7);
        assert_eq!(parse_line(b"1 4:nan").unwrap_err().0, 5);
        assert_eq!(parse_line(b"-1 4:1").unwrap_err().0, 1);
        assert_eq!(parse_line(b"1 -4:1").unwrap_err().0, 3);
    }
}
