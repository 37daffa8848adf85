//! A text pack's words kept from its first pass for its second: each chunk of documents is
//! spilled, in order, to a temporary file beside the output as its distinct words, each
//! document's places in them (`u32`s) and its label, so the second pass forms the rows from the
//! spill without reading, decompressing or tokenizing the source again, and looks each distinct
//! word of a chunk up in the vocabulary once, not each occurrence. The spill takes about as much
//! disk as the source's text, and is removed however the pack ends.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use widebag_kinds::{TextMode, TokenFormat};

use crate::dataset::RowStore;
use crate::error::DataError;
use crate::options::TextOptions;
use crate::text::rows::doc_rows;
use crate::text::words::{ChunkWords, ThreadCounts};
use crate::vocabulary::Vocabulary;

/// A document's place count marking it skipped as bad (no text), and a missing label.
const NONE: u32 = u32::MAX;
/// Records a second-pass batch forms in parallel.
const BATCH_RECORDS: usize = 4;

/// The spill file, removed when dropped.
struct Temporary(PathBuf);

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The spill being written (the first pass).
pub(crate) struct Spill {
    path: Temporary,
    file: BufWriter<std::fs::File>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> DataError + '_ {
    |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Spill {
    /// A fresh spill beside `out` (`.NAME.words-PID`).
    pub(crate) fn create(out: &Path) -> Result<Self, DataError> {
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = out.with_file_name(format!(".{name}.words-{}", std::process::id()));
        let file = std::fs::File::create(&path).map_err(io(&path))?;
        Ok(Self {
            path: Temporary(path),
            file: BufWriter::with_capacity(1 << 20, file),
        })
    }

    /// Appends one chunk's record.
    pub(crate) fn push(&mut self, record: &[u8]) -> Result<(), DataError> {
        let len = (record.len() as u64).to_le_bytes();
        let path = &self.path.0;
        self.file.write_all(&len).map_err(io(path))?;
        self.file.write_all(record).map_err(io(path))
    }

    /// The records written, from the first.
    fn read(self) -> Result<SpillReader, DataError> {
        let Spill { path, file } = self;
        let file = file.into_inner().map_err(|e| io(&path.0)(e.into_error()))?;
        drop(file);
        let file = std::fs::File::open(&path.0).map_err(io(&path.0))?;
        Ok(SpillReader {
            reader: BufReader::with_capacity(1 << 20, file),
            path,
        })
    }
}

struct SpillReader {
    reader: BufReader<std::fs::File>,
    path: Temporary,
}

impl SpillReader {
    /// The next record, `None` after the last.
    fn next_record(&mut self) -> Result<Option<Vec<u8>>, DataError> {
        let mut len = [0u8; 8];
        match self.reader.read_exact(&mut len) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            r => r.map_err(io(&self.path.0))?,
        }
        let mut record = vec![0u8; u64::from_le_bytes(len) as usize];
        self.reader
            .read_exact(&mut record)
            .map_err(io(&self.path.0))?;
        Ok(Some(record))
    }
}

/// One document of a chunk: its text (`None`: skipped as bad) and label.
pub(crate) type SpillDoc<'a> = (Option<&'a str>, Option<&'a str>);

fn put(out: &mut Vec<u8>, x: u32) {
    out.extend_from_slice(&x.to_le_bytes());
}

/// A chunk of documents (`source_bytes` of the source) as a spill record, its words counted
/// into `counts` on the way. Layout (little-endian): source bytes (u64); documents, distinct
/// words (u32 each); per document its number of places ([`NONE`]: skipped) and its label's
/// length ([`NONE`]: none); per word its length; the words' bytes; the labels' bytes; the places.
pub(crate) fn spill_chunk<'a>(
    docs: impl IntoIterator<Item = SpillDoc<'a>>,
    tokens: TokenFormat,
    counts: &ThreadCounts,
    source_bytes: u64,
) -> Vec<u8> {
    let mut words = ChunkWords::default();
    let (mut places, mut lengths, mut labels) = (Vec::new(), Vec::new(), Vec::new());
    for (text, label) in docs {
        let before = places.len();
        match text {
            Some(text) => {
                words.index(text, tokens, &mut places);
                lengths.push(((places.len() - before) as u32, label));
            }
            None => lengths.push((NONE, label)),
        }
        labels.extend(label);
    }
    counts.add_chunk(&words);
    let mut out = Vec::with_capacity(16 + 8 * lengths.len() + 4 * places.len());
    out.extend_from_slice(&source_bytes.to_le_bytes());
    put(&mut out, lengths.len() as u32);
    put(&mut out, words.words.len() as u32);
    for &(n, label) in &lengths {
        put(&mut out, n);
        put(&mut out, label.map_or(NONE, |l| l.len() as u32));
    }
    for w in &words.words {
        put(&mut out, w.len() as u32);
    }
    for w in &words.words {
        out.extend_from_slice(w.as_bytes());
    }
    for l in labels {
        out.extend_from_slice(l.as_bytes());
    }
    for p in places {
        put(&mut out, p);
    }
    out
}

