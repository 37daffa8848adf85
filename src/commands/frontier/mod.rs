//! `widebag frontier`: the task's metric against memory. Each budget is planned by the solver as
//! `train --budget` plans it; each that fits is trained by a `widebag train` child process (its
//! own heap and allocator, so its peak is measured alone; several at once only while they fit
//! side by side: [`jobs`]) into the budget's directory, and evaluated on the held-out rows;
//! results.csv, results.md and frontier.svg hold the rows. Resumable: a budget whose `row.json`
//! says it trained or was refused is not run again; a failed or unfinished one is.

mod jobs;
mod plot;
pub mod row;

use std::path::{Path, PathBuf};

use anyhow::Context;
use widebag_config::units::format_bytes;
use widebag_ledger::Placement;

use crate::commands::sweep::results::Status;
use crate::failure::{Failure, Outcome};
use crate::plan::planner::{cuts_bands, make_plan};
use crate::plan::report::Report;
use crate::preflight::{device_facts, open_compute, predict};
use crate::request::{FrontierRequest, SolverFlags};
use crate::run_dir::{RunDir, config_text};
use jobs::Job;
use row::{FrontierRow, Trained};

pub fn run(req: &FrontierRequest) -> Outcome {
    let out = RunDir::create(&req.out).map_err(Failure::run)?;
    keep_config(&out, &req.config)?;
    let compute = open_compute(req.config.train.device)?;
    eprintln!(
        "widebag: frontier over {} budgets into {} on {}",
        req.budgets.len(),
        req.out.display(),
        compute.adapter
    );
    // Each run is planned with the threads it will have (flex's per-thread scratch is in its
    // ledger), so the plan a child makes for its budget is the one planned here.
    let unfinished = (req.budgets.iter())
        .filter(|(text, _)| finished(&point_dir(&req.out, text)).is_none())
        .count();
    let threads = jobs::threads_each(req.jobs, unfinished);
    let mut rows = match threads {
        Some(t) => rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .context("starting the planning threads")
            .map_err(Failure::run)?
            .install(|| plan_all(req, &out, &compute))?,
        None => plan_all(req, &out, &compute)?,
    };
    let queue: Vec<Job> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Point::Run(_, need) => Some(Job {
                index: i,
                need_bytes: *need,
            }),
            _ => None,
        })
        .collect();
    // The memory the runs share: the device's, less the reserve the solver keeps.
    let memory = compute
        .memory_bytes
        .map(|m| m.saturating_sub(widebag_solver::reserve_bytes(m)));
    let config_file = out.file("config.toml");
    let n = rows.len();
    jobs::run_side_by_side(
        &queue,
        (memory, threads),
        req.jobs,
        |job, threads| {
            let budget = &req.budgets[job.index].0;
            start_run(&config_file, &point_dir(&req.out, budget), budget, threads)
        },
        |job, status, wall_s| {
            let Point::Run(row, _) = &rows[job.index] else {
                unreachable!("only runs are queued")
            };
            let dir = point_dir(&req.out, &row.budget);
            let row = finished_run(row.clone(), &dir, status, wall_s);
            if let Err(e) = RunDir::create(&dir).and_then(|d| d.write_json("row.json", &row)) {
                eprintln!("widebag: {e:#}");
            }
            eprintln!("widebag: [{}/{n}] {}", job.index + 1, describe(&row));
            rows[job.index] = Point::Done(row);
        },
    )
    .map_err(Failure::run)?;
    let rows: Vec<FrontierRow> = rows
        .into_iter()
        .map(|p| match p {
            Point::Done(r) => r,
            Point::Run(..) => unreachable!("every queued run finished"),
        })
        .collect();
    write_results(&out, &rows, &compute.adapter, &req.config).map_err(Failure::run)?;
    match req.json {
        true => println!("{}", serde_json::to_string(&rows).expect("rows serialise")),
        false => print!("{}", row::markdown(&rows, &compute.adapter)),
    }
    let failed = rows.iter().filter(|r| r.status == Status::Failed).count();
    if failed > 0 {
        return Err(Failure::run(anyhow::anyhow!(
            "{failed} of {} runs failed (see their train.log); run the frontier again to retry \
             them",
            rows.len()
        )));
    }
    Ok(())
}

