//! The `blocks` shuffle over several streams (`data.shuffle_streams` = S > 1), so that each rank
//! of a run reads only its own share of the file's blocks and the run is still the single
//! process's. The file's blocks are cut into S contiguous spans, one per stream, fixed for the
//! run; each stream walks its span in seeded passes of its own (its blocks permuted, then the
//! rows within windows: an [`EpochBatches`] over the span), one pass following the next without
//! a break. Every batch of `n` rows takes stream `s`'s share, its rows `⌈n·s/S⌉..⌈n·(s+1)/S⌉`,
//! in stream order, so a batch holds the same rows in the same order whatever the number of
//! ranks; under N ranks (N dividing S) rank `r`'s part of it
//! (`widebag_collective::partition::local_rows`, `⌈n·r/N⌉..⌈n·(r+1)/N⌉`) is exactly the shares
//! of streams `r·S/N..(r+1)·S/N`, and a rank reads no other stream.
//!
//! Every batch is whole (no short batch at an epoch's end: each stream runs into its next pass),
//! and every row of a stream is taken once per pass of it. The position a checkpoint keeps is
//! the rows taken (as an epoch of the training rows and a row within it); a resumed source finds
//! each stream's pass and row from it without reading a row.

use std::ops::Range;
use std::sync::Arc;

use widebag_collective::partition::local_rows as share;
use widebag_csr::CsrBatch;

use crate::batches::epochs::{DataPosition, EpochBatches, Shuffle, order_bytes_over};
use crate::batches::train_rows::TrainRows;
use crate::error::DataError;
use crate::rng::hash2;

/// The `blocks` shuffle over S streams, each read only once a batch's part asks for it.
#[derive(Clone)]
pub struct Streams {
    data: Arc<TrainRows>,
    seed: u64,
    shuffle: Shuffle,
    /// Each stream's places in the file (whole blocks but at the file's end).
    spans: Vec<Range<usize>>,
    /// Each stream's walk, made at its first read.
    walks: Vec<Option<EpochBatches>>,
    /// Rows taken by every batch so far (all streams).
    taken: u64,
    /// The rows of every batch (0 before the first).
    batch_rows: usize,
}

impl Streams {
    /// The streams of `shuffle.streams` over `data`'s blocks of `shuffle.block_rows`; an error
    /// naming `data.shuffle_streams` when a stream would hold no training row.
    pub fn new(data: Arc<TrainRows>, seed: u64, shuffle: Shuffle) -> Result<Self, DataError> {
        let n_streams = shuffle.streams.max(1);
        let per = shuffle.block_rows.max(1);
        let n_blocks = data.n_all().div_ceil(per);
        let spans: Vec<Range<usize>> = (0..n_streams)
            .map(|s| {
                let b = share(n_blocks, s, n_streams);
                (b.start * per).min(data.n_all())..(b.end * per).min(data.n_all())
            })
            .collect();
        if let Some(s) = spans
            .iter()
            .position(|r| r.len() == data.held_in(r.clone()))
        {
            return Err(DataError::InvalidSpec {
                key: "data.shuffle_streams",
                message: format!(
                    "stream {s} of {n_streams} would hold no training row: {} blocks of {per} \
                     rows ({} training rows) need fewer streams or smaller blocks \
                     (data.shuffle_block_rows)",
                    n_blocks,
                    data.n_rows()
                ),
            });
        }
        Ok(Self {
            walks: vec![None; n_streams],
            data,
            seed,
            shuffle,
            spans,
            taken: 0,
            batch_rows: 0,
        })
    }

    fn n_streams(&self) -> usize {
        self.spans.len()
    }

    /// Stream `s`'s walk, made (and moved to where the batches so far left it) at its first read.
    fn walk(&mut self, s: usize, batch_rows: usize) -> &mut EpochBatches {
        if self.walks[s].is_none() {
            let seed = hash2(self.seed ^ 0x5742_ea35_0000_0000, s as u64);
            let mut w = EpochBatches::over(
                Arc::clone(&self.data),
                self.spans[s].clone(),
                seed,
                self.shuffle,
            );
            let batches = self.taken / batch_rows as u64;
            let rows = batches * share(batch_rows, s, self.n_streams()).len() as u64;
            let len = w.n_rows() as u64;
            w.seek(rows / len, (rows % len) as usize);
            self.walks[s] = Some(w);
        }
        self.walks[s].as_mut().expect("made above")
    }

