//! The dictd dictionary format (as in GCIDE): a `.index` of `headword<TAB>offset<TAB>length`
//! lines, offsets and lengths in dictd's base64 digits, into the text of a `.dict` file or its
//! gzip-compatible `.dict.dz`. Each distinct entry block (several headwords may share one) is one
//! document for the text pipeline.

pub mod entries;
pub mod index;
pub mod pack;
pub mod read;

pub use index::{DictdFiles, base64_number, locate};
pub use pack::pack_dictd;
pub use read::dictd_documents;
