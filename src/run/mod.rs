//! A training run's shared parts: the group of processes it runs as (`launch`: one process,
//! MPI's world, or `--ranks N` threads; `explain --measure` joins MPI's world through it too),
//! where it keeps its files (`directory`; `lengthen`: a run resumed for longer), how it is shown
//! and logged as it goes (`watch`: the progress bar and `metrics.jsonl`; `hooks`: a caller's own
//! callback and stop request) and its closing summary for a terminal (`summary`).

pub mod directory;
pub mod hooks;
pub mod launch;
pub mod lengthen;
pub mod summary;
pub mod watch;
