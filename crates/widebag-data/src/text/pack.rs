//! A text corpus (one document per line of a file, or one per file of a directory) packed in two
//! streamed passes, in memory bounded by a line block (a few files) and the vocabulary, whatever
//! the corpus' size: the first reads the source, counts the words (the vocabulary) and spills
//! each chunk of documents' words to a temporary file (`token_spill`); the second forms each
//! chunk's bag-of-words or CBOW rows from the spill over the vocabulary (the language-model
//! case: context bags built while streaming, never a whole-corpus token array). The packed
//! bytes are those of the corpus read whole and packed.

use std::collections::HashMap;
use std::path::Path;

use crate::error::DataError;
use crate::labels::LabelOptions;
use crate::lines::{LineError, bad_line, for_each_chunk};
use crate::options::ReadOptions;
use crate::options::TextOptions;
use crate::packed::layout::PackMeta;
use crate::packed::stream::pack_rows;
use crate::packed::write::PackOptions;
use crate::progress::Progress;
use crate::text::corpus::{parse_document_str, walk};
use crate::text::documents::{header_of, pack_directory};
use crate::text::rows::vocabulary_of;
use crate::text::spill::{Forming, Spill, form_spilled, spill_chunk};
use crate::text::words::ThreadCounts;
use widebag_kinds::{Format, TokenFormat};

/// A chunk of lines spilled: its record, its documents (lines not skipped), and the first bad
/// line when none is skipped (the record ends before it).
type Spilled = (Vec<u8>, usize, Option<(usize, LineError)>);

/// Spills the documents of `lines` (a line that is not UTF-8 is spilled as skipped, or ends the
/// chunk as bad), their words counted into `counts`.
fn spill_lines(
    lines: &[(usize, &[u8])],
    counts: &ThreadCounts,
    tokens: TokenFormat,
    read: &ReadOptions,
) -> Spilled {
    let (mut docs, mut failed) = (Vec::with_capacity(lines.len()), None);
    for &(n, line) in lines {
        match parse_document_str(line) {
            Ok(doc) => docs.push((Some(doc), None)),
            Err(_) if read.skip_bad_lines => docs.push((None, None)),
            Err(e) => {
                failed = Some((n, e));
                break;
            }
        }
    }
    let kept = docs.iter().filter(|d| d.0.is_some()).count();
    (spill_chunk(docs, tokens, counts, 0), kept, failed)
}

/// The first pass over a corpus file: its words counted in parallel chunks of each line block,
/// into a map per rayon thread kept over the whole file ([`ThreadCounts`]), each chunk spilled
/// in order to `spill`; returns the counts and the documents (lines). A line that is not UTF-8
/// is an error naming the file, line and column, or skipped.
fn count_corpus(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    (spill, progress): (&mut Spill, &Progress),
) -> Result<(HashMap<String, u64>, usize), DataError> {
    let (counts, mut documents) = (ThreadCounts::new(), 0);
    let spill_lines = |lines: &[(usize, &[u8])]| spill_lines(lines, &counts, text.tokens, read);
    for_each_chunk(path, spill_lines, |chunks, bytes| {
        for (i, (mut record, docs, failed)) in chunks.into_iter().enumerate() {
            if i == 0 {
                // The block's bytes, told again when the second pass forms this record.
                record[..8].copy_from_slice(&bytes.to_le_bytes());
            }
            spill.push(&record)?;
            documents += docs;
            if let Some((line, e)) = failed {
                return Err(bad_line(path, line, e));
            }
        }
        progress.advance(bytes);
        Ok(())
    })?;
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
    let mut spill = Spill::create(out)?;
    let (counts, documents) = count_corpus(path, read, text, (&mut spill, &progress))?;
    let vocab = vocabulary_of(path, counts, text)?;
    let header = header_of(&vocab, documents, variant);
    let io = |source| DataError::Io {
        path: out.to_path_buf(),
        source,
    };
    let no_classes = HashMap::new();
    let forming = Forming {
        vocab: &vocab,
        text,
        classes: &no_classes,
    };
    // The rows formed from the spill (the source is not read again), a batch of chunks at a
    // time on a reading thread; here each chunk's rows are taken whole.
    pack_rows(header, out, options, |sink| {
        let mut skipped = 0;
        form_spilled(spill, &forming, |formed, bytes| {
            sink.push_rows(&formed.rows).map_err(io)?;
            skipped += formed.skipped;
            progress.advance(bytes);
            Ok(())
        })?;
        (0..skipped).for_each(|_| sink.skip_line());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::write::pack;
    use crate::source::Source;
    use std::path::PathBuf;
    use widebag_kinds::TextMode;

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
        // Both are packs: against the plain reader's rows, decoded by the documented layout.
        crate::packed::by_hand::assert_holds(&a, &loaded);
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
