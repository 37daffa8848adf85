//! The `widebag` command line: `widebag train` runs the configured job (the built-in quickstart
//! by default), `widebag explain` shows (and measures) its memory ledger, `widebag data` inspects
//! data files, `widebag plan` picks the batch size and optimizers that fit a memory budget. Exit codes: 0 ok, 1 run failed, 2 usage or configuration error, 3 does not fit.

mod bench;
mod explain;
mod plan;
mod sweep;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use widebag_config::{Config, DeviceChoice};
use widebag_data::{Format, Source, TextMode, TextOptions, TokenFormat};
use widebag_model::{RunSummary, open_device, run_training};

#[derive(Parser)]
#[command(
    name = "widebag",
    version,
    about = "Memory-exact training for very wide sparse models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model (with no options: the built-in quickstart on synthetic 240k-wide data).
    Train(TrainArgs),
    /// The memory ledger of a training step: every tensor by category, layer and phase, the
    /// predicted peak, and with --measure the allocator's readings beside it.
    Explain(ExplainArgs),
    /// The batch size and optimizers that fit a memory budget, from the ledger alone (no trial
    /// runs); exit 3 with the smallest changes that would fit when nothing does.
    Plan(PlanArgs),
    /// Run a sweep file's grid of configs, each into its own directory (resumable), and write
    /// results.csv, results.md and SVG plots.
    Sweep(SweepArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Inspect data files.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
}

#[derive(Subcommand)]
enum DataCommand {
    /// Rows, width, nnz per row, head coverage and unique ids per batch of a data file.
    Stats(StatsArgs),
    /// Convert a data file to libsvm or scipy npz.
    Convert(ConvertArgs),
    /// Write synthetic rows (the `[data]` settings of the config) to a libsvm or npz file.
    Synth(SynthArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    /// `label[,label…] [qid:n] idx:val … [# comment]` (svmlight).
    Libsvm,
    /// scipy.sparse CSR `.npz` (as written by `save_npz`).
    Npz,
    /// LightGCN interaction lists: `user item item …`.
    Lightgcn,
    /// Text: one document per line of a file, or one per file under a directory.
    Text,
    /// dictd database: NAME.index + NAME.dict(.dz); one document per entry.
    Dictd,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Libsvm => Format::Libsvm,
            FormatArg::Npz => Format::Npz,
            FormatArg::Lightgcn => Format::Lightgcn,
            FormatArg::Text => Format::Text,
            FormatArg::Dictd => Format::Dictd,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    /// One row per document, its bag of words (target: the same bag).
    Bow,
    /// One row per word: the bag of context words, the word as target.
    Cbow,
}

#[derive(Clone, Copy, ValueEnum)]
enum TokensArg {
    Plain,
    /// `word/TAG` tokens (Brown corpus): tags are dropped.
    Tagged,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutFormat {
    Libsvm,
    Npz,
}

/// Which file and how to read it (shared by `data stats` and `data convert`).
#[derive(Args)]
struct SourceArgs {
    /// The data file (lightgcn: the training file; text: a file or a directory; dictd: the
    /// .index, the .dict(.dz), or their common stem).
    file: PathBuf,
    #[arg(long, value_enum)]
    format: FormatArg,
    /// text/dictd: bag-of-words documents or CBOW windows.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// cbow: context words on each side.
    #[arg(long, default_value_t = 2)]
    window: usize,
    /// text/dictd: least count of a vocabulary word.
    #[arg(long, default_value_t = 1)]
    min_count: u64,
    /// text/dictd: most vocabulary words kept (most frequent first); 0 keeps all.
    #[arg(long, default_value_t = 0)]
    max_vocab: usize,
    /// text/dictd: token format.
    #[arg(long, value_enum, default_value = "plain")]
    tokens: TokensArg,
    /// lightgcn: the held-out file loaded alongside.
    #[arg(long)]
    test: Option<PathBuf>,
    /// libsvm: ids are 0-based (true) or 1-based (false); detected when unset.
    #[arg(long)]
    zero_based: Option<bool>,
    /// libsvm/npz/lightgcn: the input width; taken from the data when unset (an id at or beyond
    /// it is an error).
    #[arg(long)]
    width: Option<usize>,
    /// Skip malformed lines and report how many, instead of failing.
    #[arg(long)]
    skip_bad_lines: bool,
}

impl SourceArgs {
    fn source(&self) -> Result<Source, Failure> {
        let format = Format::from(self.format);
        if self.mode.is_some() && !format.is_text() {
            return Err(Failure::usage(anyhow::anyhow!(
                "--mode applies to --format text and dictd only"
            )));
        }
        if self.window == 0 || self.min_count == 0 {
            return Err(Failure::usage(anyhow::anyhow!(
                "--window and --min-count must be at least 1"
            )));
        }
        let mut s = Source::new(&self.file, format);
        s.test_path = self.test.clone();
        s.read.zero_based = self.zero_based;
        s.read.width = self.width;
        s.read.skip_bad_lines = self.skip_bad_lines;
        s.text = TextOptions {
            mode: match self.mode {
                Some(ModeArg::Cbow) => TextMode::Cbow,
                _ => TextMode::Bow,
            },
            window: self.window,
            min_count: self.min_count,
            max_vocab: self.max_vocab,
            tokens: match self.tokens {
                TokensArg::Plain => TokenFormat::Plain,
                TokensArg::Tagged => TokenFormat::Tagged,
            },
        };
        Ok(s)
    }
}

#[derive(Args)]
struct StatsArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Batches sampled per batch size for unique ids.
    #[arg(long, default_value_t = 20)]
    samples: usize,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Do not save the statistics (`FILE.stats.json` beside the data, or the cache directory
    /// when that is read-only).
    #[arg(long)]
    no_save: bool,
}

#[derive(Args)]
struct ConvertArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Output format.
    #[arg(long, value_enum)]
    to: OutFormat,
    /// Output file.
    out: PathBuf,
}

#[derive(Args)]
struct SynthArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Number of rows to write.
    #[arg(long, default_value_t = 10_000)]
    rows: usize,
    /// Output format.
    #[arg(long, value_enum)]
    to: OutFormat,
    /// Output file.
    out: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Auto,
    Wgpu,
    Cpu,
}

