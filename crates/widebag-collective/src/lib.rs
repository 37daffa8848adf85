//! The collectives a multi-process step needs (all-reduce, all-gather, all-to-all with variable
//! counts, barrier) behind one trait, so the trainer never calls MPI itself: the MPI
//! implementation is the crate `widebag-mpi`, which the binary takes behind its `mpi` feature;
//! [`local::Local`] is the group of one (a single process: every collective a no-op); and
//! [`threads::ThreadGroup`] runs N ranks as
//! threads of one process for tests. Reductions (a reduce-scatter, then an all-gather) combine
//! contributions in rank order, so every rank holds the same bits and a run does not depend on
//! arrival order.

pub mod check;
mod error;
mod group;
pub mod local;
pub mod partition;
pub mod pooled;
pub mod route;
pub mod threads;

pub use error::CollectiveError;
pub use group::Collective;
