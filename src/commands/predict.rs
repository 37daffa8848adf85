//! `widebag predict RUN_DIR --data FILE --top-k K`: each row's best K classes or items from a
//! trained run, in the data's own numbering with their names where the data has them, as CSV
//! (`row,user,rank,class,name,log_prob`; `user` for LightGCN files) or JSON lines;
//! `--exclude-seen` leaves a row's own items out.

use std::fmt::Write as _;

use anyhow::Context;
use widebag_model::eval::{ScoreNeed, ScoreOptions, score_rows};

use crate::args::PredictArgs;
use crate::failure::{Failure, Outcome};
use crate::preflight::open_compute;
use crate::request::saved_run;

pub fn run(args: &PredictArgs) -> Outcome {
    if !matches!(args.output.as_str(), "csv" | "jsonl") {
        return Err(Failure::usage(anyhow::anyhow!(
            "--output {}: csv or jsonl",
            args.output
        )));
    }
    if args.top_k == 0 {
        return Err(Failure::usage(anyhow::anyhow!(
            "--top-k must be at least 1"
        )));
    }
    let saved = saved_run(&args.run)?;
    // A run on a packed dataset named by its path alone: the format its header records.
    let mut config = widebag_prepare::with_packed_settings(&saved.config)
        .map_err(Failure::usage)?
        .unwrap_or_else(|| saved.config.clone());
    if config.data.format.is_none() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--data: the run trained on synthetic data, with no file format to read rows in"
        )));
    }
    config.data.test_path = Some(args.data.clone());
    config.train.eval_rows = 0;
    let prepared = widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)
        .map_err(Failure::usage)?;
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
    }
    let compute = open_compute(config.train.device)?;
    let mut model = widebag_model::checkpoint::saved::load(&prepared, &compute, &saved.checkpoint)
        .context("loading the checkpoint")
        .map_err(Failure::run)?;
    let n_classes = prepared.config.data.n_classes();
    let relabel = &prepared.relabel;
    // Class positions back to the data's own class ids; input ids to class positions.
    let mut class_of_position: Vec<u32> = (0..n_classes as u32).collect();
    if let Some(r) = &relabel.classes {
        for o in 0..n_classes as u32 {
            class_of_position[r.map(o) as usize] = o;
        }
    }
    let mut old_id: Vec<u32> = (0..prepared.config.data.width as u32).collect();
    if let Some(r) = &relabel.ids {
        for o in 0..old_id.len() as u32 {
            old_id[r.map(o) as usize] = o;
        }
    }
    let to_position = |old: u32| relabel.classes.as_ref().map_or(old, |r| r.map(old));
    let name = |class: u32| -> String {
        if let Some(l) = &prepared.labels {
            return l.get(class as usize).cloned().unwrap_or_default();
        }
        prepared
            .vocabulary
            .as_ref()
            .and_then(|v| v.words.get(class as usize))
            .map_or(String::new(), |(w, _)| w.clone())
    };
    let mut out = String::new();
    if args.output == "csv" {
        out.push_str("row,user,rank,class,name,log_prob\n");
    }
    let transform_normalize = prepared.config.data.normalize;
    let mut row_index = 0usize;
    for (i, batch) in prepared.eval.iter().enumerate() {
        let batch = if transform_normalize {
            batch.l2_normalized()
        } else {
            batch.clone()
        };
        let seen: Vec<Vec<u32>> = if !args.exclude_seen {
            Vec::new()
        } else if let Some(s) = prepared.eval_seen.get(i).filter(|s| !s.is_empty()) {
            s.clone()
        } else {
            let ptr = batch.row_ptr();
            (0..batch.n_rows())
                .map(|r| {
                    let mut v: Vec<u32> = batch.ids()[ptr[r]..ptr[r + 1]]
                        .iter()
                        .map(|&id| old_id[id as usize])
                        .filter(|&o| (o as usize) < n_classes)
                        .map(to_position)
                        .collect();
                    v.sort_unstable();
                    v
                })
                .collect()
        };
        let options = ScoreOptions {
            k: args.top_k,
            seen: &seen,
            backend: compute.backend,
            need: ScoreNeed::LogProbs,
        };
        let rows = score_rows(model.layout.as_mut(), &batch, options)
            .context("scoring")
            .map_err(Failure::run)?;
        for r in rows {
            let top: Vec<(u32, f32)> = r
                .top
                .iter()
                .map(|&(c, lp)| (class_of_position[c as usize], lp))
                .collect();
            let user = prepared
                .eval_users
                .as_ref()
                .and_then(|u| u.get(row_index).copied());
            let user_field = user.map_or(String::new(), |u| u.to_string());
            if args.output == "csv" {
                for (rank, (c, lp)) in top.iter().enumerate() {
                    let n = name(*c).replace('"', "\"\"");
                    let _ = writeln!(
                        out,
                        "{row_index},{user_field},{},{c},\"{n}\",{lp}",
                        rank + 1
                    );
                }
            } else {
                let items: Vec<serde_json::Value> = top
                    .iter()
                    .map(
                        |&(c, lp)| serde_json::json!({"class": c, "name": name(c), "log_prob": lp}),
                    )
                    .collect();
                let line = serde_json::json!({"row": row_index, "user": user, "top": items});
                let _ = writeln!(out, "{line}");
            }
            row_index += 1;
        }
    }
    match &args.out {
        Some(path) => widebag_data::atomic::write_atomic(path, out.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::run)?,
        None => print!("{out}"),
    }
    eprintln!(
        "widebag predict: {row_index} rows from {} (step {})",
        args.data.display(),
        model.manifest.step
    );
    Ok(())
}
