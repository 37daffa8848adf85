//! `widebag eval RUN_DIR`: a trained run's model (its last good checkpoint) on held-out rows —
//! the run's own, or `--data FILE` read against the training file — with the task's metrics.

use anyhow::Context;
use serde::Serialize;
use widebag_eval::EvalReport;

use crate::failure::{Failure, Outcome};
use crate::preflight::open_compute;
use crate::request::EvalRequest;

#[derive(Serialize)]
struct Output {
    run: std::path::PathBuf,
    checkpoint: std::path::PathBuf,
    step: u64,
    held_out: std::path::PathBuf,
    report: EvalReport,
    line: String,
}

pub fn run(req: &EvalRequest) -> Outcome {
    let (saved, config) = (&req.run, &req.config);
    let prepared = widebag_prepare::open_data(config, &widebag_prepare::PrepareOptions::READ_ONLY)
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
    let report = widebag_model::eval::held_out::evaluate_held_out(&mut model, &prepared, &compute)
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
    if req.json {
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
