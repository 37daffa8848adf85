//! The other choice of the row exchange, counted on the same batches: TorchRec's pooled
//! embeddings. Instead of sending its distinct ids to their owners and getting the rows back (and
//! later sending each row's gradient), a rank would send its entries (id and value, by row) to
//! their owners, each owner would return the partial bag sums of the asker's rows over the ids
//! it owns, and the bag's gradient would go back to the owners row by row. widebag sends rows;
//! [`pooled_sent_bytes`] is what this rank would have sent the other way, so a run reports both.

use crate::error::CollectiveError;
use crate::group::Collective;
use crate::partition::BlockSharding;

/// An input band: its ids `start..end` and its row width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandCut {
    pub start: u32,
    pub end: u32,
    pub dim: usize,
}

/// Bytes rank `comm.rank()` would send to the other ranks in one step with pooled partial sums,
/// for its rows of the batch (`row_ptr` and `ids` of its CSR rows) over `bands`: its entries
/// (4-byte id and 4-byte value) and a row index per (row, band) to each owner, each asker's
/// partial sums `[rows, dim]` over this rank's ids, and each of its rows' bag gradient
/// `[rows, dim]` to every owner it read from. Every rank calls it (one small all-to-all: how many
/// of each asker's rows read each owner's band).
pub fn pooled_sent_bytes(
    comm: &dyn Collective,
    row_ptr: &[usize],
    ids: &[u32],
    bands: &[BandCut],
) -> Result<u64, CollectiveError> {
    let (me, size, n_bands) = (comm.rank(), comm.size(), bands.len());
    let shardings: Vec<BlockSharding> = bands
        .iter()
        .map(|b| BlockSharding::new((b.end - b.start) as usize, size))
        .collect();
    let mut entries = vec![0u64; size];
    // rows[o * n_bands + k]: this rank's rows reading owner o's block of band k.
    let mut rows = vec![0u32; size * n_bands];
    let mut touched = vec![false; size * n_bands];
    for r in 0..row_ptr.len().saturating_sub(1) {
        touched.iter_mut().for_each(|t| *t = false);
        for &id in &ids[row_ptr[r]..row_ptr[r + 1]] {
            let k = bands.partition_point(|b| b.end <= id).min(n_bands - 1);
            let o = shardings[k].owner(id - bands[k].start);
            entries[o] += 1;
            touched[o * n_bands + k] = true;
        }
        for (count, &t) in rows.iter_mut().zip(&touched) {
            *count += u32::from(t);
        }
    }
    let send = (0..size)
        .map(|o| rows[o * n_bands..(o + 1) * n_bands].to_vec())
        .collect();
    let asked = comm.all_to_all_u32(send)?;
    let mut bytes = 0u64;
    for o in (0..size).filter(|&o| o != me) {
        bytes += 8 * entries[o];
        for (k, b) in bands.iter().enumerate() {
            let mine = u64::from(rows[o * n_bands + k]);
            let theirs = u64::from(asked[o].get(k).copied().unwrap_or(0));
            // A row index and the bag's gradient out; the partial sums of their rows back.
            bytes += 4 * mine + 4 * b.dim as u64 * (mine + theirs);
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::threads::ThreadGroup;

    #[test]
    fn counts_entries_rows_and_partial_sums_by_owner() {
        // One band of 10 ids, dim 3, two ranks: rank 0 owns 0..5, rank 1 owns 5..10.
        let bands = [BandCut {
            start: 0,
            end: 10,
            dim: 3,
        }];
        let out = ThreadGroup::run(2, Duration::from_secs(30), |c| {
            // Rank 0: rows {1, 6, 7} and {2}; rank 1: rows {8} and {9, 3}.
            let (ptr, ids): (Vec<usize>, Vec<u32>) = match c.rank() {
                0 => (vec![0, 3, 4], vec![1, 6, 7, 2]),
                _ => (vec![0, 1, 3], vec![8, 9, 3]),
            };
            pooled_sent_bytes(&c, &ptr, &ids, &bands).unwrap()
        });
        let got: Vec<u64> = out.into_iter().map(|r| r.unwrap()).collect();
        // Rank 0 → 1: 2 entries (16 B), 1 row (4 B), its gradient (12 B); rank 1 has 1 row
        // reading rank 0's ids: its partial sum back (12 B).
        assert_eq!(got[0], 16 + 4 + 12 + 12);
        // Rank 1 → 0: 1 entry (8 B), 1 row (4 B), its gradient (12 B); rank 0's 1 row reading
        // rank 1's ids: its partial sum (12 B).
        assert_eq!(got[1], 8 + 4 + 12 + 12);
    }
}