/// Options shared by every command that reads a configuration.
#[derive(Args)]
struct ConfigArgs {
    /// TOML configuration file layered over the built-in defaults.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Override one key, e.g. `--set model.hidden=[1024,512]` (value parsed as TOML, else a string).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

#[derive(Args)]
struct TrainArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Device: wgpu (default when an adapter exists), cpu (burn's flex backend), or auto.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Print one JSON object with the run's summary on stdout.
    #[arg(long)]
    json: bool,
    /// Plan first for this budget (`6GiB`, …) and train with the plan's batch size and
    /// optimizers; exit 3 with the plan's report when nothing fits.
    #[arg(long, value_name = "BYTES")]
    budget: Option<String>,
}

/// How the solver's flags reach the plan.
#[derive(Args, Default)]
struct BudgetArgs {
    /// Memory budget: `6GiB`, `512MiB`, `8GB` or bytes (default: plan.budget, else the device's
    /// memory minus the reserve when the device reports it).
    #[arg(long, value_name = "BYTES")]
    budget: Option<String>,
    /// What to maximise: `batch` (the largest batch, then the most capable optimizers) or
    /// `throughput` (predicted examples/s).
    #[arg(long, value_enum)]
    objective: Option<ObjectiveArg>,
    /// The smallest batch the solver may choose (plan.min_batch).
    #[arg(long)]
    min_batch: Option<usize>,
    /// The largest batch the solver considers (plan.max_batch).
    #[arg(long)]
    max_batch: Option<usize>,
    /// Keep a knob at the config's value: train.batch_size, optim.table or optim.dense
    /// (repeatable; knob keys given with --set are pinned too).
    #[arg(long, value_name = "KEY")]
    pin: Vec<String>,
    /// Plan for a device with this largest buffer instead of the opened one (with --alignment).
    #[arg(long, value_name = "BYTES")]
    max_buffer: Option<String>,
    /// Plan for a device with this allocation alignment in bytes.
    #[arg(long, value_name = "BYTES")]
    alignment: Option<u64>,
    /// The throughput model's coefficients (JSON written by `plan --calibrate --out FILE`);
    /// default: the built-in lavapipe calibration.
    #[arg(long, value_name = "FILE.json")]
    calibration: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ObjectiveArg {
    Batch,
    Throughput,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    budget: BudgetArgs,
    /// Device: wgpu (default when an adapter exists), cpu (burn's flex backend), or auto.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Print one JSON object (batch_size, optimizer, predicted_peak_bytes, budget_bytes, fits, …).
    #[arg(long)]
    json: bool,
    /// Run the plan for --steps steps on the device and check the measured peak is under the budget.
    #[arg(long)]
    verify: bool,
    /// The ground truth: find the largest batch that runs under the budget by bisecting on real
    /// runs' measured peaks (with the plan's optimizers).
    #[arg(long)]
    search: bool,
    /// With --search: stop bisecting when the bracket is within this % of the batch (0: one row).
    #[arg(long, default_value_t = 1.0)]
    tolerance: f64,
    /// Steps per run of --verify and --search (the first is a warm-up).
    #[arg(long, default_value_t = 2)]
    steps: usize,
    /// Run the solver's grid (`small`): plan, --verify and --search at five budgets for two
    /// models; fails when a point misses a bar.
    #[arg(long, value_name = "NAME")]
    grid: Option<String>,
    /// With --grid: directory for plan-grid.md and plan-grid.json; with --calibrate: the JSON
    /// file the fitted coefficients are written to.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Measure the calibration runs on the device and fit the throughput model
    /// (`--objective throughput`) to them.
    #[arg(long)]
    calibrate: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The same model in the dense and the sparse layout at a ladder of widths: predicted and
    /// measured peak memory and examples/s side by side, with a plot.
    SparseVsDense(BenchArgs),
}

#[derive(Args)]
struct BenchArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Widths to compare (classes = width), e.g. `8000,24000,80000,240000` (the default).
    #[arg(long, value_name = "LIST")]
    widths: Option<String>,
    /// Steps per run (at least 5: one warm-up, two read at every point, the rest timed).
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Directory for bench.md, bench.json and bench.svg.
    #[arg(long, value_name = "DIR", default_value = "widebag-bench")]
    out: PathBuf,
    /// Device: wgpu (default when an adapter exists), cpu (burn's flex backend), or auto.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SweepArgs {
    /// The sweep file (`configs/sweeps/NAME.toml`): base, set, [grid], [[exclude]].
    #[arg(long, value_name = "FILE.toml")]
    config: PathBuf,
    /// The sweep's directory: one directory per run, results.csv, results.md, *.svg.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Override one key of every run, e.g. `--set train.steps=5`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Device: wgpu (default when an adapter exists), cpu (burn's flex backend), or auto.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
}

#[derive(Args)]
struct ExplainArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Device: wgpu (default when an adapter exists), cpu (burn's flex backend), or auto.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Run real steps and read the allocator at every point of the step beside the prediction.
    #[arg(long)]
    measure: bool,
    /// Steps run by --measure (the first is a warm-up whose readings are discarded); the compared
    /// prediction takes its batch sizes from the steps read.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Print one JSON object (predicted_peak_bytes, measured_peak_bytes, categories, points, …).
    #[arg(long)]
    json: bool,
    /// Where --measure writes its SVG chart.
    #[arg(long, default_value = "widebag-explain.svg")]
    svg: PathBuf,
    /// Run the accuracy grid (`small`: the CI grid; `full`: the README grid) instead of one config;
    /// fails when any measured point misses the 3% bar.
    #[arg(long, value_name = "NAME")]
    grid: Option<String>,
    /// With --grid: directory for grid.md and grid.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// A failure with the exit code it maps to.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }
    fn run(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }
    fn does_not_fit(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 3,
            error: error.into(),
        }
    }
}

