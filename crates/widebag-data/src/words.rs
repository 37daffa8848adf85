//! The words of a text: the tokenizer (a word is a maximal run of ASCII letters, lower-cased;
//! with [`TokenFormat::Tagged`] the text after the last `/` of each whitespace-separated token is
//! dropped first) and word counts, without an allocation per word.

use std::collections::HashMap;

use rayon::prelude::*;
use widebag_kinds::TokenFormat;

/// Lower-cased `[a-z]+` words of a text.
pub fn tokenize(text: &str, format: TokenFormat) -> Vec<String> {
    let mut out = Vec::new();
    for_each_word(text, format, |w| out.push(w.to_string()));
    out
}

/// Calls `f` with each of [`tokenize`]'s words in turn, without allocating one per word (a
/// word with capitals is lower-cased into a reused buffer).
pub(crate) fn for_each_word(text: &str, format: TokenFormat, mut f: impl FnMut(&str)) {
    let mut lower = String::new();
    let mut words = |s: &str| {
        for w in s.split(|c: char| !c.is_ascii_alphabetic()) {
            if w.is_empty() {
                continue;
            }
            if w.bytes().any(|b| b.is_ascii_uppercase()) {
                lower.clear();
                lower.push_str(w);
                lower.make_ascii_lowercase();
                f(&lower);
            } else {
                f(w);
            }
        }
    };
    match format {
        TokenFormat::Plain => words(text),
        TokenFormat::Tagged => {
            for t in text.split_whitespace() {
                words(t.rfind('/').map_or(t, |i| &t[..i]));
            }
        }
    }
}

/// Each word's count in `docs` (in parallel).
pub(crate) fn count_words(docs: &[String], tokens: TokenFormat) -> HashMap<String, u64> {
    docs.par_iter()
        .fold(HashMap::<String, u64>::new, |mut m, d| {
            count_into(&mut m, d, tokens);
            m
        })
        .reduce(HashMap::new, add_counts)
}

/// Adds the words of `text` to `counts` (a word allocated once, when first seen).
pub(crate) fn count_into(counts: &mut HashMap<String, u64>, text: &str, tokens: TokenFormat) {
    for_each_word(text, tokens, |w| match counts.get_mut(w) {
        Some(c) => *c += 1,
        None => {
            counts.insert(w.to_string(), 1);
        }
    });
}

/// The counts of `a` and `b` together (the larger map taken over).
pub(crate) fn add_counts(
    mut a: HashMap<String, u64>,
    mut b: HashMap<String, u64>,
) -> HashMap<String, u64> {
    if a.len() < b.len() {
        std::mem::swap(&mut a, &mut b);
    }
    for (w, c) in b {
        *a.entry(w).or_insert(0) += c;
    }
    a
}
