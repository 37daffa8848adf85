//! `widebag train`, for one process or across ranks (one path: one process is the one-rank
//! case): prepares the configured run (planning it first for `--budget`: across ranks, each
//! rank its own part), refuses a step over the device's buffer limit or a run over the
//! machine's memory, trains with a progress bar and prints the summary. Across ranks
//! (`mpirun -np N` with `--features mpi`, or `--ranks N` as threads: [`launch`]) every rank
//! prepares the same run and trains its part; rank 0 keeps the run directory (config, metrics,
//! summary) and prints the summary, and every rank writes its own checkpoints under
//! `checkpoints/rank-R-of-N/`; `--resume` continues at the same N.

use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_config::units::format_bytes;
use widebag_ledger::Ledger;
use widebag_ledger::host_side::{BATCHES_IN_FLIGHT, HostSide};
use widebag_ledger::step::StepSpec;
use widebag_model::train::group::refused_across_ranks;
use widebag_model::{Compute, RunOptions, RunSummary, Watch, train};
use widebag_prepare::Prepared;

use crate::commands::explain;
use crate::failure::{Failure, Outcome};
use crate::plan::budget::plan_for_budget;
use crate::plan::report::Report;
use crate::preflight::{
    check_fits, check_memory_shared, device_facts, host_side, open_compute, predict, predict_rank,
};
use crate::request::TrainRequest;
use crate::run::directory::run_directory;
use crate::run::hooks::Hooks;
use crate::run::launch;
use crate::run::lengthen;
use crate::run::summary::render_summary;
use crate::run::watch::{Progress, StepLog};
use crate::run_dir::RunDir;

/// How a run ended, as rank 0 reports it.
pub enum Finished {
    Trained(Box<RunSummary>),
    /// `--resume` of a run whose every rank's last checkpoint is at its last step.
    Complete {
        dir: std::path::PathBuf,
        step: u64,
    },
}

pub fn run(req: &TrainRequest) -> Outcome {
    let finished = match launch::wanted(req) {
        None => train_as(req, &Local, None, Hooks::default())?,
        Some(ranks) => {
            if let Some((key, message)) = refused_across_ranks(&req.config, ranks) {
                return Err(Failure::usage(anyhow::anyhow!("{key}: {message}")));
            }
            match launch::mpi_world_size() {
                Some(_) => {
                    launch::on_mpi_world(|comm| train_as(req, comm, None, Hooks::default()))??
                }
                None => {
                    // Threads share one prepared run.
                    let prepared = prepare(req)?;
                    launch::on_threads(ranks, |comm| {
                        train_as(req, comm, Some(prepared.clone()), Hooks::default())
                    })?
                }
            }
        }
    };
    match finished {
        None => {}
        Some(Finished::Complete { dir, step }) => {
            let steps = req.config.train.steps;
            eprintln!(
                "widebag: {} is complete: its last checkpoint is at step {step} of {steps}",
                dir.display(),
            );
            if req.json {
                println!("{}", complete_json(&dir, step, steps));
            }
        }
        Some(Finished::Trained(summary)) => match req.json {
            true => println!(
                "{}",
                serde_json::to_string(&summary).expect("summary serialises")
            ),
            false => print!("{}", render_summary(&summary)),
        },
    }
    Ok(())
}

/// The run's data and bands (each process of an MPI run prepares its own; threads share one).
fn prepare(req: &TrainRequest) -> Result<Prepared, Failure> {
    let prepared = widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::TRAIN)
        .map_err(Failure::usage)?;
    crate::host_memory::data_ready();
    Ok(prepared)
}

/// One process's run of `req` with `hooks` (the Python package's way in): how it ended.
pub fn train_one(req: &TrainRequest, hooks: Hooks) -> Result<Finished, Failure> {
    let finished = train_as(req, &Local, None, hooks)?;
    Ok(finished.expect("one process is rank 0"))
}

