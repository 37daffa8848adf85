//! `plan --grid`: the solver's accuracy grid — each model planned at several budgets, the plan
//! run (`--verify`) and the true largest batch searched — against its bars, as a Markdown table.

use anyhow::Context;
use serde::Serialize;
use widebag_config::units::format_bytes;

use super::search::{search, verify};
use crate::commands::explain::grid::grid_base;
use crate::failure::{Failure, Outcome};
use crate::output::emit_rows;
use crate::plan::planner::make_plan;
use crate::plan::report::{Report, optimizers};
use crate::preflight::open_measurable;
use crate::request::{PlanGrid, SolverFlags, grid_point};

/// One model of the solver's grid and the budgets it is planned for.
pub struct GridModel {
    pub name: String,
    pub overrides: Vec<String>,
    pub budgets_bytes: Vec<u64>,
}

/// The accuracy grid of the solver: per model, its overrides and budgets.
///
/// `small` (CI and docs/memory.md): a sparse and a dense-layout model of width 1,000–2,000, five budgets
/// each. Every budget binds below `plan.max_batch`: at a point where the plan and the search both
/// stop at the cap, "plan = search" holds by construction and tests nothing (with the cap at
/// 1,024 the sparse model's budgets of 3–14 MiB all stopped there). The sparse model's cap is
/// 8,192 and its budgets 3–6 MiB (plans of about 3,000–7,000 rows, where its 2,000 ids are all
/// in every batch); the dense model's cap is 2,048 (its 1,024 rows took 9.5 MB once its targets
/// stayed sparse, under the 10 MiB budget); at budgets under 1.5 MiB its plans stay 84–96 % of the search's, since the
/// plan must hold for the largest count of distinct ids over its sample's batches and the
/// search runs two steps. (Wider models work the same way but each search probe costs tens of
/// seconds of lavapipe time; the grid is kept where CI can afford it.)
pub fn grid_points(name: &str) -> anyhow::Result<Vec<GridModel>> {
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let kib = |v: &[u64]| v.iter().map(|k| k << 10).collect::<Vec<u64>>();
    let mib = |v: &[u64]| v.iter().map(|m| m << 20).collect::<Vec<u64>>();
    Ok(match name {
        "small" => vec![
            GridModel {
                name: "sparse 2000→16→[32]→2000".to_string(),
                overrides: set(&[
                    "data.width=2000",
                    "data.n_classes=2000",
                    "model.dim=16",
                    "model.hidden=[32]",
                    "plan.min_batch=16",
                    "plan.max_batch=8192",
                ]),
                budgets_bytes: kib(&[3072, 3584, 4096, 5120, 6144]),
            },
            GridModel {
                name: "dense 1000→16→[32]→1000".to_string(),
                overrides: set(&[
                    "model.layout=\"dense\"",
                    "data.width=1000",
                    "data.n_classes=1000",
                    "model.dim=16",
                    "model.hidden=[32]",
                    "plan.min_batch=16",
                    "plan.max_batch=2048",
                ]),
                budgets_bytes: mib(&[2, 3, 5, 7, 10]),
            },
        ],
        other => anyhow::bail!("unknown grid `{other}`: use `small`"),
    })
}

/// The bars: the analytic batch is at least this % of the searched one.
pub const SEARCH_BAR_PCT: f64 = 97.0;
/// Planning (the solver alone) takes under this many milliseconds of wall time: the sparse
/// points plan in about 95 ms on a quiet 2-core machine and took up to 210 ms in CI beside the
/// other tests and the fuzz build; a sample recounted per estimator (the 0.8 s this bar caught)
/// crosses it either way.
pub const PLANNING_BAR_MS: f64 = 500.0;

/// One finished grid point.
#[derive(Clone, Debug, Serialize)]
pub struct GridRow {
    pub model: String,
    pub budget_bytes: u64,
    pub batch_size: usize,
    /// The largest batch the plan and the search may take (`plan.max_batch`).
    pub max_batch: usize,
    pub optimizers: String,
    pub predicted_peak_bytes: u64,
    pub planned_ms: f64,
    /// `None`: the plan did not fit, so nothing was run.
    pub measured_peak_bytes: Option<u64>,
    pub under_budget: bool,
    pub search_batch_size: Option<usize>,
    pub search_first_over: Option<usize>,
    pub plan_vs_search_pct: Option<f64>,
    pub probes: usize,
    /// Every bar met at this point.
    pub pass: bool,
}

