//! Streams a text file in blocks of whole lines, so line-oriented readers can parse each block in
//! parallel with rayon while the file is read once, front to back, never held whole.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::DataError;

/// Target block size in bytes (a block always ends at a line boundary).
pub const BLOCK_BYTES: usize = 4 << 20;

/// Lines of a block one rayon task parses together into reused buffers (one allocation per
/// buffer, not per line).
pub const CHUNK_LINES: usize = 2048;

/// One block: the bytes of whole lines and the 1-based number of its first line.
pub struct LineBlock {
    pub first_line: usize,
    pub bytes: Vec<u8>,
}

impl LineBlock {
    /// `(line_number, line)` pairs, without the line terminator (`\n` or `\r\n`).
    pub fn lines(&self) -> Vec<(usize, &[u8])> {
        let mut out = Vec::new();
        let mut line = self.first_line;
        let mut start = 0;
        let b = &self.bytes;
        while start < b.len() {
            let end = memchr(b'\n', &b[start..]).map_or(b.len(), |i| start + i);
            let mut l = &b[start..end];
            if l.last() == Some(&b'\r') {
                l = &l[..l.len() - 1];
            }
            out.push((line, l));
            line += 1;
            start = end + 1;
        }
        out
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == needle)
}

/// Reads `path` block by block.
pub struct LineBlocks<R: Read> {
    path: PathBuf,
    reader: R,
    carry: Vec<u8>,
    next_line: usize,
    done: bool,
}

impl LineBlocks<std::fs::File> {
    pub fn open(path: &Path) -> Result<Self, DataError> {
        let file = std::fs::File::open(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self::new(path, file))
    }
}

impl<R: Read> LineBlocks<R> {
    pub fn new(path: &Path, reader: R) -> Self {
        Self {
            path: path.to_path_buf(),
            reader,
            carry: Vec::new(),
            next_line: 1,
            done: false,
        }
    }

