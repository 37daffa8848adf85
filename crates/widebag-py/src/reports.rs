//! `widebag.explain` and `widebag.plan`: the command line's arguments parsed by its own parser
//! into its own requests, and the reports as the JSON `--json` prints and the table the terminal
//! shows.

use clap::Parser;
use pyo3::prelude::*;
use widebag::args::{Cli, Command};
use widebag::request::{ExplainRequest, PlanRequest};

use crate::errors;

/// `argv` (`["widebag", "explain", …]`) parsed as the command line parses it.
pub fn command(argv: Vec<String>) -> PyResult<Command> {
    match Cli::try_parse_from(argv) {
        Ok(cli) => Ok(cli.command),
        Err(e) => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or_default();
            Err(errors::usage(line.strip_prefix("error: ").unwrap_or(line)))
        }
    }
}

/// The ledger of `argv`'s `widebag explain`: its JSON and its table.
#[pyfunction]
pub fn explain(py: Python<'_>, argv: Vec<String>) -> PyResult<(String, String)> {
    let Command::Explain(args) = command(argv)? else {
        return Err(errors::usage("not an explain command"));
    };
    let ExplainRequest::One(one) = widebag::request::explain(&args).map_err(errors::failure)?
    else {
        return Err(errors::usage("explain's grid is the command line's"));
    };
    let report = py
        .detach(|| widebag::commands::explain::explained(&one))
        .map_err(errors::failure)?;
    let json = serde_json::to_string(&report).map_err(|e| errors::usage(e.to_string()))?;
    Ok((json, widebag::commands::explain::table(&report)))
}

/// A plan's JSON, its table and why it is refused (exit code and message), if it is.
type PlanOutcome = (String, String, Option<(u8, String)>);

/// The plan of `argv`'s `widebag plan`: its JSON, its table, and why it is refused (the exit
/// code and message `widebag plan` would exit with), if it is.
#[pyfunction]
pub fn plan(py: Python<'_>, argv: Vec<String>) -> PyResult<PlanOutcome> {
    let Command::Plan(args) = command(argv)? else {
        return Err(errors::usage("not a plan command"));
    };
    let PlanRequest::One(one) = widebag::request::plan(&args).map_err(errors::failure)? else {
        return Err(errors::usage(
            "plan's grid and calibration are the command line's",
        ));
    };
    let (report, planned_ms) = py
        .detach(|| widebag::commands::plan::planned(&one))
        .map_err(errors::failure)?;
    let json = serde_json::to_string(&report).map_err(|e| errors::usage(e.to_string()))?;
    let table = widebag::plan::report::render(&report, planned_ms);
    let refused = widebag::commands::plan::refusal(&report)
        .map(|f| (f.code, widebag::failure::render(&f.error)));
    Ok((json, table, refused))
}
