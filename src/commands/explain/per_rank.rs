//! `explain --measure` under `mpirun`: every rank (one process each) predicts its own step —
//! its rows of the same sampled global batches, its blocks of the tables and classes, its
//! exchanges' buffers (`StepSpec::on_rank`) — runs the steps reading its heap at every point
//! (flex's tensors live there; the first step is a warm-up), and sends rank 0 its predicted and
//! measured bytes per point; rank 0 prints them for every rank. Threads share one heap, so
//! `--ranks N` cannot be measured this way.

use std::fmt::Write;

use serde::Serialize;
use widebag_collective::Collective;
use widebag_config::units::format_bytes;
use widebag_ledger::{Placement, Point};
use widebag_model::train::group::refused_across_ranks;
use widebag_model::{RunOptions, Watch, train};

use crate::failure::{Failure, Outcome};
use crate::preflight::{device_facts, open_compute, predict_rank};
use crate::request::OneExplain;

/// One point of one rank: the ledger's bytes alive there (device and host: on flex both are
/// the heap) and the heap's peak bytes in use there over the measured steps.
#[derive(Clone, Debug, Serialize)]
pub struct RankPoint {
    pub point: Point,
    pub predicted_bytes: u64,
    pub measured_bytes: u64,
    pub error_pct: f64,
}

/// What rank 0 prints (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct RanksReport {
    pub ranks: usize,
    pub steps: usize,
    /// Per rank, its measured points.
    pub points: Vec<Vec<RankPoint>>,
    /// The largest |error| over every rank and point, in %.
    pub worst_error_pct: f64,
}

pub fn explain_ranks(req: &OneExplain) -> Outcome {
    if !req.measure {
        return Err(Failure::usage(anyhow::anyhow!(
            "explain under mpirun measures each rank: add --measure (without it, plan --ranks N \
             prints every rank's part)"
        )));
    }
    if let Some((key, message)) = refused_across_ranks(
        &req.config,
        crate::run::launch::mpi_world_size().unwrap_or(1),
    ) {
        return Err(Failure::usage(anyhow::anyhow!("{key}: {message}")));
    }
    let report = crate::run::launch::on_mpi_world(|comm| measure_rank(req, comm))??;
    if let Some(r) = report {
        print!("{}", render(&r, req.json));
    }
    Ok(())
}

/// This rank's prediction and measurement; rank 0 gets every rank's.
fn measure_rank(req: &OneExplain, comm: &dyn Collective) -> Result<Option<RanksReport>, Failure> {
    let steps = req.steps.max(2);
    let mut config = req.config.clone();
    config.train.steps = steps;
    let prepared = widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)
        .map_err(Failure::usage)?;
    let compute = open_compute(config.train.device)?;
    let (rank, size) = (comm.rank(), comm.size());
    let (_, ledger) =
        predict_rank(&prepared, device_facts(&compute), rank, size, 1).map_err(Failure::usage)?;
    // The first step is a warm-up: its readings are dropped.
    let options = RunOptions {
        watch: Watch {
            measure: true,
            warmup_steps: 1,
            ..Watch::default()
        },
        ..RunOptions::default()
    };
    let summary = train(prepared, &compute, comm, options, |_| {})
        .map_err(|e| Failure::run(anyhow::anyhow!("rank {rank}: {e}")))?;
    let measured = summary.across.map(|a| a.measured_point_bytes);
    let mut mine = Vec::new();
    for (&point, &measured) in measured.iter().flatten() {
        let predicted =
            ledger.live_bytes(Placement::Device, point) + ledger.live_bytes(Placement::Host, point);
        let idx = Point::ALL
            .iter()
            .position(|&p| p == point)
            .expect("a point") as u32;
        mine.extend([
            idx,
            lo(predicted),
            hi(predicted),
            lo(measured),
            hi(measured),
        ]);
    }
    let mut send = vec![Vec::new(); size];
    send[0] = mine;
    let got = comm
        .all_to_all_u32(send)
        .map_err(|e| Failure::run(anyhow::anyhow!("rank {rank}: {e}")))?;
    if rank != 0 {
        return Ok(None);
    }
    let points: Vec<Vec<RankPoint>> = got
        .iter()
        .map(|v| {
            v.chunks_exact(5)
                .map(|c| {
                    let predicted = join(c[1], c[2]);
                    let measured = join(c[3], c[4]);
                    RankPoint {
                        point: Point::ALL[c[0] as usize],
                        predicted_bytes: predicted,
                        measured_bytes: measured,
                        error_pct: (predicted as f64 - measured as f64) / (measured.max(1) as f64)
                            * 100.0,
                    }
                })
                .collect()
        })
        .collect();
    let worst_error_pct = points
        .iter()
        .flatten()
        .map(|p| p.error_pct.abs())
        .fold(0.0, f64::max);
    Ok(Some(RanksReport {
        ranks: size,
        steps,
        points,
        worst_error_pct,
    }))
}

fn lo(x: u64) -> u32 {
    x as u32
}

fn hi(x: u64) -> u32 {
    (x >> 32) as u32
}

fn join(lo: u32, hi: u32) -> u64 {
    (hi as u64) << 32 | lo as u64
}

fn render(r: &RanksReport, json: bool) -> String {
    if json {
        return serde_json::to_string(r).expect("report serialises") + "\n";
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "widebag explain --measure across {} ranks ({} steps, the first a warm-up): each \
         rank's heap against its ledger",
        r.ranks, r.steps
    );
    let _ = writeln!(
        out,
        "  {:>4}  {:<16} {:>12} {:>12} {:>8}",
        "rank", "point", "predicted", "measured", "error"
    );
    for (rank, points) in r.points.iter().enumerate() {
        for p in points {
            let _ = writeln!(
                out,
                "  {rank:>4}  {:<16} {:>12} {:>12} {:>7.2}%",
                p.point.name(),
                format_bytes(p.predicted_bytes),
                format_bytes(p.measured_bytes),
                p.error_pct
            );
        }
    }
    let _ = writeln!(out, "  worst |error| {:.2}%", r.worst_error_pct);
    out
}
