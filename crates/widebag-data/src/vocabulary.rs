//! A text's vocabulary: its words sorted by descending count (ties alphabetically), a word's id
//! its place in that order. A text dataset's ids are these words, and a packed file keeps them.

use std::collections::HashMap;

/// Words sorted by descending count, then alphabetically.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocabulary {
    pub words: Vec<(String, u64)>,
    index: HashMap<String, u32>,
}

impl Vocabulary {
    /// Bytes it holds on the heap: each word twice (the list and the index), the counts, and
    /// the index's table (about one entry's size again per word).
    pub fn heap_bytes(&self) -> u64 {
        let text: usize = self.words.iter().map(|(w, _)| 2 * w.capacity()).sum();
        let entry = size_of::<(String, u64)>() + 2 * size_of::<(String, u32)>();
        (text + self.words.len() * entry) as u64
    }

    /// Keeps words seen at least `min_count` times, at most `max_size` of them.
    pub fn from_counts(counts: HashMap<String, u64>, min_count: u64, max_size: usize) -> Self {
        let mut words: Vec<(String, u64)> = counts
            .into_iter()
            .filter(|(_, c)| *c >= min_count)
            .collect();
        words.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        words.truncate(max_size);
        Self::from_words(words)
    }

    /// `(word, count)` in id order, as [`Self::words`] holds them.
    pub fn from_words(words: Vec<(String, u64)>) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
