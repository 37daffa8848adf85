//! The collectives a multi-process step needs (all-reduce, all-gather, all-to-all with variable
//! counts, barrier) behind one trait, so the trainer never calls MPI itself: the MPI
//! implementation is the crate `widebag-mpi`, which the binary takes behind its `mpi` feature, and [`threads::ThreadGroup`] runs N ranks as
//! threads of one process for tests. Reductions combine contributions in rank order, so every
//! rank holds the same bits and a run does not depend on arrival order.

pub mod check;
pub mod partition;
pub mod route;
pub mod threads;

/// A collective that could not complete.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CollectiveError {
    /// Another rank ended (or panicked) without taking part.
    #[error("rank {rank} is gone: {op} cannot complete on rank {me}")]
    PeerGone {
        rank: usize,
        me: usize,
        op: &'static str,
    },
    /// The other ranks did not arrive in time (one is stuck or dead without notice).
    #[error("{op} on rank {me}: the other ranks did not arrive within {waited_s} s")]
    Timeout {
        me: usize,
        op: &'static str,
        waited_s: u64,
    },
    /// A contribution whose length differs from the other ranks' where they must agree.
    #[error("{op}: rank {rank} gave {got} values, this rank {want}")]
    Mismatch {
        op: &'static str,
        rank: usize,
        got: usize,
        want: usize,
    },
    /// `send` did not have one entry per rank.
    #[error("{op}: {got} destinations for {size} ranks")]
    Destinations {
        op: &'static str,
        got: usize,
        size: usize,
    },
}

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

/// A reduction from an all-gather: every rank combines the same contributions in rank order.
fn reduce<C: Collective + ?Sized>(
    c: &C,
    buf: &mut [f32],
    op: &'static str,
    f: impl Fn(f32, f32) -> f32,
) -> Result<(), CollectiveError> {
    let all = c.all_gather_f32(buf)?;
    for (rank, part) in all.iter().enumerate() {
        if part.len() != buf.len() {
            return Err(CollectiveError::Mismatch {
                op,
                rank,
                got: part.len(),
                want: buf.len(),
            });
        }
    }
    for (i, x) in buf.iter_mut().enumerate() {
        *x = all[1..].iter().fold(all[0][i], |acc, part| f(acc, part[i]));
    }
    Ok(())
}
