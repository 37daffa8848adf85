//! A dictd database's files and its index: `.index` lines of `headword<TAB>offset<TAB>length`,
//! offsets and lengths in dictd's base64 digits, read into one entry per distinct block (several
//! headwords may share one), in dictionary order.

use std::path::{Path, PathBuf};

use crate::error::DataError;
use crate::lines::{LineError, parse_lines};
use crate::text::corpus::decode_utf8;

/// The index and dictionary files of one dictd database.
#[derive(Clone, Debug, PartialEq)]
pub struct DictdFiles {
    pub index: PathBuf,
    pub dict: PathBuf,
}

/// Finds the pair from any of `NAME.index`, `NAME.dict`, `NAME.dict.dz` or `NAME`.
pub fn locate(path: &Path) -> Result<DictdFiles, DataError> {
    let s = path.to_string_lossy();
    let base = ["index", "dict.dz", "dict"]
        .iter()
        .find_map(|ext| s.strip_suffix(&format!(".{ext}")))
        .unwrap_or(&s)
        .to_string();
    let index = PathBuf::from(format!("{base}.index"));
    let dict = [".dict.dz", ".dict"]
        .iter()
        .map(|ext| PathBuf::from(format!("{base}{ext}")))
        .find(|p| p.exists());
    match dict {
        Some(dict) if index.exists() => Ok(DictdFiles { index, dict }),
        _ => Err(DataError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("a dictd database needs {base}.index and {base}.dict(.dz)"),
            ),
        }),
    }
}

/// Value of dictd's base64 digits (`A`–`Z`, `a`–`z`, `0`–`9`, `+`, `/`; most significant first).
pub fn base64_number(digits: &str) -> Option<u64> {
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    digits.bytes().try_fold(0u64, |acc, c| {
        let d = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        Some(acc * 64 + u64::from(d))
    })
}

/// `(offset, length, column of the offset field)` of one index line.
fn parse_index_line(line: &[u8]) -> Result<Option<(u64, u64, usize)>, LineError> {
    let text = decode_utf8(line).map_err(|(_, col)| (col, "the line is not valid UTF-8".into()))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let fields: Vec<&str> = text.split('\t').collect();
    if fields.len() < 3 {
        return Err((
            1,
            format!(
                "expected `headword<TAB>offset<TAB>length`, found {} field(s)",
                fields.len()
            ),
        ));
    }
    let off_col = fields[0].len() + 2;
    let len_col = off_col + fields[1].len() + 1;
    let offset = base64_number(fields[1]).ok_or_else(|| {
        (
            off_col,
            format!("offset `{}` is not a dictd base64 number", fields[1]),
        )
    })?;
    let length = base64_number(fields[2].trim_end()).ok_or_else(|| {
        (
            len_col,
            format!("length `{}` is not a dictd base64 number", fields[2]),
        )
    })?;
    Ok(Some((offset, length, off_col)))
}

/// One entry of the index: its line, its block's offset and length, the offset field's column.
pub(crate) type IndexEntry = (usize, (u64, u64, usize));

/// A dictd database's index entries in dictionary order, one per distinct block, and the index
/// lines skipped as bad. They are the index's size in memory (never the dictionary's).
pub(crate) fn index_entries(
    files: &DictdFiles,
    skip_bad_lines: bool,
) -> Result<(Vec<IndexEntry>, usize), DataError> {
    let (mut entries, skipped) = parse_lines(&files.index, skip_bad_lines, parse_index_line)?;
    entries.sort_unstable_by_key(|&(line, (off, len, _))| (off, len, line));
    entries.dedup_by_key(|&mut (_, (off, len, _))| (off, len));
    Ok((entries, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_digits() {
        assert_eq!(base64_number("A"), Some(0));
        assert_eq!(base64_number("BA"), Some(64));
        assert_eq!(base64_number("/"), Some(63));
        assert_eq!(base64_number("b"), Some(27));
        assert_eq!(base64_number("a-"), None);
        assert_eq!(base64_number(""), None);
    }
}
