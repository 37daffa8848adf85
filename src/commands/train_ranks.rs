//! `widebag train` across ranks: under `mpirun` with a binary built with `--features mpi` (one
//! process per rank, MPI's world size), or `--ranks N` as N threads of this process. Every rank
//! prepares the same run and trains its part ([`widebag_model::train_ranks`]); rank 0 prints the
//! summary.

use std::fmt::Write;
use std::time::Duration;

use widebag_collective::Collective;
use widebag_collective::threads::ThreadGroup;
use widebag_model::train_ranks::{RanksSummary, refused_across_ranks, run_training_ranks};

use crate::failure::{Failure, Outcome};
use crate::prerun::open_compute;
use crate::request::TrainRequest;

/// How long a rank waits for the others at a collective before it gives up (a rank that died).
const PEER_TIMEOUT: Duration = Duration::from_secs(600);

/// The ranks this run trains as: `--ranks`, or the MPI world's size under `mpirun`; `None` for
/// the single process.
pub fn wanted(req: &TrainRequest) -> Option<usize> {
    if let Some(n) = mpi_world_size() {
        return (n > 1 || req.ranks.is_some()).then_some(n);
    }
    req.ranks.filter(|&n| n > 1)
}

/// The world size `mpirun` gave this process (Open MPI's and MPICH's variables).
fn mpi_world_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

pub fn run(req: &TrainRequest, ranks: usize) -> Outcome {
    for (given, flag) in [
        (req.plan.is_some(), "--budget"),
        (req.out.is_some(), "--out"),
        (req.resume.is_some(), "--resume"),
    ] {
        if given {
            return Err(Failure::usage(anyhow::anyhow!(
                "{flag} is not yet available across ranks ({ranks} ranks)"
            )));
        }
    }
    if let Some((key, message)) = refused_across_ranks(&req.config) {
        return Err(Failure::usage(anyhow::anyhow!("{key}: {message}")));
    }
    let summary = match mpi_world_size() {
        Some(world) => by_mpi(req, world)?,
        None => by_threads(req, ranks)?,
    };
    if let Some(s) = summary {
        print!("{}", render(&s, req.json).map_err(Failure::run)?);
    }
    Ok(())
}

/// One rank's run: prepare, open the device, train.
fn rank_run(req: &TrainRequest, comm: &dyn Collective) -> Result<RanksSummary, Failure> {
    let prepared = widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::TRAIN)
        .map_err(Failure::usage)?;
    let compute = open_compute(req.config.train.device)?;
    run_training_ranks(prepared, &compute, comm)
        .map_err(|e| Failure::run(anyhow::anyhow!("rank {}: {e}", comm.rank())))
}

/// N ranks as threads of this process; rank 0's summary.
fn by_threads(req: &TrainRequest, ranks: usize) -> Result<Option<RanksSummary>, Failure> {
    let results = ThreadGroup::run(ranks, PEER_TIMEOUT, |c| {
        let r = rank_run(req, &c);
        if r.is_err() {
            // The others stop at their next collective instead of waiting out the timeout.
            c.abandon();
        }
        r
    });
    let mut first = None;
    for (rank, r) in results.into_iter().enumerate() {
        let s = r.map_err(|_| Failure::run(anyhow::anyhow!("rank {rank} panicked")))??;
        first.get_or_insert(s);
    }
    Ok(first)
}

#[cfg(feature = "mpi")]
fn by_mpi(req: &TrainRequest, _world: usize) -> Result<Option<RanksSummary>, Failure> {
    let comm = widebag_mpi::MpiCollective::init()
        .ok_or_else(|| Failure::run(anyhow::anyhow!("MPI was initialised already")))?;
    let s = rank_run(req, &comm)?;
    Ok((comm.rank() == 0).then_some(s))
}

#[cfg(not(feature = "mpi"))]
fn by_mpi(_req: &TrainRequest, world: usize) -> Result<Option<RanksSummary>, Failure> {
    Err(Failure::usage(anyhow::anyhow!(
        "launched by mpirun as one of {world} processes, but this widebag was built without MPI \
         (cargo build --release --features mpi)"
    )))
}

/// The summary as text, or one JSON object.
fn render(s: &RanksSummary, json: bool) -> anyhow::Result<String> {
    if json {
        return Ok(serde_json::to_string_pretty(s)? + "\n");
    }
    let mut out = String::new();
    writeln!(out, "widebag train: done across {} ranks", s.ranks)?;
    writeln!(
        out,
        "  steps × batch      {} × {} (global; {:.1} examples/s after the first step)",
        s.steps, s.batch_size, s.examples_per_s
    )?;
    writeln!(
        out,
        "  optimizers         table {}, dense {}",
        s.table_optimizer.name(),
        s.dense_optimizer.name()
    )?;
    writeln!(
        out,
        "  loss               {:.4} → {:.4} (mean of last 10: {:.4})",
        s.first_loss, s.final_loss, s.final_loss_mean10
    )?;
    if let Some(l) = s.eval_loss {
        writeln!(out, "  validation loss    {l:.4} over the held-out rows")?;
    }
    writeln!(
        out,
        "  rank 0 owns        rows {:?} per band, {} classes",
        s.owned_rows, s.owned_classes
    )?;
    for (what, bytes) in &s.sent_bytes_per_step {
        writeln!(
            out,
            "  rank 0 sent        {} per step: {what}",
            widebag_config::units::format_bytes(*bytes as u64)
        )?;
    }
    Ok(out)
}
