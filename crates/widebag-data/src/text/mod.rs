//! Text corpora: documents (one per line, one per file in a directory tree, or dictd entries)
//! become bag-of-words or CBOW-window rows over a frequency-sorted vocabulary, read whole or
//! packed streamed in two passes.
//!
//! Tokenizer: a word is a maximal run of ASCII letters, lower-cased; everything else separates
//! words. With [`TokenFormat::Tagged`](widebag_kinds::TokenFormat::Tagged) (the Brown corpus'
//! `word/TAG` format) the text after the last `/` of each whitespace-separated token is dropped
//! first. Vocabulary ids are sorted by descending count (ties alphabetically), so id 0 is the most
//! frequent word and head/tail bands are id ranges.

pub mod corpus;
pub mod documents;
pub mod labelled;
pub mod pack;
pub mod read;
pub mod rows;
mod spill;
pub mod words;

pub use pack::{corpus_bytes, pack_text};
pub use read::read_text;
