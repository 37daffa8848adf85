//! A streamed pack: rows handed one at a time to a [`RowSink`] are gathered into blocks on the
//! caller's thread, and each full block is counted (the statistics and the frequencies, in row
//! order), encoded and written on a thread of its own, in order: forming the rows overlaps
//! counting and writing them, and the bytes are those of the whole-read pack
//! ([`super::write::pack`]).

use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, SyncSender};

use crate::dataset::RowStore;
use crate::error::DataError;
use crate::key_sums::KeySums;
use crate::packed::layout::{Block, PRELUDE_BYTES, PackMeta, VERSION};
use crate::packed::write::{PackOptions, Row, check_options, encode_block, finish_file};
use crate::{atomic, stats};

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

/// Full blocks on their way to the writer (bounded, so memory holds a few blocks).
const BLOCKS_IN_FLIGHT: usize = 4;

/// What the caller's thread hands the writer, in order.
enum Part {
    /// A full block (or the last of its rows).
    Block(RowStore),
    /// The rows after this are the held-out rows.
    HeldOut,
}

/// Rows handed to a streamed pack: gathered into blocks here, each counted for the statistics
/// and the frequencies and written by the writer's thread ([`pack_rows`]).
pub struct RowSink {
    extent: Extent,
    block_rows: usize,
    /// The block being gathered.
    buf: RowStore,
    /// To the writer; `None` once the rows are all in.
    parts: Option<SyncSender<Part>>,
    /// Blocks the writer is done with, to gather the next ones into.
    spent: Receiver<RowStore>,
    /// Rows pushed (training and held-out), for errors.
    n_rows: u64,
    held_out: bool,
    /// The shape: the header's, or grown to the rows' ([`Extent::Grows`]).
    width: usize,
    n_classes: usize,
    skipped_lines: u64,
    /// Notes known only once the rows are in (after the header's).
    late_notes: Vec<String>,
}

/// The writer's thread stopped (its error is the one returned): nothing more is taken.
fn stopped() -> std::io::Error {
    std::io::Error::other("the pack's writer stopped")
}

impl RowSink {
    /// Adds a note to the metadata's, after the header's (a figure the rows told).
    pub fn note(&mut self, note: String) {
        self.late_notes.push(note);
    }

    /// Counts a source line skipped as bad (`skip_bad_lines`), for the metadata.
    pub fn skip_line(&mut self) {
        self.skipped_lines += 1;
    }

    /// Takes one row; an id or a class beyond the header's shape is an error.
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
                        self.n_rows,
                        k.unwrap_or_default()
                    ),
                ));
            }
            Extent::Declared => {}
        }
        self.n_rows += 1;
        (self.buf).push(row.ids, row.values, row.targets, row.weights);
        self.check_block()
    }

    /// Takes every row of `rows` in order, as [`Self::push`] would one at a time: checked
    /// against the shape once, and copied up to each block's end at once.
    pub fn push_rows(&mut self, rows: &RowStore) -> std::io::Result<()> {
        let n = rows.n_rows();
        let end = |keys: &[u32]| keys.iter().max().map_or(0, |&k| k as usize + 1);
        let (width, n_classes) = (end(&rows.ids), end(&rows.targets));
        let within =
            self.extent == Extent::Grows || (width <= self.width && n_classes <= self.n_classes);
        if !within {
            // The error names the row: one row at a time.
            return (0..n).try_for_each(|r| self.push(Row::of(rows, r)));
        }
        self.width = self.width.max(width);
        self.n_classes = self.n_classes.max(n_classes);
        let mut r = 0;
        while r < n {
            let buf = &mut self.buf;
            let take = (self.block_rows - buf.n_rows()).min(n - r);
            let (a, b) = (rows.row_ptr[r], rows.row_ptr[r + take]);
            let (ta, tb) = (rows.target_ptr[r], rows.target_ptr[r + take]);
            let (base, target_base) = (buf.ids.len(), buf.targets.len());
            buf.ids.extend_from_slice(&rows.ids[a..b]);
            buf.values.extend_from_slice(&rows.values[a..b]);
            buf.targets.extend_from_slice(&rows.targets[ta..tb]);
            buf.target_weights
                .extend_from_slice(&rows.target_weights[ta..tb]);
            let ends = &rows.row_ptr[r + 1..=r + take];
            buf.row_ptr.extend(ends.iter().map(|p| p - a + base));
            let ends = &rows.target_ptr[r + 1..=r + take];
            buf.target_ptr
                .extend(ends.iter().map(|p| p - ta + target_base));
            self.n_rows += take as u64;
            r += take;
            self.check_block()?;
        }
        Ok(())
    }

    /// Refuses a block past 2^32 ids (its row ends are u32s), and sends a full one.
    fn check_block(&mut self) -> std::io::Result<()> {
        let buf = &self.buf;
        if buf.ids.len().max(buf.targets.len()) > u32::MAX as usize {
            return Err(std::io::Error::other(format!(
                "a block of {} rows holds more than 2^32 ids or targets: pack with fewer rows \
                 per block (--block-rows)",
                self.block_rows
            )));
        }
        if buf.n_rows() == self.block_rows {
            self.send_block()?;
        }
        Ok(())
    }

    /// Hands the rows gathered to the writer (none: nothing) and starts a fresh block.
    fn send_block(&mut self) -> std::io::Result<()> {
        if self.buf.n_rows() == 0 {
            return Ok(());
        }
        let fresh = match self.spent.try_recv() {
            Ok(mut store) => {
                store.clear();
                store
            }
            Err(_) => RowStore::new(),
        };
        let full = std::mem::replace(&mut self.buf, fresh);
        self.send(Part::Block(full))
    }

    fn send(&self, part: Part) -> std::io::Result<()> {
        let parts = self.parts.as_ref().ok_or_else(stopped)?;
        parts.send(part).map_err(|_| stopped())
    }

    /// Ends the training rows: the rows pushed from now on are the held-out rows (LightGCN's
    /// test items, one row per training row), written as their own blocks.
    pub fn begin_held_out(&mut self) -> std::io::Result<()> {
        if self.held_out {
            return Err(std::io::Error::other(
                "the held-out rows have begun already",
            ));
        }
        self.held_out = true;
        self.send_block()?;
        self.send(Part::HeldOut)
    }
}

