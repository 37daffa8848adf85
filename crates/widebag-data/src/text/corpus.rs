//! The documents of a text corpus: one per line of a file, or one per file of a directory tree
//! (path order, names starting with `.` left out), each decoded as UTF-8 or refused naming its
//! line and column.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::DataError;
use crate::lines::{LineError, parse_lines};

/// UTF-8 text of `bytes`, or the 1-based line and column of the first invalid byte.
pub fn decode_utf8(bytes: &[u8]) -> Result<&str, (usize, usize)> {
    std::str::from_utf8(bytes).map_err(|e| {
        let bad = e.valid_up_to();
        let line_start = bytes[..bad]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line = 1 + bytes[..bad].iter().filter(|&&b| b == b'\n').count();
        (line, bad - line_start + 1)
    })
}

/// One line as a document (a blank line is an empty document); a line that is not UTF-8 is bad.
pub(crate) fn parse_document(line: &[u8]) -> Result<Option<String>, LineError> {
    parse_document_str(line).map(|text| Some(text.to_string()))
}

/// [`parse_document`]'s text, borrowed from the line.
pub(crate) fn parse_document_str(line: &[u8]) -> Result<&str, LineError> {
    decode_utf8(line).map_err(|(_, col)| (col, "the line is not valid UTF-8".to_string()))
}

/// Documents of a one-document-per-line file (blank lines are empty documents) and the number
/// of lines skipped as bad.
pub fn line_documents(
    path: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<String>, usize), DataError> {
    let (docs, skipped) = parse_lines(path, skip_bad_lines, parse_document)?;
    Ok((docs.into_iter().map(|(_, d)| d).collect(), skipped))
}

/// Files under `dir`, recursively, in path order; names starting with `.` are left out.
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for p in entries {
        if p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
        {
            continue;
        }
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// The document that the file `path` is: its text, or an error naming its line and column when
/// it is not UTF-8.
pub(crate) fn read_document(path: &Path) -> Result<String, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match decode_utf8(&bytes) {
        Ok(text) => Ok(text.to_string()),
        Err((line, column)) => Err(DataError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: "the file is not valid UTF-8".into(),
        }),
    }
}

/// One document per file under `dir` (recursively, path order). A file that is not UTF-8 is an
/// error naming it, its line and column, or is skipped and counted under `skip_bad_lines`.
pub fn file_documents(dir: &Path, skip_bad_lines: bool) -> Result<(Vec<String>, usize), DataError> {
    let (named, skipped) = named_file_documents(dir, skip_bad_lines)?;
    Ok((named.into_iter().map(|(_, d)| d).collect(), skipped))
}

/// [`file_documents`] with each document's file path.
pub fn named_file_documents(
    dir: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<(PathBuf, String)>, usize), DataError> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    let read: Vec<Result<(PathBuf, String), DataError>> = files
        .into_par_iter()
        .map(|p| read_document(&p).map(|d| (p, d)))
        .collect();
    let mut docs = Vec::with_capacity(read.len());
    let mut skipped = 0;
    for r in read {
        match r {
            Ok(d) => docs.push(d),
            Err(DataError::Parse { .. }) if skip_bad_lines => skipped += 1,
            Err(e) => return Err(e),
        }
    }
    Ok((docs, skipped))
}

/// Documents of a text corpus: one per line of a file, or one per file when `path` is a
/// directory; and the number of lines (or files) skipped as bad.
pub fn corpus_documents(
    path: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<String>, usize), DataError> {
    if path.is_dir() {
        file_documents(path, skip_bad_lines)
    } else {
        line_documents(path, skip_bad_lines)
    }
}
