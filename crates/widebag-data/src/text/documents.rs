//! Documents that come a batch at a time (a directory's files, labelled by their names or not;
//! a dictd database's entries, [`crate::dictd::pack`]) packed in two streamed passes, as
//! [`super::pack`] packs a corpus file: the first reads them once, counts the words (and lists
//! the class labels) and spills each chunk's words and labels (`spill`); the second
//! forms the rows from the spill over the vocabulary. Memory holds a batch, the vocabulary, the
//! class names and the list of files or index entries, never the documents; the packed bytes are
//! those of the source read whole and packed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::DataError;
use crate::labels::{LabelOptions, class_index, classes_note};
use crate::options::ReadOptions;
use crate::options::TextOptions;
use crate::packed::layout::PackMeta;
use crate::packed::stream::{Extent, StreamHeader, pack_rows};
use crate::packed::write::PackOptions;
use crate::text::corpus::{read_document, walk};
use crate::text::rows::{corpus_note, vocabulary_of};
use crate::text::spill::{Forming, Spill, form_spilled, spill_chunk};
use crate::text::words::ThreadCounts;
use crate::vocabulary::Vocabulary;

/// Text a pass gathers before counting or forming it in parallel: a dictd database's entries,
/// or a directory's files (read and decoded in parallel; at least one, at most
/// [`MOST_FILES`]).
pub(crate) const BATCH_BYTES: u64 = 4 << 20;
const MOST_FILES: usize = 1024;
/// Batches read and mapped ahead of the one being consumed.
const AHEAD: usize = 2;

/// One document: its text (`None`: skipped as bad under `skip_bad_lines`) and, labelled by
/// file name, its label.
pub(crate) struct Doc {
    pub(crate) text: Option<String>,
    pub(crate) label: Option<String>,
}

/// A source of documents walked in passes: each pass hands every batch, in order, to `each`
/// with the source bytes it read.
pub(crate) trait Documents: Sync {
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
pub(crate) fn pack_documents(
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

/// Tests of the streamed packs of documents: a directory labelled by file names and a dictd
/// database (plain and gzip), each byte for byte the pack of the source read whole, with bad
/// files and entries skipped alike or refused naming them and leaving no output; and the
/// streamed dictionary's blocks against the text sliced whole.
#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::dictd::pack::pack_dictd;
    use crate::packed::write::pack;
    use crate::source::Source;
    use widebag_kinds::{Format, TextMode, TokenFormat};

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("widebag-docs-pack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn options() -> PackOptions {
        PackOptions {
            block_rows: 16,
            ..PackOptions::default()
        }
    }

    /// Packs `source` streamed (`streamed`, into its argument) and read whole, beside it, and
    /// checks the two files are the same bytes.
    fn same_bytes(source: &Source, streamed: impl Fn(&Path) -> Result<PackMeta, DataError>) {
        let d = source.path.parent().unwrap().join("packed");
        std::fs::create_dir_all(&d).unwrap();
        let (a, b) = (d.join("streamed.wbp"), d.join("whole.wbp"));
        let meta = streamed(&a).unwrap();
        let loaded = crate::open::load(source).unwrap();
        let whole = pack(&loaded, &source.variant(), &b, options()).unwrap();
        assert_eq!(meta, whole);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        // Both are packs: against the plain reader's rows, decoded by the documented layout.
        crate::packed::by_hand::assert_holds(&a, &loaded);
    }

    fn directory(s: &Source) -> impl Fn(&Path) -> Result<PackMeta, DataError> + '_ {
        move |out| {
            let text = (&s.text, &s.label);
            crate::text::pack::pack_text(&s.path, &s.read, text, &s.variant(), out, options())
        }
    }

