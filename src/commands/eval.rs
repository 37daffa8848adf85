//! `widebag eval RUN_DIR`: a trained run's model (its last good checkpoint) on held-out rows —
//! the run's own, or `--data FILE` read against the training file — with the task's metrics.

use anyhow::Context;
use serde::Serialize;
use widebag_eval::EvalReport;

use crate::args::EvalArgs;
use crate::failure::{Failure, Outcome};
use crate::preflight::open_compute;
use crate::request::saved_run;

#[derive(Serialize)]
struct Output {
    run: std::path::PathBuf,
    checkpoint: std::path::PathBuf,
    step: u64,
    held_out: std::path::PathBuf,
    report: EvalReport,
    line: String,
}

pub fn run(args: &EvalArgs) -> Outcome {
    let saved = saved_run(&args.run)?;
    // A run on a packed dataset named by its path alone: the format its header records.
    let mut config = widebag_prepare::with_packed_settings(&saved.config)
        .map_err(Failure::usage)?
        .unwrap_or_else(|| saved.config.clone());
    if let Some(data) = &args.data {
        let Some(train_format) = config.data.format else {
            return Err(Failure::usage(anyhow::anyhow!(
                "--data: the run trained on synthetic data; its held-out rows are its own \
                 (train.eval_rows)"
            )));
        };
        if let Some(f) = &args.format
            && f != train_format.name()
        {
            return Err(Failure::usage(anyhow::anyhow!(
                "--format {f}: held-out rows are read in the training file's format ({})",
                train_format.name()
            )));
        }
        config.data.test_path = Some(data.clone());
        config.train.eval_rows = 0;
    }
    let prepared = widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)
        .map_err(Failure::usage)?;
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
    }
    if prepared.eval.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "{}: the run has no held-out rows (data.test_path, train.eval_rows): give --data FILE",
            saved.dir.display()
        )));
    }
    let compute = open_compute(config.train.device)?;
    let mut model = widebag_model::checkpoint::saved::load(&prepared, &compute, &saved.checkpoint)
        .context("loading the checkpoint")
        .map_err(Failure::run)?;
    let report =
        widebag_model::checkpoint::saved::evaluate_held_out(&mut model, &prepared, &compute)
            .context("evaluating")
            .map_err(Failure::run)?
            .expect("held-out rows are present");
    let held_out = match &config.data.test_path {
        Some(p) => p.clone(),
        None => "train.eval_rows".into(),
    };
    let out = Output {
        run: saved.dir.clone(),
        checkpoint: saved.checkpoint.clone(),
        step: model.manifest.step,
        held_out,
        line: report.line(),
        report,
    };
    if args.json {
        println!("{}", serde_json::to_string(&out).expect("serialises"));
    } else {
        println!(
            "widebag eval: {} at step {} on {}: {}",
            out.run.display(),
            out.step,
            out.held_out.display(),
            out.line
        );
    }
    Ok(())
}
