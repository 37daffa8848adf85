//! Requests that read a trained run (`eval`, `export`, `predict`): the run directory's config
//! (with the device flag), the checkpoint to load (the last good one unless named), and each
//! command's flags checked against them.

use std::path::PathBuf;

use widebag_config::Config;

use super::flags::{device_flag, load};
use crate::args::{EvalArgs, ExportArgs, PredictArgs, RunArgs};
use crate::failure::Failure;

/// A trained run to read.
pub struct SavedRun {
    pub dir: PathBuf,
    pub config: Config,
    pub checkpoint: PathBuf,
}

fn saved_run(args: &RunArgs) -> Result<SavedRun, Failure> {
    let file = args.run.join("config.toml");
    if !file.is_file() {
        return Err(Failure::usage(anyhow::anyhow!(
            "{}: no config.toml there (not a run directory written by `widebag train --out`)",
            args.run.display()
        )));
    }
    let config = load(Some(&file), &[], device_flag(&args.device).as_slice())?;
    let checkpoint = match &args.checkpoint {
        Some(dir) => dir.clone(),
        None => {
            let root = args.run.join("checkpoints");
            if let Some(n) = widebag_model::checkpoint::gather::ranks_of(&root) {
                eprintln!(
                    "widebag: {} was trained across {n} ranks: its ranks' checkpoints are \
                     gathered into one model",
                    args.run.display()
                );
                return Ok(SavedRun {
                    dir: args.run.clone(),
                    config,
                    checkpoint: root,
                });
            }
            let (dir, _, refused) = widebag_model::checkpoint::latest_good(&root)
                .map_err(|e| Failure::usage(anyhow::Error::from(e)))?;
            for r in refused {
                eprintln!("widebag: skipped a newer checkpoint: {r}");
            }
            dir
        }
    };
    Ok(SavedRun {
        dir: args.run.clone(),
        config,
        checkpoint,
    })
}

/// The run's config as its data is read again: a run on a packed dataset named by its path alone
/// takes the format its header records.
fn data_config(saved: &SavedRun) -> Result<Config, Failure> {
    Ok(widebag_prepare::with_packed_settings(&saved.config)
        .map_err(Failure::usage)?
        .unwrap_or_else(|| saved.config.clone()))
}

/// `widebag eval`.
pub struct EvalRequest {
    pub run: SavedRun,
    /// The run's config, reading `--data` as its held-out rows when given.
    pub config: Config,
    pub json: bool,
}

pub fn eval(args: &EvalArgs) -> Result<EvalRequest, Failure> {
    let run = saved_run(&args.run)?;
    let mut config = data_config(&run)?;
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
    Ok(EvalRequest {
        run,
        config,
        json: args.json,
    })
}

/// `widebag export`.
pub struct ExportRequest {
    pub run: SavedRun,
    /// `--to`: the directory the files go to.
    pub to: PathBuf,
}

pub fn export(args: &ExportArgs) -> Result<ExportRequest, Failure> {
    Ok(ExportRequest {
        run: saved_run(&args.run)?,
        to: args.to.clone(),
    })
}

/// `predict --output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictFormat {
    /// `row,user,rank,class,name,log_prob`, a line per class.
    Csv,
    /// One JSON object per row.
    Jsonl,
}

/// `widebag predict`.
pub struct PredictRequest {
    pub run: SavedRun,
    /// The run's config, reading `--data` as its held-out rows.
    pub config: Config,
    /// `--data`: the rows to score.
    pub data: PathBuf,
    pub top_k: usize,
    pub exclude_seen: bool,
    pub format: PredictFormat,
    /// `--out`: the file to write instead of stdout.
    pub out: Option<PathBuf>,
}

pub fn predict(args: &PredictArgs) -> Result<PredictRequest, Failure> {
    let format = match args.output.as_str() {
        "csv" => PredictFormat::Csv,
        "jsonl" => PredictFormat::Jsonl,
        other => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--output {other}: csv or jsonl"
            )));
        }
    };
    if args.top_k == 0 {
        return Err(Failure::usage(anyhow::anyhow!(
            "--top-k must be at least 1"
        )));
    }
    let run = saved_run(&args.run)?;
    let mut config = data_config(&run)?;
    if config.data.format.is_none() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--data: the run trained on synthetic data, with no file format to read rows in"
        )));
    }
    config.data.test_path = Some(args.data.clone());
    config.train.eval_rows = 0;
    Ok(PredictRequest {
        run,
        config,
        data: args.data.clone(),
        top_k: args.top_k,
        exclude_seen: args.exclude_seen,
        format,
        out: args.out.clone(),
    })
}
