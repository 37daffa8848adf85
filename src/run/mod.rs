//! A training run's shared parts: the group of processes it runs as (`launch`: one process,
//! MPI's world, or `--ranks N` threads; `explain --measure` joins MPI's world through it too) and
//! its closing summary for a terminal (`summary`).

pub mod launch;
pub mod summary;
