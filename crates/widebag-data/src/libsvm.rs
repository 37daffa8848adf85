//! libsvm / svmlight reader and writer: `label[,label…] [qid:N] idx:val … [# comment]`.
//!
//! Blocks of lines are parsed in parallel with rayon. Labels are class ids (non-negative
//! integers; several, comma-separated, for multi-label rows). `qid:` is ignored and `#` comments
//! are stripped. Ids are 0- or 1-based: set, or detected as sklearn's `load_svmlight_file` does
//! (1-based unless some id is 0). The width is set or taken from the largest id. Blank lines are
//! skipped, as sklearn does.
//!
//! Files widebag writes start with a comment other tools ignore,
//! `# widebag libsvm: zero_based=true width=N n_classes=K blank_lines=rows`, so widebag reads
//! them back exactly: the index base, width and classes, and blank lines as empty rows.

use std::io::Write;
use std::path::Path;

use widebag_csr::SparseRow;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::lines::{LineError, parse_lines};
use crate::options::ReadOptions;

/// One parsed line: class labels, raw (not yet rebased) ids and their values, and the byte
/// column where each id token starts (for error messages).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ParsedLine {
    pub(crate) labels: Vec<u32>,
    pub(crate) ids: Vec<u32>,
    pub(crate) values: Vec<f32>,
    pub(crate) columns: Vec<u32>,
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
pub(crate) fn parse_line(line: &[u8]) -> Result<Option<ParsedLine>, LineError> {
    let mut out = ParsedLine::default();
    Ok(parse_line_into(line, &mut out)?.then_some(out))
}

/// [`parse_line`] into `out` (cleared first, its buffers reused): `Ok(false)` for a blank or
/// comment-only line.
pub(crate) fn parse_line_into(line: &[u8], out: &mut ParsedLine) -> Result<bool, LineError> {
    let content = match line.iter().position(|&c| c == b'#') {
        Some(i) => &line[..i],
        None => line,
    };
    out.labels.clear();
    out.ids.clear();
    out.values.clear();
    out.columns.clear();
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
    Ok(any)
}

/// The first line of files widebag writes.
const HEADER: &str = "# widebag libsvm:";

/// Settings recorded in a widebag header line.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Header {
    pub(crate) zero_based: Option<bool>,
    pub(crate) width: Option<usize>,
    pub(crate) n_classes: Option<usize>,
    pub(crate) blank_lines_are_rows: bool,
}

/// The widest a libsvm file can be, and the most classes: ids and labels are 32-bit, and a width
/// counts them (`u32::MAX` columns; a 0-based id of `u32::MAX` would need one more).
pub const MAX_WIDTH: usize = u32::MAX as usize;

/// Reads the widebag header line, if the file has one. A value that does not parse, or a width
/// no 32-bit id can reach, is refused naming line 1 and its column.
pub(crate) fn read_header(path: &Path) -> Result<Header, DataError> {
    use std::io::BufRead;
    let mut first = String::new();
    let ok = std::fs::File::open(path)
        .map(std::io::BufReader::new)
        .and_then(|mut r| r.read_line(&mut first));
    let mut h = Header::default();
    let Some(rest) = ok.ok().and_then(|_| first.trim_end().strip_prefix(HEADER)) else {
        return Ok(h);
    };
    let bad = |kv: &str, message: String| DataError::Parse {
        path: path.to_path_buf(),
        line: 1,
        column: first.find(kv).map_or(1, |c| c + 1),
        message,
    };
    for kv in rest.split_whitespace() {
        let Some((key, v)) = kv.split_once('=') else {
            continue;
        };
        let number = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| bad(kv, format!("header `{key}`: `{v}` is not a count")))
        };
        match key {
            "zero_based" => {
                h.zero_based = Some(v.parse().map_err(|_| {
                    bad(
                        kv,
                        format!("header `zero_based`: `{v}` is not true or false"),
                    )
                })?)
            }
            "width" | "n_classes" => {
                let n = number(v)?;
                if n > MAX_WIDTH {
                    return Err(bad(
                        kv,
                        format!("header {key} {n} is more than 32-bit ids address ({MAX_WIDTH})"),
                    ));
                }
                *(if key == "width" {
                    &mut h.width
                } else {
                    &mut h.n_classes
                }) = Some(n);
            }
            "blank_lines" => h.blank_lines_are_rows = v == "rows",
            _ => {}
        }
    }
    Ok(h)
}

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

/// Writes a dataset as libsvm with 0-based ids (`zero_based = false` writes 1-based), after a
/// widebag header comment. Labels are the target classes (a row whose target is its own bag
/// gets its ids as labels; target weights other than 1 are not representable and are refused).
pub fn write_libsvm(dataset: &Dataset, path: &Path, zero_based: bool) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(i) = dataset.rows.target_weights.iter().position(|&w| w != 1.0) {
        let row = dataset.rows.target_ptr.partition_point(|&p| p <= i) - 1;
        let (targets, weights) = dataset.rows.row_targets(row);
        // Self-targets (the row's own bag with its values) are written as labels of weight 1.
        if (targets, weights) != dataset.rows.row(row) {
            return Err(DataError::InvalidSpec {
                key: "--to libsvm",
                message: format!(
                    "row {row} has target weights other than 1, which libsvm labels cannot hold \
                     (convert to npz instead)"
                ),
            });
        }
    }
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    writeln!(
        w,
        "{HEADER} zero_based={zero_based} width={} n_classes={} blank_lines=rows",
        dataset.width, dataset.n_classes
    )
    .map_err(io)?;
    let base = u32::from(!zero_based);
    for r in 0..dataset.n_rows() {
        let (ids, values) = dataset.rows.row(r);
        let targets = dataset.rows.row_targets(r);
        // svmlight readers (sklearn's among them) want sorted, unique indices per line.
        let row = SparseRow {
            ids: ids.to_vec(),
            values: values.to_vec(),
        }
        .canonical();
        let labels = if targets == (ids, values) {
            &row.ids[..]
        } else {
            targets.0
        };
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        let mut line = labels.join(",");
        for (id, v) in row.ids.iter().zip(&row.values) {
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
        assert_eq!(HEADER.len(), 17);
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
    fn written_files_read_back_exactly() {
        let mut rows = RowStore::new();
        rows.push(&[3], &[0.25], &[1], &[1.0]);
        rows.push(&[], &[], &[], &[]);
        rows.push(&[1, 4], &[1.0, 2.0], &[0, 2], &[1.0, 1.0]);
        let d = Dataset {
            source: "mem".into(),
            width: 9,
            n_classes: 5,
            rows,
            skipped_lines: 0,
            notes: vec![],
        };
        let p = std::env::temp_dir().join(format!("widebag-svm-{}.svm", std::process::id()));
        for zero_based in [true, false] {
            write_libsvm(&d, &p, zero_based).unwrap();
            let back = read_libsvm(&p, &ReadOptions::default()).unwrap();
            assert_eq!(back.rows, d.rows);
            assert_eq!((back.width, back.n_classes), (9, 5));
        }
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