    /// Rows `part(n)` of the next batch of `n` rows, built from the streams whose shares they
    /// are, and `n`. An error when `part(n)` cuts a stream's share (a number of ranks that does
    /// not divide the streams) or the batch size changes within a run.
    pub fn next_batch_part(
        &mut self,
        batch_size: usize,
        part: impl Fn(usize) -> Range<usize>,
    ) -> Result<(CsrBatch, usize), DataError> {
        let n = batch_size.max(1);
        if self.batch_rows == 0 {
            if !self.taken.is_multiple_of(n as u64) {
                return Err(self.refused(format!(
                    "a saved position after {} rows is not a whole number of batches of {n}",
                    self.taken
                )));
            }
            self.batch_rows = n;
        } else if self.batch_rows != n {
            return Err(self.refused(format!(
                "batches of {n} rows after batches of {}: streams take batches of one size",
                self.batch_rows
            )));
        }
        let mine = part(n);
        let mut rows = Vec::with_capacity(mine.len());
        for s in 0..self.n_streams() {
            let sh = share(n, s, self.n_streams());
            if sh.is_empty() || sh.end <= mine.start || sh.start >= mine.end {
                continue;
            }
            if sh.start < mine.start || sh.end > mine.end {
                return Err(self.refused(format!(
                    "rows {mine:?} of a batch of {n} cut stream {s}'s share {sh:?}: the number \
                     of ranks must divide the {} streams",
                    self.n_streams()
                )));
            }
            rows.extend(self.walk(s, n).take_rows(sh.len()));
        }
        self.taken += n as u64;
        Ok((self.data.batch(&rows)?, n))
    }

    fn refused(&self, message: String) -> DataError {
        DataError::InvalidSpec {
            key: "data.shuffle_streams",
            message,
        }
    }

    /// Epochs of the training rows started so far, counting the current one.
    pub fn epoch(&self) -> u64 {
        self.taken / self.data.n_rows().max(1) as u64 + 1
    }

    /// The rows taken, as an epoch of the training rows and the row within it.
    pub fn position(&self) -> DataPosition {
        let n = self.data.n_rows().max(1) as u64;
        DataPosition::Rows {
            epoch: self.taken / n,
            next: (self.taken % n) as usize,
        }
    }

    /// Continues after the rows `epoch` and `next` name; each stream finds its place at its
    /// next read, from the batches' size.
    pub fn seek(&mut self, epoch: u64, next: usize) {
        self.taken = epoch * self.data.n_rows() as u64 + next as u64;
        self.walks.iter_mut().for_each(|w| *w = None);
        self.batch_rows = 0;
    }

    /// Bytes the streams' orders hold at most, every stream read (each its block permutation
    /// and its largest window's rows).
    pub fn order_bytes(&self) -> u64 {
        (self.spans.iter())
            .map(|span| {
                let n_rows = span.len() - self.data.held_in(span.clone());
                order_bytes_over(&self.shuffle, span, n_rows)
            })
            .sum()
    }

