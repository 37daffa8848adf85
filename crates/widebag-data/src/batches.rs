//! Batches for training: the synthetic stream, or a loaded dataset walked in seeded shuffled
//! epochs (every row once per epoch; the last batch of an epoch may be short, as PyTorch's
//! `DataLoader(shuffle=True, drop_last=False)`).

use std::sync::Arc;

use widebag_csr::CsrBatch;

use crate::rng::{SplitMix64, hash2};
use crate::{DataError, Dataset, SyntheticStream};

/// Shuffled epochs over a dataset's rows.
#[derive(Clone, Debug)]
pub struct EpochBatches {
    data: Arc<Dataset>,
    seed: u64,
    epoch: u64,
    order: Vec<usize>,
    next: usize,
}

impl EpochBatches {
    pub fn new(data: Arc<Dataset>, seed: u64) -> Self {
        let mut me = Self {
            data,
            seed,
            epoch: 0,
            order: Vec::new(),
            next: 0,
        };
        me.shuffle();
        me
    }

    fn shuffle(&mut self) {
        let n = self.data.n_rows();
        self.order = (0..n).collect();
        let mut rng = SplitMix64::new(hash2(self.seed, self.epoch));
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            self.order.swap(i, j);
        }
        self.next = 0;
    }

    /// Epochs started so far, counting the current one.
    pub fn epoch(&self) -> u64 {
        self.epoch + 1
    }

    /// The next `batch_size` rows of the current epoch (fewer at its end).
    pub fn next_batch(&mut self, batch_size: usize) -> Result<CsrBatch, DataError> {
        self.next_batch_part(batch_size, |n| 0..n).map(|(b, _)| b)
    }

    /// Rows `part(n)` of the next batch of `n` rows (as [`Self::next_batch`] draws it), built
    /// alone, and `n`: one rank's share of a global batch, read without the others'.
    pub fn next_batch_part(
        &mut self,
        batch_size: usize,
        part: impl Fn(usize) -> std::ops::Range<usize>,
    ) -> Result<(CsrBatch, usize), DataError> {
        if self.next >= self.order.len() {
            self.epoch += 1;
            self.shuffle();
        }
        let end = (self.next + batch_size).min(self.order.len());
        let n = end - self.next;
        let mine = part(n);
        let rows = &self.order[self.next + mine.start.min(n)..self.next + mine.end.min(n)];
        self.next = end;
        Ok((self.data.batch(rows)?, n))
    }
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

    /// Continues from `epoch` (0-based) at row `next` of its shuffled order.
    pub fn seek(&mut self, epoch: u64, next: usize) {
        self.epoch = epoch;
        self.shuffle();
        self.next = next.min(self.order.len());
    }
}

/// Where training batches come from.
#[derive(Clone)]
pub enum BatchSource {
    Synthetic(SyntheticStream),
    Rows(EpochBatches),
}

impl BatchSource {
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
    use crate::RowStore;

    #[test]
    fn every_row_once_per_epoch_then_reshuffled() {
        let mut rows = RowStore::new();
        for r in 0..10u32 {
            rows.push(&[r], &[1.0], &[r], &[1.0]);
        }
        let data = Arc::new(Dataset {
            source: "mem".into(),
            width: 10,
            n_classes: 10,
            rows,
            skipped_lines: 0,
            notes: vec![],
        });
        let mut b = EpochBatches::new(data, 3);
        let mut first: Vec<u32> = Vec::new();
        for want in [4, 4, 2] {
            let batch = b.next_batch(4).unwrap();
            assert_eq!(batch.n_rows(), want);
            first.extend(batch.unique_ids().iter().copied());
        }
        first.sort_unstable();
        assert_eq!(first, (0..10).collect::<Vec<u32>>());
        assert_eq!(b.epoch(), 1);
        b.next_batch(4).unwrap();
        assert_eq!(b.epoch(), 2);
    }

    #[test]
    fn the_parts_of_a_batch_are_the_batch() {
        let mut rows = RowStore::new();
        for r in 0..10u32 {
            rows.push(&[r, (r + 3) % 10], &[1.0, 2.0], &[r], &[1.0]);
        }
        let data = Arc::new(Dataset {
            source: "mem".into(),
            width: 10,
            n_classes: 10,
            rows,
            skipped_lines: 0,
            notes: vec![],
        });
        let mut whole = BatchSource::Rows(EpochBatches::new(data, 7));
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
