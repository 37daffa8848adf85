//! A dictd database's entry blocks read from its dictionary (`.dict`, or gzip-compatible
//! `.dict.dz`) in one streamed pass, in a window from each entry to its end, never the whole
//! text; a fault names its line and column in the decompressed text.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::dictd::index::{DictdFiles, IndexEntry};
use crate::error::DataError;

/// Counts bytes read through it (to place decompression errors, and for progress).
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

type FileReader = Counting<std::io::BufReader<std::fs::File>>;

/// The dictionary file, decompressed when its name ends in `.dz` or `.gz`.
enum Stream {
    Plain(FileReader),
    Gzip(flate2::read::MultiGzDecoder<FileReader>),
}

/// Text read from the dictionary file into a window that starts at an entry and grows to its
/// end (entries come in offset order), never the whole text; the lines before the window are
/// counted, so a fault names its line and column in the decompressed text.
struct DictText {
    path: PathBuf,
    stream: Stream,
    /// The text read and kept: the window is `buf[head..]` (drained when more is read).
    buf: Vec<u8>,
    head: usize,
    /// The text offset of the window's first byte.
    start: u64,
    ended: bool,
    /// The text's length when the file is not compressed (its size).
    known_len: Option<u64>,
    /// Lines (newlines) before `start`, and where the line holding `start` begins.
    lines_before: usize,
    line_start: u64,
}

/// Bytes read from the dictionary at a time.
const READ_BYTES: usize = 1 << 20;

impl DictText {
    fn open(path: &Path) -> Result<Self, DataError> {
        let file = std::fs::File::open(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let counted = Counting {
            inner: std::io::BufReader::new(file),
            bytes: 0,
        };
        let name = path.to_string_lossy();
        let size = std::fs::metadata(path).map(|m| m.len()).ok();
        let (stream, known_len) = match name.ends_with(".dz") || name.ends_with(".gz") {
            true => (
                Stream::Gzip(flate2::read::MultiGzDecoder::new(counted)),
                None,
            ),
            false => (Stream::Plain(counted), size),
        };
        Ok(Self {
            path: path.to_path_buf(),
            stream,
            buf: Vec::new(),
            head: 0,
            start: 0,
            ended: false,
            known_len,
            lines_before: 0,
            line_start: 0,
        })
    }

    /// The file's bytes read so far.
    fn file_bytes(&self) -> u64 {
        match &self.stream {
            Stream::Plain(r) => r.bytes,
            Stream::Gzip(d) => d.get_ref().bytes,
        }
    }

    fn window(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    fn end(&self) -> u64 {
        self.start + self.window().len() as u64
    }

    /// Reads a chunk onto the window's end; `false` at the end of the text.
    fn read_more(&mut self) -> Result<bool, DataError> {
        self.buf.drain(..self.head);
        self.head = 0;
        let have = self.buf.len();
        self.buf.resize(have + READ_BYTES, 0);
        let got = match &mut self.stream {
            Stream::Plain(r) => r
                .read(&mut self.buf[have..])
                .map_err(|source| DataError::Io {
                    path: self.path.clone(),
                    source,
                }),
            Stream::Gzip(d) => d
                .read(&mut self.buf[have..])
                .map_err(|e| DataError::Archive {
                    path: self.path.clone(),
                    member: "(gzip stream)".into(),
                    offset: d.get_ref().bytes,
                    message: format!("the compressed dictionary is corrupted or truncated: {e}"),
                }),
        };
        self.buf.truncate(have + *got.as_ref().unwrap_or(&0));
        self.ended = got? == 0;
        Ok(!self.ended)
    }

    /// Moves the window's start to `offset` (or the end of the text, when it is shorter),
    /// counting the lines passed.
    fn advance_to(&mut self, offset: u64) -> Result<(), DataError> {
        loop {
            let cut = offset.min(self.end()).saturating_sub(self.start) as usize;
            let passed = &self.window()[..cut];
            if let Some(last) = passed.iter().rposition(|&b| b == b'\n') {
                self.lines_before += passed.iter().filter(|&&b| b == b'\n').count();
                self.line_start = self.start + last as u64 + 1;
            }
            self.head += cut;
            self.start += cut as u64;
            if self.start == offset || !self.read_more()? {
                return Ok(());
            }
        }
    }

    /// Reads until the window reaches `end`; `false` when the text ends first (found without
    /// reading when the text's length is known).
    fn reach(&mut self, end: u64) -> Result<bool, DataError> {
        if self.known_len.is_some_and(|n| end > n) {
            return Ok(false);
        }
        while self.end() < end {
            if !self.read_more()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The text's length (read to its end when it is compressed, keeping none of it).
    fn len(&mut self) -> Result<u64, DataError> {
        match self.known_len {
            Some(n) => Ok(n),
            None => self.advance_to(u64::MAX).map(|()| self.end()),
        }
    }

    /// The 1-based line and column of the text offset `at` (inside the window).
    fn line_column(&self, at: u64) -> (usize, usize) {
        let before = &self.window()[..(at - self.start) as usize];
        let line = self.lines_before + 1 + before.iter().filter(|&&b| b == b'\n').count();
        let line_start = match before.iter().rposition(|&b| b == b'\n') {
            Some(i) => self.start + i as u64 + 1,
            None => self.line_start,
        };
        (line, (at - line_start) as usize + 1)
    }
}

/// Hands each entry block of `entries` (in order) to `each` as text, `None` for a block skipped
/// as bad under `skip_bad_lines` (one past the dictionary's end, or not UTF-8), with the
/// dictionary file's bytes read since the last block. The dictionary is read once, streamed.
pub(crate) fn for_each_entry(
    files: &DictdFiles,
    entries: &[IndexEntry],
    skip_bad_lines: bool,
    mut each: impl FnMut(Option<&str>, u64) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut text = DictText::open(&files.dict)?;
    let mut reported = 0;
    for &(line, (offset, length, column)) in entries {
        text.advance_to(offset)?;
        let end = offset.checked_add(length);
        let inside = match end {
            Some(end) => text.reach(end)?,
            None => false,
        };
        let read = text.file_bytes() - reported;
        reported += read;
        let Some(end) = end.filter(|_| inside) else {
            if skip_bad_lines {
                each(None, read)?;
                continue;
            }
            let len = text.len()?;
            return Err(DataError::Parse {
                path: files.index.clone(),
                line,
                column,
                message: format!(
                    "entry {offset}+{length} runs past the {len} bytes of {}",
                    files.dict.display()
                ),
            });
        };
        let block = &text.window()[(offset - text.start) as usize..(end - text.start) as usize];
        match std::str::from_utf8(block) {
            Ok(s) => each(Some(s), read)?,
            Err(_) if skip_bad_lines => each(None, read)?,
            Err(e) => {
                let (l, c) = text.line_column(offset + e.valid_up_to() as u64);
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
    Ok(())
}
