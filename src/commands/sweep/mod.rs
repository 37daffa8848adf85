//! `widebag sweep`: runs every point of a sweep file in turn, each into its own run directory
//! (the layout `train --out` writes, through [`crate::run_dir`], plus `row.json`, the run's row
//! of the results), resumably, and writes the results as CSV, Markdown and SVG plots.

mod plots;
pub mod results;

use std::path::Path;

use anyhow::Context;
use widebag_collective::local::Local;
use widebag_config::sweep::{Sweep, SweepPoint};
use widebag_config::units::format_bytes;
use widebag_ledger::Placement;
use widebag_model::{CheckpointPlan, Compute, ProbeMode, RunOptions, Watch, train};
use widebag_solver::Calibration;

use crate::commands::explain;
use crate::failure::{Failure, Outcome};
use crate::plan::planner::{budget, make_plan};
use widebag_ledger::host_side::BATCHES_IN_FLIGHT;

use crate::preflight::{check_fits, check_memory, device_facts, host_side, open_compute, predict};
use crate::request::{SolverFlags, SweepRequest};
use crate::run_dir::RunDir;
use results::{RunRow, Status};

pub fn run(req: &SweepRequest) -> Outcome {
    let sweep = &req.sweep;
    eprintln!(
        "widebag: {}: {} runs ({} excluded) into {}",
        req.file.display(),
        sweep.points.len(),
        sweep.excluded,
        req.out.display()
    );
    let compute = open_compute(req.device)?;
    let rows =
        run_all(sweep, &req.out, &compute, req.calibration.as_ref()).map_err(Failure::run)?;
    let keys: Vec<String> = sweep.spec.grid.keys().cloned().collect();
    print!("{}", results::markdown(&rows, &keys, &compute.adapter));
    let failed = rows.iter().filter(|r| r.status == Status::Failed).count();
    if failed > 0 {
        return Err(Failure::run(anyhow::anyhow!(
            "{failed} of {} runs failed (see their row.json); run the sweep again to retry them",
            rows.len()
        )));
    }
    Ok(())
}

/// A finished run (ok or refused) is skipped on resume; a failed one is run again.
fn finished(dir: &Path) -> Option<RunRow> {
    let text = std::fs::read_to_string(dir.join("row.json")).ok()?;
    let row: RunRow = serde_json::from_str(&text).ok()?;
    (row.status != Status::Failed).then_some(row)
}

/// Runs one point into `dir`: config, ledger and plan first (refused when it does not fit),
/// then training with one metrics line per step.
fn run_point(
    point: &SweepPoint,
    dir: &Path,
    compute: &Compute,
    calibration: Option<&Calibration>,
) -> anyhow::Result<RunRow> {
    let run_dir = RunDir::create(dir)?;
    let config = &point.config;
    run_dir.write_config(config)?;
    let mut row = RunRow::new(
        &point.name,
        Status::Refused,
        &point.values,
        config.train.batch_size,
    );
    let mut prepared =
        widebag_prepare::open_data(config, &widebag_prepare::PrepareOptions::READ_ONLY)?;
    let (spec, ledger) = predict(&prepared, device_facts(compute))?;
    let peak = ledger.peak(Placement::Device);
    row.predicted_peak_bytes = Some(peak.bytes);
    row.categories = ledger
        .categories_at(Placement::Device, peak.point)
        .into_iter()
        .map(|(c, b)| (c.name().to_string(), b))
        .collect();
    let host = host_side(&prepared, &spec, &ledger, BATCHES_IN_FLIGHT);
    let fits = check_fits(&ledger, &spec).and_then(|()| check_memory(&ledger, &host, compute));
    let mut report = explain::report(spec, ledger, &compute.adapter, None);
    report.host = Some(explain::host::host_report(host, None));
    run_dir.write_json("ledger.json", &report)?;
    if let Err(e) = fits {
        row.error = Some(format!("{e:#}"));
        return Ok(row);
    }
    // The plan with every knob pinned: does this run fit the budget (plan.budget, else the
    // device's memory minus the reserve)? Planned as `plan` would: the batch range capped at the
    // data's rows, the calibration of `--calibration`.
    prepared.config.plan.pin = widebag_config::PLAN_KNOBS
        .iter()
        .map(|k| k.to_string())
        .collect();
    match budget(None, &prepared.config, compute.memory_bytes) {
        Ok(_) => {
            let flags = SolverFlags::with_calibration(calibration.cloned());
            let report = make_plan(&mut prepared, &flags, &[], Some(compute))?.report;
            run_dir.write_json("plan.json", &report)?;
            if !report.fits {
                row.error = Some(format!(
                    "does not fit the {} budget: predicted peak {}",
                    format_bytes(report.budget_bytes),
                    format_bytes(report.predicted_peak_bytes)
                ));
                return Ok(row);
            }
        }
        Err(e) => eprintln!("widebag: {}: no plan ({e:#})", point.name),
    }
    train_point(prepared, &run_dir, compute, row)
}

