//! The header line widebag writes first in a libsvm file (a comment other tools ignore), which
//! records the index base, width and classes so that widebag reads the file back exactly.

use std::path::Path;

use crate::error::DataError;

/// The first line of files widebag writes.
pub(crate) const HEADER: &str = "# widebag libsvm:";

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
