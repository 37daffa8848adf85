//! `widebag train`: prepares the configured run (planning it first for `--budget`), refuses a
//! step over the device's buffer limit, trains with a progress bar and prints the summary.

use std::fmt::Write;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use widebag_config::units::format_bytes;
use widebag_model::{CheckpointPlan, RunOptions, RunSummary, run_training_with};
use widebag_prepare::Prepared;

use crate::commands::budget::plan_for_budget;
use crate::commands::explain;
use crate::failure::{Failure, Outcome};
use crate::prerun::{check_fits, check_memory, device_facts, open_compute, predict};
use crate::request::TrainRequest;
use crate::run_dir::RunDir;

pub fn run(req: &TrainRequest) -> Outcome {
    if let Some(ranks) = crate::commands::train_ranks::wanted(req) {
        return crate::commands::train_ranks::run(req, ranks);
    }
    let mut prepared =
        widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::TRAIN)
            .map_err(Failure::usage)?;
    announce(&prepared);
    let compute = open_compute(req.config.train.device)?;
    let (saved_config, planned) = match plan_for_budget(req, &mut prepared, &compute, (0, 1))? {
        Some(b) => {
            if b.prepared_again {
                announce(&prepared);
            }
            (b.saved_config, Some(b.report))
        }
        None => (req.config.clone(), None),
    };
    // Refuse, before anything is allocated, a precision the device cannot store and a step with
    // a tensor over the device's buffer limit.
    widebag_model::device::check_precisions(
        &prepared.config,
        &compute,
        prepared.model_bands.input.len(),
    )
    .map_err(Failure::usage)?;
    let (spec, ledger) = predict(&prepared, device_facts(&compute)).map_err(Failure::usage)?;
    check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
    check_memory(&ledger, &compute).map_err(Failure::does_not_fit)?;
    crate::heap::set_context(expectation(&ledger, &compute));
    let mut options = RunOptions {
        profile_sync: req.profile,
        ..RunOptions::default()
    };
    let run_dir = run_directory(req, &mut options, &prepared.config)?;
    if let Some((dir, Some(step))) = &run_dir
        && *step >= prepared.config.train.steps as u64
    {
        eprintln!(
            "widebag: {} is complete: its last checkpoint is at step {step} of {}",
            dir.path.display(),
            prepared.config.train.steps
        );
        if req.json {
            println!(
                "{}",
                complete_json(&dir.path, *step, prepared.config.train.steps)
            );
        }
        return Ok(());
    }
    let mut metrics = match &run_dir {
        Some((dir, resumed)) => {
            if resumed.is_none() {
                dir.write_config(&saved_config).map_err(Failure::run)?;
                let report = explain::report(spec, ledger, &compute.adapter, None);
                dir.write_json("ledger.json", &report)
                    .map_err(Failure::run)?;
                if let Some(p) = &planned {
                    dir.write_json("plan.json", p).map_err(Failure::run)?;
                }
            }
            Some(dir.metrics(*resumed).map_err(Failure::run)?)
        }
        None => {
            if prepared.config.train.checkpoint_every > 0 {
                eprintln!("widebag: train.checkpoint_every needs --out DIR; no checkpoints");
            }
            None
        }
    };
    let bar = ProgressBar::new(prepared.config.train.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed}<{eta}]")
            .expect("valid template"),
    );
    let start = run_dir.as_ref().and_then(|d| d.1).unwrap_or(0);
    bar.set_position(start);
    let started = std::time::Instant::now();
    let mut examples = 0usize;
    let mut last_eval = String::new();
    let summary = run_training_with(prepared, &compute, options, |s| {
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
        if let Some(m) = &mut metrics {
            m.step(s);
        }
    })
    .context("training")
    .map_err(Failure::run)?;
    bar.finish_and_clear();
    if let Some((dir, _)) = &run_dir {
        if let Some(m) = metrics {
            m.finish().map_err(Failure::run)?;
        }
        dir.write_json("summary.json", &summary)
            .map_err(Failure::run)?;
    }
    if req.json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary serialises")
        );
    } else {
        print!("{}", render_summary(&summary));
    }
    Ok(())
}