/// Trains a point that fits, writing metrics.jsonl and summary.json into `dir`.
fn train_point(
    prepared: widebag_prepare::Prepared,
    dir: &RunDir,
    compute: &Compute,
    mut row: RunRow,
) -> anyhow::Result<RunRow> {
    let mut metrics = dir.metrics(None)?;
    // Every point of the step is read in the first three steps (after the first, discarded as
    // warm-up), so the measured peak covers the peaks inside a step; the rest are timed.
    let options = RunOptions {
        watch: Watch {
            probe: ProbeMode::PhaseEnds,
            warmup_steps: 1,
            detailed_steps: 3,
            ..Watch::default()
        },
        checkpoints: (prepared.config.train.checkpoint_every > 0).then(|| CheckpointPlan {
            root: dir.checkpoints(),
            every: prepared.config.train.checkpoint_every as u64,
        }),
        ..RunOptions::default()
    };
    let summary = train(prepared, compute, &Local, options, |s| {
        metrics.step(s);
        row.losses.push(s.loss);
    })
    .context("training")?;
    metrics.finish()?;
    dir.write_json("summary.json", &summary)?;
    row.status = Status::Ok;
    row.measured_peak_bytes = summary.peak_in_use_bytes;
    row.examples_per_s = Some(summary.examples_per_s);
    row.final_loss = Some(summary.final_loss_mean10);
    Ok(row)
}

/// Runs the sweep into `out` (resuming what is there) and writes the results; returns the rows.
fn run_all(
    sweep: &Sweep,
    out: &Path,
    compute: &Compute,
    calibration: Option<&Calibration>,
) -> anyhow::Result<Vec<RunRow>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut rows = Vec::new();
    let n = sweep.points.len();
    for (i, point) in sweep.points.iter().enumerate() {
        let dir = out.join(&point.name);
        if let Some(row) = finished(&dir) {
            eprintln!(
                "widebag: [{}/{n}] {}: {} (done before, skipped)",
                i + 1,
                point.name,
                row.status.name()
            );
            rows.push(row);
            continue;
        }
        let row = run_point(point, &dir, compute, calibration).unwrap_or_else(|e| RunRow {
            error: Some(format!("{e:#}")),
            ..RunRow::new(
                &point.name,
                Status::Failed,
                &point.values,
                point.config.train.batch_size,
            )
        });
        RunDir::create(&dir)?.write_json("row.json", &row)?;
        eprintln!(
            "widebag: [{}/{n}] {}: {}{}",
            i + 1,
            point.name,
            row.status.name(),
            match (&row.error, row.examples_per_s) {
                (Some(e), _) => format!(" ({e})"),
                (None, Some(x)) => format!(
                    ", {x:.1} examples/s, loss {:.4}, peak {}",
                    row.final_loss.unwrap_or(f32::NAN),
                    row.measured_peak_bytes.map_or("-".into(), format_bytes)
                ),
                _ => String::new(),
            }
        );
        rows.push(row);
    }
    let keys: Vec<String> = sweep.spec.grid.keys().cloned().collect();
    let results = RunDir::create(out)?;
    results.write("results.csv", results::csv(&rows, &keys).as_bytes())?;
    results.write(
        "results.md",
        results::markdown(&rows, &keys, &compute.adapter).as_bytes(),
    )?;
    plots::plot_memory(&out.join("memory.svg"), &rows)?;
    plots::plot_losses(&out.join("loss.svg"), &rows)?;
    plots::plot_throughput(&out.join("throughput.svg"), &rows, &keys)?;
    Ok(rows)
}
