//! The dictd dictionary format (as in GCIDE): a `.index` of `headword<TAB>offset<TAB>length`
//! lines, offsets and lengths in dictd's base64 digits, into the text of a `.dict` file or its
//! gzip-compatible `.dict.dz`. Each distinct entry block (several headwords may share one) is one
//! document for the text pipeline.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::DataError;
use crate::lines::{LineError, parse_lines};
use crate::text::decode_utf8;

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

/// Counts bytes read through it (to place decompression errors).
struct Counting<R> {
    inner: R,
    bytes: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// The whole dictionary text (decompressed when the name ends in `.dz` or `.gz`).
fn dict_text(path: &Path) -> Result<Vec<u8>, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    let name = path.to_string_lossy();
    if name.ends_with(".dz") || name.ends_with(".gz") {
        let mut counted = Counting {
            inner: std::io::BufReader::new(file),
            bytes: 0,
        };
        let result = flate2::read::MultiGzDecoder::new(&mut counted).read_to_end(&mut out);
        result.map_err(|e| DataError::Archive {
            path: path.to_path_buf(),
            member: "(gzip stream)".into(),
            offset: counted.bytes,
            message: format!("the compressed dictionary is corrupted or truncated: {e}"),
        })?;
    } else {
        std::io::BufReader::new(file)
            .read_to_end(&mut out)
            .map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
    }
    Ok(out)
}

/// The distinct entry blocks of a dictd database as documents, in dictionary order, and the
/// number of index lines skipped as bad.
pub fn dictd_documents(
    path: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<String>, usize, DictdFiles), DataError> {
    let files = locate(path)?;
    let (mut entries, mut skipped) = parse_lines(&files.index, skip_bad_lines, parse_index_line)?;
    let text = dict_text(&files.dict)?;
    entries.sort_unstable_by_key(|&(line, (off, len, _))| (off, len, line));
    entries.dedup_by_key(|&mut (_, (off, len, _))| (off, len));
    let mut docs = Vec::with_capacity(entries.len());
    for (line, (offset, length, column)) in entries {
        let end = offset
            .checked_add(length)
            .filter(|&e| e <= text.len() as u64);
        let Some(end) = end else {
            if skip_bad_lines {
                skipped += 1;
                continue;
            }
            return Err(DataError::Parse {
                path: files.index.clone(),
                line,
                column,
                message: format!(
                    "entry {offset}+{length} runs past the {} bytes of {}",
                    text.len(),
                    files.dict.display()
                ),
            });
        };
        let block = &text[offset as usize..end as usize];
        match decode_utf8(block) {
            Ok(s) => docs.push(s.to_string()),
            Err(_) if skip_bad_lines => skipped += 1,
            Err(_) => {
                // Report the position in the dictionary text.
                let (l, c) = decode_utf8(&text[..end as usize]).err().unwrap_or((0, 0));
                return Err(DataError::Parse {
                    path: files.dict.clone(),
                    line: l,
                    column: c,
                    message: format!(
                        "the entry of index line {line} is not valid UTF-8 (line and column \
                         are in the decompressed text)"
                    ),
                });
            }
        }
    }
    if docs.is_empty() {
        return Err(DataError::Empty { path: files.index });
    }
    Ok((docs, skipped, files))
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

    #[test]
    fn entries_dedupe_and_errors_locate() {
        let dir = std::env::temp_dir().join(format!("widebag-dictd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "cat\n  A small animal.\ndog\n  Not a cat.\n";
        std::fs::write(dir.join("d.dict"), text).unwrap();
        // "cat" block = bytes 0..22 (A, W), "dog" block = 22..39 (W, R); "kitty" shares the cat block.
        std::fs::write(dir.join("d.index"), "cat\tA\tW\ndog\tW\tR\nkitty\tA\tW\n").unwrap();
        let (docs, skipped, files) = dictd_documents(&dir.join("d.index"), false).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(skipped, 0);
        assert!(docs[1].starts_with("dog"));
        assert_eq!(files.dict, dir.join("d.dict"));
        std::fs::write(dir.join("d.index"), "cat\tA\tW\ndog\tW\tBA\n").unwrap();
        let e = dictd_documents(&dir.join("d"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("d.index:2:5") && e.contains("runs past"), "{e}");
        std::fs::write(dir.join("d.index"), "cat\tA\tW\ndog\tW!\tR\n").unwrap();
        let e = dictd_documents(&dir.join("d"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("d.index:2:5"), "{e}");
        let (docs, skipped, _) = dictd_documents(&dir.join("d"), true).unwrap();
        assert_eq!((docs.len(), skipped), (1, 1));
    }
}