fn device_choice(config: &mut Config, device: Option<DeviceArg>) {
    if let Some(d) = device {
        config.train.device = match d {
            DeviceArg::Auto => DeviceChoice::Auto,
            DeviceArg::Wgpu => DeviceChoice::Wgpu,
            DeviceArg::Cpu => DeviceChoice::Cpu,
        };
    }
}

fn open_compute(config: &Config) -> Result<widebag_model::Compute, Failure> {
    let compute = open_device(config.train.device)
        .context("opening the device")
        .map_err(Failure::run)?;
    if let Some(notice) = &compute.fallback_notice {
        eprintln!("widebag: {notice}");
    }
    Ok(compute)
}

fn explain_one(args: &ExplainArgs) -> Result<(), Failure> {
    let mut config = load_config(&args.config)?;
    device_choice(&mut config, args.device);
    let prepared = widebag_config::open_data(&config).map_err(Failure::usage)?;
    let compute = open_compute(&config)?;
    let (mut spec, mut ledger) = explain::predict(&prepared, &compute).map_err(Failure::usage)?;
    let measured = if args.measure {
        explain::check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
        // Compared with the steps it reads: predicted from those steps' batches.
        let steps = args.steps.max(2);
        (spec, ledger) =
            explain::predict_batches(&prepared, &compute, 1, steps - 1).map_err(Failure::usage)?;
        Some(explain::measure(prepared, &compute, args.steps).map_err(Failure::run)?)
    } else {
        None
    };
    let report = explain::report(spec, ledger, &compute, measured.as_ref());
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("report serialises")
        );
    } else {
        explain::print_report(&report);
    }
    if measured.is_some() {
        explain::write_svg(&args.svg, &report)
            .with_context(|| format!("writing {}", args.svg.display()))
            .map_err(Failure::run)?;
        eprintln!("widebag: chart written to {}", args.svg.display());
    }
    Ok(())
}

/// Prints a grid's rows (JSON) or table (Markdown), and keeps both as `DIR/STEM.md` and
/// `DIR/STEM.json` when a directory is given.
fn emit_grid<T: serde::Serialize>(
    rows: &[T],
    md: &str,
    json: bool,
    out: Option<&std::path::Path>,
    stem: &str,
) -> Result<(), Failure> {
    if json {
        println!("{}", serde_json::to_string(rows).expect("rows serialise"));
    } else {
        print!("{md}");
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(dir.join(format!("{stem}.md")), md))
            .and_then(|_| {
                std::fs::write(
                    dir.join(format!("{stem}.json")),
                    serde_json::to_string_pretty(rows).expect("rows serialise"),
                )
            })
            .with_context(|| format!("writing {}", dir.display()))
            .map_err(Failure::run)?;
    }
    Ok(())
}

