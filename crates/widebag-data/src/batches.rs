//! Batches for training: the synthetic stream, or a data file's training rows walked in seeded
//! shuffled epochs (every row once per epoch; the last batch of an epoch may be short, as
//! PyTorch's `DataLoader(shuffle=True, drop_last=False)`).
//!
//! Two shuffles ([`ShuffleMode`]): `rows`, one permutation of every row; `blocks`, a
//! permutation of the blocks (runs of `block_rows` rows, in memory or packed alike) cut into
//! windows of consecutive shuffled blocks, each window's rows permuted in turn. `blocks` holds
//! one window's indices and reads the file a window at a time, so it trains on data larger than
//! memory; both are fixed by the seed and the epoch, and a position (epoch, row of the epoch) is
//! found again without reading any row, so a resumed run sees the batches it would have.

use std::sync::Arc;

use widebag_csr::CsrBatch;
pub use widebag_kinds::ShuffleMode;

use crate::rng::{SplitMix64, hash2};
use crate::train_rows::TrainRows;
use crate::{DataError, SyntheticStream};

/// How an epoch's order is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shuffle {
    pub mode: ShuffleMode,
    /// `blocks`: rows in a block (the file's rows `b·block_rows..(b+1)·block_rows`).
    pub block_rows: usize,
    /// `blocks`: rows in a window (whole blocks, at least one).
    pub window_rows: usize,
}

impl Default for Shuffle {
    fn default() -> Self {
        Self {
            mode: ShuffleMode::Rows,
            block_rows: 4096,
            window_rows: 65_536,
        }
    }
}

