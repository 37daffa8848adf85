//! Documents that come a batch at a time (a directory's files, labelled by their names or not;
//! a dictd database's entries) packed in two streamed passes, as [`crate::text_pack`] packs a
//! corpus file: the first reads them once, counts the words (and lists the class labels) and
//! spills each chunk's words and labels (`token_spill`); the second forms the rows from the
//! spill over the vocabulary. Memory holds a batch, the vocabulary, the class names and the
//! list of files or index entries, never the documents; the packed bytes are those of the
//! source read whole and packed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::dictd::{DictdFiles, for_each_entry, index_entries, locate};
use crate::error::DataError;
use crate::labels::{LabelOptions, class_index, classes_note};
use crate::options::ReadOptions;
use crate::options::TextOptions;
use crate::packed::layout::PackMeta;
use crate::packed::stream::{Extent, StreamHeader, pack_rows};
use crate::packed::write::PackOptions;
use crate::text::{corpus_note, read_document, vocabulary_of, walk};
use crate::token_spill::{Forming, Spill, form_spilled, spill_chunk};
use crate::vocabulary::Vocabulary;
use crate::words::ThreadCounts;

/// Text a pass gathers before counting or forming it in parallel: a dictd database's entries,
/// or a directory's files (read and decoded in parallel; at least one, at most
/// [`MOST_FILES`]).
const BATCH_BYTES: u64 = 4 << 20;
const MOST_FILES: usize = 1024;
/// Batches read and mapped ahead of the one being consumed.
const AHEAD: usize = 2;

/// One document: its text (`None`: skipped as bad under `skip_bad_lines`) and, labelled by
/// file name, its label.
struct Doc {
    text: Option<String>,
    label: Option<String>,
}

/// A source of documents walked in passes: each pass hands every batch, in order, to `each`
/// with the source bytes it read.
trait Documents: Sync {
    fn pass(
        &self,
        each: &mut dyn FnMut(Vec<Doc>, u64) -> Result<(), DataError>,
    ) -> Result<(), DataError>;
}

/// The files of a directory (and their sizes), with the labels their names give when `label`
/// cuts them.
struct DirectoryFiles<'a> {
    files: Vec<(PathBuf, u64)>,
    label: Option<&'a LabelOptions>,
    skip_bad_lines: bool,
}

impl Documents for DirectoryFiles<'_> {
    fn pass(
        &self,
        each: &mut dyn FnMut(Vec<Doc>, u64) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let mut rest = &self.files[..];
        while !rest.is_empty() {
            let (mut n, mut bytes) = (0, 0);
            while n < rest.len().min(MOST_FILES) && (n == 0 || bytes + rest[n].1 <= BATCH_BYTES) {
                bytes += rest[n].1;
                n += 1;
            }
            let (chunk, after) = rest.split_at(n);
            rest = after;
            let docs = (chunk.par_iter())
                .map(|(p, _)| {
                    let text = match read_document(p) {
                        Ok(doc) => Some(doc),
                        Err(DataError::Parse { .. }) if self.skip_bad_lines => None,
                        Err(e) => return Err(e),
                    };
                    let label = self.label.map(|l| l.label_of(p)).transpose()?;
                    Ok(Doc { text, label })
                })
                .collect::<Result<Vec<Doc>, DataError>>()?;
            each(docs, bytes)?;
        }
        Ok(())
    }
}

/// A dictd database's entries, the dictionary streamed once per pass.
struct DictdEntries {
    files: DictdFiles,
    entries: Vec<(usize, (u64, u64, usize))>,
    skip_bad_lines: bool,
}

impl Documents for DictdEntries {
    fn pass(
        &self,
        each: &mut dyn FnMut(Vec<Doc>, u64) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let (mut batch, mut text_bytes, mut read) = (Vec::new(), 0, 0);
        for_each_entry(
            &self.files,
            &self.entries,
            self.skip_bad_lines,
            |doc, bytes| {
                text_bytes += doc.map_or(0, str::len) as u64;
                read += bytes;
                let text = doc.map(str::to_string);
                batch.push(Doc { text, label: None });
                if text_bytes >= BATCH_BYTES {
                    each(std::mem::take(&mut batch), std::mem::take(&mut read))?;
                    text_bytes = 0;
                }
                Ok(())
            },
        )?;
        each(batch, read)
    }
}

/// One pass over `docs`, each batch mapped by `map` on a thread of its own (with the reading,
/// [`AHEAD`] batches ahead; rayon inside `map`) while `each` takes the batches before it, in
/// order. An error of `each` stops the pass and is returned.
fn pipelined<T: Send>(
    docs: &dyn Documents,
    map: impl Fn(Vec<Doc>) -> T + Sync,
    mut each: impl FnMut(T, u64) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<(T, u64)>(AHEAD);
    std::thread::scope(|scope| {
        let map = &map;
        let reader = scope.spawn(move || {
            docs.pass(&mut |batch, bytes| {
                // A closed channel: `each` failed, and its error is the one returned.
                let stopped = |_| DataError::Io {
                    path: PathBuf::new(),
                    source: std::io::Error::other("the pass was stopped"),
                };
                tx.send((map(batch), bytes)).map_err(stopped)
            })
        });
        let mut consumed = Ok(());
        for (mapped, bytes) in rx.iter() {
            consumed = each(mapped, bytes);
            if consumed.is_err() {
                break;
            }
        }
        // Closed before the reader is joined, so a reader blocked on a full channel stops.
        drop(rx);
        let read = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        consumed.and(read)
    })
}

