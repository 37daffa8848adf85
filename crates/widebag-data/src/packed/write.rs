//! Writing a packed dataset: the blocks in row order, then the metadata, then the prelude that
//! points at it, under a temporary name renamed into place when complete (`atomic`). Nothing
//! in it depends on the time or the path, so packing the same input twice gives the same bytes.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::dataset::RowStore;
use crate::packed::{Block, DEFAULT_BLOCK_ROWS, MAGIC, PRELUDE_BYTES, PackMeta, VERSION};
use crate::source::Loaded;
use crate::{DataError, atomic, stats};

/// How to pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackOptions {
    /// Rows per block (the last block may hold fewer).
    pub block_rows: u32,
    /// Batches sampled per batch size for the unique-ids statistics.
    pub stats_samples: usize,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            block_rows: DEFAULT_BLOCK_ROWS,
            stats_samples: 20,
        }
    }
}

fn put_u32s(out: &mut Vec<u8>, v: impl IntoIterator<Item = u32>) {
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Rows `rows` of `store` as one block's bytes, and its entry (offset `at`).
fn encode_block(store: &RowStore, rows: std::ops::Range<usize>, at: u64) -> (Vec<u8>, Block) {
    let (a, b) = (store.row_ptr[rows.start], store.row_ptr[rows.end]);
    let (ta, tb) = (store.target_ptr[rows.start], store.target_ptr[rows.end]);
    let values = store.values[a..b].iter().any(|&v| v != 1.0);
    let weights = store.target_weights[ta..tb].iter().any(|&w| w != 1.0);
    let targets_are_ids = !weights
        && store.targets[ta..tb] == store.ids[a..b]
        && rows
            .clone()
            .all(|r| store.target_ptr[r] - ta == store.row_ptr[r] - a);
    let n = rows.len();
    let words = n * 2 + (b - a) * (1 + values as usize) + (tb - ta) * (1 + weights as usize);
    let mut out = Vec::with_capacity(words * 4);
    put_u32s(
        &mut out,
        rows.clone()
            .map(|r| (store.row_ptr[r + 1] - store.row_ptr[r]) as u32),
    );
    put_u32s(&mut out, store.ids[a..b].iter().copied());
    if values {
        put_u32s(&mut out, store.values[a..b].iter().map(|v| v.to_bits()));
    }
    if !targets_are_ids {
        put_u32s(
            &mut out,
            rows.map(|r| (store.target_ptr[r + 1] - store.target_ptr[r]) as u32),
        );
        put_u32s(&mut out, store.targets[ta..tb].iter().copied());
    }
    if weights {
        put_u32s(
            &mut out,
            store.target_weights[ta..tb].iter().map(|w| w.to_bits()),
        );
    }
    let block = Block {
        offset: at,
        bytes: out.len() as u64,
        rows: n as u32,
        nnz: (b - a) as u64,
        n_targets: (tb - ta) as u64,
        values,
        weights,
        targets_are_ids,
        crc32: crc32fast::hash(&out),
    };
    (out, block)
}

/// Writes `store`'s rows as blocks of `block_rows` from offset `*at`, advancing it.
fn write_blocks(
    w: &mut impl Write,
    store: &RowStore,
    block_rows: usize,
    at: &mut u64,
) -> std::io::Result<Vec<Block>> {
    let mut blocks = Vec::new();
    let n = store.n_rows();
    let mut start = 0;
    while start < n {
        let end = (start + block_rows).min(n);
        let (bytes, block) = encode_block(store, start..end, *at);
        w.write_all(&bytes)?;
        *at += bytes.len() as u64;
        blocks.push(block);
        start = end;
    }
    Ok(blocks)
}

/// Packs a loaded source (`variant`: its row-forming settings) into `out`, atomically: on any
/// error `out` keeps what it held and no temporary file is left. Returns the metadata written.
pub fn pack(
    loaded: &Loaded,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    if options.block_rows == 0 {
        return Err(DataError::InvalidSpec {
            key: "block_rows",
            message: "a block holds at least one row".into(),
        });
    }
    let d = &loaded.dataset;
    let stats = stats::compute(d, options.stats_samples, 0);
    let mut meta = PackMeta {
        version: VERSION,
        variant: variant.to_string(),
        n_rows: d.n_rows() as u64,
        width: d.width as u64,
        n_classes: d.n_classes as u64,
        nnz: d.rows.nnz() as u64,
        block_rows: options.block_rows,
        blocks: Vec::new(),
        test_blocks: None,
        stats,
        vocabulary: loaded.vocabulary.as_ref().map(|v| v.words.clone()),
        labels: loaded.labels.clone(),
        skipped_lines: d.skipped_lines as u64,
        notes: d.notes.clone(),
    };
    let block_rows = options.block_rows as usize;
    let io = |source| DataError::Io {
        path: out.to_path_buf(),
        source,
    };
    atomic::write_atomic_with(out, |w| {
        w.write_all(&[0u8; PRELUDE_BYTES])?;
        let mut at = PRELUDE_BYTES as u64;
        meta.blocks = write_blocks(w, &d.rows, block_rows, &mut at)?;
        if let Some(test) = &loaded.test {
            meta.test_blocks = Some(write_blocks(w, test, block_rows, &mut at)?);
        }
        let json = serde_json::to_vec(&meta).map_err(std::io::Error::other)?;
        let meta_len = u32::try_from(json.len()).map_err(std::io::Error::other)?;
        w.write_all(&json)?;
        let mut prelude = Vec::with_capacity(PRELUDE_BYTES);
        prelude.extend_from_slice(MAGIC);
        prelude.extend_from_slice(&VERSION.to_le_bytes());
        prelude.extend_from_slice(&0u32.to_le_bytes());
        prelude.extend_from_slice(&at.to_le_bytes());
        prelude.extend_from_slice(&meta_len.to_le_bytes());
        prelude.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
        w.seek(SeekFrom::Start(0))?;
        w.write_all(&prelude)
    })
    .map_err(io)?;
    Ok(meta)
}
