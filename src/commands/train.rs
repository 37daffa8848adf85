//! `widebag train`, for one process or across ranks (one path: one process is the one-rank
//! case): prepares the configured run (planning it first for `--budget`: across ranks, each
//! rank its own part), refuses a step over the device's buffer limit or a run over the
//! machine's memory, trains with a progress bar and prints the summary. Across ranks
//! (`mpirun -np N` with `--features mpi`, or `--ranks N` as threads: [`launch`]) every rank
//! prepares the same run and trains its part; rank 0 keeps the run directory (config, metrics,
//! summary) and prints the summary, and every rank writes its own checkpoints under
//! `checkpoints/rank-R-of-N/`; `--resume` continues at the same N.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_config::units::format_bytes;
use widebag_ledger::host_side::BATCHES_IN_FLIGHT;
use widebag_model::train::group::{rank_dir, refused_across_ranks};
use widebag_model::{CheckpointPlan, Ranks, Resume, RunOptions, RunSummary, Watch, train};
use widebag_prepare::Prepared;

use crate::commands::explain;
use crate::failure::{Failure, Outcome};
use crate::plan::budget::plan_for_budget;
use crate::preflight::{
    check_fits, check_memory_shared, device_facts, host_side, open_compute, predict, predict_rank,
};
use crate::request::TrainRequest;
use crate::run::launch;
use crate::run::summary::render_summary;
use crate::run_dir::{MetricsLog, RunDir};

/// How a run ended, as rank 0 reports it.
enum Finished {
    Trained(Box<RunSummary>),
    /// `--resume` of a run whose every rank's last checkpoint is at its last step.
    Complete {
        dir: std::path::PathBuf,
        step: u64,
    },
}

