//! Arguments plus configuration → a validated request, in one step. Flags that set a config key
//! (`--device`, `--objective`, `--min-batch`, `--max-batch`) become overrides layered after
//! `--set`, so `widebag_config` validates the whole run once; the other flags are parsed here.
//! Every error names the flag or the key (exit 2).

use std::path::{Path, PathBuf};

use widebag_config::sweep::Sweep;
use widebag_config::{Config, DeviceChoice};
use widebag_data::{Format, Source, TextMode, TextOptions, TokenFormat};
use widebag_solver::Calibration;

use crate::args::{
    BenchArgs, ConfigArgs, DeviceArgs, ExplainArgs, FormatArg, LabelArg, ModeArg, SourceArgs,
    SweepArgs, TokensArg, TrainArgs,
};
use crate::failure::Failure;

/// The widths `widebag bench` measures by default (next-id targets over every id: classes =
/// width).
pub const DEFAULT_WIDTHS: [usize; 4] = [8_000, 24_000, 80_000, 240_000];

mod flags;
mod frontier;
mod plan;
mod saved;

use flags::{FlagOverride, device_flag, load, load_args, name_flags};
pub use frontier::{FrontierRequest, frontier};
use plan::budget_flag;
pub use plan::{Calibrate, OnePlan, PlanGrid, PlanRequest, SolverFlags, calibration, plan};
pub use saved::{EvalRequest, ExportRequest, PredictFormat, PredictRequest, eval, export, predict};

/// A plain configuration (`data synth`).
pub fn config(args: &ConfigArgs) -> Result<Config, Failure> {
    load_args(args, &[])
}

/// The configuration of one point of a built-in grid: the quickstart, `overrides`, the device.
pub fn grid_point(overrides: &[String], device: &DeviceArgs) -> Result<Config, Failure> {
    load(None, overrides, device_flag(device).as_slice())
}

/// `widebag train`.
pub struct TrainRequest {
    pub config: Config,
    /// The `--set` arguments (knob keys among them are pinned when planning).
    pub overrides: Vec<String>,
    pub json: bool,
    /// `--profile`: exact stage times on wgpu.
    pub profile: bool,
    /// `--budget`: plan first with these flags.
    pub plan: Option<SolverFlags>,
    /// `--out`: the run directory to write.
    pub out: Option<PathBuf>,
    /// `--resume`: the run directory to continue.
    pub resume: Option<PathBuf>,
    /// `--resume` with `--set` of the run's length or timing: the config the run was written
    /// with (its `config.toml`), which `config` lengthens.
    pub lengthened: Option<Config>,
    /// `--ranks`: ranks to train as (threads here; MPI's world size under mpirun).
    pub ranks: Option<usize>,
    /// `--save-init`: the safetensors file the initial weights go to.
    pub save_init: Option<PathBuf>,
}

pub fn train(args: &TrainArgs) -> Result<TrainRequest, Failure> {
    let mut flags: Vec<FlagOverride> = device_flag(&args.device).into_iter().collect();
    if args.keep_accuracy {
        flags.push(plan::keep_accuracy_flag());
    }
    let (config, lengthened) = match &args.resume {
        Some(dir) => resumed_config(dir, &args.config.overrides, &flags)?,
        None => (load_args(&args.config, flags.as_slice())?, None),
    };
    let plan = match budget_flag(args.budget.as_ref())? {
        Some(budget) => Some(SolverFlags {
            budget: Some(budget),
            ..SolverFlags::with_calibration(calibration(&args.calibration)?)
        }),
        None => None,
    };
    Ok(TrainRequest {
        config,
        overrides: args.config.overrides.clone(),
        json: args.json,
        profile: args.profile,
        plan,
        out: args.out.clone(),
        resume: args.resume.clone(),
        lengthened,
        ranks: args.ranks.map(|n| n as usize),
        save_init: args.save_init.clone(),
    })
}

/// A resumed run's config: its own `config.toml` (the device may change), lengthened or
/// re-timed by `overrides` (with the config it was written with), any other key refused.
fn resumed_config(
    dir: &Path,
    overrides: &[String],
    flags: &[FlagOverride],
) -> Result<(Config, Option<Config>), Failure> {
    let file = dir.join("config.toml");
    if !file.is_file() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--resume {}: no config.toml there (not a run directory written by \
             `widebag train --out`)",
            dir.display()
        )));
    }
    for o in overrides {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k.trim());
        if !widebag_config::is_run_length_key(key) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--set {key}: a resumed run keeps its model, data and optimizer; with --resume \
                 only {} may change (they lengthen or re-time the run)",
                widebag_config::RUN_LENGTH_KEYS.join(", ")
            )));
        }
    }
    let written = load(Some(&file), &[], flags)?;
    if overrides.is_empty() {
        return Ok((written, None));
    }
    let config = load(Some(&file), overrides, flags)?;
    Ok((config, Some(written)))
}

/// `widebag explain` for one configured run.
pub struct OneExplain {
    pub config: Config,
    pub measure: bool,
    pub steps: usize,
    pub json: bool,
    pub svg: PathBuf,
}

/// `widebag explain --grid NAME`.
pub struct ExplainGrid {
    pub name: String,
    pub device: DeviceArgs,
    pub steps: usize,
    pub json: bool,
    pub out: Option<PathBuf>,
}

pub enum ExplainRequest {
    One(Box<OneExplain>),
    Grid(ExplainGrid),
}

