//! The `widebag` command line: `widebag train` runs the configured job (the built-in quickstart
//! by default). Exit codes: 0 ok, 1 run failed, 2 usage or configuration error, 3 does not fit.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use widebag_config::{Config, DeviceChoice};
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
}

#[derive(Clone, Copy, ValueEnum)]
enum DataFormat {
    /// `label[,label…] idx:val …` (svmlight).
    Libsvm,
    /// LightGCN interaction lists: `user item item …`.
    Lightgcn,
}

#[derive(Args)]
struct StatsArgs {
    /// The data file (for lightgcn: the training file).
    file: PathBuf,
    #[arg(long, value_enum)]
    format: DataFormat,
    /// lightgcn: the held-out file loaded alongside.
    #[arg(long)]
    test: Option<PathBuf>,
    /// libsvm: ids are 0-based (true) or 1-based (false); detected when unset.
    #[arg(long)]
    zero_based: Option<bool>,
    /// Skip malformed lines and report how many, instead of failing.
    #[arg(long)]
    skip_bad_lines: bool,
    /// Batches sampled per batch size for unique ids.
    #[arg(long, default_value_t = 20)]
    samples: usize,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Do not save the statistics as `FILE.stats.json` beside the data.
    #[arg(long)]
    no_save: bool,
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
    if let Some(d) = args.device {
        config.train.device = match d {
            DeviceArg::Auto => DeviceChoice::Auto,
            DeviceArg::Wgpu => DeviceChoice::Wgpu,
            DeviceArg::Cpu => DeviceChoice::Cpu,
        };
    }
    let compute = open_device(config.train.device)
        .context("opening the device")
        .map_err(Failure::run)?;
    if let Some(notice) = &compute.fallback_notice {
        eprintln!("widebag: {notice}");
    }
    let bar = ProgressBar::new(config.train.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  [{elapsed}<{eta}]")
            .expect("valid template"),
    );
    let started = std::time::Instant::now();
    let mut examples = 0usize;
    let summary = run_training(&config, &compute, |s| {
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

fn data_stats(args: &StatsArgs) -> Result<(), Failure> {
    let options = widebag_data::ReadOptions {
        zero_based: args.zero_based,
        skip_bad_lines: args.skip_bad_lines,
        ..Default::default()
    };
    let dataset = match args.format {
        DataFormat::Libsvm => widebag_data::libsvm::read_libsvm(&args.file, &options),
        DataFormat::Lightgcn => {
            widebag_data::lightgcn::read_lightgcn(&args.file, args.test.as_deref(), &options)
                .map(|i| i.train)
        }
    }
    .map_err(Failure::usage)?;
    let stats = widebag_data::stats::compute(&dataset, args.samples, 0);
    let json = serde_json::to_string_pretty(&stats).expect("stats serialise");
    let mut beside = args.file.clone().into_os_string();
    beside.push(".stats.json");
    if !args.no_save
        && let Err(e) = std::fs::write(&beside, &json)
    {
        eprintln!(
            "widebag: could not save the statistics beside the data ({}: {e})",
            PathBuf::from(&beside).display()
        );
    }
    if dataset.skipped_lines > 0 {
        eprintln!("widebag: skipped {} bad lines", dataset.skipped_lines);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&stats).expect("stats serialise")
        );
        return Ok(());
    }
    println!("{}", args.file.display());
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Train(args) => train(args),
        Command::Data {
            command: DataCommand::Stats(args),
        } => data_stats(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}
