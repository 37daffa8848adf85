//! Text corpora (one document per line): a simple tokenizer, a frequency-sorted vocabulary, and
//! bag-of-words or CBOW-window rows.
//!
//! Tokenizer: a word is a maximal run of ASCII letters, lower-cased; everything else separates
//! words. Vocabulary ids are sorted by descending count (ties alphabetically), so id 0 is the most
//! frequent word and head/tail bands are id ranges.

use std::collections::HashMap;
use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::lines::{LineError, parse_lines};
use crate::{DataError, ReadOptions};

/// Lower-cased `[a-z]+` words of a line.
pub fn tokenize(line: &str) -> impl Iterator<Item = String> + '_ {
    line.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
}

/// Words sorted by descending count, then alphabetically.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocabulary {
    pub words: Vec<(String, u64)>,
    index: HashMap<String, u32>,
}

impl Vocabulary {
    /// Keeps words seen at least `min_count` times, at most `max_size` of them.
    pub fn from_counts(counts: HashMap<String, u64>, min_count: u64, max_size: usize) -> Self {
        let mut words: Vec<(String, u64)> = counts
            .into_iter()
            .filter(|(_, c)| *c >= min_count)
            .collect();
        words.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        words.truncate(max_size);
        let index = words
            .iter()
            .enumerate()
            .map(|(i, (w, _))| (w.clone(), i as u32))
            .collect();
        Self { words, index }
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
    pub fn id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    /// `word<TAB>count` lines, in id order.
    pub fn to_tsv(&self) -> String {
        self.words
            .iter()
            .map(|(w, c)| format!("{w}\t{c}\n"))
            .collect()
    }
}

/// How documents become rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextMode {
    /// One row per document: the bag of its in-vocabulary words, with the same bag as target.
    Bow,
    /// One row per in-vocabulary word: the bag of the `window` words on each side as input, the
    /// word as target.
    Cbow { window: usize },
}

fn decode(line: &[u8]) -> Result<Option<String>, LineError> {
    let text = std::str::from_utf8(line).map_err(|e| {
        (
            e.valid_up_to() + 1,
            "the line is not valid UTF-8".to_string(),
        )
    })?;
    Ok(Some(text.to_string()))
}

/// Reads a one-document-per-line corpus in two passes (count, then map to ids).
pub fn read_text(
    path: &Path,
    options: &ReadOptions,
    mode: TextMode,
    min_count: u64,
    max_size: usize,
) -> Result<(Dataset, Vocabulary), DataError> {
    let (docs, skipped) = parse_lines(path, options.skip_bad_lines, decode)?;
    let mut counts: HashMap<String, u64> = HashMap::new();
    for (_, d) in &docs {
        for w in tokenize(d) {
            *counts.entry(w).or_insert(0) += 1;
        }
    }
    let vocab = Vocabulary::from_counts(counts, min_count, max_size);
    if vocab.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let mut rows = RowStore::new();
    for (_, d) in &docs {
        let ids: Vec<u32> = tokenize(d).filter_map(|w| vocab.id(&w)).collect();
        match mode {
            TextMode::Bow => {
                let ones = vec![1.0; ids.len()];
                rows.push(&ids, &ones, &ids, &ones);
            }
            TextMode::Cbow { window } => {
                for (i, &centre) in ids.iter().enumerate() {
                    let lo = i.saturating_sub(window);
                    let hi = (i + window + 1).min(ids.len());
                    let context: Vec<u32> = (lo..hi).filter(|&j| j != i).map(|j| ids[j]).collect();
                    let ones = vec![1.0; context.len()];
                    rows.push(&context, &ones, &[centre], &[1.0]);
                }
            }
        }
    }
    Ok((
        Dataset {
            source: path.to_path_buf(),
            width: vocab.len(),
            n_classes: vocab.len(),
            rows,
            skipped_lines: skipped,
            notes: vec![format!("vocabulary of {} words", vocab.len())],
        },
        vocab,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_lowercases_alphabetic_runs() {
        let w: Vec<String> = tokenize("The cat's 2 CATS—sat!").collect();
        assert_eq!(w, vec!["the", "cat", "s", "cats", "sat"]);
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
        let (d, v) = read_text(
            &p,
            &ReadOptions::default(),
            TextMode::Cbow { window: 1 },
            1,
            100,
        )
        .unwrap();
        // a:2, b:2, c:1 → a=0, b=1, c=2.
        assert_eq!(v.id("c"), Some(2));
        assert_eq!(d.n_rows(), 5);
        assert_eq!(d.rows.row(1).0, &[0, 2]); // context of "b" in "a b c"
        assert_eq!(d.rows.row_targets(1).0, &[1]);
        let (d, _) = read_text(&p, &ReadOptions::default(), TextMode::Bow, 1, 100).unwrap();
        assert_eq!(d.n_rows(), 2);
        std::fs::write(&p, b"ok\nfine\nx \xff\n").unwrap();
        let e = read_text(&p, &ReadOptions::default(), TextMode::Bow, 1, 100).unwrap_err();
        assert!(e.to_string().contains("docs.txt:3:3"), "{e}");
    }
}
