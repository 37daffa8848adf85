//! The arguments of the commands that read a trained run: `eval`, `export` and `predict`.

use std::path::PathBuf;

use clap::Args;

use crate::device_args::DeviceArgs;

/// A trained run and the device to read it on.
#[derive(Args)]
pub struct RunArgs {
    /// The run directory (`widebag train --out DIR`).
    #[arg(value_name = "RUN_DIR")]
    pub run: PathBuf,
    /// A checkpoint directory of the run to read instead of its last good one.
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// `widebag eval`.
#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Held-out rows from this file, read with the training file's width, numbering and
    /// vocabulary (its format: the training file's).
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// The format of --data; it must be the training file's.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `widebag export`.
#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Where to write the files (created).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
}

/// `widebag predict`.
#[derive(Args)]
pub struct PredictArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Rows to score, in the training file's format, read with its vocabulary.
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Classes or items per row.
    #[arg(long, default_value_t = 20)]
    pub top_k: usize,
    /// Leave out each row's own items (its input ids) from its ranking.
    #[arg(long)]
    pub exclude_seen: bool,
    /// `csv` (row,user,rank,class,name,log_prob) or `jsonl` (one object per row).
    #[arg(long, default_value = "csv")]
    pub output: String,
    /// Write to this file instead of stdout (atomically).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}