/// Packs the documents `docs` walks (twice) into `out`, atomically as `pack_rows`: each the
/// rows `text` forms, targeting its class when `label` is given. `source` names the data in
/// errors (no word kept); `skipped` counts what was skipped before the passes (bad index lines).
fn pack_documents(
    (source, docs): (&Path, &dyn Documents),
    text: &TextOptions,
    label: Option<&LabelOptions>,
    (variant, out): (&str, &Path),
    options: PackOptions,
    skipped: usize,
) -> Result<PackMeta, DataError> {
    let progress = options.progress.clone();
    let (mut documents, mut labels) = (0, BTreeSet::new());
    let counts = ThreadCounts::new();
    let mut spill = Spill::create(out)?;
    // Each batch's chunks of documents spilled ahead (their words counted into a map per rayon
    // thread kept over the pass), written in order here, their labels listed.
    let spill_batch = |batch: Vec<Doc>| -> Vec<(Vec<u8>, Vec<Option<String>>)> {
        (chunks(&batch).into_par_iter())
            .map(|docs| {
                let docs = &batch[docs];
                let each = docs.iter().map(|d| (d.text.as_deref(), d.label.as_deref()));
                let record = spill_chunk(each, text.tokens, &counts, 0);
                let kept = docs.iter().filter(|d| d.text.is_some());
                (record, kept.map(|d| d.label.clone()).collect())
            })
            .collect()
    };
    pipelined(docs, spill_batch, |chunks, bytes| {
        for (i, (mut record, batch_labels)) in chunks.into_iter().enumerate() {
            if i == 0 {
                // The batch's bytes, told again when the second pass forms this record.
                record[..8].copy_from_slice(&bytes.to_le_bytes());
            }
            spill.push(&record)?;
            documents += batch_labels.len();
            labels.extend(batch_labels.into_iter().flatten());
        }
        progress.advance(bytes);
        Ok(())
    })?;
    let counts = counts.into_counts();
    let vocab = vocabulary_of(source, counts, text)?;
    let mut header = header_of(&vocab, documents, variant);
    let names: Vec<String> = labels.into_iter().collect();
    let index = class_index(&names);
    if label.is_some() {
        header.n_classes = names.len();
        header.labels = Some(names.clone());
    }
    let mut per_class = vec![0u64; names.len()];
    let forming = Forming {
        vocab: &vocab,
        text,
        classes: &index,
    };
    // The rows formed from the spill (the source is not read again), a batch of chunks at a
    // time on a reading thread; here each chunk's rows are taken whole.
    pack_rows(header, out, options, |sink| {
        let mut skipped = skipped;
        form_spilled(spill, &forming, |formed, bytes| {
            skipped += formed.skipped;
            for c in formed.classes {
                per_class[c as usize] += 1;
            }
            sink.push_rows(&formed.rows)
                .map_err(|source| DataError::Io {
                    path: out.to_path_buf(),
                    source,
                })?;
            progress.advance(bytes);
            Ok(())
        })?;
        (0..skipped).for_each(|_| sink.skip_line());
        if let Some(label) = label {
            sink.note(classes_note(label, &names, &per_class));
        }
        Ok(())
    })
}

/// Packs the directory of documents `dir` streamed (one per file, recursively, path order), in
/// two passes over its files, [`BATCH_BYTES`] of them at a time; each file's class is cut from its
/// name when `label` says so (`data.label = "file_name"`).
pub(crate) fn pack_directory(
    dir: &Path,
    read: &ReadOptions,
    (text, label): (&TextOptions, &LabelOptions),
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    let sized = |f: PathBuf| {
        let bytes = std::fs::metadata(&f).map_or(0, |m| m.len());
        (f, bytes)
    };
    let label = label.is_file_name().then_some(label);
    let docs = DirectoryFiles {
        files: files.into_iter().map(sized).collect(),
        label,
        skip_bad_lines: read.skip_bad_lines,
    };
    pack_documents((dir, &docs), text, label, (variant, out), options, 0)
}

/// Packs the dictd database at `path` (any of its names, as [`locate`] finds it) streamed: its
/// index read (its entries, in dictionary order), then the dictionary in two streamed passes;
/// `options.progress` is told the dictionary file's bytes of each.
pub fn pack_dictd(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    let files = locate(path)?;
    let (entries, skipped) = index_entries(&files, read.skip_bad_lines)?;
    if entries.is_empty() {
        return Err(DataError::Empty { path: files.index });
    }
    let index = files.index.clone();
    let docs = DictdEntries {
        files,
        entries,
        skip_bad_lines: read.skip_bad_lines,
    };
    pack_documents(
        (&index, &docs),
        text,
        None,
        (variant, out),
        options,
        skipped,
    )
}

/// The streamed header of a corpus of `documents` over `vocab`.
pub(crate) fn header_of(vocab: &Vocabulary, documents: usize, variant: &str) -> StreamHeader {
    let tokens: u64 = vocab.words.iter().map(|(_, c)| c).sum();
    StreamHeader {
        variant: variant.to_string(),
        width: vocab.len(),
        n_classes: vocab.len(),
        extent: Extent::Declared,
        notes: vec![corpus_note(documents, tokens as usize, vocab.len())],
        vocabulary: Some(vocab.words.clone()),
        labels: None,
    }
}

/// Text per spilled chunk (in parallel): a chunk's distinct words are stored and looked up once
/// each, so a chunk holds many documents when they are short (a dictionary's entries).
const CHUNK_BYTES: usize = 256 << 10;

/// `docs` cut into runs of about [`CHUNK_BYTES`] of text (at least one document each).
fn chunks(docs: &[Doc]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, d) in docs.iter().enumerate() {
        bytes += d.text.as_ref().map_or(0, String::len);
        if bytes >= CHUNK_BYTES || i + 1 == docs.len() {
            out.push(start..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    out
}

#[cfg(test)]
#[path = "documents_pack_tests.rs"]
mod tests;