/// A budget's place in the frontier: to run (with the bytes it needs), or done.
enum Point {
    Run(FrontierRow, u64),
    Done(FrontierRow),
}

/// The frontier's config.toml: written by the first invocation, and the same on every later
/// one (a frontier's rows are of one configuration).
fn keep_config(out: &RunDir, config: &widebag_config::Config) -> Result<(), Failure> {
    let text = config_text(config).map_err(Failure::run)?;
    let file = out.file("config.toml");
    match std::fs::read_to_string(&file) {
        Ok(old) if old == text => Ok(()),
        Ok(_) => Err(Failure::usage(anyhow::anyhow!(
            "{} holds a frontier of another configuration (its config.toml differs from this \
             --config and --set); give a new --out, or the same configuration to resume it",
            out.path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => out
            .write("config.toml", text.as_bytes())
            .map_err(Failure::run),
        Err(e) => Err(Failure::run(
            anyhow::Error::from(e).context(format!("reading {}", file.display())),
        )),
    }
}

/// A budget's directory: `budget-64MiB`.
fn point_dir(out: &Path, budget: &str) -> PathBuf {
    let name: String = budget
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '.' {
            true => c,
            false => '_',
        })
        .collect();
    out.join(format!("budget-{name}"))
}

/// A budget finished before (trained or refused); a failed one is run again.
fn finished(dir: &Path) -> Option<FrontierRow> {
    let text = std::fs::read_to_string(dir.join("row.json")).ok()?;
    let row: FrontierRow = serde_json::from_str(&text).ok()?;
    (row.status != Status::Failed).then_some(row)
}

/// Plans every budget not finished before: refused ones are done; the rest are queued with the
/// bytes each needs beside the others (its predicted peak, host tier and the data).
fn plan_all(
    req: &FrontierRequest,
    out: &RunDir,
    compute: &widebag_model::Compute,
) -> Result<Vec<Point>, Failure> {
    let heap_before = crate::heap::in_use_bytes();
    let prepared =
        widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::READ_ONLY)
            .map_err(Failure::usage)?;
    // Each run holds the data as this process does.
    let data_bytes = crate::heap::in_use_bytes().saturating_sub(heap_before);
    let n = req.budgets.len();
    let mut points = Vec::with_capacity(n);
    for (i, (text, bytes)) in req.budgets.iter().enumerate() {
        let dir = point_dir(&out.path, text);
        if let Some(row) = finished(&dir) {
            eprintln!(
                "widebag: [{}/{n}] {} (done before, skipped)",
                i + 1,
                describe(&row)
            );
            points.push(Point::Done(row));
            continue;
        }
        let mut p = prepared.clone();
        let flags = SolverFlags {
            budget: Some((text.clone(), *bytes)),
            ..SolverFlags::with_calibration(None)
        };
        let report = make_plan(&mut p, &flags, &[], Some(compute))
            .map_err(|e| Failure::usage(e.context(format!("planning for {text}"))))?
            .report;
        let point = RunDir::create(&dir).map_err(Failure::run)?;
        point
            .write_json("plan.json", &report)
            .map_err(Failure::run)?;
        let row = FrontierRow::planned(text, &report);
        if !report.fits {
            point.write_json("row.json", &row).map_err(Failure::run)?;
            eprintln!("widebag: [{}/{n}] {}", i + 1, describe(&row));
            points.push(Point::Done(row));
            continue;
        }
        let host = match req.jobs > 1 {
            true => host_bytes(p, &report, compute).map_err(Failure::usage)?,
            false => 0,
        };
        let need = report.predicted_peak_bytes + host + data_bytes;
        points.push(Point::Run(row, need));
    }
    Ok(points)
}

/// The host tier's bytes of the planned run (prepared again when the plan cuts bands).
fn host_bytes(
    mut prepared: widebag_prepare::Prepared,
    report: &Report,
    compute: &widebag_model::Compute,
) -> anyhow::Result<u64> {
    prepared.config = report.plan.apply_to(&prepared.config);
    if cuts_bands(&report.plan) {
        prepared = widebag_prepare::open_data(
            &prepared.config,
            &widebag_prepare::PrepareOptions::READ_ONLY,
        )?;
    }
    let (_, ledger) = predict(&prepared, device_facts(compute))?;
    Ok(ledger.peak(Placement::Host).bytes)
}

/// Starts `widebag train --budget` for one budget into `dir/run` (an unfinished run of an
/// earlier invocation removed first): stdout to `dir/train.json`, stderr to `dir/train.log`.
fn start_run(
    config_file: &Path,
    dir: &Path,
    budget: &str,
    threads: Option<usize>,
) -> anyhow::Result<std::process::Child> {
    let run = dir.join("run");
    if run.exists() {
        std::fs::remove_dir_all(&run).with_context(|| format!("removing {}", run.display()))?;
    }
    let create = |name: &str| {
        let path = dir.join(name);
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))
    };
    let exe = std::env::current_exe().context("finding the widebag binary")?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("train")
        .arg("--config")
        .arg(config_file)
        .args(["--budget", budget, "--json", "--out"])
        .arg(&run)
        .stdin(std::process::Stdio::null())
        .stdout(create("train.json")?)
        .stderr(create("train.log")?);
    if let Some(t) = threads {
        command.env("RAYON_NUM_THREADS", t.to_string());
    }
    command.spawn().context("starting widebag train")
}