fn permute<T>(items: &mut [T], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Shuffled epochs over a dataset's training rows.
#[derive(Clone)]
pub struct EpochBatches {
    data: Arc<TrainRows>,
    seed: u64,
    shuffle: Shuffle,
    epoch: u64,
    /// Rows of the epoch's order from `base` on (`rows`: all of them; `blocks`: one window's).
    order: Vec<usize>,
    base: usize,
    /// `blocks`: the epoch's block permutation and the next window to draw.
    blocks: Vec<usize>,
    window: usize,
    next: usize,
}

impl EpochBatches {
    pub fn new(data: Arc<TrainRows>, seed: u64, shuffle: Shuffle) -> Self {
        let mut me = Self {
            data,
            seed,
            shuffle,
            epoch: 0,
            order: Vec::new(),
            base: 0,
            blocks: Vec::new(),
            window: 0,
            next: 0,
        };
        me.start_epoch();
        me
    }

    fn block_rows(&self) -> usize {
        self.shuffle.block_rows.max(1)
    }

    fn blocks_per_window(&self) -> usize {
        (self.shuffle.window_rows / self.block_rows()).max(1)
    }

    /// Draws the epoch's order (`rows`) or block permutation (`blocks`), at its first row.
    fn start_epoch(&mut self) {
        let mut rng = SplitMix64::new(hash2(self.seed, self.epoch));
        (self.base, self.next, self.window) = (0, 0, 0);
        match self.shuffle.mode {
            ShuffleMode::Rows => {
                self.order = self.data.train_rows_in(0..self.data.n_all()).collect();
                permute(&mut self.order, &mut rng);
            }
            ShuffleMode::Blocks => {
                let n_blocks = self.data.n_all().div_ceil(self.block_rows());
                self.blocks = (0..n_blocks).collect();
                permute(&mut self.blocks, &mut rng);
                self.order.clear();
            }
        }
    }

    /// The blocks of window `w` of the epoch.
    fn window_blocks(&self, w: usize) -> &[usize] {
        let per = self.blocks_per_window();
        let start = (w * per).min(self.blocks.len());
        &self.blocks[start..(start + per).min(self.blocks.len())]
    }

    /// Training rows in block `b`.
    fn block_range(&self, b: usize) -> std::ops::Range<usize> {
        let per = self.block_rows();
        b * per..((b + 1) * per).min(self.data.n_all())
    }

    /// `blocks`: moves `base` past the current window and draws the next one's order.
    fn next_window(&mut self) {
        self.base += self.order.len();
        let rows: Vec<usize> = self
            .window_blocks(self.window)
            .iter()
            .flat_map(|&b| self.data.train_rows_in(self.block_range(b)))
            .collect();
        self.order = rows;
        let salt = hash2(self.seed ^ 0xb10c_5a1f, self.epoch);
        permute(
            &mut self.order,
            &mut SplitMix64::new(hash2(salt, self.window as u64)),
        );
        self.window += 1;
    }

    /// Epochs started so far, counting the current one.
    pub fn epoch(&self) -> u64 {
        self.epoch + 1
    }

    /// The next `batch_size` rows of the current epoch (fewer at its end).
    pub fn next_batch(&mut self, batch_size: usize) -> Result<CsrBatch, DataError> {
        self.next_batch_part(batch_size, |n| 0..n).map(|(b, _)| b)
    }

    /// Places in the file of the epoch's rows `range` (within the epoch's rows), drawing
    /// windows as needed.
    fn take(&mut self, range: std::ops::Range<usize>) -> Vec<usize> {
        let mut out = Vec::with_capacity(range.len());
        for at in range {
            while at >= self.base + self.order.len() {
                self.next_window();
            }
            out.push(self.order[at - self.base]);
        }
        out
    }

    /// Rows `part(n)` of the next batch of `n` rows (as [`Self::next_batch`] draws it), built
    /// alone, and `n`: one rank's share of a global batch, read without the others'.
    pub fn next_batch_part(
        &mut self,
        batch_size: usize,
        part: impl Fn(usize) -> std::ops::Range<usize>,
    ) -> Result<(CsrBatch, usize), DataError> {
        let n_rows = self.data.n_rows();
        if self.next >= n_rows {
            self.epoch += 1;
            self.start_epoch();
        }
        let end = (self.next + batch_size).min(n_rows);
        let n = end - self.next;
        let mine = part(n);
        let rows = self.take(self.next + mine.start.min(n)..self.next + mine.end.min(n));
        self.next = end;
        Ok((self.data.batch(&rows)?, n))
    }

    /// Row indices held now: one per row of the epoch (`rows`) or of one window (`blocks`).
    pub fn order_rows(&self) -> usize {
        self.order.len()
    }

    /// Bytes the epoch's order holds at most: every training row's index (`rows`), or the
    /// block permutation and the largest window's rows (`blocks`).
    pub fn order_bytes(&self) -> u64 {
        let word = size_of::<usize>() as u64;
        match self.shuffle.mode {
            ShuffleMode::Rows => self.data.n_rows() as u64 * word,
            ShuffleMode::Blocks => {
                let n_blocks = self.data.n_all().div_ceil(self.block_rows());
                let window = (self.blocks_per_window() * self.block_rows()).min(self.data.n_all());
                (n_blocks + window) as u64 * word
            }
        }
    }
}

/// What a batch source holds in host memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resident {
    /// Rows on the heap (a file read whole).
    pub rows_bytes: u64,
    /// The epoch's order.
    pub order_bytes: u64,
    /// Maps beside the rows: renumbering, a packed file's block table, the synthetic
    /// generator's Zipf tables.
    pub maps_bytes: u64,
}

/// Where a batch source stands: what a checkpoint keeps to continue the same sequence of
/// batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataPosition {
    /// The synthetic stream's next row index.
    Synthetic { next_row: u64 },
    /// The 0-based epoch under way and the next row of its shuffled order.
    Rows { epoch: u64, next: usize },
}

impl EpochBatches {
    pub fn position(&self) -> DataPosition {
        DataPosition::Rows {
            epoch: self.epoch,
            next: self.next,
        }
    }

    /// Continues from `epoch` (0-based) at row `next` of its shuffled order. `blocks` finds the
    /// window holding `next` from the blocks' row counts, without reading a row.
    pub fn seek(&mut self, epoch: u64, next: usize) {
        self.epoch = epoch;
        self.start_epoch();
        let next = next.min(self.data.n_rows());
        if self.shuffle.mode == ShuffleMode::Blocks {
            let mut skipped = 0;
            while !self.window_blocks(self.window).is_empty() {
                let rows: usize = (self.window_blocks(self.window).iter())
                    .map(|&b| {
                        let r = self.block_range(b);
                        r.len() - self.data.held_in(r)
                    })
                    .sum();
                if skipped + rows > next {
                    break;
                }
                skipped += rows;
                self.window += 1;
            }
            self.order.clear();
            self.base = skipped;
            self.next_window();
        }
        self.next = next;
    }
}

