//! `CollectiveError`: a collective that could not complete (a rank gone, a timeout, lengths
//! that disagree).

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