pub fn explain(args: &ExplainArgs) -> Result<ExplainRequest, Failure> {
    if let Some(name) = &args.grid {
        return Ok(ExplainRequest::Grid(ExplainGrid {
            name: name.clone(),
            device: args.device,
            steps: args.steps,
            json: args.json,
            out: args.out.clone(),
        }));
    }
    Ok(ExplainRequest::One(Box::new(OneExplain {
        config: load_args(&args.config, device_flag(&args.device).as_slice())?,
        measure: args.measure,
        steps: args.steps,
        json: args.json,
        svg: args.svg.clone(),
    })))
}

/// `widebag sweep`: every point's config built and checked up front.
pub struct SweepRequest {
    pub file: PathBuf,
    pub sweep: Sweep,
    pub out: PathBuf,
    /// The device every run uses (`--device`, else the first point's `train.device`).
    pub device: DeviceChoice,
    /// `--calibration`'s; `None`: the device's built-in one.
    pub calibration: Option<Calibration>,
}

pub fn sweep(args: &SweepArgs) -> Result<SweepRequest, Failure> {
    let flags: Vec<FlagOverride> = device_flag(&args.device).into_iter().collect();
    let mut all = args.overrides.clone();
    all.extend(flags.iter().map(FlagOverride::arg));
    let sweep = widebag_config::sweep::load_sweep(&args.config, &all)
        .map_err(|e| Failure::usage(name_flags(e, &flags)))?;
    let device = sweep
        .points
        .first()
        .map_or(Config::default().train.device, |p| p.config.train.device);
    Ok(SweepRequest {
        file: args.config.clone(),
        sweep,
        out: args.out.clone(),
        device,
        calibration: calibration(&args.calibration)?,
    })
}

/// `widebag bench sparse-vs-dense`.
pub struct BenchRequest {
    pub config: Config,
    pub widths: Vec<usize>,
    pub steps: usize,
    pub out: PathBuf,
    pub json: bool,
}

/// The widths of `--widths 8000,24000`.
fn parse_widths(text: &str) -> anyhow::Result<Vec<usize>> {
    text.split(',')
        .map(|w| {
            let w = w.trim().replace('_', "");
            w.parse::<usize>()
                .ok()
                .filter(|&w| w >= 2)
                .ok_or_else(|| anyhow::anyhow!("--widths: `{w}` is not a width of at least 2"))
        })
        .collect()
}

pub fn bench(args: &BenchArgs) -> Result<BenchRequest, Failure> {
    let widths = match &args.widths {
        Some(text) => parse_widths(text).map_err(Failure::usage)?,
        None => DEFAULT_WIDTHS.to_vec(),
    };
    Ok(BenchRequest {
        config: load_args(&args.config, device_flag(&args.device).as_slice())?,
        widths,
        steps: args.steps,
        out: args.out.clone(),
        json: args.json,
    })
}

/// The data source of `data stats` and `data convert`.
/// The format a file's extension names, if it names one.
fn format_of(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    [
        (".svm", Format::Libsvm),
        (".libsvm", Format::Libsvm),
        (".npz", Format::Npz),
        (".index", Format::Dictd),
        (".dict", Format::Dictd),
        (".dict.dz", Format::Dictd),
    ]
    .into_iter()
    .find(|(ext, _)| name.ends_with(ext))
    .map(|(_, f)| f)
}

pub fn source(args: &SourceArgs) -> Result<Source, Failure> {
    let format = match args.format {
        Some(FormatArg::Libsvm) => Format::Libsvm,
        Some(FormatArg::Npz) => Format::Npz,
        Some(FormatArg::Lightgcn) => Format::Lightgcn,
        Some(FormatArg::Text) => Format::Text,
        Some(FormatArg::Dictd) => Format::Dictd,
        // A packed dataset says how its rows were formed; the format only labels them.
        None if widebag_data::packed::is_packed(&args.file) => Format::Libsvm,
        None => {
            let format = format_of(&args.file).ok_or_else(|| {
                Failure::usage(anyhow::anyhow!(
                    "{}: give --format (libsvm, npz, lightgcn, text or dictd): the extension \
                     does not say",
                    args.file.display()
                ))
            })?;
            eprintln!(
                "widebag: {}: read as {} (from its extension; --format to choose)",
                args.file.display(),
                format.name()
            );
            format
        }
    };
    if args.mode.is_some() && !format.is_text() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--mode applies to --format text and dictd only"
        )));
    }
    if args.window == 0 || args.min_count == 0 {
        return Err(Failure::usage(anyhow::anyhow!(
            "--window and --min-count must be at least 1"
        )));
    }
    let mut s = Source::new(&args.file, format);
    s.test_path = args.test.clone();
    s.read.zero_based = args.zero_based;
    s.read.width = args.width;
    s.read.skip_bad_lines = args.skip_bad_lines;
    s.text = TextOptions {
        mode: match args.mode {
            Some(ModeArg::Cbow) => TextMode::Cbow,
            _ => TextMode::Bow,
        },
        window: args.window,
        min_count: args.min_count,
        max_vocab: args.max_vocab,
        tokens: match args.tokens {
            TokensArg::Plain => TokenFormat::Plain,
            TokensArg::Tagged => TokenFormat::Tagged,
        },
    };
    if let LabelArg::FileName = args.label {
        let [start, end] = args.label_chars[..] else {
            return Err(Failure::usage(anyhow::anyhow!(
                "--label-chars takes START,END (two numbers)"
            )));
        };
        s.label = widebag_data::labels::LabelOptions::file_name(start, end);
    }
    Ok(s)
}
