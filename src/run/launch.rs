//! The group of processes a command runs as: one process (`widebag_collective::local::Local`),
//! `mpirun -np N` with a binary built with `--features mpi` (one process per rank, MPI's world
//! size), or `--ranks N` as N threads of this process.

use std::time::Duration;

use widebag_collective::Collective;
use widebag_collective::threads::ThreadGroup;

use crate::failure::Failure;
use crate::request::TrainRequest;

/// How long a rank waits for the others at a collective before it gives up (a rank that died).
const PEER_TIMEOUT: Duration = Duration::from_secs(600);

/// The ranks this run trains as: `--ranks`, or the MPI world's size under `mpirun`; `None` for
/// one process.
pub fn wanted(req: &TrainRequest) -> Option<usize> {
    if let Some(n) = mpi_world_size() {
        return (n > 1 || req.ranks.is_some()).then_some(n);
    }
    req.ranks.filter(|&n| n > 1)
}

/// How many of the world's ranks `mpirun` started on this machine (Open MPI's and MPICH's
/// variables); all of them when they are threads of this process.
pub fn local_ranks(comm: &dyn Collective) -> usize {
    match mpi_world_size() {
        Some(_) => ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
            .iter()
            .find_map(|k| std::env::var(k).ok()?.parse().ok())
            .unwrap_or(comm.size()),
        None => comm.size(),
    }
}

/// The world size `mpirun` gave this process (Open MPI's and MPICH's variables).
pub fn mpi_world_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Runs `f` on this process's rank of the MPI world (a binary built with `--features mpi`,
/// started by `mpirun`).
#[cfg(feature = "mpi")]
pub fn on_mpi_world<T>(f: impl FnOnce(&dyn Collective) -> T) -> Result<T, Failure> {
    let comm = widebag_mpi::MpiCollective::init()
        .ok_or_else(|| Failure::run(anyhow::anyhow!("MPI was initialised already")))?;
    Ok(f(&comm))
}

#[cfg(not(feature = "mpi"))]
pub fn on_mpi_world<T>(_f: impl FnOnce(&dyn Collective) -> T) -> Result<T, Failure> {
    Err(Failure::usage(anyhow::anyhow!(
        "launched by mpirun as one of {} processes, but this widebag was built without MPI \
         (cargo build --release --features mpi)",
        mpi_world_size().unwrap_or(0)
    )))
}

/// Runs `f` as `ranks` ranks on threads of this process; rank 0's result, or the first
/// failure by rank. A rank that fails lets the others stop at their next collective instead of
/// waiting out the timeout.
pub fn on_threads<T: Send>(
    ranks: usize,
    f: impl Fn(&dyn Collective) -> Result<T, Failure> + Sync,
) -> Result<T, Failure> {
    let results = ThreadGroup::run(ranks, PEER_TIMEOUT, |c| {
        let r = f(&c);
        if r.is_err() {
            c.abandon();
        }
        r
    });
    let mut first = None;
    for (rank, r) in results.into_iter().enumerate() {
        let r = r.map_err(|_| Failure::run(anyhow::anyhow!("rank {rank} panicked")))??;
        first.get_or_insert(r);
    }
    first.ok_or_else(|| Failure::run(anyhow::anyhow!("no rank ran")))
}
