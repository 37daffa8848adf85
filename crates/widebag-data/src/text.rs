//! Text corpora: documents (one per line, one per file in a directory tree, or dictd entries)
//! become bag-of-words or CBOW-window rows over a frequency-sorted vocabulary.
//!
//! Tokenizer: a word is a maximal run of ASCII letters, lower-cased; everything else separates
//! words. With [`TokenFormat::Tagged`] (the Brown corpus' `word/TAG` format) the text after the
//! last `/` of each whitespace-separated token is dropped first. Vocabulary ids are sorted by
//! descending count (ties alphabetically), so id 0 is the most frequent word and head/tail bands
//! are id ranges.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use widebag_csr::SparseRow;
use widebag_kinds::{TextMode, TokenFormat};

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::lines::{LineError, parse_lines};
use crate::options::{ReadOptions, TextOptions};
use crate::vocabulary::Vocabulary;
use crate::words::{count_words, for_each_word};

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

/// Counts the words of `docs` (in parallel) and keeps those `options` allow.
pub fn count_vocabulary(
    source: &Path,
    docs: &[String],
    options: &TextOptions,
) -> Result<Vocabulary, DataError> {
    vocabulary_of(source, count_words(docs, options.tokens), options)
}

/// The vocabulary `options` keep of words counted `counts`; none is an error naming `source`.
pub(crate) fn vocabulary_of(
    source: &Path,
    counts: HashMap<String, u64>,
    options: &TextOptions,
) -> Result<Vocabulary, DataError> {
    let max_size = if options.max_vocab == 0 {
        usize::MAX
    } else {
        options.max_vocab
    };
    let vocab = Vocabulary::from_counts(counts, options.min_count, max_size);
    if vocab.is_empty() {
        return Err(DataError::Empty {
            path: source.to_path_buf(),
        });
    }
    Ok(vocab)
}

/// Rows formed over a given vocabulary, and what was left out.
#[derive(Clone, Debug)]
pub struct FormedRows {
    pub dataset: Dataset,
    /// Word tokens the vocabulary does not hold (left out before rows are formed).
    pub unknown_tokens: u64,
    /// Bow documents with no in-vocabulary word, left out under `drop_empty_documents`.
    pub dropped_documents: u64,
    /// Bow documents with a class target whose class is unknown (`None`), left out.
    pub unknown_labels: u64,
}

/// Bow documents' classes, for rows that target one class (weight 1) instead of their own bag.
#[derive(Clone, Copy, Debug)]
pub struct DocClasses<'a> {
    /// Each document's class, in document order; `None`: unknown, the document is left out.
    pub ids: &'a [Option<u32>],
    /// The number of classes (the dataset's `n_classes`).
    pub n_classes: usize,
}

/// Forms the rows of `docs` over `vocab`: the one path training (with the vocabulary it counted)
/// and held-out data (with the training vocabulary) share. Words `vocab` does not hold are left
/// out first, so CBOW windows span the in-vocabulary words. In bow mode a document with no
/// in-vocabulary word is an empty row, or left out when `drop_empty_documents` is set.
pub fn form_rows(
    source: &Path,
    docs: &[String],
    options: &TextOptions,
    skipped_lines: usize,
    vocab: &Vocabulary,
    drop_empty_documents: bool,
) -> FormedRows {
    let vocab_rows = (vocab, drop_empty_documents);
    form_rows_as(source, docs, options, skipped_lines, vocab_rows, None)
}