fn explain_grid(args: &ExplainArgs, name: &str) -> Result<(), Failure> {
    let points = explain::grid_points(name).map_err(Failure::usage)?;
    let mut rows = Vec::new();
    let mut adapter = String::new();
    for (i, overrides) in points.iter().enumerate() {
        let mut config = explain::grid_config(overrides).map_err(Failure::usage)?;
        device_choice(&mut config, args.device);
        let prepared = widebag_config::open_data(&config).map_err(Failure::usage)?;
        let compute = open_compute(&config)?;
        adapter = compute.adapter.clone();
        let (spec, ledger) = explain::predict(&prepared, &compute).map_err(Failure::usage)?;
        let mut row = explain::GridRow {
            layout: config.model.layout.name().to_string(),
            width: config.data.width,
            batch_size: config.train.batch_size,
            dense_optim: config.optim.dense.name().to_string(),
            table_optim: config.optim.table.name().to_string(),
            predicted_peak_bytes: ledger.sampled_peak(widebag_ledger::Placement::Device).bytes,
            measured_peak_bytes: None,
            error_pct: None,
            note: String::new(),
        };
        if let Err(e) = explain::check_fits(&ledger, &spec) {
            row.note = "predicted only (over the buffer limit)".into();
            eprintln!(
                "[{}/{}] {}: {e:#}",
                i + 1,
                points.len(),
                overrides.join(" ")
            );
        } else {
            let summary = explain::measure(prepared, &compute, args.steps).map_err(Failure::run)?;
            let r = explain::report(spec, ledger, &compute, Some(&summary));
            row.measured_peak_bytes = r.measured_peak_bytes;
            row.error_pct = r.error_pct;
            eprintln!(
                "[{}/{}] {}: predicted {} measured {} error {:.2}%",
                i + 1,
                points.len(),
                overrides.join(" "),
                row.predicted_peak_bytes,
                row.measured_peak_bytes.unwrap_or(0),
                row.error_pct.unwrap_or(f64::NAN)
            );
        }
        rows.push(row);
    }
    let md = explain::grid_markdown(&rows, &adapter);
    emit_grid(&rows, &md, args.json, args.out.as_deref(), "grid")?;
    let measured: Vec<&explain::GridRow> = rows
        .iter()
        .filter(|r| r.measured_peak_bytes.is_some())
        .collect();
    let over: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.error_pct.is_some_and(|e| e > explain::BAR_PCT))
        .map(|(i, r)| format!("#{} ({:.2}%)", i + 1, r.error_pct.unwrap_or(0.0)))
        .collect();
    let worst = measured
        .iter()
        .filter_map(|r| r.error_pct)
        .fold(0.0f64, f64::max);
    eprintln!(
        "widebag: {} points measured, worst error {worst:.2}% (bar {}%)",
        measured.len(),
        explain::BAR_PCT
    );
    if !over.is_empty() {
        return Err(Failure::run(anyhow::anyhow!(
            "points over the {}% bar: {}",
            explain::BAR_PCT,
            over.join(", ")
        )));
    }
    Ok(())
}

fn explain(args: &ExplainArgs) -> Result<(), Failure> {
    match &args.grid {
        Some(name) => explain_grid(args, name),
        None => explain_one(args),
    }
}

/// Applies the solver flags to `prepared.config`, then plans. Config problems exit 2.
fn make_plan(
    prepared: &mut widebag_config::Prepared,
    args: &BudgetArgs,
    overrides: &[String],
    compute: Option<&widebag_model::Compute>,
) -> Result<(plan::Report, f64), Failure> {
    let c = &mut prepared.config;
    if let Some(o) = args.objective {
        c.plan.objective = match o {
            ObjectiveArg::Batch => widebag_config::Objective::Batch,
            ObjectiveArg::Throughput => widebag_config::Objective::Throughput,
        };
    }
    if let Some(b) = args.min_batch {
        c.plan.min_batch = b;
    }
    if let Some(b) = args.max_batch {
        c.plan.max_batch = b;
    }
    if c.plan.min_batch == 0 || c.plan.min_batch > c.plan.max_batch {
        return Err(Failure::usage(anyhow::anyhow!(
            "--min-batch {} / --max-batch {}: need 1 <= min <= max",
            c.plan.min_batch,
            c.plan.max_batch
        )));
    }
    if let Some(note) = plan::cap_to_data(prepared) {
        eprintln!("widebag: {note}");
    }
    let config = &prepared.config;
    let pins = plan::pins(config, overrides, &args.pin).map_err(Failure::usage)?;
    let budget = plan::budget(
        args.budget.as_deref(),
        config,
        compute.and_then(|c| c.memory_bytes),
    )
    .map_err(Failure::usage)?;
    let device = plan::device_facts(compute, args.max_buffer.as_deref(), args.alignment, config)
        .map_err(Failure::usage)?;
    let calibration = match &args.calibration {
        Some(path) => std::fs::read_to_string(path)
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(serde_json::from_str::<widebag_solver::Calibration>(&t)?))
            .with_context(|| format!("--calibration {}", path.display()))
            .map_err(Failure::usage)?,
        None => widebag_solver::Calibration::lavapipe_2core(),
    };
    let rows = plan::sample(prepared).map_err(Failure::usage)?;
    let (solved, planned_ms) = plan::solve(
        &prepared.config,
        device,
        budget.bytes,
        &rows,
        pins,
        &calibration,
    )
    .map_err(Failure::usage)?;
    Ok((plan::Report::new(solved, &budget, device), planned_ms))
}