/// A run's row from how it ended: trained (its summary read), refused (exit 3) or failed, with
/// the last line of its log.
fn finished_run(
    row: FrontierRow,
    dir: &Path,
    status: std::io::Result<std::process::ExitStatus>,
    wall_s: f64,
) -> FrontierRow {
    let log = dir.join("train.log");
    let last_line = || {
        std::fs::read_to_string(&log)
            .ok()
            .and_then(|t| {
                t.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_default()
    };
    let fail = |mut row: FrontierRow, status: Status, error: String| {
        row.status = status;
        row.error = Some(error);
        row
    };
    match status.map(|s| s.code()) {
        Ok(Some(0)) => {
            let summary = dir.join("run").join("summary.json");
            match std::fs::read_to_string(&summary)
                .map_err(anyhow::Error::from)
                .and_then(|t| Ok(serde_json::from_str::<Trained>(&t)?))
            {
                Ok(t) => row.trained(t, wall_s),
                Err(e) => fail(
                    row,
                    Status::Failed,
                    format!("reading {}: {e}", summary.display()),
                ),
            }
        }
        Ok(Some(3)) => fail(row, Status::Refused, last_line()),
        Ok(code) => {
            let how = code.map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
            fail(
                row,
                Status::Failed,
                format!("{how}: {} (see {})", last_line(), log.display()),
            )
        }
        Err(e) => fail(row, Status::Failed, format!("not started: {e}")),
    }
}

/// A row in one line, for the progress log.
fn describe(row: &FrontierRow) -> String {
    let what = match (&row.quality, &row.error) {
        (Some(q), _) => format!(
            ", {} {:.4}, peak {}",
            q.name,
            q.value,
            row.measured_peak_bytes
                .map_or("not measured".into(), format_bytes)
        ),
        (None, Some(e)) => format!(" ({e})"),
        _ => String::new(),
    };
    format!("{}: {}{what}", row.budget, row.status.name())
}

/// results.csv, results.md and frontier.svg.
fn write_results(
    out: &RunDir,
    rows: &[FrontierRow],
    adapter: &str,
    config: &widebag_config::Config,
) -> anyhow::Result<()> {
    out.write("results.csv", row::csv(rows).as_bytes())?;
    out.write("results.md", row::markdown(rows, adapter).as_bytes())?;
    let source = config
        .data
        .path
        .as_ref()
        .and_then(|p| p.file_name())
        .map_or("synthetic data".to_string(), |f| {
            f.to_string_lossy().into_owned()
        });
    plot::plot_frontier(
        &out.file("frontier.svg"),
        rows,
        &format!("Quality against peak memory, one run per budget ({source})"),
    )
}