/// Rank `comm.rank()`'s run: prepare, open the device, plan its part (`--budget`), refuse what
/// would not fit, train, and (rank 0) keep the run directory. Rank 0 gets how the run ended.
fn train_as(
    req: &TrainRequest,
    comm: &dyn Collective,
    prepared: Option<Prepared>,
    mut hooks: Hooks,
) -> Result<Option<Finished>, Failure> {
    let lead = comm.rank() == 0;
    let mut prepared = match prepared {
        Some(p) => p,
        None => prepare(req)?,
    };
    if lead {
        announce(&prepared);
    }
    let compute = open_compute(req.config.train.device)?;
    let (saved_config, planned) = plan_part(req, &mut prepared, &compute, comm)?;
    let fits = refuse_what_does_not_fit(&prepared, &compute, comm)?;
    let mut options = run_options(req, &hooks);
    let steps = prepared.config.train.steps as u64;
    let run_dir = run_directory(req, &mut options, &prepared.config, comm)?;
    if let Some(done) = already_complete(req, &run_dir, steps, comm)? {
        return Ok(lead.then_some(done));
    }
    let log_dir = run_dir.as_ref().map(|(d, _)| d).filter(|_| lead);
    if let (Some(dir), Some(written)) = (log_dir, &req.lengthened) {
        let from = run_dir.as_ref().and_then(|(_, s)| *s).unwrap_or(0);
        let note = lengthen::note(written, &req.config, steps as usize, from);
        eprintln!("widebag: {note}");
        lengthen::record(dir, &req.config, &note).map_err(Failure::run)?;
    }
    if let Some(dir) = log_dir.filter(|_| req.resume.is_none()) {
        write_run_files(dir, &saved_config, fits, planned.as_ref(), &compute)?;
    }
    if run_dir.is_none() && lead && prepared.config.train.checkpoint_every > 0 {
        eprintln!("widebag: train.checkpoint_every needs --out DIR; no checkpoints");
    }
    let mut progress = Progress::new(lead && hooks.bar, steps);
    let mut log = StepLog::new(log_dir, req.resume.is_some());
    let summary = train(prepared, &compute, comm, options, |s| {
        progress.step(s);
        log.step(s);
        if let Some(f) = hooks.on_step.as_mut() {
            f(s, steps);
        }
    });
    progress.finish();
    let summary = match summary {
        Ok(s) => s,
        Err(e) => {
            // The steps taken stay in the log (a run stopped on request resumes from them).
            if let Err(l) = log.finish() {
                eprintln!("widebag: metrics log: {l:#}");
            }
            return Err(training_failure(e, comm));
        }
    };
    if let Some(d) = log_dir {
        log.finish().map_err(Failure::run)?;
        d.write_json("summary.json", &summary)
            .map_err(Failure::run)?;
    }
    Ok(lead.then(|| Finished::Trained(Box::new(summary))))
}

/// `--budget`: this rank's part planned (the run prepared again when the plan cuts bands),
/// with the config the run directory keeps and the plan's report; without it, the request's
/// config and no plan.
fn plan_part(
    req: &TrainRequest,
    prepared: &mut Prepared,
    compute: &Compute,
    comm: &dyn Collective,
) -> Result<(widebag_config::Config, Option<Report>), Failure> {
    let lead = comm.rank() == 0;
    Ok(
        match plan_for_budget(req, prepared, compute, (comm.rank(), comm.size()))? {
            Some(b) => {
                if b.prepared_again && lead {
                    announce(prepared);
                }
                (b.saved_config, Some(b.report))
            }
            None => (req.config.clone(), None),
        },
    )
}

/// The step's predicted ledger and host side, once it is known to fit.
struct Fits {
    spec: StepSpec,
    ledger: Ledger,
    host: HostSide,
}

/// Refused, before anything is allocated: a precision the device cannot store, a step with a
/// tensor over the device's buffer limit, and the ranks this machine holds (one process; all
/// threads; under mpirun its local ranks) over its memory (exit 3, with the ledger's numbers).
fn refuse_what_does_not_fit(
    prepared: &Prepared,
    compute: &Compute,
    comm: &dyn Collective,
) -> Result<Fits, Failure> {
    let (rank, size) = (comm.rank(), comm.size());
    widebag_model::device::check_precisions(
        &prepared.config,
        compute,
        prepared.model_bands.input.len(),
    )
    .map_err(Failure::usage)?;
    let facts = device_facts(compute);
    let (spec, ledger) = match size == 1 {
        true => predict(prepared, facts),
        false => predict_rank(prepared, facts, rank, size, 0),
    }
    .map_err(Failure::usage)?;
    check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
    let host = host_side(prepared, &spec, &ledger, BATCHES_IN_FLIGHT);
    check_memory_shared(&ledger, &host, compute, launch::local_ranks(comm))
        .map_err(Failure::does_not_fit)?;
    if rank == 0 {
        crate::heap::set_context(expectation(&ledger, compute));
    }
    Ok(Fits { spec, ledger, host })
}