fn plan_grid(args: &PlanArgs, name: &str) -> Result<(), Failure> {
    let models = plan::grid_points(name).map_err(Failure::usage)?;
    let mut rows = Vec::new();
    let mut adapter = String::new();
    for m in &models {
        let model = &m.name;
        for &budget in &m.budgets_bytes {
            let mut all = explain::grid_base();
            all.extend(m.overrides.iter().cloned());
            let mut config = widebag_config::load(None, &all).map_err(Failure::usage)?;
            device_choice(&mut config, args.device);
            let mut prepared = widebag_config::open_data(&config).map_err(Failure::usage)?;
            let compute = open_compute(&config)?;
            adapter = compute.adapter.clone();
            let budget_args = BudgetArgs {
                budget: Some(budget.to_string()),
                ..Default::default()
            };
            let (mut report, planned_ms) =
                make_plan(&mut prepared, &budget_args, &[], Some(&compute))?;
            if report.fits {
                report.verify = Some(
                    plan::verify(&prepared, &report.plan, &compute, args.steps)
                        .map_err(Failure::run)?,
                );
            }
            report.search = Some(
                plan::search(
                    &prepared,
                    &report.plan,
                    &compute,
                    args.steps,
                    args.tolerance,
                    |_| {},
                )
                .map_err(Failure::run)?,
            );
            let row = plan::GridRow::new(model, &report, planned_ms).map_err(Failure::run)?;
            eprintln!(
                "widebag: {model} @ {}: plan {} ({}), measured {} {}, search {:?} → {}",
                widebag_config::units::format_bytes(budget),
                row.batch_size,
                row.optimizers,
                row.measured_peak_bytes
                    .map_or("-".into(), widebag_config::units::format_bytes),
                if row.under_budget { "under" } else { "OVER" },
                row.search_batch_size,
                row.plan_vs_search_pct
                    .map_or("-".into(), |x| format!("{x:.1}%"))
            );
            rows.push(row);
        }
    }
    let md = plan::grid_markdown(&rows, &adapter);
    emit_grid(&rows, &md, args.json, args.out.as_deref(), "plan-grid")?;
    let failed: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.pass)
        .map(|(i, r)| {
            format!(
                "#{} ({} @ {})",
                i + 1,
                r.model,
                widebag_config::units::format_bytes(r.budget_bytes)
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err(Failure::run(anyhow::anyhow!(
            "grid points missing a bar (plan ≥ {}% of search, measured under budget, planning < {} ms): {}",
            plan::SEARCH_BAR_PCT,
            plan::PLANNING_BAR_MS,
            failed.join(", ")
        )));
    }
    Ok(())
}

fn bench_sparse_vs_dense(args: &BenchArgs) -> Result<(), Failure> {
    let mut config = load_config(&args.config)?;
    device_choice(&mut config, args.device);
    let widths = match &args.widths {
        Some(text) => bench::parse_widths(text).map_err(Failure::usage)?,
        None => bench::DEFAULT_WIDTHS.to_vec(),
    };
    let compute = open_compute(&config)?;
    let rows = bench::run(&config, &widths, args.steps, &compute, |r| {
        eprintln!(
            "widebag: width {} {}: predicted {}, measured {}, {} {}",
            r.width,
            r.layout,
            r.predicted_peak_bytes
                .map_or("-".into(), widebag_config::units::format_bytes),
            r.measured_peak_bytes
                .map_or("-".into(), widebag_config::units::format_bytes),
            r.examples_per_s
                .map_or("-".into(), |x| format!("{x:.1} examples/s")),
            r.note
        )
    })
    .map_err(Failure::run)?;
    let md = bench::markdown(&rows, &config, args.steps.max(5), &compute.adapter);
    emit_grid(&rows, &md, args.json, Some(&args.out), "bench")?;
    bench::plot(&args.out.join("bench.svg"), &rows).map_err(Failure::run)?;
    eprintln!(
        "widebag: bench.md, bench.json and bench.svg in {}",
        args.out.display()
    );
    Ok(())
}

fn sweep_command(args: &SweepArgs) -> Result<(), Failure> {
    let sweep =
        widebag_config::sweep::load_sweep(&args.config, &args.overrides).map_err(Failure::usage)?;
    eprintln!(
        "widebag: {}: {} runs ({} excluded) into {}",
        args.config.display(),
        sweep.points.len(),
        sweep.excluded,
        args.out.display()
    );
    let mut config = sweep
        .points
        .first()
        .map(|p| p.config.clone())
        .unwrap_or_default();
    device_choice(&mut config, args.device);
    let compute = open_compute(&config)?;
    let rows = sweep::run(&sweep, &args.out, &compute).map_err(Failure::run)?;
    print!(
        "{}",
        sweep::markdown(
            &rows,
            &sweep.spec.grid.keys().cloned().collect::<Vec<_>>(),
            &compute.adapter
        )
    );
    let failed = rows
        .iter()
        .filter(|r| r.status == sweep::Status::Failed)
        .count();
    if failed > 0 {
        return Err(Failure::run(anyhow::anyhow!(
            "{failed} of {} runs failed (see their summary.json); run the sweep again to retry them",
            rows.len()
        )));
    }
    Ok(())
}

fn plan_calibrate(args: &PlanArgs) -> Result<(), Failure> {
    let mut config = load_config(&args.config)?;
    device_choice(&mut config, args.device);
    let compute = open_compute(&config)?;
    let (calibration, rows) =
        plan::calibrate(&compute, args.steps.max(6), config.train.device, |r| {
            eprintln!(
                "widebag: calibrate {}: {:.4} s/step",
                r.overrides.join(" "),
                r.measured_step_s
            )
        })
        .map_err(Failure::run)?;
    for r in &rows {
        println!(
            "{:<110} measured {:>8.4} s/step  fitted {:>8.4}",
            r.overrides.join(" "),
            r.measured_step_s,
            r.fitted_step_s
        );
    }
    let text = serde_json::to_string_pretty(&calibration).expect("calibration serialises");
    println!("{text}");
    if let Some(path) = &args.out {
        std::fs::write(path, &text)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::run)?;
    }
    Ok(())
}

