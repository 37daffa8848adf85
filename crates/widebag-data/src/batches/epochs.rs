//! Batches for training from a data file: its training rows walked in seeded shuffled epochs
//! (every row once per epoch; the last batch of an epoch may be short, as PyTorch's
//! `DataLoader(shuffle=True, drop_last=False)`).
//!
//! Two shuffles ([`ShuffleMode`]): `rows`, one permutation of every row; `blocks`, a
//! permutation of the blocks (runs of `block_rows` rows, in memory or packed alike) cut into
//! windows of consecutive shuffled blocks, each window's rows permuted in turn. `blocks` holds
//! one window's indices and reads the file a window at a time, so it trains on data larger than
//! memory; both are fixed by the seed and the epoch, and a position (epoch, row of the epoch) is
//! found again without reading any row, so a resumed run sees the batches it would have.
//! `blocks` over several streams (`Shuffle::streams`) is [`super::streams`]: each stream an
//! [`EpochBatches`] over its own span of the file.

use std::sync::Arc;

use widebag_csr::CsrBatch;
use widebag_kinds::ShuffleMode;

use crate::batches::train_rows::TrainRows;
use crate::error::DataError;
use crate::rng::{SplitMix64, hash2};

/// How an epoch's order is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shuffle {
    pub mode: ShuffleMode,
    /// `blocks`: rows in a block (the file's rows `b·block_rows..(b+1)·block_rows`).
    pub block_rows: usize,
    /// `blocks`: rows in a window (whole blocks, at least one).
    pub window_rows: usize,
    /// `blocks`: streams the file's blocks are cut into (1: one walk over every block; more:
    /// [`super::streams::Streams`], each rank of a run reading only its streams' blocks).
    pub streams: usize,
}

impl Default for Shuffle {
    fn default() -> Self {
        Self {
            mode: ShuffleMode::Rows,
            block_rows: 4096,
            window_rows: 65_536,
            streams: 1,
        }
    }
}

fn permute<T>(items: &mut [T], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Bytes an epoch's order over `span` (holding `n_rows` training rows) holds at most.
pub(crate) fn order_bytes_over(
    shuffle: &Shuffle,
    span: &std::ops::Range<usize>,
    n_rows: usize,
) -> u64 {
    let word = size_of::<usize>() as u64;
    match shuffle.mode {
        ShuffleMode::Rows => n_rows as u64 * word,
        ShuffleMode::Blocks => {
            let per = shuffle.block_rows.max(1);
            let n_blocks = span.end.div_ceil(per) - span.start / per;
            let window = ((shuffle.window_rows / per).max(1) * per).min(span.len());
            (n_blocks + window) as u64 * word
        }
    }
}

/// Shuffled epochs over a dataset's training rows.
#[derive(Clone)]
pub struct EpochBatches {
    data: Arc<TrainRows>,
    /// The places in the file walked (every row, or one stream's whole blocks).
    span: std::ops::Range<usize>,
    /// Training rows in `span`.
    n_rows: usize,
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
        let span = 0..data.n_all();
        Self::over(data, span, seed, shuffle)
    }

    /// Epochs over the rows of `span` alone (places in the file; whole blocks but at the end).
    pub(crate) fn over(
        data: Arc<TrainRows>,
        span: std::ops::Range<usize>,
        seed: u64,
        shuffle: Shuffle,
    ) -> Self {
        let n_rows = span.len() - data.held_in(span.clone());
        let mut me = Self {
            data,
            span,
            n_rows,
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
                self.order = self.data.train_rows_in(self.span.clone()).collect();
                permute(&mut self.order, &mut rng);
            }
            ShuffleMode::Blocks => {
                let per = self.block_rows();
                self.blocks = (self.span.start / per..self.span.end.div_ceil(per)).collect();
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
        (b * per).max(self.span.start)..((b + 1) * per).min(self.span.end)
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
        let n_rows = self.n_rows;
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

    /// The next `n` rows (places in the file), the epochs following one another without a
    /// break: one stream's share of a batch.
    pub(crate) fn take_rows(&mut self, n: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n && self.n_rows > 0 {
            if self.next >= self.n_rows {
                self.epoch += 1;
                self.start_epoch();
            }
            let m = (n - out.len()).min(self.n_rows - self.next);
            out.extend(self.take(self.next..self.next + m));
            self.next += m;
        }
        out
    }

    /// Training rows walked each epoch.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// The rows walked, as a batch source holds them.
    pub(crate) fn data(&self) -> &Arc<TrainRows> {
        &self.data
    }

    /// Row indices held now: one per row of the epoch (`rows`) or of one window (`blocks`).
    pub fn order_rows(&self) -> usize {
        self.order.len()
    }

    /// Bytes the epoch's order holds at most: every training row's index (`rows`), or the
    /// block permutation and the largest window's rows (`blocks`).
    pub fn order_bytes(&self) -> u64 {
        order_bytes_over(&self.shuffle, &self.span, self.n_rows)
    }
}

/// Where a batch source stands: what a checkpoint keeps to continue the same sequence of
/// batches (streams: the rows taken, as the epoch and the row within it).
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
        let next = next.min(self.n_rows);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dataset::{Dataset, RowStore};

    /// `n` rows, row `r` holding id `r` and class `r`.
    pub(crate) fn rows(n: u32, held: Vec<usize>) -> Arc<TrainRows> {
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

    pub(crate) fn blocks(block_rows: usize, window_rows: usize) -> Shuffle {
        Shuffle {
            mode: ShuffleMode::Blocks,
            block_rows,
            window_rows,
            streams: 1,
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
}
