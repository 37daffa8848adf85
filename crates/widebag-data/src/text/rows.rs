//! Text documents become rows over a vocabulary: the vocabulary kept of their counted words, each
//! document's in-vocabulary ids, and its rows (in bow mode its bag, or one class; in CBOW mode a
//! row per word, its context window targeting it). Training and held-out data share this path.

use std::collections::HashMap;
use std::path::Path;

use rayon::prelude::*;
use widebag_csr::SparseRow;
use widebag_kinds::{TextMode, TokenFormat};

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::options::TextOptions;
use crate::text::words::{count_words, for_each_word};
use crate::vocabulary::Vocabulary;

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