/// [`form_rows`], with bow rows targeting `classes` when given (text documents labelled by their
/// file names) instead of their own bags.
pub fn form_rows_as(
    source: &Path,
    docs: &[String],
    options: &TextOptions,
    skipped_lines: usize,
    (vocab, drop_empty_documents): (&Vocabulary, bool),
    classes: Option<DocClasses<'_>>,
) -> FormedRows {
    let tokens = options.tokens;
    let doc_ids: Vec<(Vec<u32>, u64)> =
        docs.par_iter().map(|d| doc_ids(d, tokens, vocab)).collect();
    let mut rows = RowStore::new();
    let (mut dropped_documents, mut unknown_labels) = (0, 0);
    for (doc, (ids, _)) in doc_ids.iter().enumerate() {
        // `Some(None)`: a class target, unknown; `None`: the document's own bag.
        let class = classes.map(|c| c.ids.get(doc).copied().flatten());
        match (options.mode, class) {
            (TextMode::Bow, Some(None)) => unknown_labels += 1,
            (TextMode::Bow, _) if ids.is_empty() && drop_empty_documents => dropped_documents += 1,
            (_, class) => doc_rows(ids, options, class.flatten(), |a, b, c, d| {
                rows.push(a, b, c, d)
            }),
        }
    }
    let tokens_total: usize = doc_ids.iter().map(|(ids, _)| ids.len()).sum();
    FormedRows {
        dataset: Dataset {
            source: source.to_path_buf(),
            width: vocab.len(),
            n_classes: classes.map_or(vocab.len(), |c| c.n_classes),
            rows,
            skipped_lines,
            notes: vec![corpus_note(docs.len(), tokens_total, vocab.len())],
        },
        unknown_tokens: doc_ids.iter().map(|(_, u)| u).sum(),
        dropped_documents,
        unknown_labels,
    }
}

/// The note a text dataset carries: its documents, in-vocabulary tokens and vocabulary size.
pub(crate) fn corpus_note(documents: usize, tokens: usize, words: usize) -> String {
    format!("{documents} documents, {tokens} in-vocabulary tokens, vocabulary of {words} words")
}

/// A document's in-vocabulary word ids, in order, and how many of its words `vocab` lacks.
pub(crate) fn doc_ids(doc: &str, tokens: TokenFormat, vocab: &Vocabulary) -> (Vec<u32>, u64) {
    let mut ids = Vec::new();
    let unknown = doc_ids_into(doc, tokens, vocab, &mut ids);
    (ids, unknown)
}

/// [`doc_ids`] appended to `ids`; returns the words left out.
pub(crate) fn doc_ids_into(
    doc: &str,
    tokens: TokenFormat,
    vocab: &Vocabulary,
    ids: &mut Vec<u32>,
) -> u64 {
    let mut unknown = 0;
    for_each_word(doc, tokens, |w| match vocab.id(w) {
        Some(id) => ids.push(id),
        None => unknown += 1,
    });
    unknown
}

/// The rows of one document of in-vocabulary `ids` handed to `push` (input ids and values,
/// targets and weights): in bow mode one row, targeting `class` when given, else its own bag
/// (distinct words with their counts as values and weights); in CBOW mode a row per word, its
/// context window targeting it.
pub(crate) fn doc_rows(
    ids: &[u32],
    options: &TextOptions,
    class: Option<u32>,
    mut push: impl FnMut(&[u32], &[f32], &[u32], &[f32]),
) {
    match (options.mode, class) {
        (TextMode::Bow, Some(c)) => {
            let bag = SparseRow::bag(ids.to_vec()).canonical();
            push(&bag.ids, &bag.values, &[c], &[1.0]);
        }
        (TextMode::Bow, None) => {
            let bag = SparseRow::bag(ids.to_vec()).canonical();
            push(&bag.ids, &bag.values, &bag.ids, &bag.values);
        }
        (TextMode::Cbow, _) => {
            let window = options.window;
            let mut context = Vec::with_capacity(2 * window);
            let ones = vec![1.0; 2 * window];
            for (i, &centre) in ids.iter().enumerate() {
                let lo = i.saturating_sub(window);
                let hi = (i + window + 1).min(ids.len());
                context.clear();
                context.extend((lo..hi).filter(|&j| j != i).map(|j| ids[j]));
                push(&context, &ones[..context.len()], &[centre], &[1.0]);
            }
        }
    }
}

