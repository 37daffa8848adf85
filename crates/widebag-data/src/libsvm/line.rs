//! A libsvm line's syntax: `label[,label…] [qid:N] idx:val … [# comment]` parsed into its
//! labels, raw ids (not yet rebased), values and each id's column.

use crate::lines::LineError;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libsvm::header::HEADER;

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
    fn errors_carry_columns() {
        assert_eq!(parse_line(b"1 4:x").unwrap_err().0, 5);
        assert_eq!(parse_line(b"1 4:1 junk").unwrap_err().0, 7);
        assert_eq!(parse_line(b"1 4:nan").unwrap_err().0, 5);
        assert_eq!(parse_line(b"-1 4:1").unwrap_err().0, 1);
        assert_eq!(parse_line(b"1 -4:1").unwrap_err().0, 3);
    }
}
