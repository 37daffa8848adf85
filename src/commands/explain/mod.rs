//! `widebag explain`: the memory ledger of the configured step as a table or JSON, with
//! `--measure` the allocator's readings beside it and an SVG chart; `--grid` runs the accuracy
//! grid.

mod bar;
pub mod grid;
pub mod host;
mod per_rank;
mod render;
mod report;

pub use report::{Report, report};

use anyhow::Context;
use widebag_ledger::host_side::BATCHES_IN_FLIGHT;

use crate::failure::{Failure, Outcome};
use crate::measure::measure;
use crate::preflight::{
    check_fits, device_facts, host_side, open_compute, open_measurable, predict, predict_batches,
};
use crate::request::{ExplainRequest, OneExplain};

pub fn run(req: &ExplainRequest) -> Outcome {
    match req {
        ExplainRequest::One(one) => explain_one(one),
        ExplainRequest::Grid(g) => grid::run_grid(g),
    }
}

fn explain_one(req: &OneExplain) -> Outcome {
    if crate::run::launch::mpi_world_size().is_some_and(|n| n > 1) {
        return per_rank::explain_ranks(req);
    }
    let report = explained(req)?;
    if req.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("report serialises")
        );
    } else {
        print!("{}", render::render(&report));
    }
    if req.measure {
        render::write_svg(&req.svg, &report)
            .with_context(|| format!("writing {}", req.svg.display()))
            .map_err(Failure::run)?;
        eprintln!("widebag: chart written to {}", req.svg.display());
    }
    Ok(())
}

/// The table `widebag explain` prints for `report`.
pub fn table(report: &Report) -> String {
    render::render(report)
}

/// The ledger of one process's step (with `req.measure`, the allocator's readings beside it),
/// as `widebag explain --json` prints it.
pub fn explained(req: &OneExplain) -> Result<Report, Failure> {
    let prepared =
        widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::READ_ONLY)
            .map_err(Failure::usage)?;
    crate::host_memory::data_ready();
    let compute = if req.measure {
        open_measurable(req.config.train.device)?
    } else {
        open_compute(req.config.train.device)?
    };
    let device = device_facts(&compute);
    let (mut spec, mut ledger) = predict(&prepared, device).map_err(Failure::usage)?;
    let (measured, side) = if req.measure {
        check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
        // Compared with the steps it reads: predicted from those steps' batches.
        let steps = req.steps.max(2);
        (spec, ledger) =
            predict_batches(&prepared, device, 1, steps - 1).map_err(Failure::usage)?;
        // A measured run on the heap reads all of its batches ahead.
        let in_flight = match crate::measure::reads_the_heap(&compute) {
            true => steps as u64,
            false => BATCHES_IN_FLIGHT,
        };
        let side = host_side(&prepared, &spec, &ledger, in_flight);
        let measured = measure(prepared, &compute, req.steps).map_err(Failure::run)?;
        (Some(measured), side)
    } else {
        let side = host_side(&prepared, &spec, &ledger, BATCHES_IN_FLIGHT);
        (None, side)
    };
    let mut report = report(spec, ledger, &compute.adapter, measured.as_ref());
    report.tied_output = req.config.model.tie_output;
    report.host = Some(host::host_report(side, measured.as_ref()));
    Ok(report)
}
