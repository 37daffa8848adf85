//! A one-document-per-line text corpus packed in two streamed passes, in memory bounded by a line
//! block and the vocabulary, whatever the corpus' size: the first counts the words (the
//! vocabulary), the second forms each block's bag-of-words or CBOW rows over it as the block
//! comes (the language-model case: context bags built while streaming, never a whole-corpus
//! token array). The packed bytes are those of the corpus read whole and packed.

use std::collections::HashMap;
use std::path::Path;

use rayon::prelude::*;

use crate::lines::{CHUNK_LINES, LineBlocks, LineError, bad_line, for_each_parsed};
use crate::packed::PackMeta;
use crate::packed::write::{Extent, PackOptions, Row, StreamHeader, pack_rows};
use crate::text::{TextOptions, corpus_note, doc_ids, doc_rows, parse_document_str, vocabulary_of};
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

/// Packs the corpus file `path` (one document per line) into `out` streamed (atomically, as
/// `pack_rows`), or `Ok(None)` for a directory of documents (read whole first).
/// `options.progress` is told the bytes of each pass (two over the file).
pub fn pack_text(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<Option<PackMeta>, DataError> {
    if path.is_dir() {
        return Ok(None);
    }
    let progress = options.progress.clone();
    let (counts, documents) = count_corpus(path, read, text, &progress)?;
    let vocab = vocabulary_of(path, counts, text)?;
    let tokens: u64 = vocab.words.iter().map(|(_, c)| c).sum();
    let header = StreamHeader {
        variant: variant.to_string(),
        width: vocab.len(),
        n_classes: vocab.len(),
        extent: Extent::Declared,
        notes: vec![corpus_note(documents, tokens as usize, vocab.len())],
        vocabulary: Some(vocab.words.clone()),
    };
    // Each line parsed straight to its in-vocabulary ids (no text kept), on the reader's side.
    let ids = |line: &[u8]| -> Result<Option<Vec<u32>>, LineError> {
        let doc = parse_document_str(line)?;
        Ok(Some(doc_ids(doc, text.tokens, &vocab).0))
    };
    pack_rows(header, out, options, |sink| {
        let io = |source| DataError::Io {
            path: out.to_path_buf(),
            source,
        };
        let skipped = for_each_parsed(path, read.skip_bad_lines, ids, |docs, bytes| {
            for (_, doc) in docs {
                let mut pushed = Ok(());
                doc_rows(&doc, text, None, |ids, values, targets, weights| {
                    if pushed.is_ok() {
                        pushed = sink.push(Row {
                            ids,
                            values,
                            targets,
                            weights,
                        });
                    }
                });
                pushed.map_err(io)?;
            }
            progress.advance(bytes);
            Ok(())
        })?;
        (0..skipped).for_each(|_| sink.skip_line());
        Ok(())
    })
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::write::pack;
    use crate::{Format, Source, TextMode, TokenFormat};

    fn dir(name: &str) -> std::path::PathBuf {
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
            .expect("a file streams");
        let loaded = crate::open::load(&source).unwrap();
        let whole = pack(&loaded, &source.variant(), &b, options()).unwrap();
        assert_eq!(meta, whole);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
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
        let out = d.join("bad.wbp");
        let e = pack_text(
            &path,
            &ReadOptions::default(),
            &TextOptions::default(),
            "t",
            &out,
            PackOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(e, DataError::Parse { line: 60_001, .. }), "{e}");
        assert!(!out.exists());
    }
}
