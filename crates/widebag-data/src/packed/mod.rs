//! widebag's packed dataset: one file holding a dataset's rows as a reader formed them (and, for
//! LightGCN data, its held-out rows; for text, the vocabulary and class names) in blocks of a
//! fixed number of rows, each with a CRC-32, and metadata that carries the shape and the
//! statistics `data stats` prints, so that reading them costs one small read whatever the
//! file's size. [`write::pack`] writes it atomically and byte for byte the same for the same
//! input; [`read::PackedFile`] reads it through a memory map and checks each block's checksum at
//! its first read. A file is recognised by its magic bytes, whatever its name
//! ([`is_packed`]), so `data.path` pointing at it is enough.
//!
//! Its layout is [`layout`]'s; [`stream`] writes a pack a row at a time, as the rows come;
//! [`gather`] reads any rows in place.

pub mod gather;
pub mod layout;
pub mod read;
pub mod stream;
pub mod write;

pub use layout::{
    Block, DEFAULT_BLOCK_ROWS, MAGIC, PRELUDE_BYTES, PackMeta, Section, VERSION, frequencies_fit,
    is_packed,
};
pub use read::PackedFile;
pub use write::{PackOptions, pack};

#[cfg(test)]
pub(crate) mod by_hand;
#[cfg(test)]
mod tests;
