//! The `Collective` trait: the operations of a group of ranks, with its reductions built once
//! (a reduce-scatter, then an all-gather, combined in rank order).

use crate::error::CollectiveError;
use crate::partition;

/// The operations of a group of `size()` ranks; every rank calls each one, in the same order.
/// Not `Send`: an MPI communicator stays on the thread that made it.
pub trait Collective {
    /// This rank, `0 .. size()`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn size(&self) -> usize;
    /// `send[r]` goes to rank `r`; returns, by source rank, what every rank sent to this one.
    fn all_to_all_u32(&self, send: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>, CollectiveError>;
    /// As [`Self::all_to_all_u32`], for values.
    fn all_to_all_f32(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, CollectiveError>;
    /// Every rank's `local`, by rank.
    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<Vec<f32>>, CollectiveError>;
    /// `buf ← Σ_ranks buf`, element-wise, summed in rank order (the same bits on every rank).
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), CollectiveError> {
        reduce(self, buf, "all_reduce_sum", |a, b| a + b)
    }
    /// `buf ← max_ranks buf`, element-wise.
    fn all_reduce_max(&self, buf: &mut [f32]) -> Result<(), CollectiveError> {
        reduce(self, buf, "all_reduce_max", f32::max)
    }
    /// Returns when every rank has called it.
    fn barrier(&self) -> Result<(), CollectiveError> {
        self.all_gather_f32(&[]).map(drop)
    }
}

/// A reduction as a reduce-scatter then an all-gather (each rank sends about `2 (N-1)/N` of the
/// buffer, not `N-1` copies of it): rank `r` receives every rank's block `r` of the buffer
/// ([`partition::reduce_block`]), combines them in rank order and all-gathers the result, so
/// every element is combined in rank order on every rank (the same bits everywhere). Each block
/// carries the sender's buffer length, so ranks whose lengths differ all fail with
/// [`CollectiveError::Mismatch`] before the all-gather.
fn reduce<C: Collective + ?Sized>(
    c: &C,
    buf: &mut [f32],
    op: &'static str,
    f: impl Fn(f32, f32) -> f32,
) -> Result<(), CollectiveError> {
    let (me, size, len) = (c.rank(), c.size(), buf.len());
    let tag = [(len & 0xffff) as f32, (len >> 16) as f32];
    let send = (0..size)
        .map(|r| {
            let mut v = buf[partition::reduce_block(len, r, size)].to_vec();
            v.extend_from_slice(&tag);
            v
        })
        .collect();
    let parts = c.all_to_all_f32(send)?;
    for (rank, part) in parts.iter().enumerate() {
        let got = match part.len() {
            n if n >= 2 => part[n - 2] as usize | (part[n - 1] as usize) << 16,
            _ => usize::MAX,
        };
        if got != len {
            return Err(CollectiveError::Mismatch {
                op,
                rank,
                got,
                want: len,
            });
        }
    }
    let n = partition::reduce_block(len, me, size).len();
    let mut reduced = parts[0][..n].to_vec();
    for part in &parts[1..] {
        for (a, &b) in reduced.iter_mut().zip(&part[..n]) {
            *a = f(*a, b);
        }
    }
    let all = c.all_gather_f32(&reduced)?;
    for (rank, part) in all.iter().enumerate() {
        let want = partition::reduce_block(len, rank, size).len();
        if part.len() != want {
            return Err(CollectiveError::Mismatch {
                op,
                rank,
                got: part.len(),
                want,
            });
        }
    }
    let mut at = 0;
    for part in all {
        buf[at..at + part.len()].copy_from_slice(&part);
        at += part.len();
    }
    Ok(())
}
