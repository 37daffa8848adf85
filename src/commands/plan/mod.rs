//! `widebag plan`: the batch size and optimizers that fit a memory budget, from the ledger alone;
//! its report or JSON, `--verify` and `--search` on the device, the solver's `--grid`, and
//! `--calibrate` for the throughput model. Exit 3 when nothing fits.

mod bracket;
mod calibrate;
mod grid;
mod search;

use widebag_config::units::format_bytes;

use crate::failure::{Failure, Outcome};
use crate::plan::host::HostCheck;
use crate::plan::planner::{Planned, cuts_bands, make_plan};
use crate::plan::report::{Report, render};
use crate::preflight::{open_compute, open_measurable};
use crate::request::{OnePlan, PlanRequest};

pub fn run(req: &PlanRequest) -> Outcome {
    match req {
        PlanRequest::One(one) => plan_one(one),
        PlanRequest::Grid(g) => grid::run_grid(g),
        PlanRequest::Calibrate(c) => calibrate::run_calibrate(c),
    }
}

fn plan_one(req: &OnePlan) -> Outcome {
    let (report, planned_ms) = planned(req)?;
    if req.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("plan serialises")
        );
        eprintln!(
            "widebag: planned in {planned_ms:.1} ms ({} ledger evaluations)",
            report.plan.evaluations
        );
    } else {
        print!("{}", render(&report, planned_ms));
    }
    match refusal(&report) {
        Some(f) if req.json => Err(f.reported()),
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Why `report`'s plan is refused (over the budget, the host's memory, or `--verify`'s measured
/// peak over the budget), as the failure `widebag plan` exits with; `None` when it stands.
pub fn refusal(report: &Report) -> Option<Failure> {
    if !report.fits {
        return Some(Failure::does_not_fit(anyhow::anyhow!(
            "{}",
            report.plan.refusal()
        )));
    }
    if let Some(h) = report.host.as_ref().filter(|h| !h.fits) {
        return Some(Failure::does_not_fit(anyhow::anyhow!("{}", h.refusal())));
    }
    if let Some(v) = &report.verify
        && !v.under_budget
    {
        return Some(Failure::run(anyhow::anyhow!(
            "--verify: measured peak {} is over the {} budget",
            format_bytes(v.measured_peak_bytes),
            format_bytes(report.budget_bytes)
        )));
    }
    None
}

/// The plan `widebag plan` prints (with `--verify` and `--search` their measurements), and the
/// milliseconds planning took; a plan that does not fit is returned, not refused ([`refusal`]).
pub fn planned(req: &OnePlan) -> Result<(Report, f64), Failure> {
    let mut prepared =
        widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::READ_ONLY)
            .map_err(Failure::usage)?;
    crate::host_memory::data_ready();
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
    }
    if req.solver.ranks > 1 {
        if req.verify || req.search {
            return Err(Failure::usage(anyhow::anyhow!(
                "--verify and --search are not yet available with --ranks (they measure one \
                 process's allocator)"
            )));
        }
        if let Some((key, message)) =
            widebag_model::train::group::refused_across_ranks(&req.config, req.solver.ranks)
        {
            return Err(Failure::usage(anyhow::anyhow!("{key}: {message}")));
        }
    }
    // Given device facts plan for another device; otherwise the device is opened and read.
    let needs_device = req.verify || req.search || req.solver.max_buffer_bytes.is_none();
    let compute = if needs_device {
        Some(if req.verify || req.search {
            open_measurable(req.config.train.device)?
        } else {
            open_compute(req.config.train.device)?
        })
    } else {
        None
    };
    let Planned {
        mut report,
        planned_ms,
    } = make_plan(&mut prepared, &req.solver, &req.overrides, compute.as_ref())
        .map_err(Failure::usage)?;
    if let Some(budget) = &req.host_budget
        && report.fits
    {
        let side = planned_host_side(&prepared, &report).map_err(Failure::usage)?;
        report.host = Some(HostCheck::of(&side, budget));
    }
    let compute_for_runs = || {
        compute
            .as_ref()
            .ok_or_else(|| Failure::usage(anyhow::anyhow!("--verify and --search need a device")))
    };
    if req.verify && report.fits {
        let c = compute_for_runs()?;
        let v = search::verify(&prepared, &report.plan, c, req.steps).map_err(Failure::run)?;
        report.verify = Some(v);
    }
    if req.search {
        let c = compute_for_runs()?;
        let s = search::search(
            &prepared,
            &report.plan,
            c,
            req.steps,
            req.tolerance_pct,
            |p| {
                eprintln!(
                    "widebag: search: batch {} → {}",
                    p.batch_size,
                    match p.measured_peak_bytes {
                        Some(m) => format!(
                            "{} ({})",
                            format_bytes(m),
                            if p.runs_under_budget { "under" } else { "over" }
                        ),
                        None => "refused (buffer limit)".into(),
                    }
                )
            },
        )
        .map_err(Failure::run)?;
        report.search = Some(s);
    }
    Ok((report, planned_ms))
}

/// The host side of `report`'s plan on `prepared`'s data (prepared again when the plan cuts a
/// side into bands: the bands and the numbering come from that).
fn planned_host_side(
    prepared: &widebag_prepare::Prepared,
    report: &Report,
) -> anyhow::Result<widebag_ledger::host_side::HostSide> {
    let mut planned = prepared.clone();
    planned.config = report.plan.apply_to(&prepared.config);
    if cuts_bands(&report.plan) {
        planned = widebag_prepare::open_data(
            &planned.config,
            &widebag_prepare::PrepareOptions::READ_ONLY,
        )?;
    }
    let (spec, ledger) = crate::preflight::predict(&planned, report.device)?;
    let in_flight = widebag_ledger::host_side::BATCHES_IN_FLIGHT;
    Ok(crate::preflight::host_side(
        &planned, &spec, &ledger, in_flight,
    ))
}
