//! `widebag train` across ranks: under `mpirun` with a binary built with `--features mpi` (one
//! process per rank, MPI's world size), or `--ranks N` as N threads of this process. Every rank
//! prepares the same run and trains its part ([`widebag_model::train::ranks`]). With `--budget`
//! every rank plans its own part (the solver's budget is per rank: `plan --ranks N`). With
//! `--out` rank 0 writes the run directory (config, metrics, summary) and every rank its own
//! checkpoints under `checkpoints/rank-R-of-N/`; `--resume` continues at the same N. Rank 0
//! prints the summary.

use std::fmt::Write;
use std::time::Duration;

use widebag_collective::Collective;
use widebag_collective::threads::ThreadGroup;
use widebag_config::units::format_bytes;
use widebag_model::CheckpointPlan;
use widebag_model::Ranks;
use widebag_model::train::ranks::{
    RanksOptions, RanksSummary, rank_dir, refused_across_ranks, run_training_ranks,
};
use widebag_prepare::Prepared;

use crate::commands::budget::plan_for_budget;
use crate::failure::{Failure, Outcome};
use crate::prerun::{check_fits, check_memory_shared, device_facts, open_compute, predict_rank};
use crate::request::TrainRequest;
use crate::run_dir::{MetricsLog, RunDir};

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

/// How many of the world's ranks `mpirun` started on this machine (Open MPI's and MPICH's
/// variables).
fn mpi_local_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// The world size `mpirun` gave this process (Open MPI's and MPICH's variables).
pub fn mpi_world_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

pub fn run(req: &TrainRequest, ranks: usize) -> Outcome {
    if let Some((key, message)) = refused_across_ranks(&req.config) {
        return Err(Failure::usage(anyhow::anyhow!("{key}: {message}")));
    }
    let summary = match mpi_world_size() {
        Some(_) => by_mpi(req)?,
        None => by_threads(req, ranks)?,
    };
    if let Some(s) = summary {
        print!("{}", render(&s, req.json).map_err(Failure::run)?);
    }
    Ok(())
}

/// One rank's run: prepare, open the device, plan its part (`--budget`), train, and (rank 0)
/// keep the run directory.
fn rank_run(
    req: &TrainRequest,
    comm: &dyn Collective,
    prepared: Option<Prepared>,
) -> Result<RanksSummary, Failure> {
    let mut prepared = match prepared {
        Some(p) => p,
        None => prepare(req)?,
    };
    let compute = open_compute(req.config.train.device)?;
    let lead = comm.rank() == 0;
    let saved_config = plan_for_budget(req, &mut prepared, &compute, (comm.rank(), comm.size()))?
        .map_or_else(|| req.config.clone(), |b| b.saved_config);
    // Refused before anything is allocated: a tensor over the buffer limit, or the ranks this
    // machine holds (threads: all of them; under mpirun: its local ranks) over its memory.
    let (spec, ledger) = predict_rank(
        &prepared,
        device_facts(&compute),
        comm.rank(),
        comm.size(),
        0,
    )
    .map_err(Failure::usage)?;
    check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
    let local = match mpi_world_size() {
        Some(_) => mpi_local_size().unwrap_or(comm.size()),
        None => comm.size(),
    };
    check_memory_shared(&ledger, &compute, local).map_err(Failure::does_not_fit)?;
    let every = prepared.config.train.checkpoint_every as u64;
    let (dir, resume) = match (&req.resume, &req.out) {
        (Some(path), _) => (Some(path), true),
        (None, Some(path)) => (Some(path), false),
        (None, None) => (None, false),
    };
    let run_dir = match dir {
        Some(path) => {
            if lead
                && !resume
                && (path.join("summary.json").exists() || path.join("checkpoints").exists())
            {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--out {}: already holds a run; continue it with --resume {} or choose \
                     another directory",
                    path.display(),
                    path.display()
                )));
            }
            let mine = rank_dir(&path.join("checkpoints"), ranks_of(comm));
            if resume && !mine.exists() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--resume {}: no checkpoints of rank {} of {} (a run continues at the number \
                     of ranks that wrote it: {})",
                    path.display(),
                    comm.rank(),
                    comm.size(),
                    written_by(&path.join("checkpoints"))
                )));
            }
            let d = RunDir::create(path).map_err(Failure::run)?;
            if lead && !resume {
                d.write_config(&saved_config).map_err(Failure::run)?;
            }
            Some(d)
        }
        None => None,
    };
    let options = RanksOptions {
        checkpoints: run_dir.as_ref().map(|d| CheckpointPlan {
            root: d.checkpoints(),
            every,
        }),
        resume,
        measure: false,
    };
    // Rank 0 logs every step; a resumed log is cut back to the checkpoint's step at the first.
    let mut metrics: Option<MetricsLog> = None;
    let mut log_error = None;
    let log_dir = run_dir.as_ref().filter(|_| lead);
    let summary = run_training_ranks(prepared, &compute, comm, options, |s| {
        let Some(d) = log_dir else { return };
        if metrics.is_none() && log_error.is_none() {
            match d.metrics(resume.then(|| s.step - 1)) {
                Ok(m) => metrics = Some(m),
                Err(e) => log_error = Some(e),
            }
        }
        if let Some(m) = &mut metrics {
            m.step(s);
        }
    })
    .map_err(|e| {
        let usage = matches!(e, widebag_model::ModelError::Unsupported { .. });
        let error = anyhow::anyhow!("rank {}: {e}", comm.rank());
        match usage {
            true => Failure::usage(error),
            false => Failure::run(error),
        }
    })?;
    if let Some(d) = log_dir {
        if let Some(e) = log_error {
            return Err(Failure::run(e));
        }
        if let Some(m) = metrics {
            m.finish().map_err(Failure::run)?;
        }
        if summary.steps == 0 {
            eprintln!(
                "widebag: {} is complete: its last checkpoint is at step {}",
                d.path.display(),
                summary.resumed_from.unwrap_or(0)
            );
        }
        d.write_json("summary.json", &summary)
            .map_err(Failure::run)?;
    }
    Ok(summary)
}

