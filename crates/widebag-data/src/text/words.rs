//! The words of a text: the tokenizer (a word is a maximal run of ASCII letters, lower-cased;
//! with [`TokenFormat::Tagged`] the text after the last `/` of each whitespace-separated token is
//! dropped first) and word counts, without an allocation per word.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use rayon::prelude::*;
use widebag_kinds::TokenFormat;

/// Lower-cased `[a-z]+` words of a text.
pub fn tokenize(text: &str, format: TokenFormat) -> Vec<String> {
    let mut out = Vec::new();
    for_each_word(text, format, |w| out.push(w.to_string()));
    out
}

/// Calls `f` with each maximal run of ASCII letters of `text` as the text spells it (with
/// [`TokenFormat::Tagged`], of each whitespace-separated token's text before its last `/`).
fn for_each_run<'a>(text: &'a str, format: TokenFormat, mut f: impl FnMut(&'a str)) {
    let mut runs = |s: &'a str| {
        for w in s.split(|c: char| !c.is_ascii_alphabetic()) {
            if !w.is_empty() {
                f(w);
            }
        }
    };
    match format {
        TokenFormat::Plain => runs(text),
        TokenFormat::Tagged => {
            for t in text.split_whitespace() {
                runs(t.rfind('/').map_or(t, |i| &t[..i]));
            }
        }
    }
}

/// `w` lower-cased: itself when it has no capitals, else lower-cased into `buf`.
fn lowered<'b>(w: &'b str, buf: &'b mut String) -> &'b str {
    if !w.bytes().any(|b| b.is_ascii_uppercase()) {
        return w;
    }
    buf.clear();
    buf.push_str(w);
    buf.make_ascii_lowercase();
    buf
}

/// The word `word` (lowered from the text's `w`) as a key: borrowed from the text when it is
/// `w` itself, else owned.
fn spelled<'a>(w: &'a str, word: &str) -> Cow<'a, str> {
    match std::ptr::eq(word.as_ptr(), w.as_ptr()) {
        true => Cow::Borrowed(w),
        false => Cow::Owned(word.to_string()),
    }
}

/// Calls `f` with each of [`tokenize`]'s words in turn, without allocating one per word (a
/// word with capitals is lower-cased into a reused buffer).
pub(crate) fn for_each_word(text: &str, format: TokenFormat, mut f: impl FnMut(&str)) {
    let mut lower = String::new();
    for_each_run(text, format, |w| f(lowered(w, &mut lower)));
}

/// Word counts keyed by the text's own spelling where it is the word (borrowed), else by the
/// word lower-cased (owned): counting allocates once per word with capitals first seen, not
/// once per word.
pub(crate) type TextCounts<'a> = HashMap<Cow<'a, str>, u64>;

/// Each word's count in `docs` (in parallel).
pub(crate) fn count_words(docs: &[String], tokens: TokenFormat) -> HashMap<String, u64> {
    let counts = docs
        .par_iter()
        .fold(TextCounts::new, |mut m, d| {
            count_into(&mut m, d, tokens);
            m
        })
        .reduce(TextCounts::new, add_counts);
    let mut owned = HashMap::with_capacity(counts.len());
    add_owned(&mut owned, counts);
    owned
}

/// Adds the words of `text` to `counts`.
pub(crate) fn count_into<'a>(counts: &mut TextCounts<'a>, text: &'a str, tokens: TokenFormat) {
    let mut lower = String::new();
    for_each_run(text, tokens, |w| {
        let word = lowered(w, &mut lower);
        match counts.get_mut(word) {
            Some(c) => *c += 1,
            None => {
                counts.insert(spelled(w, word), 1);
            }
        }
    });
}

/// The counts of `a` and `b` together (the larger map taken over; no word copied).
pub(crate) fn add_counts<'a>(mut a: TextCounts<'a>, mut b: TextCounts<'a>) -> TextCounts<'a> {
    if a.len() < b.len() {
        std::mem::swap(&mut a, &mut b);
    }
    for (w, c) in b {
        *a.entry(w).or_insert(0) += c;
    }
    a
}

/// Adds `part` to `counts`, a word copied only when `counts` lacks it.
pub(crate) fn add_owned(counts: &mut HashMap<String, u64>, part: TextCounts<'_>) {
    for (w, c) in part {
        match counts.get_mut(w.as_ref()) {
            Some(n) => *n += c,
            None => {
                counts.insert(w.into_owned(), c);
            }
        }
    }
}

/// Word counts kept per rayon thread across a whole pass of parallel work (a word copied once
/// per thread, when the thread first sees it; no map made or merged per chunk), merged at the
/// end.
pub(crate) struct ThreadCounts(Vec<Mutex<HashMap<String, u64>>>);

impl ThreadCounts {
    pub(crate) fn new() -> Self {
        let threads = rayon::current_num_threads().max(1);
        Self((0..threads).map(|_| Mutex::default()).collect())
    }

    /// Every thread's counts together.
    pub(crate) fn into_counts(self) -> HashMap<String, u64> {
        let maps = self
            .0
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
        maps.reduce(|mut a, b| {
            for (w, c) in b {
                match a.get_mut(&w) {
                    Some(n) => *n += c,
                    None => {
                        a.insert(w, c);
                    }
                }
            }
            a
        })
        .unwrap_or_default()
    }
}

/// The distinct words of a chunk of documents, each with its place (first seen first) and
/// count: keyed by the text's own spelling where it is the word (a word with capitals,
/// lower-cased, is owned).
#[derive(Default)]
pub(crate) struct ChunkWords<'a> {
    index: HashMap<Cow<'a, str>, u32>,
    pub(crate) words: Vec<Cow<'a, str>>,
    pub(crate) counts: Vec<u64>,
}

impl<'a> ChunkWords<'a> {
    /// Appends the place of each word of `text` to `places` (a new word gets the next place).
    pub(crate) fn index(&mut self, text: &'a str, tokens: TokenFormat, places: &mut Vec<u32>) {
        let mut lower = String::new();
        for_each_run(text, tokens, |w| {
            let word = lowered(w, &mut lower);
            let at = match self.index.get(word) {
                Some(&at) => at,
                None => {
                    let at = self.words.len() as u32;
                    let key = spelled(w, word);
                    self.index.insert(key.clone(), at);
                    self.words.push(key);
                    self.counts.push(0);
                    at
                }
            };
            self.counts[at as usize] += 1;
            places.push(at);
        });
    }
}

impl ThreadCounts {
    /// Adds a chunk's words and counts to the calling thread's counts (one lookup per distinct
    /// word of the chunk).
    pub(crate) fn add_chunk(&self, chunk: &ChunkWords<'_>) {
        let at = rayon::current_thread_index().unwrap_or(0) % self.0.len();
        let mut counts = self.0[at].lock().unwrap_or_else(|e| e.into_inner());
        for (w, &c) in chunk.words.iter().zip(&chunk.counts) {
            match counts.get_mut(w.as_ref()) {
                Some(n) => *n += c,
                None => {
                    counts.insert(w.to_string(), c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_lowercases_alphabetic_runs() {
        let w = tokenize("The cat's 2 CATS—sat!", TokenFormat::Plain);
        assert_eq!(w, vec!["the", "cat", "s", "cats", "sat"]);
        let w = tokenize("The/at Fulton/np-tl ./. Atlanta's/np$", TokenFormat::Tagged);
        assert_eq!(w, vec!["the", "fulton", "atlanta", "s"]);
    }
}
