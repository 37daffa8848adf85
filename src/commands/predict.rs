//! `widebag predict RUN_DIR --data FILE --top-k K`: each row's best K classes or items from a
//! trained run, in the data's own numbering with their names where the data has them, as CSV
//! (`row,user,rank,class,name,log_prob`; `user` for LightGCN files) or JSON lines;
//! `--exclude-seen` leaves a row's own items out.

use std::fmt::Write as _;

use anyhow::Context;
use widebag_csr::CsrBatch;
use widebag_model::Compute;
use widebag_model::checkpoint::saved::Saved;
use widebag_model::eval::{ScoreNeed, ScoreOptions, score_rows};
use widebag_prepare::{Prepared, original_ids};

use crate::failure::{Failure, Outcome};
use crate::preflight::open_compute;
use crate::request::{PredictFormat, PredictRequest};

pub fn run(req: &PredictRequest) -> Outcome {
    let prepared =
        widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::READ_ONLY)
            .map_err(Failure::usage)?;
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
    }
    let compute = open_compute(req.config.train.device)?;
    let mut model =
        widebag_model::checkpoint::saved::load(&prepared, &compute, &req.run.checkpoint)
            .context("loading the checkpoint")
            .map_err(Failure::run)?;
    let ranking = Ranking {
        top_k: req.top_k,
        exclude_seen: req.exclude_seen,
    };
    let rows = ranked(&prepared, &mut model, ranking, &compute).map_err(Failure::run)?;
    let numbering = Numbering::of(&prepared);
    let mut out = String::new();
    if req.format == PredictFormat::Csv {
        out.push_str("row,user,rank,class,name,log_prob\n");
    }
    for r in &rows {
        write_row(&mut out, req.format, (r.row, r.user), &r.top, &numbering);
    }
    write_out(req, &out)?;
    eprintln!(
        "widebag predict: {} rows from {} (step {})",
        rows.len(),
        req.data.display(),
        model.manifest.step
    );
    Ok(())
}

/// How rows are ranked: their best `top_k` classes, leaving out what each row has seen (its
/// user's training items, else its own input ids that are classes) with `exclude_seen`.
#[derive(Clone, Copy, Debug)]
pub struct Ranking {
    pub top_k: usize,
    pub exclude_seen: bool,
}

/// A held-out row's best classes: its index, its LightGCN user, and `(class, log_prob)` best
/// first, classes in the data's own numbering.
pub struct Ranked {
    pub row: usize,
    pub user: Option<u32>,
    pub top: Vec<(u32, f32)>,
}

/// Every held-out row of `prepared` ranked by `model`.
pub fn ranked(
    prepared: &Prepared,
    model: &mut Saved,
    ranking: Ranking,
    compute: &Compute,
) -> anyhow::Result<Vec<Ranked>> {
    let numbering = Numbering::of(prepared);
    let mut out = Vec::new();
    for (i, batch) in prepared.eval.iter().enumerate() {
        let batch = if prepared.config.data.normalize {
            batch.l2_normalized()
        } else {
            batch.clone()
        };
        let seen = seen_items(ranking.exclude_seen, prepared, i, &batch, &numbering);
        let options = ScoreOptions {
            k: ranking.top_k,
            seen: &seen,
            backend: compute.backend,
            need: ScoreNeed::LogProbs,
            screen: None,
        };
        let rows = score_rows(model.layout.as_mut(), &batch, options).context("scoring")?;
        for r in rows {
            let row = out.len();
            out.push(Ranked {
                row,
                user: (prepared.eval_users.as_ref()).and_then(|u| u.get(row).copied()),
                top: (r.top.iter())
                    .map(|&(c, lp)| (numbering.class_of_position[c as usize], lp))
                    .collect(),
            });
        }
    }
    Ok(out)
}

/// The data's own numbering of what the model scores: the class id at each class position and
/// the original id of each input id (both renumbered by frequency when the run cut them into
/// bands), and the classes' names.
struct Numbering<'p> {
    prepared: &'p Prepared,
    class_of_position: Vec<u32>,
    old_id: Vec<u32>,
}

impl<'p> Numbering<'p> {
    fn of(prepared: &'p Prepared) -> Self {
        let relabel = &prepared.relabel;
        let data = &prepared.config.data;
        Self {
            prepared,
            class_of_position: original_ids(relabel.classes.as_ref(), data.n_classes()),
            old_id: original_ids(relabel.ids.as_ref(), data.width),
        }
    }

    /// The class position of the data's class `old`.
    fn position(&self, old: u32) -> u32 {
        let classes = &self.prepared.relabel.classes;
        classes.as_ref().map_or(old, |r| r.map(old))
    }

    /// The name of the data's class `class`: its label, else its word, else nothing.
    fn name(&self, class: u32) -> String {
        if let Some(l) = &self.prepared.labels {
            return l.get(class as usize).cloned().unwrap_or_default();
        }
        self.prepared
            .vocabulary
            .as_ref()
            .and_then(|v| v.words.get(class as usize))
            .map_or(String::new(), |(w, _)| w.clone())
    }
}

/// The class positions each row of batch `i` leaves out of its ranking (`--exclude-seen`): the
/// user's training items where the data keeps them, else the row's own input ids that are
/// classes.
fn seen_items(
    exclude_seen: bool,
    prepared: &Prepared,
    i: usize,
    batch: &CsrBatch,
    numbering: &Numbering,
) -> Vec<Vec<u32>> {
    if !exclude_seen {
        return Vec::new();
    }
    if let Some(s) = prepared.eval_seen.get(i).filter(|s| !s.is_empty()) {
        return s.clone();
    }
    let n_classes = prepared.config.data.n_classes();
    let ptr = batch.row_ptr();
    (0..batch.n_rows())
        .map(|r| {
            let mut v: Vec<u32> = batch.ids()[ptr[r]..ptr[r + 1]]
                .iter()
                .map(|&id| numbering.old_id[id as usize])
                .filter(|&o| (o as usize) < n_classes)
                .map(|o| numbering.position(o))
                .collect();
            v.sort_unstable();
            v
        })
        .collect()
}

/// One row's best classes (the data's class ids) as CSV lines or a JSON line.
fn write_row(
    out: &mut String,
    format: PredictFormat,
    (row, user): (usize, Option<u32>),
    top: &[(u32, f32)],
    numbering: &Numbering,
) {
    match format {
        PredictFormat::Csv => {
            let user_field = user.map_or(String::new(), |u| u.to_string());
            for (rank, (c, lp)) in top.iter().enumerate() {
                let n = numbering.name(*c).replace('"', "\"\"");
                let _ = writeln!(out, "{row},{user_field},{},{c},\"{n}\",{lp}", rank + 1);
            }
        }
        PredictFormat::Jsonl => {
            let items: Vec<serde_json::Value> = top
                .iter()
                .map(|&(c, lp)| {
                    serde_json::json!({"class": c, "name": numbering.name(c), "log_prob": lp})
                })
                .collect();
            let line = serde_json::json!({"row": row, "user": user, "top": items});
            let _ = writeln!(out, "{line}");
        }
    }
}

/// The predictions to `--out` (atomically) or stdout.
fn write_out(req: &PredictRequest, out: &str) -> Outcome {
    match &req.out {
        Some(path) => widebag_data::atomic::write_atomic(path, out.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::run)?,
        None => print!("{out}"),
    }
    Ok(())
}
