//! A text corpus (one document per line of a file, or one per file of a directory) packed in two
//! streamed passes, in memory bounded by a line block (a few files) and the vocabulary, whatever
//! the corpus' size: the first counts the words (the
//! vocabulary), the second forms each block's bag-of-words or CBOW rows over it as the block
//! comes (the language-model case: context bags built while streaming, never a whole-corpus
//! token array). The packed bytes are those of the corpus read whole and packed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::lines::{CHUNK_LINES, LineBlocks, LineError, bad_line, for_each_parsed};
use crate::packed::PackMeta;
use crate::packed::write::{Extent, PackOptions, Row, RowSink, StreamHeader, pack_rows};
use crate::text::{
    TextOptions, Vocabulary, corpus_note, doc_ids, doc_rows, parse_document_str, read_document,
    vocabulary_of, walk,
};
use crate::words::{add_counts, count_into};
use crate::{DataError, Progress, ReadOptions};

/// The words of a corpus file counted in parallel chunks of each line block, borrowing the
/// block's text (a word allocated once per chunk, when first seen), and its documents (lines);
/// a line that is not UTF-8 is an error naming the file, line and column, or skipped.
fn count_corpus(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    progress: &Progress,
) -> Result<(HashMap<String, u64>, usize), DataError> {
    type Part = (HashMap<String, u64>, usize, Option<(usize, LineError)>);
    let chunk = |lines: &[(usize, &[u8])]| -> Part {
        let (mut counts, mut documents) = (HashMap::new(), 0);
        for &(n, line) in lines {
            match parse_document_str(line) {
                Ok(doc) => {
                    documents += 1;
                    count_into(&mut counts, doc, text.tokens);
                }
                Err(_) if read.skip_bad_lines => {}
                Err(e) => return (counts, documents, Some((n, e))),
            }
        }
        (counts, documents, None)
    };
    let mut blocks = LineBlocks::open(path)?;
    let (mut counts, mut documents) = (HashMap::new(), 0);
    while let Some(block) = blocks.next_block()? {
        let parts: Vec<Part> = block.lines().par_chunks(CHUNK_LINES).map(chunk).collect();
        for (part, docs, failed) in parts {
            if let Some((line, e)) = failed {
                return Err(bad_line(path, line, e));
            }
            counts = add_counts(counts, part);
            documents += docs;
        }
        progress.advance(block.bytes.len() as u64);
    }
    Ok((counts, documents))
}

/// Files a directory's passes read at a time (each a document, read and decoded in parallel).
const FILES_AT_ONCE: usize = 64;

/// The bytes a pass over the corpus `path` reads: the file's, or every document file's under a
/// directory.
pub fn corpus_bytes(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut files = Vec::new();
    match path.is_dir() && walk(path, &mut files).is_ok() {
        true => files.iter().map(|f| size(f)).sum(),
        false => size(path),
    }
}

