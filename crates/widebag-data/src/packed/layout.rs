//! The packed file's layout: the prelude's magic and version, each block's and section's place
//! and checksum, and the metadata ([`PackMeta`]) that describes them.
//!
//! Little-endian:
//! - prelude, 32 bytes: magic `WIDEBAGP`, version (u32), 0 (u32), the metadata's offset (u64),
//!   its length (u32) and its CRC-32 (u32);
//! - the blocks. Per block, each 4-byte section in turn: each row's end in the block's ids (u32,
//!   cumulative, so row `r`'s ids are `end[r-1]..end[r]` and any row is found in one read), the
//!   ids (u32), the values (f32; left out when every value of the block is 1), each row's end in
//!   the block's targets (u32), the targets (u32), their weights (f32; left out when every weight
//!   is 1). When every row's targets are its own ids with weight 1 (a recommender's bag), the
//!   three target sections are left out;
//! - the frequencies (when the width and classes are of the order of the data): each id's
//!   summed `|value|`, then each class's summed `|weight|`, as f64, over the rows' blocks; the
//!   head/tail bands' renumbering reads them instead of every block;
//! - the metadata, JSON ([`PackMeta`]), last, so that packing streams and the prelude is
//!   written when everything else is.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::stats::DataStats;

/// The first eight bytes of a packed dataset.
pub const MAGIC: &[u8; 8] = widebag_kinds::PACKED_MAGIC;
/// The layout's version; a reader refuses any other.
pub const VERSION: u32 = 3;
/// Bytes before the first block.
pub const PRELUDE_BYTES: usize = 32;
/// Rows per block unless asked otherwise.
pub const DEFAULT_BLOCK_ROWS: u32 = 4096;

/// One block's place in the file and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub offset: u64,
    pub bytes: u64,
    pub rows: u32,
    pub nnz: u64,
    pub n_targets: u64,
    /// Whether the values are stored (else every value is 1).
    pub values: bool,
    /// Whether the target weights are stored (else every weight is 1).
    pub weights: bool,
    /// Every row's targets are its own ids, weight 1 (a recommender's bag): the target
    /// sections are left out.
    pub targets_are_ids: bool,
    pub crc32: u32,
}

/// A section of bytes after the blocks, with its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    pub offset: u64,
    pub bytes: u64,
    pub crc32: u32,
}

/// What a packed dataset holds, as its metadata says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PackMeta {
    pub version: u32,
    /// The source's format and row-forming settings (`Source::variant`).
    pub variant: String,
    pub n_rows: u64,
    pub width: u64,
    pub n_classes: u64,
    pub nnz: u64,
    pub block_rows: u32,
    pub blocks: Vec<Block>,
    /// LightGCN: the held-out items of each user row, in the same blocks' layout.
    pub test_blocks: Option<Vec<Block>>,
    /// Each id's then each class's summed `|value|` (f64): absent when the width or classes
    /// claimed are far beyond the data's size.
    pub frequencies: Option<Section>,
    /// The statistics `data stats` prints, computed when packing.
    pub stats: DataStats,
    /// Text: the vocabulary, `(word, count)` in id order.
    pub vocabulary: Option<Vec<(String, u64)>>,
    /// Text with file-name labels: the class names, class id order.
    pub labels: Option<Vec<String>>,
    pub skipped_lines: u64,
    pub notes: Vec<String>,
}

/// Whether a file of `meta`'s shape carries the frequency section: its width and classes are
/// of the order of its size (a claimed width of 2^40 is not written out as zeros).
pub fn frequencies_fit(meta: &PackMeta) -> bool {
    meta.width + meta.n_classes <= 4 * (meta.nnz + meta.n_rows) + (1 << 20)
}

/// Whether `path` is a packed dataset (its first bytes are [`MAGIC`]); `false` for a directory,
/// a short or unreadable file.
pub fn is_packed(path: &Path) -> bool {
    widebag_kinds::is_packed(path)
}