/// A chunk of documents formed into rows: their rows in order, the documents skipped as bad,
/// and the class each labelled document targets.
pub(crate) struct FormedDocs {
    pub(crate) rows: RowStore,
    pub(crate) skipped: usize,
    pub(crate) classes: Vec<u32>,
}

/// Reads a record front to back; a record this process did not write whole is an error.
struct Cursor<'r> {
    bytes: &'r [u8],
}

impl<'r> Cursor<'r> {
    fn take(&mut self, n: usize) -> Result<&'r [u8], String> {
        if n > self.bytes.len() {
            return Err("a spill record ends early".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn str(&mut self, n: usize) -> Result<&'r str, String> {
        std::str::from_utf8(self.take(n)?).map_err(|e| format!("a spilled word: {e}"))
    }
}

/// What the second pass needs to form a record's rows.
pub(crate) struct Forming<'v> {
    pub(crate) vocab: &'v Vocabulary,
    pub(crate) text: &'v TextOptions,
    /// Each class name's id, for labelled documents.
    pub(crate) classes: &'v HashMap<String, u32>,
}

/// A record's documents formed into rows over the vocabulary: each word of the chunk looked up
/// once, each document's in-vocabulary words in order.
fn form_record(record: &[u8], f: &Forming<'_>) -> Result<(FormedDocs, u64), String> {
    let mut c = Cursor { bytes: record };
    let source_bytes = u64::from_le_bytes(c.take(8)?.try_into().expect("8 bytes"));
    let (n_docs, n_words) = (c.u32()? as usize, c.u32()? as usize);
    let mut docs = Vec::with_capacity(n_docs.min(record.len()));
    for _ in 0..n_docs {
        docs.push((c.u32()?, c.u32()?));
    }
    let mut lengths = Vec::with_capacity(n_words.min(record.len()));
    for _ in 0..n_words {
        lengths.push(c.u32()? as usize);
    }
    let mut ids = Vec::with_capacity(lengths.len());
    for n in lengths {
        ids.push(f.vocab.id(c.str(n)?).unwrap_or(NONE));
    }
    let mut labels = Vec::with_capacity(docs.len());
    for &(_, label) in &docs {
        labels.push(match label {
            NONE => None,
            n => Some(c.str(n as usize)?),
        });
    }
    // Room for the rows at once (a CBOW row per place, each with its window; a bag per
    // document), not grown a doubling at a time: a hint, bounded by the record's size.
    let places: usize = docs
        .iter()
        .map(|&(n, _)| n as usize)
        .filter(|&n| n != NONE as usize)
        .sum();
    let places = places.min(record.len());
    let rows = match f.text.mode {
        TextMode::Cbow => {
            let context = 2 * f.text.window.min(64);
            RowStore::with_capacity(places, places.saturating_mul(context), places)
        }
        TextMode::Bow => RowStore::with_capacity(docs.len(), places, places),
    };
    let mut formed = FormedDocs {
        rows,
        skipped: 0,
        classes: Vec::new(),
    };
    let mut doc_ids = Vec::new();
    for (&(n, _), label) in docs.iter().zip(labels) {
        if n == NONE {
            formed.skipped += 1;
            continue;
        }
        doc_ids.clear();
        for _ in 0..n {
            let id = *ids
                .get(c.u32()? as usize)
                .ok_or("a spilled place past its words")?;
            if id != NONE {
                doc_ids.push(id);
            }
        }
        let class = label.and_then(|l| f.classes.get(l).copied());
        formed.classes.extend(class);
        let rows = &mut formed.rows;
        doc_rows(&doc_ids, f.text, class, |a, b, c, d| rows.push(a, b, c, d));
    }
    Ok((formed, source_bytes))
}