/// Where training batches come from.
#[derive(Clone)]
pub enum BatchSource {
    Synthetic(SyntheticStream),
    Rows(EpochBatches),
}

impl BatchSource {
    /// What it holds in host memory.
    pub fn resident(&self) -> Resident {
        match self {
            BatchSource::Synthetic(s) => Resident {
                maps_bytes: s.heap_bytes(),
                ..Resident::default()
            },
            BatchSource::Rows(r) => {
                let (rows_bytes, maps_bytes) = r.data.resident_bytes();
                Resident {
                    rows_bytes,
                    order_bytes: r.order_bytes(),
                    maps_bytes,
                }
            }
        }
    }

    pub fn position(&self) -> DataPosition {
        match self {
            BatchSource::Synthetic(s) => DataPosition::Synthetic {
                next_row: s.next_row(),
            },
            BatchSource::Rows(r) => r.position(),
        }
    }

    /// Continues from `position`; an error when it belongs to the other kind of source.
    pub fn seek(&mut self, position: DataPosition) -> Result<(), DataError> {
        match (self, position) {
            (BatchSource::Synthetic(s), DataPosition::Synthetic { next_row }) => {
                s.seek(next_row);
                Ok(())
            }
            (BatchSource::Rows(r), DataPosition::Rows { epoch, next }) => {
                r.seek(epoch, next);
                Ok(())
            }
            (_, p) => Err(DataError::InvalidSpec {
                key: "data",
                message: format!("a saved data position {p:?} does not fit this run's data"),
            }),
        }
    }

    pub fn next_batch(&mut self, batch_size: usize) -> Result<CsrBatch, DataError> {
        match self {
            BatchSource::Synthetic(s) => s.next_batch(batch_size),
            BatchSource::Rows(r) => r.next_batch(batch_size),
        }
    }