/// How the run is watched and what it saves: flex's peak measured on the heap (one process;
/// each rank of mpirun is measured by `explain --measure`), `--profile`, `--save-init`.
fn run_options(req: &TrainRequest, hooks: &Hooks) -> RunOptions {
    RunOptions {
        stop: hooks.stop.clone(),
        watch: Watch {
            profile_sync: req.profile,
            heap_probe: true,
            ..Watch::default()
        },
        save_init: req.save_init.clone(),
        ..RunOptions::default()
    }
}

/// `--resume` of a run every rank finished: how it ended (the ranks agree before any of them
/// returns); `None` while there are steps to take.
fn already_complete(
    req: &TrainRequest,
    run_dir: &Option<(RunDir, Option<u64>)>,
    steps: u64,
    comm: &dyn Collective,
) -> Result<Option<Finished>, Failure> {
    let Some((dir, resumed)) = run_dir.as_ref().filter(|_| req.resume.is_some()) else {
        return Ok(None);
    };
    let mut open = [match resumed {
        Some(step) if *step >= steps => 0.0f32,
        _ => 1.0,
    }];
    comm.all_reduce_sum(&mut open)
        .map_err(|e| Failure::run(anyhow::anyhow!("rank {}: {e}", comm.rank())))?;
    Ok((open[0] == 0.0).then(|| Finished::Complete {
        dir: dir.path.clone(),
        step: resumed.unwrap_or(steps),
    }))
}

/// A new run directory's config, ledger (with the host side) and plan.
fn write_run_files(
    dir: &RunDir,
    config: &widebag_config::Config,
    fits: Fits,
    planned: Option<&Report>,
    compute: &Compute,
) -> Result<(), Failure> {
    dir.write_config(config).map_err(Failure::run)?;
    let mut report = explain::report(fits.spec, fits.ledger, &compute.adapter, None);
    report.host = Some(explain::host::host_report(fits.host, None));
    dir.write_json("ledger.json", &report)
        .map_err(Failure::run)?;
    if let Some(p) = planned {
        dir.write_json("plan.json", p).map_err(Failure::run)?;
    }
    Ok(())
}

/// A training error as the run's failure: across ranks named by the rank, and a setting the
/// device cannot run a usage error.
fn training_failure(e: widebag_model::ModelError, comm: &dyn Collective) -> Failure {
    if comm.size() == 1 {
        return Failure::run(anyhow::Error::new(e).context("training"));
    }
    let usage = matches!(e, widebag_model::ModelError::Unsupported { .. });
    let error = anyhow::anyhow!("rank {}: {e}", comm.rank());
    match usage {
        true => Failure::usage(error),
        false => Failure::run(error),
    }
}

/// The prepared run's warnings, bands and data file, on stderr.
fn announce(prepared: &Prepared) {
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
    }
    for b in &prepared.bands {
        eprintln!("widebag: {}", b.line());
    }
    if let Some(d) = &prepared.data {
        eprintln!(
            "widebag: {} ({}): {} rows, width {}, {} classes, {} nnz{}",
            d.path.display(),
            d.format.name(),
            d.rows,
            d.width,
            d.n_classes,
            d.nnz_total,
            if d.skipped_lines > 0 {
                format!(", {} bad lines skipped", d.skipped_lines)
            } else {
                String::new()
            }
        );
    }
}

/// What an out-of-memory report says the run expected: the ledger's peak, where it falls, and the
/// memory the device has (where known).
fn expectation(ledger: &Ledger, compute: &Compute) -> String {
    use widebag_ledger::Placement;
    let device = ledger.peak(Placement::Device);
    let host = ledger.peak(Placement::Host).bytes;
    let memory = compute.memory_bytes.map_or(String::new(), |m| {
        format!(", of the {} it has", format_bytes(m))
    });
    format!(
        "the ledger predicted a peak of {} on {} at `{}`{memory}, and {} on the host tier \
         (`widebag explain` itemizes it; `widebag plan --budget B` finds a layout under B)",
        format_bytes(device.bytes),
        compute.adapter,
        device.point.name(),
        format_bytes(host)
    )
}

/// `--json` for a run directory that is already complete: one object saying so, with the run's
/// own `summary.json` when it has one (`null` when the run stopped before writing it).
fn complete_json(dir: &std::path::Path, step: u64, steps: usize) -> serde_json::Value {
    let summary = std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "status": "complete",
        "run_dir": dir.display().to_string(),
        "last_checkpoint_step": step,
        "steps": steps,
        "summary": summary,
    })
}