fn ranks_of(comm: &dyn Collective) -> Ranks {
    Ranks {
        rank: comm.rank(),
        size: comm.size(),
    }
}

/// The rank counts a run's checkpoints were written at (`2 ranks, 3 ranks`), or `none`.
fn written_by(root: &std::path::Path) -> String {
    let sizes = widebag_model::checkpoint::gather::rank_sizes(root);
    match sizes.is_empty() {
        true => "none".to_string(),
        false => {
            let s: Vec<String> = sizes.iter().map(|n| format!("{n} ranks")).collect();
            s.join(", ")
        }
    }
}

/// The run's data and bands (each process of an MPI run prepares its own; threads share one).
fn prepare(req: &TrainRequest) -> Result<Prepared, Failure> {
    widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::TRAIN)
        .map_err(Failure::usage)
}

/// N ranks as threads of this process, sharing one prepared run; rank 0's summary.
fn by_threads(req: &TrainRequest, ranks: usize) -> Result<Option<RanksSummary>, Failure> {
    let prepared = prepare(req)?;
    let results = ThreadGroup::run(ranks, PEER_TIMEOUT, |c| {
        let r = rank_run(req, &c, Some(prepared.clone()));
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

fn by_mpi(req: &TrainRequest) -> Result<Option<RanksSummary>, Failure> {
    on_mpi_world(|comm| {
        let s = rank_run(req, comm, None)?;
        Ok((comm.rank() == 0).then_some(s))
    })?
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
    if let Some(e) = &s.eval {
        writeln!(out, "  held-out           {}", e.line())?;
    }
    writeln!(
        out,
        "  rank 0 owns        rows {:?} per band, {} classes",
        s.owned_rows, s.owned_classes
    )?;
    let rows_exchange: f64 = s
        .sent_bytes_per_step
        .iter()
        .filter(|(k, _)| k.ends_with("(all-to-all)"))
        .map(|(_, v)| v)
        .sum();
    writeln!(
        out,
        "  row exchange       {} per step as rows; pooled partial sums would send {} ({:.2}×)",
        format_bytes(rows_exchange as u64),
        format_bytes(s.pooled_alternative_bytes_per_step as u64),
        s.pooled_alternative_bytes_per_step / rows_exchange.max(1.0)
    )?;
    for (what, bytes) in &s.sent_bytes_per_step {
        writeln!(
            out,
            "  rank 0 sent        {} per step: {what}",
            format_bytes(*bytes as u64)
        )?;
    }
    Ok(out)
}