/// The run directory of `--out` (new) or `--resume` (with the step it continues from), and the
/// checkpoint settings it brings.
fn run_directory(
    req: &TrainRequest,
    options: &mut RunOptions,
    config: &widebag_config::Config,
) -> Result<Option<(RunDir, Option<u64>)>, Failure> {
    let every = config.train.checkpoint_every as u64;
    if let Some(path) = &req.resume {
        let dir = RunDir::create(path).map_err(Failure::run)?;
        let (ckpt, manifest, refused) =
            widebag_model::checkpoint::latest_good(&dir.checkpoints()).map_err(Failure::run)?;
        for r in refused {
            eprintln!("widebag: skipped a newer checkpoint: {r}");
        }
        eprintln!(
            "widebag: resuming {} from {} (step {})",
            path.display(),
            ckpt.display(),
            manifest.step
        );
        options.resume = Some(ckpt);
        options.checkpoints = Some(CheckpointPlan {
            root: dir.checkpoints(),
            every,
        });
        return Ok(Some((dir, Some(manifest.step))));
    }
    let Some(path) = &req.out else {
        return Ok(None);
    };
    if path.join("summary.json").exists() || path.join("checkpoints").exists() {
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

/// The run's summary for a terminal.
pub fn render_summary(s: &RunSummary) -> String {
    let mut out = String::new();
    write_summary(&mut out, s).expect("writing to a String");
    out
}

fn write_summary(out: &mut String, s: &RunSummary) -> std::fmt::Result {
    writeln!(out, "widebag train: done")?;
    writeln!(out, "  adapter            {} [{:?}]", s.adapter, s.backend)?;
    writeln!(
        out,
        "  model              {} → {} → {:?} → {} classes ({} table shards, {} class chunks)",
        s.width, s.dim, s.hidden, s.n_classes, s.table_shards, s.class_chunks
    )?;
    writeln!(
        out,
        "  optimizers         table {:?}, dense {:?}",
        s.table_optimizer, s.dense_optimizer
    )?;
    writeln!(
        out,
        "  steps × batch      {} × {}  ({:.1} examples/s after the first step)",
        s.steps, s.batch_size, s.examples_per_s
    )?;
    writeln!(
        out,
        "  loss               {:.4} → {:.4} (mean of last 10: {:.4})",
        s.first_loss, s.final_loss, s.final_loss_mean10
    )?;
    writeln!(
        out,
        "  table / parameters {} / {} ({} input-side and {} output values)",
        format_bytes(s.table_bytes),
        format_bytes(s.parameter_bytes),
        s.table_parameters,
        s.output_parameters
    )?;
    writeln!(out, "  output             {}", s.output.name())?;
    for b in &s.bands {
        writeln!(out, "  {}", b.line())?;
    }
    if s.host_bytes > 0 {
        writeln!(
            out,
            "  host bands         {} in host memory; per step {} to the device, {} back",
            format_bytes(s.host_bytes),
            format_bytes(s.host_to_device_bytes_per_step.round() as u64),
            format_bytes(s.device_to_host_bytes_per_step.round() as u64)
        )?;
    }
    if let Some(l) = s.eval_loss {
        writeln!(
            out,
            "  validation loss    {l:.4} over {} held-out rows",
            s.eval_rows
        )?;
    }
    if let Some(e) = s.evaluations.last() {
        writeln!(
            out,
            "  evaluation         {} (after step {})",
            e.line, e.step
        )?;
    }
    if let Some(d) = &s.data {
        writeln!(
            out,
            "  data               {} ({}, {} rows, {} epochs started, {:.1} unique ids per batch)",
            d.path.display(),
            d.format.name(),
            d.rows,
            s.epochs.unwrap_or(0),
            d.unique_ids_per_batch
        )?;
        if let Some(v) = &d.vocabulary_file {
            writeln!(out, "  vocabulary         {}", v.display())?;
        }
        if let Some(f) = &d.stats_file {
            let how = if d.stats_reused { "reused" } else { "saved" };
            writeln!(out, "  statistics         {} ({how})", f.display())?;
        }
    }
    match (s.peak_in_use_bytes, s.peak_reserved_bytes) {
        (Some(u), Some(r)) => writeln!(
            out,
            "  peak device memory {} in use, {} reserved (burn allocator)",
            format_bytes(u),
            format_bytes(r)
        )?,
        _ => writeln!(out, "  peak device memory not reported by this backend")?,
    }
    if let Some(rss) = s.peak_rss_bytes {
        writeln!(
            out,
            "  peak process RSS   {} (host memory, data included)",
            format_bytes(rss)
        )?;
    }
    writeln!(out, "  step profile       {}", profile_line(&s.profile))?;
    Ok(())
}

/// `ms per step` and the largest stages with their shares, e.g.
/// `41.2 ms/step: output_backward 48% · output_forward 30% · …`.
pub fn profile_line(p: &widebag_model::ProfileReport) -> String {
    let stages: Vec<String> = p
        .top()
        .iter()
        .filter(|s| s.share >= 0.01)
        .map(|s| format!("{} {:.0}%", s.stage.name(), 100.0 * s.share))
        .collect();
    format!(
        "{:.1} ms/step over {} steps{}: {}",
        p.ms_per_step,
        p.steps,
        if p.synced { " (synced)" } else { "" },
        stages.join(" · ")
    )
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