/// What the writer's thread counted and wrote.
struct Written {
    /// The blocks since the held-out rows began (else every block), and the offset after them.
    blocks: Vec<Block>,
    at: u64,
    train_blocks: Option<Vec<Block>>,
    tally: stats::Tally,
    /// Each id's and each class's summed `|value|` over the training rows (the frequency
    /// section), in row order as the whole-read pack sums them.
    ids: KeySums<f64>,
    classes: KeySums<f64>,
}

/// The writer's thread: each block in turn counted (training rows only: the statistics and
/// frequencies are the training rows', as a pack of the source read whole counts them),
/// encoded and written to `w` from offset `at`, then handed back through `spent`.
fn count_and_write<W: Write>(
    w: &mut W,
    at: u64,
    parts: Receiver<Part>,
    spent: Sender<RowStore>,
) -> std::io::Result<Written> {
    let mut out = Written {
        blocks: Vec::new(),
        at,
        train_blocks: None,
        tally: stats::Tally::new(0),
        ids: KeySums::new(),
        classes: KeySums::new(),
    };
    for part in parts {
        let store = match part {
            Part::Block(store) => store,
            Part::HeldOut => {
                out.train_blocks = Some(std::mem::take(&mut out.blocks));
                continue;
            }
        };
        if out.train_blocks.is_none() {
            out.tally.add_rows(&store);
            out.ids.add_magnitudes(&store.ids, &store.values);
            (out.classes).add_magnitudes(&store.targets, &store.target_weights);
        }
        let (bytes, block) = encode_block(&store, 0..store.n_rows(), out.at);
        w.write_all(&bytes)?;
        out.at += bytes.len() as u64;
        out.blocks.push(block);
        // The caller may have finished: a store it no longer takes is dropped.
        let _ = spent.send(store);
    }
    Ok(out)
}

/// Packs rows streamed by `fill` into `out`, in memory bounded by a few blocks, the width (or
/// the data's size, when an id claims more: [`KeySums`]) and [`stats::SAMPLE_ROWS`] (not by the
/// number of rows), atomically as [`super::write::pack`]. `fill` runs on the caller's thread;
/// the blocks are counted and written on another. An error `fill` returns (a bad source line)
/// is returned as it is, with no output left.
pub fn pack_rows(
    header: StreamHeader,
    out: &Path,
    options: PackOptions,
    fill: impl FnOnce(&mut RowSink) -> Result<(), DataError>,
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
        let (parts_tx, parts) = std::sync::mpsc::sync_channel(BLOCKS_IN_FLIGHT);
        let (spent_tx, spent) = std::sync::mpsc::channel();
        let mut sink = RowSink {
            extent: header.extent,
            block_rows: options.block_rows as usize,
            buf: RowStore::new(),
            parts: Some(parts_tx),
            spent,
            n_rows: 0,
            held_out: false,
            width: header.width,
            n_classes: header.n_classes,
            skipped_lines: 0,
            late_notes: Vec::new(),
        };
        let to_writer = &mut *w;
        let (filled, counted) = std::thread::scope(|scope| {
            let writer = scope
                .spawn(move || count_and_write(to_writer, PRELUDE_BYTES as u64, parts, spent_tx));
            let filled = fill(&mut sink).map(|()| sink.send_block());
            // Closed, so the writer ends once it has taken what was sent.
            sink.parts = None;
            let counted = writer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (filled, counted)
        });
        // A failed write is the writer's error (the sink saw only that it stopped); else the
        // rows' own error (the source's file and line) is returned as it is.
        let counted = counted?;
        match filled {
            Err(e) => {
                failed = Some(e);
                Err(std::io::Error::other("the rows failed"))
            }
            Ok(sent) => {
                sent?;
                written = Some(finish(&header, &options, sink, counted, w)?);
                Ok(())
            }
        }
    })
    .map_err(|e| failed.take().unwrap_or_else(|| io(e)))?;
    Ok(written.expect("written when the file is"))
}

/// The metadata of the rows `sink` took and the writer `counted`, written after the blocks.
fn finish<W: Write + std::io::Seek>(
    header: &StreamHeader,
    options: &PackOptions,
    sink: RowSink,
    counted: Written,
    w: &mut W,
) -> std::io::Result<PackMeta> {
    let Written {
        blocks: last,
        at,
        train_blocks,
        tally,
        ids,
        classes,
    } = counted;
    let (width, n_classes) = (sink.width, sink.n_classes);
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
        skipped_lines: sink.skipped_lines,
        notes: [header.notes.clone(), sink.late_notes].concat(),
    };
    let frequencies = || (ids.into_dense(width), classes.into_dense(n_classes));
    finish_file(w, &mut meta, at, frequencies)?;
    Ok(meta)
}
