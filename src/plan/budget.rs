//! `train --budget B`, for one process or each rank of many: plan the run (a rank's part across
//! ranks: the solver's budget is per rank), refuse with exit 3 a budget nothing fits (the plan
//! printed, or its JSON with `--json`), else apply the plan to the config and prepare the run
//! again when the plan cuts a side into bands.

use widebag_config::Config;
use widebag_config::units::format_bytes;
use widebag_model::Compute;
use widebag_prepare::Prepared;

use crate::failure::Failure;
use crate::plan::planner::{Planned, cuts_bands, make_plan};
use crate::plan::report::{Report, render};
use crate::request::{SolverFlags, TrainRequest};

/// Where the run stands after planning: the config to save (the user's, the plan applied), the
/// plan's report, and whether the run was prepared again (ids renumbered for the cut bands).
pub struct Budgeted {
    pub saved_config: Config,
    pub report: Report,
    pub prepared_again: bool,
}

/// Plans `prepared` for `req`'s budget as rank `rank` of `ranks` (`0` of `1` for one process);
/// rank 0 alone prints. `None` when the request has no budget.
pub fn plan_for_budget(
    req: &TrainRequest,
    prepared: &mut Prepared,
    compute: &Compute,
    (rank, ranks): (usize, usize),
) -> Result<Option<Budgeted>, Failure> {
    let Some(flags) = &req.plan else {
        return Ok(None);
    };
    let lead = rank == 0;
    let flags = SolverFlags {
        ranks,
        ..flags.clone()
    };
    let per_rank = if ranks > 1 { " per rank" } else { "" };
    let Planned { report, planned_ms } =
        make_plan(prepared, &flags, &req.overrides, Some(compute)).map_err(Failure::usage)?;
    if !report.fits {
        let f = Failure::does_not_fit(anyhow::anyhow!(
            "{}{per_rank} (see the plan above)",
            report.plan.refusal()
        ));
        if lead && req.json {
            println!(
                "{}",
                serde_json::to_string(&report).expect("plan serialises")
            );
        } else if lead {
            print!("{}", render(&report, planned_ms));
        }
        return Err(if req.json { f.reported() } else { f });
    }
    if lead {
        let across = if ranks > 1 {
            format!(" across {ranks}")
        } else {
            String::new()
        };
        eprintln!(
            "widebag: planned for {}{per_rank}{across}: batch {}, table {}, dense {} (predicted \
             peak {})",
            format_bytes(report.budget_bytes),
            report.batch_size,
            report.plan.chosen.table.name(),
            report.plan.chosen.dense.name(),
            format_bytes(report.predicted_peak_bytes)
        );
    }
    let saved_config = report.plan.apply_to(&req.config);
    prepared.config = report.plan.apply_to(&prepared.config);
    let prepared_again = cuts_bands(&report.plan);
    if prepared_again {
        // The plan cut a side into bands: prepare again, so the ids or classes are renumbered
        // by frequency and the bands resolved for the cut.
        *prepared =
            widebag_prepare::open_data(&saved_config, &widebag_prepare::PrepareOptions::TRAIN)
                .map_err(Failure::usage)?;
    }
    Ok(Some(Budgeted {
        saved_config,
        report,
        prepared_again,
    }))
}