/// The second pass: every record of `spill` in order, formed into rows a batch of records at a
/// time in parallel on a reading thread, handed to `each` with the source bytes it stands for.
pub(crate) fn form_spilled(
    spill: Spill,
    forming: &Forming<'_>,
    mut each: impl FnMut(FormedDocs, u64) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut reader = spill.read()?;
    let path = reader.path.0.clone();
    let bad = |message: String| DataError::Io {
        path: path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, message),
    };
    type Batch = Result<Vec<(FormedDocs, u64)>, DataError>;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(2);
    std::thread::scope(|scope| {
        let bad = &bad;
        scope.spawn(move || {
            loop {
                let mut records = Vec::with_capacity(BATCH_RECORDS);
                let read = (|| {
                    while records.len() < BATCH_RECORDS {
                        match reader.next_record()? {
                            Some(r) => records.push(r),
                            None => break,
                        }
                    }
                    Ok(())
                })();
                let last = records.len() < BATCH_RECORDS || read.is_err();
                let batch = read.and_then(|()| {
                    (records.par_iter())
                        .map(|r| form_record(r, forming).map_err(bad))
                        .collect()
                });
                // A closed channel: `each` stopped (an error), nothing more to read.
                if tx.send(batch).is_err() || last {
                    return;
                }
            }
        });
        // Owned here, so an early return closes the channel before the reader is joined.
        let rx = rx;
        for batch in rx.iter() {
            for (formed, bytes) in batch? {
                each(formed, bytes)?;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk spilled and formed again gives the rows its documents form directly, with its
    /// skipped documents counted and its labels' classes; the spill file is gone once read.
    #[test]
    fn a_spilled_chunk_forms_the_rows_of_its_documents() {
        let docs: Vec<SpillDoc<'_>> = vec![
            (Some("The cat sat on the mat"), Some("news")),
            (None, Some("news")),
            (Some("a DOG, the cat; zebra!"), None),
            (Some(""), Some("fiction")),
            (Some("cat cat Cat"), Some("unknown")),
        ];
        let counts = ThreadCounts::new();
        let record = spill_chunk(docs.clone(), TokenFormat::Plain, &counts, 7);
        let counts = counts.into_counts();
        assert_eq!((counts["cat"], counts["the"], counts["dog"]), (5, 3, 1));
        // "zebra" and "on" left out of the vocabulary.
        let words = ["cat", "the", "sat", "mat", "a", "dog"];
        let vocab = Vocabulary::from_words(words.iter().map(|w| (w.to_string(), 1)).collect());
        let classes = HashMap::from([("news".to_string(), 0), ("fiction".to_string(), 1)]);
        for mode in [TextMode::Bow, TextMode::Cbow] {
            let text = TextOptions {
                mode,
                window: 1,
                ..TextOptions::default()
            };
            let forming = Forming {
                vocab: &vocab,
                text: &text,
                classes: &classes,
            };
            let (formed, bytes) = form_record(&record, &forming).unwrap();
            assert_eq!((bytes, formed.skipped), (7, 1));
            assert_eq!(formed.classes, [0, 1]);
            let mut want = RowStore::new();
            for (doc, label) in docs.iter().filter_map(|(d, l)| Some((d.as_ref()?, l))) {
                let (ids, _) = crate::text::rows::doc_ids(doc, TokenFormat::Plain, &vocab);
                let class = label.and_then(|l| classes.get(l).copied());
                doc_rows(&ids, &text, class, |a, b, c, d| want.push(a, b, c, d));
            }
            assert_eq!(formed.rows, want, "{mode:?}");
        }
        // A record cut short is an error, not a panic.
        let text = TextOptions::default();
        let forming = Forming {
            vocab: &vocab,
            text: &text,
            classes: &classes,
        };
        for cut in [0, 9, record.len() / 2, record.len() - 1] {
            assert!(form_record(&record[..cut], &forming).is_err(), "{cut}");
        }
    }

    #[test]
    fn the_spill_file_is_removed_once_read_or_dropped() {
        let dir = std::env::temp_dir().join(format!("widebag-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.wbp");
        let listed = || std::fs::read_dir(&dir).unwrap().count();
        let mut spill = Spill::create(&out).unwrap();
        let counts = ThreadCounts::new();
        spill
            .push(&spill_chunk(
                [(Some("a b"), None)],
                TokenFormat::Plain,
                &counts,
                3,
            ))
            .unwrap();
        assert_eq!(listed(), 1);
        let vocab = Vocabulary::from_words(vec![("a".into(), 1)]);
        let (text, classes) = (TextOptions::default(), HashMap::new());
        let forming = Forming {
            vocab: &vocab,
            text: &text,
            classes: &classes,
        };
        let mut seen = Vec::new();
        form_spilled(spill, &forming, |f, bytes| {
            seen.push((f.rows.n_rows(), bytes));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(1, 3)]);
        assert_eq!(listed(), 0);
        drop(Spill::create(&out).unwrap());
        assert_eq!(listed(), 0);
    }
}
