//! Writing a packed dataset: the blocks in row order, then the metadata, then the prelude that
//! points at it, under a temporary name renamed into place when complete (`atomic`). Nothing
//! in it depends on the time or the path, so packing the same input twice gives the same bytes.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::dataset::RowStore;
use crate::key_sums::KeySums;
use crate::packed::{
    Block, DEFAULT_BLOCK_ROWS, MAGIC, PRELUDE_BYTES, PackMeta, Section, VERSION, frequencies_fit,
};
use crate::source::Loaded;
use crate::{DataError, Progress, atomic, stats};

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
fn finish_file<W: Write + Seek>(
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

fn check_options(options: &PackOptions) -> Result<(), DataError> {
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

/// What a streamed pack knows before its rows: the shape and how the rows were formed.
#[derive(Clone, Debug)]
pub struct StreamHeader {
    pub variant: String,
    pub width: usize,
    pub n_classes: usize,
    /// Whether the width and classes above are the shape, or the least it grows from.
    pub extent: Extent,
    pub notes: Vec<String>,
    /// Text: the vocabulary, `(word, count)` in id order (counted in a pass before the rows).
    pub vocabulary: Option<Vec<(String, u64)>>,
    /// Documents labelled by file name: the class names, class id order.
    pub labels: Option<Vec<String>>,
}

/// How a streamed pack's shape is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Before the rows: an id or class beyond it is an error.
    Declared,
    /// From the rows: the largest id and class pushed (held-out rows too) plus one, or the
    /// header's width and classes when larger.
    Grows,
}

/// Rows handed to a streamed pack: written a block at a time, counted for the statistics and
/// the frequencies on the way.
pub struct RowSink<'w, W: Write> {
    w: &'w mut W,
    extent: Extent,
    blocks: BlockSink,
    /// The training rows' blocks, once the held-out rows have begun ([`Self::begin_held_out`]).
    train_blocks: Option<Vec<Block>>,
    tally: stats::Tally,
    /// The shape: the header's, or grown to the rows' ([`Extent::Grows`]).
    width: usize,
    n_classes: usize,
    /// Each id's and each class's summed `|value|` (the frequency section).
    ids: KeySums<f64>,
    classes: KeySums<f64>,
    skipped_lines: u64,
    /// Notes known only once the rows are in (after the header's).
    late_notes: Vec<String>,
}

impl<W: Write> RowSink<'_, W> {
    /// Adds a note to the metadata's, after the header's (a figure the rows told).
    pub fn note(&mut self, note: String) {
        self.late_notes.push(note);
    }

    /// Counts a source line skipped as bad (`skip_bad_lines`), for the metadata.
    pub fn skip_line(&mut self) {
        self.skipped_lines += 1;
    }

    /// Writes one row; an id or a class beyond the header's shape is an error.
    pub fn push(&mut self, row: Row<'_>) -> std::io::Result<()> {
        let end = |keys: &[u32]| keys.iter().max().map_or(0, |&k| k as usize + 1);
        let (width, n_classes) = (end(row.ids), end(row.targets));
        match self.extent {
            Extent::Grows => {
                self.width = self.width.max(width);
                self.n_classes = self.n_classes.max(n_classes);
            }
            Extent::Declared if width > self.width || n_classes > self.n_classes => {
                let beyond =
                    |keys: &[u32], n: usize| keys.iter().copied().find(|&k| k as usize >= n);
                let k = beyond(row.ids, self.width).or(beyond(row.targets, self.n_classes));
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "row {}: id or class {} beyond the declared shape",
                        self.tally.rows(),
                        k.unwrap_or_default()
                    ),
                ));
            }
            Extent::Declared => {}
        }
        // Held-out rows are stored, not counted: the statistics and frequencies are the
        // training rows' (as a pack of the source read whole counts them).
        if self.train_blocks.is_none() {
            self.tally.add(row.ids);
            self.ids.add_magnitudes(row.ids, row.values);
            self.classes.add_magnitudes(row.targets, row.weights);
        }
        self.blocks.push(self.w, row)
    }

    /// Ends the training rows: the rows pushed from now on are the held-out rows (LightGCN's
    /// test items, one row per training row), written as their own blocks.
    pub fn begin_held_out(&mut self) -> std::io::Result<()> {
        if self.train_blocks.is_some() {
            return Err(std::io::Error::other(
                "the held-out rows have begun already",
            ));
        }
        let fresh = BlockSink::new(self.blocks.block_rows, 0);
        let (blocks, at) = std::mem::replace(&mut self.blocks, fresh).finish(self.w)?;
        self.blocks.at = at;
        self.train_blocks = Some(blocks);
        Ok(())
    }
}

/// Packs rows streamed by `fill` into `out`, in memory bounded by a block, the width (or the
/// data's size, when an id claims more: [`KeySums`]) and [`stats::SAMPLE_ROWS`] (not by the
/// number of rows), atomically as [`pack`]. An error `fill`
/// returns (a bad source line) is returned as it is, with no output left.
pub fn pack_rows(
    header: StreamHeader,
    out: &Path,
    options: PackOptions,
    fill: impl FnOnce(&mut RowSink<'_, std::io::BufWriter<&std::fs::File>>) -> Result<(), DataError>,
) -> Result<PackMeta, DataError> {
    check_options(&options)?;
    let io = |source| DataError::Io {
        path: out.to_path_buf(),
        source,
    };
    let mut written = None;
    let mut failed = None;
    atomic::write_atomic_with(out, |w| {
        w.write_all(&[0u8; PRELUDE_BYTES])?;
        let block_rows = options.block_rows as usize;
        let mut sink = RowSink {
            w,
            extent: header.extent,
            blocks: BlockSink::new(block_rows, PRELUDE_BYTES as u64),
            train_blocks: None,
            tally: stats::Tally::new(0),
            width: header.width,
            n_classes: header.n_classes,
            ids: KeySums::new(),
            classes: KeySums::new(),
            skipped_lines: 0,
            late_notes: Vec::new(),
        };
        // The rows' own error (the source's file and line) is returned as it is.
        if let Err(e) = fill(&mut sink) {
            failed = Some(e);
            return Err(std::io::Error::other("the rows failed"));
        }
        let RowSink {
            w,
            extent: _,
            blocks,
            train_blocks,
            tally,
            width,
            n_classes,
            ids,
            classes,
            skipped_lines,
            late_notes,
        } = sink;
        let (last, at) = blocks.finish(w)?;
        let (blocks, test_blocks) = match train_blocks {
            Some(train) => (train, Some(last)),
            None => (last, None),
        };
        let stats = tally.finish(width, n_classes, options.stats_samples, 0);
        let mut meta = PackMeta {
            version: VERSION,
            variant: header.variant.clone(),
            n_rows: stats.rows as u64,
            width: width as u64,
            n_classes: n_classes as u64,
            nnz: stats.nnz_total as u64,
            block_rows: options.block_rows,
            blocks,
            test_blocks,
            frequencies: None,
            stats,
            vocabulary: header.vocabulary.clone(),
            labels: header.labels.clone(),
            skipped_lines,
            notes: [header.notes.clone(), late_notes].concat(),
        };
        let frequencies = || (ids.into_dense(width), classes.into_dense(n_classes));
        finish_file(w, &mut meta, at, frequencies)?;
        written = Some(meta);
        Ok(())
    })
    .map_err(|e| failed.take().unwrap_or_else(|| io(e)))?;
    Ok(written.expect("written when the file is"))
}