pub fn run(req: &TrainRequest) -> Outcome {
    let finished = match launch::wanted(req) {
        None => train_as(req, &Local, None)?,
        Some(ranks) => {
            if let Some((key, message)) = refused_across_ranks(&req.config, ranks) {
                return Err(Failure::usage(anyhow::anyhow!("{key}: {message}")));
            }
            match launch::mpi_world_size() {
                Some(_) => launch::on_mpi_world(|comm| train_as(req, comm, None))??,
                None => {
                    // Threads share one prepared run.
                    let prepared = prepare(req)?;
                    launch::on_threads(ranks, |comm| train_as(req, comm, Some(prepared.clone())))?
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

/// Rank `comm.rank()`'s run: prepare, open the device, plan its part (`--budget`), refuse what
/// would not fit, train, and (rank 0) keep the run directory. Rank 0 gets how the run ended.
fn train_as(
    req: &TrainRequest,
    comm: &dyn Collective,
    prepared: Option<Prepared>,
) -> Result<Option<Finished>, Failure> {
    let (rank, size) = (comm.rank(), comm.size());
    let (lead, alone) = (rank == 0, size == 1);
    let mut prepared = match prepared {
        Some(p) => p,
        None => prepare(req)?,
    };
    if lead {
        announce(&prepared);
    }
    let compute = open_compute(req.config.train.device)?;
    let (saved_config, planned) = match plan_for_budget(req, &mut prepared, &compute, (rank, size))?
    {
        Some(b) => {
            if b.prepared_again && lead {
                announce(&prepared);
            }
            (b.saved_config, Some(b.report))
        }
        None => (req.config.clone(), None),
    };
    // Refuse, before anything is allocated, a precision the device cannot store, a step with a
    // tensor over the device's buffer limit, and the ranks this machine holds (one process; all
    // threads; under mpirun its local ranks) over its memory.
    widebag_model::device::check_precisions(
        &prepared.config,
        &compute,
        prepared.model_bands.input.len(),
    )
    .map_err(Failure::usage)?;
    let facts = device_facts(&compute);
    let (spec, ledger) = match alone {
        true => predict(&prepared, facts),
        false => predict_rank(&prepared, facts, rank, size, 0),
    }
    .map_err(Failure::usage)?;
    check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
    let host = host_side(&prepared, &spec, &ledger, BATCHES_IN_FLIGHT);
    check_memory_shared(&ledger, &host, &compute, launch::local_ranks(comm))
        .map_err(Failure::does_not_fit)?;
    if lead {
        crate::heap::set_context(expectation(&ledger, &compute));
    }
    let mut options = RunOptions {
        watch: Watch {
            profile_sync: req.profile,
            // flex's peak is measured on the heap (one process; each rank of mpirun is
            // measured by `explain --measure`).
            heap_probe: true,
            ..Watch::default()
        },
        save_init: req.save_init.clone(),
        ..RunOptions::default()
    };
    let steps = prepared.config.train.steps as u64;
    let run_dir = run_directory(req, &mut options, &prepared.config, comm)?;
    // A run every rank finished is complete (the ranks agree before any of them returns).
    if let Some((dir, resumed)) = &run_dir
        && req.resume.is_some()
    {
        let mut open = [match resumed {
            Some(step) if *step >= steps => 0.0f32,
            _ => 1.0,
        }];
        comm.all_reduce_sum(&mut open)
            .map_err(|e| Failure::run(anyhow::anyhow!("rank {rank}: {e}")))?;
        if open[0] == 0.0 {
            let step = resumed.unwrap_or(steps);
            let done = Finished::Complete {
                dir: dir.path.clone(),
                step,
            };
            return Ok(lead.then_some(done));
        }
    }
    let log_dir = run_dir.as_ref().map(|(d, _)| d).filter(|_| lead);
    let resuming = req.resume.is_some();
    if let Some(dir) = log_dir
        && !resuming
    {
        dir.write_config(&saved_config).map_err(Failure::run)?;
        let mut report = explain::report(spec, ledger, &compute.adapter, None);
        report.host = Some(explain::host::host_report(host, None));
        dir.write_json("ledger.json", &report)
            .map_err(Failure::run)?;
        if let Some(p) = &planned {
            dir.write_json("plan.json", p).map_err(Failure::run)?;
        }
    }
    if run_dir.is_none() && lead && prepared.config.train.checkpoint_every > 0 {
        eprintln!("widebag: train.checkpoint_every needs --out DIR; no checkpoints");
    }
    let bar = match lead {
        true => ProgressBar::new(steps),
        false => ProgressBar::hidden(),
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed}<{eta}]")
            .expect("valid template"),
    );
    let started = std::time::Instant::now();
    let mut examples = 0usize;
    let mut last_eval = String::new();
    // Rank 0 logs every step; a resumed log is cut back to the checkpoint's step at the first.
    let mut metrics: Option<MetricsLog> = None;
    let mut log_error = None;
    let summary = train(prepared, &compute, comm, options, |s| {
        if bar.position() == 0 {
            bar.set_position(s.step - 1);
        }
        examples += s.n_rows;
        let rate = examples as f64 / started.elapsed().as_secs_f64().max(1e-9);
        if let Some(e) = &s.eval {
            last_eval = format!("  [{}]", e.line());
        }
        let epoch = s.epoch.map_or(String::new(), |e| format!("epoch {e}  "));
        bar.set_message(format!(
            "{epoch}loss {:.4}  {:.0} ex/s{last_eval}",
            s.loss, rate
        ));
        bar.inc(1);
        let Some(d) = log_dir else { return };
        if metrics.is_none() && log_error.is_none() {
            match d.metrics(resuming.then(|| s.step - 1)) {
                Ok(m) => metrics = Some(m),
                Err(e) => log_error = Some(e),
            }
        }
        if let Some(m) = &mut metrics {
            m.step(s);
        }
    });
    let summary = match alone {
        true => summary.context("training").map_err(Failure::run)?,
        false => summary.map_err(|e| {
            let usage = matches!(e, widebag_model::ModelError::Unsupported { .. });
            let error = anyhow::anyhow!("rank {rank}: {e}");
            match usage {
                true => Failure::usage(error),
                false => Failure::run(error),
            }
        })?,
    };
    bar.finish_and_clear();
    if let Some(d) = log_dir {
        if let Some(e) = log_error {
            return Err(Failure::run(e));
        }
        if let Some(m) = metrics {
            m.finish().map_err(Failure::run)?;
        }
        d.write_json("summary.json", &summary)
            .map_err(Failure::run)?;
    }
    Ok(lead.then(|| Finished::Trained(Box::new(summary))))
}

/// The run directory of `--out` (new) or `--resume` (with the step of this rank's newest good
/// checkpoint), and the checkpoint settings it brings. One process continues from its newest
/// good checkpoint; ranks from the newest step every rank has one of, at the same N.
fn run_directory(
    req: &TrainRequest,
    options: &mut RunOptions,
    config: &widebag_config::Config,
    comm: &dyn Collective,
) -> Result<Option<(RunDir, Option<u64>)>, Failure> {
    let every = config.train.checkpoint_every as u64;
    let ranks = Ranks {
        rank: comm.rank(),
        size: comm.size(),
    };
    let alone = ranks.size == 1;
    if let Some(path) = &req.resume {
        let dir = RunDir::create(path).map_err(Failure::run)?;
        let mine = rank_dir(&dir.checkpoints(), ranks);
        options.checkpoints = Some(CheckpointPlan {
            root: dir.checkpoints(),
            every,
        });
        if !alone {
            if !mine.exists() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--resume {}: no checkpoints of rank {} of {} (a run continues at the \
                     number of ranks that wrote it: {})",
                    path.display(),
                    ranks.rank,
                    ranks.size,
                    written_by(&dir.checkpoints())
                )));
            }
            // The step every rank continues from is agreed as the run starts.
            options.resume = Some(Resume::NewestCommon);
            let newest = widebag_model::checkpoint::latest_good(&mine).ok();
            return Ok(Some((dir, newest.map(|(_, m, _)| m.step))));
        }
        let (ckpt, manifest, refused) =
            widebag_model::checkpoint::latest_good(&mine).map_err(Failure::run)?;
        for r in refused {
            eprintln!("widebag: skipped a newer checkpoint: {r}");
        }
        eprintln!(
            "widebag: resuming {} from {} (step {})",
            path.display(),
            ckpt.display(),
            manifest.step
        );
        options.resume = Some(Resume::Checkpoint(ckpt));
        return Ok(Some((dir, Some(manifest.step))));
    }
    let Some(path) = &req.out else {
        return Ok(None);
    };
    if comm.rank() == 0 && (path.join("summary.json").exists() || path.join("checkpoints").exists())
    {
        return Err(Failure::usage(anyhow::anyhow!(
            "--out {}: already holds a run; continue it with --resume {} or choose another \
             directory",
            path.display(),
            path.display()
        )));
    }
    let dir = RunDir::create(path).map_err(Failure::run)?;
    options.checkpoints = Some(CheckpointPlan {
        root: dir.checkpoints(),
        every,
    });
    Ok(Some((dir, None)))
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
fn expectation(ledger: &widebag_ledger::Ledger, compute: &widebag_model::Compute) -> String {
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