fn plan_command(args: &PlanArgs) -> Result<(), Failure> {
    if let Some(name) = &args.grid {
        return plan_grid(args, name);
    }
    if args.calibrate {
        return plan_calibrate(args);
    }
    let mut config = load_config(&args.config)?;
    device_choice(&mut config, args.device);
    let mut prepared = widebag_config::open_data(&config).map_err(Failure::usage)?;
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
    }
    // Given device facts plan for another device; otherwise the device is opened and read.
    let needs_device = args.verify || args.search || args.budget.max_buffer.is_none();
    let compute = if needs_device {
        Some(open_compute(&config)?)
    } else {
        None
    };
    let (mut report, planned_ms) = make_plan(
        &mut prepared,
        &args.budget,
        &args.config.overrides,
        compute.as_ref(),
    )?;
    let compute_for_runs = || {
        compute
            .as_ref()
            .ok_or_else(|| Failure::usage(anyhow::anyhow!("--verify and --search need a device")))
    };
    if args.verify && report.fits {
        let c = compute_for_runs()?;
        let v = plan::verify(&prepared, &report.plan, c, args.steps).map_err(Failure::run)?;
        report.verify = Some(v);
    }
    if args.search {
        let c = compute_for_runs()?;
        let s = plan::search(
            &prepared,
            &report.plan,
            c,
            args.steps,
            args.tolerance,
            |p| {
                eprintln!(
                    "widebag: search: batch {} → {}",
                    p.batch_size,
                    match p.measured_peak_bytes {
                        Some(m) => format!(
                            "{} ({})",
                            widebag_config::units::format_bytes(m),
                            if p.runs_under_budget { "under" } else { "over" }
                        ),
                        None => "refused (buffer limit)".into(),
                    }
                )
            },
        )
        .map_err(Failure::run)?;
        report.search = Some(s);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("plan serialises")
        );
    } else {
        plan::print(&report, planned_ms);
    }
    if args.json {
        eprintln!(
            "widebag: planned in {planned_ms:.1} ms ({} ledger evaluations)",
            report.plan.evaluations
        );
    }
    if !report.fits {
        return Err(Failure::does_not_fit(anyhow::anyhow!(
            "nothing fits the {} budget: {}",
            widebag_config::units::format_bytes(report.budget_bytes),
            report.plan.suggestions.first().map_or(
                "no single change fits".to_string(),
                |s| format!("smallest change: {}", s.text)
            )
        )));
    }
    if let Some(v) = &report.verify
        && !v.under_budget
    {
        return Err(Failure::run(anyhow::anyhow!(
            "--verify: measured peak {} is over the {} budget",
            widebag_config::units::format_bytes(v.measured_peak_bytes),
            widebag_config::units::format_bytes(report.budget_bytes)
        )));
    }
    Ok(())
}