    /// Rows `part(n)` of the next batch (of `n` rows), built without the others, and `n`; the
    /// source moves past the whole batch. A rank of a multi-process run reads its rows of each
    /// global batch this way: the ranks' parts are disjoint and together the batch
    /// [`Self::next_batch`] would give, whatever the number of ranks.
    pub fn next_batch_part(
        &mut self,
        batch_size: usize,
        part: impl Fn(usize) -> std::ops::Range<usize>,
    ) -> Result<(CsrBatch, usize), DataError> {
        match self {
            BatchSource::Synthetic(s) => {
                let first = s.next_row();
                let mine = part(batch_size);
                let b = s.batch_at(first + mine.start as u64, mine.len())?;
                s.seek(first + batch_size as u64);
                Ok((b, batch_size))
            }
            BatchSource::Rows(r) => r.next_batch_part(batch_size, part),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dataset, RowStore};

    /// `n` rows, row `r` holding id `r` and class `r`.
    fn rows(n: u32, held: Vec<usize>) -> Arc<TrainRows> {
        let mut rows = RowStore::new();
        for r in 0..n {
            rows.push(&[r, (r + 3) % n], &[1.0, 2.0], &[r], &[1.0]);
        }
        let data = Dataset {
            source: "mem".into(),
            width: n as usize,
            n_classes: n as usize,
            rows,
            skipped_lines: 0,
            notes: vec![],
        };
        Arc::new(TrainRows::memory(data).hold_out(held))
    }

    fn blocks(block_rows: usize, window_rows: usize) -> Shuffle {
        Shuffle {
            mode: ShuffleMode::Blocks,
            block_rows,
            window_rows,
        }
    }

    /// The class of each row of the next batch (row `r`'s class is `r`).
    fn classes(b: &mut EpochBatches, n: usize) -> Vec<u32> {
        b.next_batch(n).unwrap().targets().classes.clone()
    }

    #[test]
    fn every_row_once_per_epoch_then_reshuffled() {
        for shuffle in [Shuffle::default(), blocks(3, 6)] {
            let mut b = EpochBatches::new(rows(10, vec![]), 3, shuffle);
            let mut first: Vec<u32> = Vec::new();
            for want in [4, 4, 2] {
                let got = classes(&mut b, 4);
                assert_eq!(got.len(), want);
                first.extend(got);
            }
            let order = first.clone();
            first.sort_unstable();
            assert_eq!(first, (0..10).collect::<Vec<u32>>(), "{shuffle:?}");
            assert_eq!(b.epoch(), 1);
            let again: Vec<u32> = (0..3).flat_map(|_| classes(&mut b, 4)).collect();
            assert_eq!(b.epoch(), 2);
            assert_ne!(again, order, "{shuffle:?}: epoch 2 is reshuffled");
        }
    }

    #[test]
    fn blocks_shuffle_holds_one_window_and_keeps_its_blocks_together() {
        let mut b = EpochBatches::new(rows(100, vec![]), 5, blocks(10, 20));
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.extend(classes(&mut b, 20));
            assert!(b.order_rows() <= 20, "one window of two blocks");
        }
        // Each run of 20 rows is two whole blocks of 10.
        for w in seen.chunks(20) {
            let mut bl: Vec<u32> = w.iter().map(|r| r / 10).collect();
            bl.sort_unstable();
            bl.dedup();
            assert_eq!(bl.len(), 2, "{w:?}");
        }
        let mut all = seen.clone();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<u32>>());
        assert_ne!(seen, (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn held_rows_are_never_trained_on() {
        let held = vec![0, 4, 5, 6, 19];
        for shuffle in [Shuffle::default(), blocks(4, 8)] {
            let mut b = EpochBatches::new(rows(20, held.clone()), 1, shuffle);
            let mut got: Vec<u32> = (0..5).flat_map(|_| classes(&mut b, 3)).collect();
            got.sort_unstable();
            let want: Vec<u32> = (0..20).filter(|r| !held.contains(&(*r as usize))).collect();
            assert_eq!(got, want, "{shuffle:?}");
        }
    }

    #[test]
    fn a_source_sought_to_a_position_continues_as_the_uninterrupted_one() {
        for shuffle in [Shuffle::default(), blocks(4, 8), blocks(4, 1)] {
            let data = rows(37, vec![3, 9, 10, 11, 30]);
            let mut whole = BatchSource::Rows(EpochBatches::new(Arc::clone(&data), 9, shuffle));
            for step in 0..20 {
                let at = whole.position();
                let mut resumed =
                    BatchSource::Rows(EpochBatches::new(Arc::clone(&data), 9, shuffle));
                resumed.seek(at).unwrap();
                let (a, b) = (whole.next_batch(5).unwrap(), resumed.next_batch(5).unwrap());
                assert_eq!(a.targets(), b.targets(), "{shuffle:?} step {step}");
                assert_eq!(whole.position(), resumed.position());
            }
        }
    }

    #[test]
    fn the_parts_of_a_batch_are_the_batch() {
        for shuffle in [Shuffle::default(), blocks(2, 4)] {
            let mut whole = BatchSource::Rows(EpochBatches::new(rows(10, vec![]), 7, shuffle));
            let mut parts = [whole.clone(), whole.clone(), whole.clone()];
            // Three epochs of batches of 4 (the last of each epoch short), in three parts.
            for _ in 0..9 {
                let b = whole.next_batch(4).unwrap();
                let mut got = Vec::new();
                for (k, p) in parts.iter_mut().enumerate() {
                    let (part, n) = p
                        .next_batch_part(4, |n| (n * k / 3)..(n * (k + 1) / 3))
                        .unwrap();
                    assert_eq!(n, b.n_rows());
                    got.push(part);
                }
                let rows: Vec<usize> = got.iter().map(|p| p.n_rows()).collect();
                assert_eq!(rows.iter().sum::<usize>(), b.n_rows());
                let mut at = 0;
                for (p, &n) in got.iter().zip(&rows) {
                    let want = b.row_range(at..at + n);
                    assert_eq!(
                        (p.row_ptr(), p.ids(), p.values()),
                        (want.row_ptr(), want.ids(), want.values())
                    );
                    assert_eq!(p.targets(), want.targets());
                    at += n;
                }
                assert_eq!(parts[0].position(), whole.position());
            }
        }
    }
}
