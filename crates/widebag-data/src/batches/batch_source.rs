//! Where training batches come from: the synthetic stream, a data file's rows in shuffled
//! epochs ([`EpochBatches`]), or its blocks over several streams ([`Streams`]); what each holds
//! in host memory, and one rank's part of each batch read alone.

use std::sync::Arc;

use widebag_csr::CsrBatch;
use widebag_kinds::ShuffleMode;

use crate::batches::epochs::{DataPosition, EpochBatches, Shuffle};
use crate::batches::streams::Streams;
use crate::batches::train_rows::TrainRows;
use crate::error::DataError;
use crate::synthetic::SyntheticStream;

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

impl Resident {
    /// A data file's rows (on the heap or mapped, with their maps) and an order of `order_bytes`.
    fn of(data: &TrainRows, order_bytes: u64) -> Self {
        let (rows_bytes, maps_bytes) = data.resident_bytes();
        Self {
            rows_bytes,
            order_bytes,
            maps_bytes,
        }
    }
}

/// Where training batches come from.
#[derive(Clone)]
pub enum BatchSource {
    Synthetic(SyntheticStream),
    Rows(EpochBatches),
    Streams(Streams),
}

impl BatchSource {
    /// A data file's training rows as `shuffle` walks them: in epochs, or (`blocks` over more
    /// than one stream) in streams; an error naming `data.shuffle_streams` when a stream would
    /// hold no training row.
    pub fn rows(data: Arc<TrainRows>, seed: u64, shuffle: Shuffle) -> Result<Self, DataError> {
        Ok(match (shuffle.mode, shuffle.streams) {
            (ShuffleMode::Blocks, 2..) => Self::Streams(Streams::new(data, seed, shuffle)?),
            _ => Self::Rows(EpochBatches::new(data, seed, shuffle)),
        })
    }

    /// What it holds in host memory.
    pub fn resident(&self) -> Resident {
        match self {
            BatchSource::Synthetic(s) => Resident {
                maps_bytes: s.heap_bytes(),
                ..Resident::default()
            },
            BatchSource::Rows(r) => Resident::of(r.data(), r.order_bytes()),
            BatchSource::Streams(s) => Resident::of(s.data(), s.order_bytes()),
        }
    }

    pub fn position(&self) -> DataPosition {
        match self {
            BatchSource::Synthetic(s) => DataPosition::Synthetic {
                next_row: s.next_row(),
            },
            BatchSource::Rows(r) => r.position(),
            BatchSource::Streams(s) => s.position(),
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
            (BatchSource::Streams(s), DataPosition::Rows { epoch, next }) => {
                s.seek(epoch, next);
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
            BatchSource::Streams(s) => s.next_batch_part(batch_size, |n| 0..n).map(|(b, _)| b),
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
            BatchSource::Streams(s) => s.next_batch_part(batch_size, part),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batches::epochs::tests::{blocks, rows};

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