fn load_config(args: &ConfigArgs) -> Result<Config, Failure> {
    widebag_config::load(args.config.as_deref(), &args.overrides).map_err(Failure::usage)
}

fn print_summary(s: &RunSummary) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!("widebag train: done");
    println!("  adapter            {} [{:?}]", s.adapter, s.backend);
    println!(
        "  model              {} → {} → {:?} → {} classes ({} table shards, {} class chunks)",
        s.width, s.dim, s.hidden, s.n_classes, s.table_shards, s.class_chunks
    );
    println!(
        "  optimizers         table {:?}, dense {:?}",
        s.table_optimizer, s.dense_optimizer
    );
    println!(
        "  steps × batch      {} × {}  ({:.1} examples/s after the first step)",
        s.steps, s.batch_size, s.examples_per_s
    );
    println!(
        "  loss               {:.4} → {:.4} (mean of last 10: {:.4})",
        s.first_loss, s.final_loss, s.final_loss_mean10
    );
    println!(
        "  table / parameters {:.1} MiB / {:.1} MiB ({} input-side and {} output values)",
        mib(s.table_bytes),
        mib(s.parameter_bytes),
        s.table_parameters,
        s.output_parameters
    );
    println!("  output             {}", s.output.name());
    for b in &s.bands {
        println!("  {}", b.line());
    }
    if s.host_bytes > 0 {
        println!(
            "  host bands         {:.1} MiB in host memory; per step {:.1} KiB to the device, \
             {:.1} KiB back",
            mib(s.host_bytes),
            s.host_to_device_bytes_per_step / 1024.0,
            s.device_to_host_bytes_per_step / 1024.0
        );
    }
    if let Some(l) = s.eval_loss {
        println!(
            "  validation loss    {l:.4} over {} held-out rows",
            s.eval_rows
        );
    }
    if let Some(d) = &s.data {
        println!(
            "  data               {} ({}, {} rows, {} epochs started, {:.1} unique ids per batch)",
            d.path.display(),
            d.format.name(),
            d.rows,
            s.epochs.unwrap_or(0),
            d.unique_ids_per_batch
        );
        if let Some(v) = &d.vocabulary_file {
            println!("  vocabulary         {}", v.display());
        }
        if let Some(f) = &d.stats_file {
            let how = if d.stats_reused { "reused" } else { "saved" };
            println!("  statistics         {} ({how})", f.display());
        }
    }
    match (s.peak_in_use_bytes, s.peak_reserved_bytes) {
        (Some(u), Some(r)) => println!(
            "  peak device memory {:.1} MiB in use, {:.1} MiB reserved (burn allocator)",
            mib(u),
            mib(r)
        ),
        _ => println!("  peak device memory not reported by this backend"),
    }
    if let Some(rss) = s.peak_rss_bytes {
        println!(
            "  peak process RSS   {:.1} MiB (host memory, data included)",
            mib(rss)
        );
    }
}

fn train(args: &TrainArgs) -> Result<(), Failure> {
    let mut config = load_config(&args.config)?;
    device_choice(&mut config, args.device);
    let prepared = widebag_config::open_data(&config).map_err(Failure::usage)?;
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
    let compute = open_compute(&config)?;
    let mut prepared = prepared;
    if let Some(text) = &args.budget {
        let budget_args = BudgetArgs {
            budget: Some(text.clone()),
            ..Default::default()
        };
        let (report, planned_ms) = make_plan(
            &mut prepared,
            &budget_args,
            &args.config.overrides,
            Some(&compute),
        )?;
        if !report.fits {
            plan::print(&report, planned_ms);
            return Err(Failure::does_not_fit(anyhow::anyhow!(
                "does not fit the {} budget (see the plan above)",
                widebag_config::units::format_bytes(report.budget_bytes)
            )));
        }
        eprintln!(
            "widebag: planned for {}: batch {}, table {}, dense {} (predicted peak {})",
            widebag_config::units::format_bytes(report.budget_bytes),
            report.batch_size,
            report.plan.chosen.table.name(),
            report.plan.chosen.dense.name(),
            widebag_config::units::format_bytes(report.predicted_peak_bytes)
        );
        prepared.config = plan::apply(&prepared.config, &report.plan);
    }
    let config = prepared.config.clone();
    // Refuse, before anything is allocated, a step with a tensor over the device's buffer limit.
    let (spec, ledger) = explain::predict(&prepared, &compute).map_err(Failure::usage)?;
    explain::check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
    let bar = ProgressBar::new(config.train.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed}<{eta}]")
            .expect("valid template"),
    );
    let started = std::time::Instant::now();
    let mut examples = 0usize;
    let summary = run_training(prepared, &compute, |s| {
        examples += s.n_rows;
        let rate = examples as f64 / started.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("loss {:.4}  {:.0} ex/s", s.loss, rate));
        bar.inc(1);
    })
    .context("training")
    .map_err(Failure::run)?;
    bar.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary serialises")
        );
    } else {
        print_summary(&summary);
    }
    Ok(())
}