/// Builds the vocabulary of `docs` ([`count_vocabulary`]) and their rows ([`form_rows`]).
pub fn build(
    source: &Path,
    docs: &[String],
    options: &TextOptions,
    skipped_lines: usize,
) -> Result<(Dataset, Vocabulary), DataError> {
    let vocab = count_vocabulary(source, docs, options)?;
    let formed = form_rows(source, docs, options, skipped_lines, &vocab, false);
    Ok((formed.dataset, vocab))
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

/// Reads a text corpus: one document per line of a file, or one per file when `path` is a
/// directory.
pub fn read_text(
    path: &Path,
    read: &ReadOptions,
    options: &TextOptions,
) -> Result<(Dataset, Vocabulary), DataError> {
    let (docs, skipped) = corpus_documents(path, read.skip_bad_lines)?;
    build(path, &docs, options, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::tokenize;

    #[test]
    fn tokenizer_lowercases_alphabetic_runs() {
        let w = tokenize("The cat's 2 CATS—sat!", TokenFormat::Plain);
        assert_eq!(w, vec!["the", "cat", "s", "cats", "sat"]);
        let w = tokenize("The/at Fulton/np-tl ./. Atlanta's/np$", TokenFormat::Tagged);
        assert_eq!(w, vec!["the", "fulton", "atlanta", "s"]);
    }

    #[test]
    fn vocabulary_is_frequency_sorted_with_limits() {
        let counts: HashMap<String, u64> = [("b", 3), ("a", 3), ("c", 5), ("d", 1)]
            .into_iter()
            .map(|(w, c)| (w.to_string(), c))
            .collect();
        let v = Vocabulary::from_counts(counts, 2, 10);
        assert_eq!(v.id("c"), Some(0));
        assert_eq!(v.id("a"), Some(1));
        assert_eq!(v.id("b"), Some(2));
        assert_eq!(v.id("d"), None);
        assert_eq!(v.to_tsv(), "c\t5\na\t3\nb\t3\n");
    }

    #[test]
    fn cbow_windows_and_bow_rows() {
        let dir = std::env::temp_dir().join(format!("widebag-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("docs.txt");
        std::fs::write(&p, "a b c\nb a\n").unwrap();
        let cbow = TextOptions {
            mode: TextMode::Cbow,
            window: 1,
            ..TextOptions::default()
        };
        let (d, v) = read_text(&p, &ReadOptions::default(), &cbow).unwrap();
        // a:2, b:2, c:1 → a=0, b=1, c=2.
        assert_eq!(v.id("c"), Some(2));
        assert_eq!(d.n_rows(), 5);
        assert_eq!(d.rows.row(1).0, &[0, 2]); // context of "b" in "a b c"
        assert_eq!(d.rows.row_targets(1).0, &[1]);
        let (d, _) = read_text(&p, &ReadOptions::default(), &TextOptions::default()).unwrap();
        assert_eq!(d.n_rows(), 2);
        std::fs::write(&p, b"ok\nfine\nx \xff\n").unwrap();
        let e = read_text(&p, &ReadOptions::default(), &TextOptions::default()).unwrap_err();
        assert!(e.to_string().contains("docs.txt:3:3"), "{e}");
        // A directory: one document per file; a non-UTF-8 file names its line and column.
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("a.txt"), "b b\nc").unwrap();
        std::fs::write(tree.join("sub/b.txt"), "b a").unwrap();
        std::fs::write(tree.join(".hidden"), "zzz").unwrap();
        let (d, v) = read_text(&tree, &ReadOptions::default(), &TextOptions::default()).unwrap();
        assert_eq!(d.n_rows(), 2);
        assert_eq!(v.id("b"), Some(0));
        // "b b c": distinct words with counts, as input and as target weights.
        assert_eq!(d.rows.row(0), (&[0, 2][..], &[2.0, 1.0][..]));
        assert_eq!(d.rows.row_targets(0), d.rows.row(0));
        assert_eq!(v.id("zzz"), None);
        std::fs::write(tree.join("sub/c.txt"), b"ok\nab\xffc").unwrap();
        let e = read_text(&tree, &ReadOptions::default(), &TextOptions::default()).unwrap_err();
        assert!(e.to_string().contains("c.txt:2:3"), "{e}");
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        let (d, _) = read_text(&tree, &skip, &TextOptions::default()).unwrap();
        assert_eq!((d.n_rows(), d.skipped_lines), (2, 1));
    }
}