    fn dictd(s: &Source) -> impl Fn(&Path) -> Result<PackMeta, DataError> + '_ {
        move |out| pack_dictd(&s.path, &s.read, &s.text, &s.variant(), out, options())
    }

    /// The error `streamed` gives packing into a fresh name in `d`, with no output left.
    fn refused(d: &Path, streamed: impl Fn(&Path) -> Result<PackMeta, DataError>) -> String {
        let out = d.join("bad.wbp");
        let e = streamed(&out).unwrap_err();
        assert!(!out.exists(), "{e}");
        e.to_string()
    }

    #[test]
    fn a_labelled_directory_streams_to_the_whole_reads_pack_byte_for_byte() {
        let tree = dir("labelled").join("brown");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        // 150 documents (three passes' batches of files) in 7 genres, one nested, one empty.
        let words = [
            "The/at", "cat/nn", "sat/vbd", "on/in", "a/at", "mat/nn", "./.",
        ];
        for f in 0..150usize {
            let text: Vec<&str> = (0..f % 19).map(|k| words[(f * 5 + k * k) % 7]).collect();
            let at = match f % 40 == 7 {
                true => tree.join("sub"),
                false => tree.clone(),
            };
            let genre = (b'a' + (f % 7) as u8) as char;
            std::fs::write(at.join(format!("c{genre}{f:02}")), text.join(" ")).unwrap();
        }
        std::fs::write(tree.join(".hidden"), "zebra/nn").unwrap();
        let mut source = Source::new(&tree, Format::Text);
        source.text.tokens = TokenFormat::Tagged;
        source.label = LabelOptions::file_name(1, 2);
        same_bytes(&source, directory(&source));
        let packed = directory(&source)(&dir("labelled-meta").join("p.wbp")).unwrap();
        assert_eq!(packed.labels.as_ref().map(Vec::len), Some(7));
        assert_eq!(packed.n_classes, 7);
        // A file that is not UTF-8: skipped and counted alike, or refused naming its line.
        std::fs::write(tree.join("sub/cz99"), b"cat/nn\nsat/vbd \xff").unwrap();
        source.read.skip_bad_lines = true;
        same_bytes(&source, directory(&source));
        source.read.skip_bad_lines = false;
        let e = refused(tree.parent().unwrap(), directory(&source));
        assert!(e.contains("cz99:2:9"), "{e}");
        // A name too short for the label's characters is refused naming the file and the key.
        std::fs::remove_file(tree.join("sub/cz99")).unwrap();
        std::fs::write(tree.join("x"), "cat/nn").unwrap();
        let e = refused(tree.parent().unwrap(), directory(&source));
        assert!(e.contains("data.label_chars") && e.contains("`x`"), "{e}");
        // Labels need bow rows.
        std::fs::remove_file(tree.join("x")).unwrap();
        source.text.mode = TextMode::Cbow;
        let e = refused(tree.parent().unwrap(), directory(&source));
        assert!(e.contains("data.label"), "{e}");
    }

    /// A dictionary of `entries` blocks of words over more than two of the reader's chunks, and its
    /// index: headwords in alphabetical order (so offsets out of order), two sharing a block.
    fn dictionary(d: &Path, entries: usize) -> (Vec<u8>, String) {
        let words = [
            "noun", "a", "small", "animal", "of", "the", "cat", "kind", "verb", "run",
        ];
        let (mut text, mut blocks) = (Vec::new(), Vec::new());
        let mut x = 7u64;
        for e in 0..entries {
            let start = text.len();
            let mut entry = format!("head{e}\n  ");
            for _ in 0..(5 + e % 300) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                entry.push_str(words[((x >> 33) % 10).min((x >> 40) % 7) as usize]);
                entry.push(' ');
            }
            entry.push('\n');
            text.extend_from_slice(entry.as_bytes());
            blocks.push((start, entry.len()));
        }
        let b64 = |mut n: usize| {
            const DIGITS: &[u8] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut s = Vec::new();
            loop {
                s.push(DIGITS[n % 64]);
                n /= 64;
                if n == 0 {
                    break;
                }
            }
            s.reverse();
            String::from_utf8(s).unwrap()
        };
        let mut lines: Vec<String> = (blocks.iter().enumerate())
            .map(|(e, &(o, l))| format!("head{e}\t{}\t{}", b64(o), b64(l)))
            .collect();
        lines.push(format!("alias\t{}\t{}", b64(blocks[3].0), b64(blocks[3].1)));
        lines.sort();
        std::fs::write(d.join("d.dict"), &text).unwrap();
        (text, lines.join("\n") + "\n")
    }

    #[test]
    fn a_dictd_database_streams_to_the_whole_reads_pack_byte_for_byte() {
        let d = dir("dictd");
        let (text, index) = dictionary(&d, 4000);
        assert!(text.len() > 2 << 20, "more than two of the reader's chunks");
        std::fs::write(d.join("d.index"), &index).unwrap();
        // The streamed blocks are the text sliced whole, in offset order, one per distinct block.
        let (docs, skipped, _) =
            crate::dictd::read::dictd_documents(&d.join("d.index"), false).unwrap();
        assert_eq!((docs.len(), skipped), (4000, 0));
        assert!(docs[3999].starts_with("head3999\n"));
        let joined: String = docs.concat();
        assert_eq!(joined.as_bytes(), &text[..]);
        let mut source = Source::new(d.join("d.index"), Format::Dictd);
        same_bytes(&source, dictd(&source));
        source.text.mode = TextMode::Cbow;
        source.text.window = 3;
        same_bytes(&source, dictd(&source));
        // The same database gzip-compressed (as dictzip's `.dict.dz` is read).
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).unwrap();
        std::fs::write(d.join("d.dict.dz"), gz.finish().unwrap()).unwrap();
        std::fs::remove_file(d.join("d.dict")).unwrap();
        same_bytes(&source, dictd(&source));
        // An entry past the text's end: skipped and counted alike, or refused naming its line.
        let past = format!("zz\tA\t{}\n", "/".repeat(5));
        std::fs::write(d.join("d.index"), format!("{index}{past}")).unwrap();
        source.read.skip_bad_lines = true;
        same_bytes(&source, dictd(&source));
        source.read.skip_bad_lines = false;
        let e = refused(&d, dictd(&source));
        assert!(
            e.contains("d.index:4002:4") && e.contains("runs past"),
            "{e}"
        );
        // A block that is not UTF-8: refused naming its line and column in the decompressed text.
        let mut bad = text.clone();
        let at = docs[..10].iter().map(String::len).sum::<usize>() + 8;
        bad[at] = 0xff;
        std::fs::write(d.join("d.dict"), &bad).unwrap();
        std::fs::remove_file(d.join("d.dict.dz")).unwrap();
        std::fs::write(d.join("d.index"), &index).unwrap();
        let e = refused(&d, dictd(&source));
        let line = 1 + text[..at].iter().filter(|&&b| b == b'\n').count();
        let column = at - text[..at].iter().rposition(|&b| b == b'\n').unwrap();
        assert!(e.contains(&format!("d.dict:{line}:{column}")), "{e}");
    }
}