    /// The next block, or `None` at the end of the file.
    pub fn next_block(&mut self) -> Result<Option<LineBlock>, DataError> {
        if self.done {
            return Ok(None);
        }
        let mut buf = std::mem::take(&mut self.carry);
        let mut filled = buf.len();
        buf.resize(filled.max(BLOCK_BYTES), 0);
        loop {
            if filled == buf.len() {
                // Block full: cut at the last newline, or grow if one line is longer than a block.
                if let Some(cut) = buf[..filled].iter().rposition(|&c| c == b'\n') {
                    self.carry = buf[cut + 1..filled].to_vec();
                    buf.truncate(cut + 1);
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            let n = self
                .reader
                .read(&mut buf[filled..])
                .map_err(|source| DataError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if n == 0 {
                self.done = true;
                buf.truncate(filled);
                break;
            }
            filled += n;
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let first_line = self.next_line;
        self.next_line += buf.iter().filter(|&&c| c == b'\n').count();
        Ok(Some(LineBlock {
            first_line,
            bytes: buf,
        }))
    }
}

/// A line parser's failure: 1-based byte column and message.
pub type LineError = (usize, String);

/// The error naming `path`, `line` and the failure's column.
pub fn bad_line(path: &Path, line: usize, (column, message): LineError) -> DataError {
    DataError::Parse {
        path: path.to_path_buf(),
        line,
        column,
        message,
    }
}

/// Parses every line of `path` with `parse` (blocks read in order, lines of a block in parallel
/// with rayon). Returns `(line_number, item)` for lines that yield an item, and the number of
/// lines skipped as bad when `skip_bad_lines` is set; otherwise the first bad line is an error
/// naming the file, line and column.
pub fn parse_lines<T: Send>(
    path: &Path,
    skip_bad_lines: bool,
    parse: impl Fn(&[u8]) -> Result<Option<T>, LineError> + Sync,
) -> Result<(Vec<(usize, T)>, usize), DataError> {
    let mut out = Vec::new();
    let skipped = for_each_parsed(path, skip_bad_lines, parse, |items, _| {
        out.extend(items);
        Ok(())
    })?;
    Ok((out, skipped))
}

/// As [`parse_lines`], but hands each block's items (in order) and the block's size in bytes to
/// `each` instead of collecting them: memory bounded by a few blocks, whatever the file's size.
/// A thread reads and parses (rayon) the next blocks while `each` takes this one, so a costly
/// `each` (a writer) overlaps the parsing. Returns the number of lines skipped as bad.
pub fn for_each_parsed<T: Send>(
    path: &Path,
    skip_bad_lines: bool,
    parse: impl Fn(&[u8]) -> Result<Option<T>, LineError> + Sync,
    mut each: impl FnMut(Vec<(usize, T)>, u64) -> Result<(), DataError>,
) -> Result<usize, DataError> {
    use rayon::prelude::*;
    type Parsed<T> = Vec<(usize, Result<Option<T>, LineError>)>;
    let parse_block = |block: &LineBlock| -> Parsed<T> {
        let lines = block.lines().into_par_iter();
        lines.map(|(n, l)| (n, parse(l))).collect()
    };
    let mut skipped = 0;
    mapped_blocks(path, parse_block, |results, bytes| {
        let mut items = Vec::with_capacity(results.len());
        for (line, r) in results {
            match r {
                Ok(Some(item)) => items.push((line, item)),
                Ok(None) => {}
                Err(_) if skip_bad_lines => skipped += 1,
                Err(e) => return Err(bad_line(path, line, e)),
            }
        }
        each(items, bytes)
    })?;
    Ok(skipped)
}

/// As [`for_each_parsed`], a chunk of [`CHUNK_LINES`] lines at a time: `map` turns each chunk
/// of a block into one item (in parallel; an item carries its own bad lines), and `each` takes
/// a block's items in order, with the block's size in bytes, while a thread reads and maps the
/// next blocks. An error of `each` (or of reading) stops the pass and is returned.
pub fn for_each_chunk<T: Send>(
    path: &Path,
    map: impl Fn(&[(usize, &[u8])]) -> T + Sync,
    each: impl FnMut(Vec<T>, u64) -> Result<(), DataError>,
) -> Result<(), DataError> {
    use rayon::prelude::*;
    let map_block = |block: &LineBlock| -> Vec<T> {
        let lines = block.lines();
        lines.par_chunks(CHUNK_LINES).map(&map).collect()
    };
    mapped_blocks(path, map_block, each)
}

/// Each block of `path` mapped by `map` on a reading thread (two blocks ahead) and handed to
/// `each` in order, with the block's size in bytes. An error of `each` (or of reading) stops
/// the pass and is returned.
fn mapped_blocks<U: Send>(
    path: &Path,
    map: impl Fn(&LineBlock) -> U + Sync,
    mut each: impl FnMut(U, u64) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut blocks = LineBlocks::open(path)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(U, u64), DataError>>(2);
    std::thread::scope(|scope| {
        let map = &map;
        scope.spawn(move || {
            while let Some(next) = blocks.next_block().transpose() {
                let failed = next.is_err();
                let mapped = next.map(|block| (map(&block), block.bytes.len() as u64));
                // A closed channel: `each` stopped (an error), nothing more to read.
                if tx.send(mapped).is_err() || failed {
                    return;
                }
            }
        });
        // Owned here, so an early return closes the channel before the reader is joined.
        let rx = rx;
        for block in rx.iter() {
            let (mapped, bytes) = block?;
            each(mapped, bytes)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_end_on_line_boundaries_and_number_lines() {
        let text: String = (0..100_000).map(|i| format!("line {i}\r\n")).collect();
        let mut blocks = LineBlocks::new(Path::new("mem"), text.as_bytes());
        let mut seen = 0;
        while let Some(b) = blocks.next_block().unwrap() {
            for (n, l) in b.lines() {
                assert_eq!(l, format!("line {}", n - 1).as_bytes());
                seen += 1;
            }
        }
        assert_eq!(seen, 100_000);
        let mut last = LineBlocks::new(Path::new("mem"), &b"a\nb"[..]);
        let b = last.next_block().unwrap().unwrap();
        assert_eq!(b.lines(), vec![(1, &b"a"[..]), (2, &b"b"[..])]);
        assert!(last.next_block().unwrap().is_none());
    }
}