/// Packs the corpus `path` into `out` streamed (atomically, as `pack_rows`): one document per
/// line of a file, or one per file of a directory (recursively, path order), in two passes
/// whose `options.progress` is told the bytes read.
pub fn pack_text(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<Option<PackMeta>, DataError> {
    if path.is_dir() {
        return pack_text_dir(path, read, text, variant, out, options).map(Some);
    }
    let progress = options.progress.clone();
    let (counts, documents) = count_corpus(path, read, text, &progress)?;
    let vocab = vocabulary_of(path, counts, text)?;
    let header = header_of(&vocab, documents, variant);
    // Each line parsed straight to its in-vocabulary ids (no text kept), on the reader's side.
    let ids = |line: &[u8]| -> Result<Option<Vec<u32>>, LineError> {
        let doc = parse_document_str(line)?;
        Ok(Some(doc_ids(doc, text.tokens, &vocab).0))
    };
    pack_rows(header, out, options, |sink| {
        let skipped = for_each_parsed(path, read.skip_bad_lines, ids, |docs, bytes| {
            for (_, doc) in docs {
                push_document(sink, &doc, text, out)?;
            }
            progress.advance(bytes);
            Ok(())
        })?;
        (0..skipped).for_each(|_| sink.skip_line());
        Ok(())
    })
    .map(Some)
}

/// The streamed header of a corpus of `documents` over `vocab`.
fn header_of(vocab: &Vocabulary, documents: usize, variant: &str) -> StreamHeader {
    let tokens: u64 = vocab.words.iter().map(|(_, c)| c).sum();
    StreamHeader {
        variant: variant.to_string(),
        width: vocab.len(),
        n_classes: vocab.len(),
        extent: Extent::Declared,
        notes: vec![corpus_note(documents, tokens as usize, vocab.len())],
        vocabulary: Some(vocab.words.clone()),
    }
}

/// The rows of one document of in-vocabulary `ids` written to `sink` (`out` names a failed
/// write).
fn push_document<W: std::io::Write>(
    sink: &mut RowSink<'_, W>,
    ids: &[u32],
    text: &TextOptions,
    out: &Path,
) -> Result<(), DataError> {
    let mut pushed = Ok(());
    doc_rows(ids, text, None, |ids, values, targets, weights| {
        if pushed.is_ok() {
            pushed = sink.push(Row {
                ids,
                values,
                targets,
                weights,
            });
        }
    });
    pushed.map_err(|source| DataError::Io {
        path: out.to_path_buf(),
        source,
    })
}

/// The documents of `files`, read and decoded in parallel; `None` for a file that is not UTF-8
/// under `skip_bad_lines` (an error naming it, its line and column otherwise).
fn read_documents(
    files: &[PathBuf],
    skip_bad_lines: bool,
) -> Result<Vec<Option<String>>, DataError> {
    (files.par_iter())
        .map(|p| match read_document(p) {
            Ok(doc) => Ok(Some(doc)),
            Err(DataError::Parse { .. }) if skip_bad_lines => Ok(None),
            Err(e) => Err(e),
        })
        .collect()
}

/// A directory of documents packed in two passes over its files, [`FILES_AT_ONCE`] at a time:
/// memory bounded by those files, the file list and the vocabulary.
fn pack_text_dir(
    dir: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    let progress = options.progress.clone();
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    let bytes = |files: &[PathBuf]| -> u64 {
        (files.iter())
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .sum()
    };
    let (mut counts, mut documents) = (HashMap::new(), 0);
    for chunk in files.chunks(FILES_AT_ONCE) {
        let docs = read_documents(chunk, read.skip_bad_lines)?;
        let part = (docs.par_iter().flatten())
            .fold(HashMap::new, |mut c, doc| {
                count_into(&mut c, doc, text.tokens);
                c
            })
            .reduce(HashMap::new, add_counts);
        counts = add_counts(counts, part);
        documents += docs.iter().flatten().count();
        progress.advance(bytes(chunk));
    }
    let vocab = vocabulary_of(dir, counts, text)?;
    let header = header_of(&vocab, documents, variant);
    pack_rows(header, out, options, |sink| {
        let mut skipped = 0;
        for chunk in files.chunks(FILES_AT_ONCE) {
            let docs: Vec<Option<Vec<u32>>> = (read_documents(chunk, read.skip_bad_lines)?)
                .par_iter()
                .map(|d| d.as_deref().map(|d| doc_ids(d, text.tokens, &vocab).0))
                .collect();
            for doc in docs {
                match doc {
                    Some(ids) => push_document(sink, &ids, text, out)?,
                    None => skipped += 1,
                }
            }
            progress.advance(bytes(chunk));
        }
        (0..skipped).for_each(|_| sink.skip_line());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::write::pack;
    use crate::{Format, Source, TextMode, TokenFormat};

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("widebag-text-pack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// More than one 4 MiB line block of documents: Zipf-ish words, blank lines, tagged tokens.
    fn corpus(path: &Path, docs: usize) {
        let words = [
            "the", "of", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "zebra",
        ];
        let mut text = String::new();
        let mut x = 12345u64;
        for d in 0..docs {
            if d % 97 == 5 {
                text.push('\n');
                continue;
            }
            for _ in 0..(d % 40) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 33) as usize;
                let w = words[(r % words.len()).min(r % 5 + r % 3)];
                text.push_str(&format!("{w}/nn{} ", r % 7));
            }
            text.push_str(&format!("word{}\n", d % 13));
        }
        std::fs::write(path, text).unwrap();
    }

    fn same_bytes(path: &Path, text: TextOptions, read: &ReadOptions) {
        let d = path.parent().unwrap();
        let (a, b) = (d.join("streamed.wbp"), d.join("whole.wbp"));
        let mut source = Source::new(path, Format::Text);
        source.text = text.clone();
        source.read = read.clone();
        let options = || PackOptions {
            block_rows: 500,
            ..PackOptions::default()
        };
        let meta = pack_text(path, read, &text, &source.variant(), &a, options())
            .unwrap()
            .expect("a corpus streams");
        let loaded = crate::open::load(&source).unwrap();
        let whole = pack(&loaded, &source.variant(), &b, options()).unwrap();
        assert_eq!(meta, whole);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    }

    /// The error packing `path` (no line skipped) gives, with no output left beside it.
    fn refused(path: &Path) -> DataError {
        let out = path.parent().unwrap().join("bad.wbp");
        let e = pack_text(
            path,
            &ReadOptions::default(),
            &TextOptions::default(),
            "t",
            &out,
            PackOptions::default(),
        )
        .unwrap_err();
        assert!(!out.exists(), "{e}");
        e
    }

    #[test]
    fn streamed_pack_is_the_whole_reads_pack_byte_for_byte() {
        let d = dir("same");
        let path = d.join("corpus.txt");
        corpus(&path, 60_000);
        assert!(
            std::fs::metadata(&path).unwrap().len() > 4 << 20,
            "two line blocks at least"
        );
        let cbow = TextOptions {
            mode: TextMode::Cbow,
            window: 3,
            min_count: 2,
            max_vocab: 12,
            tokens: TokenFormat::Tagged,
        };
        same_bytes(&path, cbow, &ReadOptions::default());
        same_bytes(&path, TextOptions::default(), &ReadOptions::default());
        // A line that is not UTF-8: skipped and counted, or an error naming the file and line.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"cat \xff sat\nthe end\n");
        std::fs::write(&path, &bytes).unwrap();
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        same_bytes(&path, TextOptions::default(), &skip);
        let e = refused(&path);
        assert!(matches!(e, DataError::Parse { line: 60_001, .. }), "{e}");
    }

    #[test]
    fn a_directory_streams_to_the_whole_reads_pack_byte_for_byte() {
        let d = dir("tree");
        let tree = d.join("docs");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        // 150 documents (three passes' chunks of files), one nested, one hidden, one empty.
        let words = [
            "the", "of", "cat", "sat", "on", "mat", "a", "dog", "ran", "far",
        ];
        for f in 0..150usize {
            let text: Vec<&str> = (0..f % 23).map(|k| words[(f * 7 + k * k) % 10]).collect();
            let at = if f % 50 == 3 {
                tree.join("sub")
            } else {
                tree.clone()
            };
            std::fs::write(at.join(format!("doc{f:03}.txt")), text.join(" ")).unwrap();
        }
        std::fs::write(tree.join(".hidden"), "zebra zebra").unwrap();
        let cbow = TextOptions {
            mode: TextMode::Cbow,
            window: 2,
            ..TextOptions::default()
        };
        same_bytes(&tree, cbow, &ReadOptions::default());
        same_bytes(&tree, TextOptions::default(), &ReadOptions::default());
        assert_eq!(corpus_bytes(&tree), {
            let mut files = Vec::new();
            walk(&tree, &mut files).unwrap();
            files
                .iter()
                .map(|f| std::fs::metadata(f).unwrap().len())
                .sum::<u64>()
        });
        // A file that is not UTF-8: skipped and counted alike, or an error naming it and its
        // line, with no output.
        std::fs::write(tree.join("sub/bad.txt"), b"cat\nsat \xff").unwrap();
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        same_bytes(&tree, TextOptions::default(), &skip);
        let e = refused(&tree);
        assert!(e.to_string().contains("bad.txt:2:5"), "{e}");
    }
}