    /// The rows the streams walk.
    pub(crate) fn data(&self) -> &Arc<TrainRows> {
        &self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batches::epochs::tests::{blocks, rows};

    fn streams(n_streams: usize) -> Shuffle {
        Shuffle {
            streams: n_streams,
            ..blocks(4, 8)
        }
    }

    /// The rows (row `r`'s class is `r`) of the next part.
    fn part(s: &mut Streams, n: usize, rank: usize, ranks: usize) -> Vec<u32> {
        let (b, got) = s.next_batch_part(n, |n| share(n, rank, ranks)).unwrap();
        assert_eq!(got, n);
        b.targets().classes.clone()
    }

    #[test]
    fn a_batch_is_the_same_for_any_number_of_ranks_and_a_rank_reads_only_its_streams() {
        let data = rows(103, vec![0, 7, 8, 50, 101]);
        let one = Streams::new(Arc::clone(&data), 4, streams(6)).unwrap();
        for ranks in [1, 2, 3, 6] {
            let mut whole = one.clone();
            let mut parts: Vec<Streams> = (0..ranks).map(|_| one.clone()).collect();
            for step in 0..40 {
                let want = part(&mut whole, 10, 0, 1);
                assert_eq!(want.len(), 10);
                let mut got = Vec::new();
                for (r, p) in parts.iter_mut().enumerate() {
                    let mine = part(p, 10, r, ranks);
                    assert_eq!(mine.len(), share(10, r, ranks).len());
                    // Rank r's rows lie in its streams' spans alone.
                    let spans = &one.spans[r * 6 / ranks..(r + 1) * 6 / ranks];
                    for &row in &mine {
                        let row = row as usize;
                        assert!(spans.iter().any(|s| s.contains(&row)), "rank {r}: {row}");
                    }
                    got.extend(mine);
                }
                assert_eq!(got, want, "{ranks} ranks, step {step}");
                assert!(!data.held().contains(&(want[0] as usize)));
            }
            // The streams other ranks read were never walked here.
            if ranks > 1 {
                assert!(parts[0].walks[6 / ranks..].iter().all(Option::is_none));
            }
        }
    }

    #[test]
    fn every_row_of_a_stream_is_taken_once_per_pass_of_it() {
        let data = rows(61, vec![3, 30]);
        let mut s = Streams::new(Arc::clone(&data), 2, streams(3)).unwrap();
        let mut taken: Vec<Vec<u32>> = vec![Vec::new(); 3];
        for _ in 0..60 {
            let batch = part(&mut s, 9, 0, 1);
            for (k, t) in taken.iter_mut().enumerate() {
                t.extend(&batch[share(9, k, 3)]);
            }
        }
        for (k, t) in taken.iter().enumerate() {
            let span = s.spans[k].clone();
            let mine: Vec<u32> = (data.train_rows_in(span)).map(|r| r as u32).collect();
            let passes: Vec<Vec<u32>> = t.chunks(mine.len()).map(<[u32]>::to_vec).collect();
            for pass in &passes[..passes.len() - 1] {
                let mut sorted = pass.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, mine, "stream {k}");
            }
            assert_ne!(passes[0], passes[1], "stream {k}: each pass is reshuffled");
        }
        assert_eq!(s.epoch(), 60 * 9 / 59 + 1);
    }

    #[test]
    fn a_sought_source_continues_as_the_uninterrupted_one_on_every_rank() {
        let data = rows(90, vec![5, 6, 44]);
        let fresh = Streams::new(data, 8, streams(4)).unwrap();
        let mut whole = fresh.clone();
        for step in 0..30 {
            let at = whole.position();
            let want = part(&mut whole, 7, 0, 1);
            let mut got = Vec::new();
            for rank in 0..2 {
                let mut resumed = fresh.clone();
                let DataPosition::Rows { epoch, next } = at else {
                    unreachable!()
                };
                resumed.seek(epoch, next);
                got.extend(part(&mut resumed, 7, rank, 2));
                assert_eq!(resumed.position(), whole.position());
            }
            assert_eq!(got, want, "step {step}");
        }
    }

    #[test]
    fn streams_that_cannot_be_read_as_asked_are_refused_by_key() {
        let key = |e: DataError| match e {
            DataError::InvalidSpec { key, message } => (key, message),
            e => panic!("{e}"),
        };
        // 10 rows in blocks of 4: three blocks for four streams.
        let (k, m) = key(Streams::new(rows(10, vec![]), 1, streams(4)).err().unwrap());
        assert_eq!(k, "data.shuffle_streams");
        assert!(m.contains("no training row"), "{m}");
        let mut s = Streams::new(rows(40, vec![]), 1, streams(4)).unwrap();
        let (k, m) = key(s.next_batch_part(8, |n| share(n, 0, 3)).err().unwrap());
        assert_eq!(k, "data.shuffle_streams");
        assert!(m.contains("must divide"), "{m}");
        s.next_batch_part(8, |n| 0..n).unwrap();
        let (_, m) = key(s.next_batch_part(6, |n| 0..n).err().unwrap());
        assert!(m.contains("one size"), "{m}");
        s.seek(0, 3);
        let (_, m) = key(s.next_batch_part(8, |n| 0..n).err().unwrap());
        assert!(m.contains("whole number of batches"), "{m}");
    }
}
