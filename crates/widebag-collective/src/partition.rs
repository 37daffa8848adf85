//! How a multi-process step divides its work: each rank's rows of a global batch (a contiguous,
//! disjoint part, so the union over ranks is the single process's batch, whatever order the
//! batches come in), each rank's block of output classes (the class-split output layer), each
//! rank's block of a buffer it reduces (and what an all-reduce sends), and one fused buffer for
//! the dense layers' gradients (one all-reduce per step, not one per tensor).

use std::ops::Range;

/// Which rank owns which rows of an `n_rows` table over `ranks` ranks: consecutive blocks of
/// `ceil(n_rows / ranks)` rows, the last possibly shorter or empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSharding {
    pub n_rows: usize,
    pub ranks: usize,
}

impl BlockSharding {
    pub fn new(n_rows: usize, ranks: usize) -> Self {
        Self {
            n_rows,
            ranks: ranks.max(1),
        }
    }

    /// Rows per block (the last block may hold fewer).
    pub fn block_rows(&self) -> usize {
        self.n_rows.div_ceil(self.ranks).max(1)
    }

    /// The rank that owns row `id`.
    pub fn owner(&self, id: u32) -> usize {
        (id as usize / self.block_rows()).min(self.ranks - 1)
    }

    /// The rows rank `rank` owns.
    pub fn rows_of(&self, rank: usize) -> Range<usize> {
        let b = self.block_rows();
        let start = (rank * b).min(self.n_rows);
        start..((rank + 1) * b).min(self.n_rows)
    }
}

/// Rank `rank`'s rows of a global batch of `global_rows` over `ranks`:
/// `⌈n·rank/ranks⌉..⌈n·(rank+1)/ranks⌉`. Every row belongs to exactly one rank, rank 0 takes
/// the most (`⌈n/ranks⌉`, what a plan prices), and the split nests: with `ranks` dividing `S`,
/// rank `r`'s rows are the union of parts `r·S/ranks..(r+1)·S/ranks` of the split into `S`
/// (the streams of a `blocks` shuffle, `widebag_data::streams`).
pub fn local_rows(global_rows: usize, rank: usize, ranks: usize) -> Range<usize> {
    let ranks = ranks.max(1);
    let at = |k: usize| (global_rows * k).div_ceil(ranks);
    at(rank)..at(rank + 1)
}

/// Rank `rank`'s classes of `n_classes` (consecutive blocks, as [`BlockSharding`]
/// cuts rows).
pub fn class_block(n_classes: usize, rank: usize, ranks: usize) -> Range<usize> {
    BlockSharding::new(n_classes, ranks).rows_of(rank)
}

/// The block of a `len`-long buffer that rank `rank` of `ranks` reduces in an all-reduce
/// (consecutive blocks, as [`BlockSharding`] cuts rows).
pub fn reduce_block(len: usize, rank: usize, ranks: usize) -> Range<usize> {
    BlockSharding::new(len, ranks).rows_of(rank)
}

/// Values rank `rank` of `ranks` sends to the other ranks to all-reduce a `len`-long buffer:
/// every other rank's block (with the two-value length tag each block carries), then its own
/// reduced block to each other rank.
pub fn all_reduce_sent(len: usize, rank: usize, ranks: usize) -> u64 {
    let others: u64 = (0..ranks)
        .filter(|&r| r != rank)
        .map(|r| reduce_block(len, r, ranks).len() as u64 + 2)
        .sum();
    others + reduce_block(len, rank, ranks).len() as u64 * (ranks.max(1) as u64 - 1)
}

/// Values rank `rank` of `ranks` receives while all-reducing a `len`-long buffer: every rank's
/// copy of its block (each with its tag), then every rank's reduced block.
pub fn all_reduce_received(len: usize, rank: usize, ranks: usize) -> u64 {
    (reduce_block(len, rank, ranks).len() as u64 + 2) * ranks as u64 + len as u64
}

/// Several tensors' values end to end in one buffer, and back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fused {
    /// Each part's length, in order.
    pub lens: Vec<usize>,
}

impl Fused {
    /// `parts` end to end, remembering their lengths.
    pub fn pack(parts: &[&[f32]]) -> (Self, Vec<f32>) {
        let lens = parts.iter().map(|p| p.len()).collect();
        (Self { lens }, parts.concat())
    }

    /// The parts of `buf` (as packed), or `None` when its length is not theirs.
    pub fn unpack<'a>(&self, buf: &'a [f32]) -> Option<Vec<&'a [f32]>> {
        if buf.len() != self.lens.iter().sum::<usize>() {
            return None;
        }
        let mut rest = buf;
        Some(
            self.lens
                .iter()
                .map(|&n| {
                    let (part, tail) = rest.split_at(n);
                    rest = tail;
                    part
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_rows_split_every_batch_exactly() {
        for rows in [0, 1, 5, 128, 129] {
            for ranks in 1..=5 {
                let mut next = 0;
                for r in 0..ranks {
                    let part = local_rows(rows, r, ranks);
                    assert_eq!(part.start, next);
                    assert!(part.len() == rows / ranks || part.len() == rows / ranks + 1);
                    next = part.end;
                }
                assert_eq!(next, rows);
                assert_eq!(local_rows(rows, 0, ranks).len(), rows.div_ceil(ranks));
                // Nested: over `ranks · k` parts, rank r's rows are parts r·k..(r+1)·k.
                for k in 1..=4 {
                    for r in 0..ranks {
                        let (first, last) = (r * k, (r + 1) * k - 1);
                        let joined = local_rows(rows, first, ranks * k).start
                            ..local_rows(rows, last, ranks * k).end;
                        assert_eq!(joined, local_rows(rows, r, ranks), "{rows} {ranks} {k}");
                    }
                }
            }
        }
        assert_eq!(class_block(240_000, 2, 3), 160_000..240_000);
    }

    #[test]
    fn fused_buffers_round_trip() {
        let (a, b, c) = ([1.0f32, 2.0], [3.0f32], [4.0f32, 5.0, 6.0]);
        let (fused, buf) = Fused::pack(&[&a, &b, &c]);
        assert_eq!(buf, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(fused.unpack(&buf).unwrap(), vec![&a[..], &b[..], &c[..]]);
        assert!(fused.unpack(&buf[1..]).is_none());
    }

    #[test]
    fn an_all_reduce_sends_twice_the_buffer_less_its_own_share() {
        // 4 ranks, 100 values: three blocks of 25 (+ a 2-value tag each) out, and 25 reduced
        // values to each of 3 ranks: 156, against 300 for three whole copies.
        assert_eq!(all_reduce_sent(100, 0, 4), 3 * 27 + 3 * 25);
        assert_eq!(all_reduce_sent(100, 0, 1), 0);
        for (len, size) in [(0, 3), (7, 3), (1000, 4), (5, 8)] {
            // Everything sent is received by someone, less what each rank keeps for itself.
            let sent: u64 = (0..size).map(|r| all_reduce_sent(len, r, size)).sum();
            let received: u64 = (0..size).map(|r| all_reduce_received(len, r, size)).sum();
            let kept: u64 = (0..size)
                .map(|r| 2 * reduce_block(len, r, size).len() as u64 + 2)
                .sum();
            assert_eq!(sent + kept, received, "{len} values over {size} ranks");
        }
    }
}
