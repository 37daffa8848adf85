//! The `widebag` command line: `widebag train` runs the configured job (the built-in quickstart
//! by default), `widebag explain` shows (and measures) its memory ledger, `widebag data` inspects
//! data files. Exit codes: 0 ok, 1 run failed, 2 usage or configuration error, 3 does not fit.

mod explain;

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
    /// Steps run by --measure (the first is a warm-up whose readings are discarded).
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
    let (spec, ledger) = explain::predict(&prepared, &compute).map_err(Failure::usage)?;
    let measured = if args.measure {
        explain::check_fits(&ledger, &spec).map_err(Failure::does_not_fit)?;
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
    if args.json {
        println!("{}", serde_json::to_string(&rows).expect("rows serialise"));
    } else {
        print!("{md}");
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(dir.join("grid.md"), &md))
            .and_then(|_| {
                std::fs::write(
                    dir.join("grid.json"),
                    serde_json::to_string_pretty(&rows).expect("rows serialise"),
                )
            })
            .with_context(|| format!("writing {}", dir.display()))
            .map_err(Failure::run)?;
    }
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
        "  table / parameters {:.1} MiB / {:.1} MiB",
        mib(s.table_bytes),
        mib(s.parameter_bytes)
    );
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
}

fn train(args: &TrainArgs) -> Result<(), Failure> {
    let mut config = load_config(&args.config)?;
    device_choice(&mut config, args.device);
    let prepared = widebag_config::open_data(&config).map_err(Failure::usage)?;
    for w in &prepared.warnings {
        eprintln!("widebag: {w}");
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
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Train(args) => train(args),
        Command::Explain(args) => explain(args),
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