impl GridRow {
    pub fn new(model: &str, report: &Report, planned_ms: f64) -> anyhow::Result<Self> {
        let v = report.verify.as_ref();
        let s = report.search.as_ref().context("grid points are searched")?;
        let p = &report.plan.chosen;
        let under_budget = v.is_some_and(|v| v.under_budget);
        let pass = report.fits
            && under_budget
            && planned_ms < PLANNING_BAR_MS
            && s.plan_vs_search_pct.is_some_and(|x| x >= SEARCH_BAR_PCT);
        Ok(Self {
            model: model.to_string(),
            budget_bytes: report.budget_bytes,
            batch_size: p.batch_size,
            max_batch: report.plan.max_batch,
            optimizers: optimizers(report.layout, p.table, p.dense),
            predicted_peak_bytes: p.predicted_peak_bytes,
            planned_ms,
            measured_peak_bytes: v.map(|v| v.measured_peak_bytes),
            under_budget,
            search_batch_size: s.batch_size,
            search_first_over: s.first_over,
            plan_vs_search_pct: s.plan_vs_search_pct,
            probes: s.probes.len(),
            pass,
        })
    }
}

/// The grid as a Markdown table.
pub fn grid_markdown(rows: &[GridRow], adapter: &str) -> String {
    let mut s = format!(
        "Measured on {adapter}. Plan: the analytic solver; measured: the plan run for two steps \
         (peak bytes in use after a warm-up step); search: the largest batch real runs kept \
         under the budget (bisection to 1%).\n\n| model | budget | plan batch | optimizers | \
         predicted | measured | search batch | plan/search | planning |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} ms |\n",
            r.model,
            format_bytes(r.budget_bytes),
            r.batch_size,
            r.optimizers,
            format_bytes(r.predicted_peak_bytes),
            r.measured_peak_bytes
                .map_or("(does not fit)".into(), format_bytes),
            r.search_batch_size.map_or("none".into(), |b| format!(
                "{b} (< {})",
                r.search_first_over.map_or("-".into(), |x| x.to_string())
            )),
            r.plan_vs_search_pct
                .map_or("-".into(), |x| format!("{x:.1}%")),
            r.planned_ms
        ));
    }
    s
}

/// Runs the grid; fails when a point misses a bar.
pub fn run_grid(req: &PlanGrid) -> Outcome {
    let models = grid_points(&req.name).map_err(Failure::usage)?;
    let mut rows = Vec::new();
    let mut adapter = String::new();
    for m in &models {
        let model = &m.name;
        for &budget in &m.budgets_bytes {
            let mut all = grid_base();
            all.extend(m.overrides.iter().cloned());
            let config = grid_point(&all, &req.device)?;
            let mut prepared =
                widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)
                    .map_err(Failure::usage)?;
            let compute = open_measurable(config.train.device)?;
            adapter = compute.adapter.clone();
            let flags = SolverFlags {
                budget: Some((budget.to_string(), budget)),
                ..SolverFlags::with_calibration(None)
            };
            let planned =
                make_plan(&mut prepared, &flags, &[], Some(&compute)).map_err(Failure::usage)?;
            let mut report = planned.report;
            if report.fits {
                report.verify = Some(
                    verify(&prepared, &report.plan, &compute, req.steps).map_err(Failure::run)?,
                );
            }
            report.search = Some(
                search(
                    &prepared,
                    &report.plan,
                    &compute,
                    req.steps,
                    req.tolerance_pct,
                    |_| {},
                )
                .map_err(Failure::run)?,
            );
            let row = GridRow::new(model, &report, planned.planned_ms).map_err(Failure::run)?;
            eprintln!(
                "widebag: {model} @ {}: plan {} ({}), measured {} {}, search {:?} → {}",
                format_bytes(budget),
                row.batch_size,
                row.optimizers,
                row.measured_peak_bytes.map_or("-".into(), format_bytes),
                if row.under_budget { "under" } else { "OVER" },
                row.search_batch_size,
                row.plan_vs_search_pct
                    .map_or("-".into(), |x| format!("{x:.1}%"))
            );
            rows.push(row);
        }
    }
    let md = grid_markdown(&rows, &adapter);
    emit_rows(&rows, &md, req.json, req.out.as_deref(), "plan-grid")?;
    let failed: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.pass)
        .map(|(i, r)| {
            format!(
                "#{} ({} @ {})",
                i + 1,
                r.model,
                format_bytes(r.budget_bytes)
            )
        })
        .collect();
    if !failed.is_empty() {
        let f = Failure::run(anyhow::anyhow!(
            "grid points missing a bar (plan ≥ {SEARCH_BAR_PCT}% of search, measured under \
             budget, planning < {PLANNING_BAR_MS} ms): {}",
            failed.join(", ")
        ));
        // With --json the rows printed above are the one JSON value; their `pass` fields fail.
        return Err(if req.json { f.reported() } else { f });
    }
    Ok(())
}
