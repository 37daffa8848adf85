//! Writing a packed dataset read whole: the blocks in row order, then the metadata, then the
//! prelude that points at it, under a temporary name renamed into place when complete
//! (`atomic`); and the block encoding and file ending a streamed pack ([`super::stream`])
//! shares. Nothing in it depends on the time or the path, so packing the same input twice gives
//! the same bytes.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::dataset::RowStore;
use crate::error::DataError;
use crate::loaded::Loaded;
use crate::packed::layout::{
    Block, DEFAULT_BLOCK_ROWS, MAGIC, PRELUDE_BYTES, PackMeta, Section, VERSION, frequencies_fit,
};
use crate::progress::Progress;
use crate::{atomic, stats};

/// How to pack.
#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Rows per block (the last block may hold fewer).
    pub block_rows: u32,
    /// Batches sampled per batch size for the unique-ids statistics.
    pub stats_samples: usize,
    /// Told the rows written ([`pack`]) or the source's bytes read (a streamed pack: each pass
    /// over the source in turn).
    pub progress: Progress,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            block_rows: DEFAULT_BLOCK_ROWS,
            stats_samples: 20,
            progress: Progress::NONE,
        }
    }
}

/// Appends `v`'s words little-endian: the buffer grown once, then written in place (a loop the
/// compiler turns into wide copies, not one growth check per word).
fn put_u32s(out: &mut Vec<u8>, v: impl ExactSizeIterator<Item = u32>) {
    let at = out.len();
    out.resize(at + 4 * v.len(), 0);
    for (word, x) in out[at..].chunks_exact_mut(4).zip(v) {
        word.copy_from_slice(&x.to_le_bytes());
    }
}

/// Rows `rows` of `store` as one block's bytes, and its entry (offset `at`).
pub(super) fn encode_block(
    store: &RowStore,
    rows: std::ops::Range<usize>,
    at: u64,
) -> (Vec<u8>, Block) {
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
        rows.clone().map(|r| (store.row_ptr[r + 1] - a) as u32),
    );
    put_u32s(&mut out, store.ids[a..b].iter().copied());
    if values {
        put_u32s(&mut out, store.values[a..b].iter().map(|v| v.to_bits()));
    }
    if !targets_are_ids {
        put_u32s(
            &mut out,
            rows.map(|r| (store.target_ptr[r + 1] - ta) as u32),
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

/// Rows taken one at a time and written a block at a time from offset `at`.
struct BlockSink {
    block_rows: usize,
    at: u64,
    buf: RowStore,
    blocks: Vec<Block>,
}

impl BlockSink {
    fn new(block_rows: usize, at: u64) -> Self {
        Self {
            block_rows,
            at,
            buf: RowStore::new(),
            blocks: Vec::new(),
        }
    }

    fn push(&mut self, w: &mut impl Write, row: Row<'_>) -> std::io::Result<()> {
        self.buf.push(row.ids, row.values, row.targets, row.weights);
        // A block's row ends are u32s: a block past 2^32 ids is refused, not wrapped.
        if self.buf.ids.len().max(self.buf.targets.len()) > u32::MAX as usize {
            return Err(std::io::Error::other(format!(
                "a block of {} rows holds more than 2^32 ids or targets: pack with fewer \
                 rows per block (--block-rows)",
                self.block_rows
            )));
        }
        if self.buf.n_rows() == self.block_rows {
            self.flush(w)?;
        }
        Ok(())
    }

    fn flush(&mut self, w: &mut impl Write) -> std::io::Result<()> {
        let n = self.buf.n_rows();
        if n > 0 {
            let (bytes, block) = encode_block(&self.buf, 0..n, self.at);
            w.write_all(&bytes)?;
            self.at += bytes.len() as u64;
            self.blocks.push(block);
            self.buf = RowStore::new();
        }
        Ok(())
    }

    /// The blocks written and the offset after them.
    fn finish(mut self, w: &mut impl Write) -> std::io::Result<(Vec<Block>, u64)> {
        self.flush(w)?;
        Ok((self.blocks, self.at))
    }
}

/// One row: input ids and values, target classes and weights.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    pub ids: &'a [u32],
    pub values: &'a [f32],
    pub targets: &'a [u32],
    pub weights: &'a [f32],
}

impl<'a> Row<'a> {
    /// Row `r` of `store`.
    pub fn of(store: &'a RowStore, r: usize) -> Self {
        let ((ids, values), (targets, weights)) = (store.row(r), store.row_targets(r));
        Self {
            ids,
            values,
            targets,
            weights,
        }
    }
}

/// Writes `store`'s rows as blocks of `block_rows` from offset `*at`, advancing it.
fn write_blocks(
    w: &mut impl Write,
    store: &RowStore,
    block_rows: usize,
    at: &mut u64,
    progress: &Progress,
) -> std::io::Result<Vec<Block>> {
    let mut sink = BlockSink::new(block_rows, *at);
    for r in 0..store.n_rows() {
        sink.push(w, Row::of(store, r))?;
        if (r + 1) % block_rows == 0 {
            progress.advance(block_rows as u64);
        }
    }
    progress.advance((store.n_rows() % block_rows) as u64);
    let (blocks, end) = sink.finish(w)?;
    *at = end;
    Ok(blocks)
}

/// The frequency section's bytes (little-endian f64s: ids, then classes).
fn frequency_bytes(ids: &[f64], classes: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 * (ids.len() + classes.len()));
    for f in ids.iter().chain(classes) {
        out.extend_from_slice(&f.to_le_bytes());
    }
    out
}

/// Writes what follows the blocks (from offset `at`): the frequency section when it fits,
/// the metadata, then the prelude at the start.
pub(super) fn finish_file<W: Write + Seek>(
    w: &mut W,
    meta: &mut PackMeta,
    mut at: u64,
    frequencies: impl FnOnce() -> (Vec<f64>, Vec<f64>),
) -> std::io::Result<()> {
    if frequencies_fit(meta) {
        let (ids, classes) = frequencies();
        let bytes = frequency_bytes(&ids, &classes);
        w.write_all(&bytes)?;
        meta.frequencies = Some(Section {
            offset: at,
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
        });
        at += bytes.len() as u64;
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
}

pub(super) fn check_options(options: &PackOptions) -> Result<(), DataError> {
    if options.block_rows == 0 {
        return Err(DataError::InvalidSpec {
            key: "block_rows",
            message: "a block holds at least one row".into(),
        });
    }
    Ok(())
}

/// Packs a loaded source (`variant`: its row-forming settings) into `out`, atomically: on any
/// error `out` keeps what it held and no temporary file is left. Returns the metadata written.
pub fn pack(
    loaded: &Loaded,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    check_options(&options)?;
    let d = &loaded.dataset;
    // Counted a row at a time, as a streamed pack counts them: the same figures either way.
    let mut tally = stats::Tally::new(0);
    for r in 0..d.n_rows() {
        tally.add(d.rows.row(r).0);
    }
    let stats = tally.finish(d.width, d.n_classes, options.stats_samples, 0);
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
        frequencies: None,
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
        let progress = &options.progress;
        meta.blocks = write_blocks(w, &d.rows, block_rows, &mut at, progress)?;
        if let Some(test) = &loaded.test {
            meta.test_blocks = Some(write_blocks(w, test, block_rows, &mut at, progress)?);
        }
        let freq = || crate::frequencies::of_store(&d.rows, d.width, d.n_classes);
        finish_file(w, &mut meta, at, freq)
    })
    .map_err(io)?;
    Ok(meta)
}