/// Loads a source and saves a text vocabulary beside `vocab_beside` (when given); data errors are
/// usage errors (exit 2).
fn load_source(
    source: &Source,
    vocab_beside: Option<&std::path::Path>,
) -> Result<widebag_data::Loaded, Failure> {
    let loaded = widebag_data::load(source).map_err(Failure::usage)?;
    if let (Some(v), Some(beside)) = (&loaded.vocabulary, vocab_beside) {
        match widebag_data::source::save_sidecar(beside, "vocab.tsv", &v.to_tsv()) {
            Ok(p) => eprintln!(
                "widebag: vocabulary of {} words saved to {}",
                v.len(),
                p.display()
            ),
            Err(e) => eprintln!("widebag: vocabulary not saved: {e}"),
        }
    }
    if loaded.dataset.skipped_lines > 0 {
        eprintln!(
            "widebag: skipped {} bad lines",
            loaded.dataset.skipped_lines
        );
    }
    Ok(loaded)
}

fn data_stats(args: &StatsArgs) -> Result<(), Failure> {
    let source = args.source.source()?;
    let beside = (!args.no_save).then_some(source.path.as_path());
    let dataset = load_source(&source, beside)?.dataset;
    let mut stats = widebag_data::stats::compute(&dataset, args.samples, 0);
    if !args.no_save {
        match widebag_data::stats::save(&source, &mut stats) {
            Ok(p) => eprintln!("widebag: statistics saved to {}", p.display()),
            Err(e) => eprintln!("widebag: statistics not saved: {e}"),
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&stats).expect("stats serialise")
        );
        return Ok(());
    }
    println!("{}", source.path.display());
    println!(
        "  rows {}  width {}  classes {}  empty rows {}",
        stats.rows, stats.width, stats.n_classes, stats.empty_rows
    );
    let n = &stats.nnz_per_row;
    println!(
        "  nnz {} (per row: min {}, mean {:.2}, p50 {}, p99 {}, max {})",
        stats.nnz_total, n.min, n.mean, n.p50, n.p99, n.max
    );
    println!("  ids used {}", stats.ids_used);
    for (k, share) in &stats.top_coverage {
        println!("  top {k:>8} ids cover {:6.2}% of nnz", 100.0 * share);
    }
    for (b, u) in &stats.unique_ids_per_batch {
        println!("  batch {b:>5}: {u:10.1} unique ids");
    }
    Ok(())
}

fn data_convert(args: &ConvertArgs) -> Result<(), Failure> {
    let source = args.source.source()?;
    // The ids of a converted text corpus mean nothing without its vocabulary: keep it beside
    // the output.
    let dataset = load_source(&source, Some(&args.out))?.dataset;
    write_dataset(&dataset, args.to, &args.out)?;
    let shape = dataset.shape();
    eprintln!(
        "widebag: wrote {} rows, width {}, {} nnz to {}",
        shape.rows,
        shape.width,
        shape.nnz_total,
        args.out.display()
    );
    Ok(())
}

fn write_dataset(
    dataset: &widebag_data::Dataset,
    to: OutFormat,
    out: &std::path::Path,
) -> Result<(), Failure> {
    match to {
        OutFormat::Libsvm => widebag_data::libsvm::write_libsvm(dataset, out, true),
        OutFormat::Npz => widebag_data::npz::write_npz(dataset, out),
    }
    .map_err(Failure::run)
}

fn data_synth(args: &SynthArgs) -> Result<(), Failure> {
    let config = load_config(&args.config)?;
    let stream = widebag_data::SyntheticStream::new(widebag_config::synthetic_spec(&config))
        .map_err(Failure::usage)?;
    let dataset = widebag_data::synthetic::to_dataset(&stream, args.rows);
    write_dataset(&dataset, args.to, &args.out)?;
    eprintln!(
        "widebag: wrote {} synthetic rows ({} nnz) to {}",
        args.rows,
        dataset.rows.nnz(),
        args.out.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    // A closed stdout (`widebag plan | head`) ends the process as other command-line tools do,
    // rather than as a panic in `println!`.
    #[cfg(unix)]
    // SAFETY: restoring a signal's default disposition at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Train(args) => train(args),
        Command::Explain(args) => explain(args),
        Command::Plan(args) => plan_command(args),
        Command::Sweep(args) => sweep_command(args),
        Command::Bench {
            command: BenchCommand::SparseVsDense(args),
        } => bench_sparse_vs_dense(args),
        Command::Data { command } => match command {
            DataCommand::Stats(args) => data_stats(args),
            DataCommand::Convert(args) => data_convert(args),
            DataCommand::Synth(args) => data_synth(args),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}
