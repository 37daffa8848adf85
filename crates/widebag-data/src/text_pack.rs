//! A text corpus (one document per line of a file, or one per file of a directory) packed in two
//! streamed passes, in memory bounded by a line block (a few files) and the vocabulary, whatever
//! the corpus' size: the first counts the words (the
//! vocabulary), the second forms each block's bag-of-words or CBOW rows over it as the block
//! comes (the language-model case: context bags built while streaming, never a whole-corpus
//! token array). The packed bytes are those of the corpus read whole and packed.

use std::collections::HashMap;
use std::path::Path;

use rayon::prelude::*;

use crate::dataset::RowStore;
use crate::documents_pack::{header_of, pack_directory};
use crate::labels::LabelOptions;
use crate::lines::{CHUNK_LINES, LineBlocks, LineError, bad_line, for_each_chunk};
use crate::packed::PackMeta;
use crate::packed::stream::pack_rows;
use crate::packed::write::PackOptions;
use crate::text::{
    TextOptions, Vocabulary, doc_ids_into, doc_rows, parse_document_str, vocabulary_of, walk,
};
use crate::words::ThreadCounts;
use crate::{DataError, Progress, ReadOptions};
use widebag_kinds::{Format, TokenFormat};

/// Lines of a block counted: the documents (lines), and the first bad line.
type Part = (usize, Option<(usize, LineError)>);

/// Counts the words of `lines` into `counts` (a line that is not UTF-8 is skipped, or ends the
/// count as bad).
fn count_lines(
    counts: &ThreadCounts,
    lines: &[(usize, &[u8])],
    tokens: TokenFormat,
    read: &ReadOptions,
) -> Part {
    let mut part = (0, None);
    for &(n, line) in lines {
        match parse_document_str(line) {
            Ok(doc) => {
                part.0 += 1;
                counts.count(doc, tokens);
            }
            Err(_) if read.skip_bad_lines => {}
            Err(e) => {
                part.1 = Some((n, e));
                break;
            }
        }
    }
    part
}

/// Two parts together; the first failing line (the lower line number) is the one reported.
fn merge_parts(a: Part, b: Part) -> Part {
    let failed = match (a.1, b.1) {
        (Some(x), Some(y)) => Some(if x.0 <= y.0 { x } else { y }),
        (x, y) => x.or(y),
    };
    (a.0 + b.0, failed)
}

/// The words of a corpus file counted in parallel chunks of each line block, into a map per
/// rayon thread kept over the whole file ([`ThreadCounts`]), and its documents (lines); a line
/// that is not UTF-8 is an error naming the file, line and column, or skipped.
fn count_corpus(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    progress: &Progress,
) -> Result<(HashMap<String, u64>, usize), DataError> {
    let mut blocks = LineBlocks::open(path)?;
    let (counts, mut documents) = (ThreadCounts::new(), 0);
    while let Some(block) = blocks.next_block()? {
        let lines = block.lines();
        let (docs, failed) = (lines.par_chunks(CHUNK_LINES))
            .map(|lines| count_lines(&counts, lines, text.tokens, read))
            .reduce(|| (0, None), merge_parts);
        if let Some((line, e)) = failed {
            return Err(bad_line(path, line, e));
        }
        documents += docs;
        progress.advance(block.bytes.len() as u64);
    }
    Ok((counts.into_counts(), documents))
}

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
/// line of a file, or one per file of a directory (recursively, path order; each targeting the
/// class its name gives under `label`), in two passes whose `options.progress` is told the
/// bytes read.
pub fn pack_text(
    path: &Path,
    read: &ReadOptions,
    (text, label): (&TextOptions, &LabelOptions),
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    label.check(Format::Text, text.mode, path)?;
    if path.is_dir() {
        return pack_directory(path, read, (text, label), variant, out, options);
    }
    let progress = options.progress.clone();
    let (counts, documents) = count_corpus(path, read, text, &progress)?;
    let vocab = vocabulary_of(path, counts, text)?;
    let header = header_of(&vocab, documents, variant);
    let io = |source| DataError::Io {
        path: out.to_path_buf(),
        source,
    };
    // Each chunk of lines parsed straight to its rows over the vocabulary (no text kept), on
    // the reader's side; here each chunk's rows are taken whole.
    let form = |lines: &[(usize, &[u8])]| form_chunk(lines, &vocab, text, read);
    pack_rows(header, out, options, |sink| {
        let mut skipped = 0;
        for_each_chunk(path, form, |chunks, bytes| {
            for chunk in chunks {
                sink.push_rows(&chunk.rows).map_err(io)?;
                skipped += chunk.skipped;
                if let Some((line, e)) = chunk.failed {
                    return Err(bad_line(path, line, e));
                }
            }
            progress.advance(bytes);
            Ok(())
        })?;
        (0..skipped).for_each(|_| sink.skip_line());
        Ok(())
    })
}

/// A chunk of lines formed into rows: its documents' rows in line order, the lines skipped as
/// bad, and the first bad line (the chunk's rows end before it) when none is skipped.
struct FormedChunk {
    rows: RowStore,
    skipped: usize,
    failed: Option<(usize, LineError)>,
}

/// The rows `text` forms of each line (a document) over `vocab`.
fn form_chunk(
    lines: &[(usize, &[u8])],
    vocab: &Vocabulary,
    text: &TextOptions,
    read: &ReadOptions,
) -> FormedChunk {
    let mut chunk = FormedChunk {
        rows: RowStore::new(),
        skipped: 0,
        failed: None,
    };
    let mut ids = Vec::new();
    for &(n, line) in lines {
        match parse_document_str(line) {
            Ok(doc) => {
                ids.clear();
                doc_ids_into(doc, text.tokens, vocab, &mut ids);
                let rows = &mut chunk.rows;
                doc_rows(&ids, text, None, |a, b, c, d| rows.push(a, b, c, d));
            }
            Err(_) if read.skip_bad_lines => chunk.skipped += 1,
            Err(e) => {
                chunk.failed = Some((n, e));
                break;
            }
        }
    }
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::write::pack;
    use crate::{Source, TextMode};
    use std::path::PathBuf;

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
        let label = LabelOptions::default();
        let meta = pack_text(
            path,
            read,
            (&text, &label),
            &source.variant(),
            &a,
            options(),
        )
        .unwrap();
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
            (&TextOptions::default(), &LabelOptions::default()),
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
