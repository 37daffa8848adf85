//! The command line as clap parses it: every command's flags, with the device flag defined once
//! (`DeviceArgs`) and flattened where it applies. Nothing here is checked beyond what clap does;
//! `request` turns these into a validated request.

use std::path::PathBuf;

pub use crate::data_args::{
    ConvertArgs, FormatArg, LabelArg, ModeArg, OutFormat, PackArgs, SourceArgs, StatsArgs,
    TokensArg,
};
pub use crate::device_args::{DeviceArg, DeviceArgs};
pub use crate::run_args::{EvalArgs, ExportArgs, PredictArgs, RunArgs};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "widebag",
    version,
    about = "Memory-exact training for very wide sparse models",
    after_help = "Start with README.md. Guides: docs/recommenders.md (Gowalla end to end), \
                  docs/language-models.md (text, GCIDE, Brown), docs/memory.md (the ledger, \
                  plans, remedies), docs/benchmarks.md (bench, sweeps, PyTorch peers), \
                  docs/multi-process.md (mpirun, --ranks), docs/data-formats.md, \
                  docs/checkpoints.md (run directories, resume, eval, export, predict)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Train a model (with no options: the built-in quickstart on synthetic 240k-wide data).
    #[command(after_help = "Guides: docs/recommenders.md, docs/language-models.md, \
                            docs/multi-process.md (--ranks, mpirun), docs/checkpoints.md (--out, --resume).")]
    Train(TrainArgs),
    /// The memory ledger of a training step: every tensor by category, layer and phase, the
    /// predicted peak, and with --measure the allocator's readings beside it.
    #[command(after_help = "Guide: docs/memory.md.")]
    Explain(ExplainArgs),
    /// The batch size and optimizers that fit a memory budget, from the ledger alone (no trial
    /// runs); exit 3 with the smallest changes that would fit when nothing does.
    #[command(after_help = "Guide: docs/memory.md (planning for a budget, the remedies).")]
    Plan(PlanArgs),
    /// Run a sweep file's grid of configs, each into its own directory (resumable), and write
    /// results.csv, results.md and SVG plots.
    #[command(after_help = "Guide: docs/benchmarks.md (experiments).")]
    Sweep(SweepArgs),
    /// The task's metric against memory: the model trained at each budget with the layout the
    /// solver chooses for it (as `train --budget` does), each run measured alone; writes
    /// results.csv, results.md and frontier.svg (resumable).
    #[command(after_help = "Guide: docs/remedies.md.")]
    Frontier(FrontierArgs),
    /// Benchmarks.
    #[command(after_help = "Guide: docs/benchmarks.md.")]
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Evaluate a trained run (its last good checkpoint) on held-out rows: the run's own
    /// (data.test_path or train.eval_rows), or a file given with --data.
    #[command(after_help = "Guide: docs/checkpoints.md.")]
    Eval(EvalArgs),
    /// Export a trained run's model as safetensors and .npy files (ids in the data's own
    /// numbering, head/tail bands projected to the full dim) with its vocabulary.
    #[command(after_help = "Guide: docs/checkpoints.md.")]
    Export(ExportArgs),
    /// The top-K classes or items of each row of a data file, from a trained run, as CSV or
    /// JSON lines.
    #[command(after_help = "Guide: docs/checkpoints.md.")]
    Predict(PredictArgs),
    /// Inspect data files.
    #[command(after_help = "Guide: docs/data-formats.md.")]
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
}

#[derive(Subcommand)]
pub enum DataCommand {
    /// Rows, width, nnz per row, head coverage and unique ids per batch of a data file.
    Stats(StatsArgs),
    /// Convert a data file to libsvm or scipy npz.
    Convert(ConvertArgs),
    /// Write synthetic rows (the `[data]` settings of the config) to a libsvm or npz file.
    Synth(SynthArgs),
    /// Pack a data file into widebag's packed format: checksummed blocks, statistics in the
    /// header, read through a memory map wherever a data file is accepted.
    Pack(PackArgs),
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The same model in the dense and the sparse layout at a ladder of widths: predicted and
    /// measured peak memory and examples/s side by side, with a plot.
    SparseVsDense(BenchArgs),
}

/// Options shared by every command that reads a configuration.
#[derive(Args)]
pub struct ConfigArgs {
    /// TOML configuration file layered over the built-in defaults.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Override one key, e.g. `--set model.hidden=[1024,512]` (value parsed as TOML, else a string).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}

/// The throughput model a plan uses (`--objective throughput`).
#[derive(Args)]
pub struct CalibrationArgs {
    /// The throughput model's coefficients (JSON written by `plan --calibrate --out FILE`);
    /// default: the built-in lavapipe calibration.
    #[arg(long, value_name = "FILE.json")]
    pub calibration: Option<PathBuf>,
}

#[derive(Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Print one JSON object with the run's summary on stdout.
    #[arg(long)]
    pub json: bool,
    /// Time each stage of the step exactly: on wgpu every stage boundary waits for the device,
    /// which costs some throughput (on flex stage times are exact anyway). The step profile is
    /// in the summary and in `--json` either way.
    #[arg(long)]
    pub profile: bool,
    /// Plan first for this budget (`6GiB`, …) and train with the plan's batch size and
    /// optimizers; exit 3 with the plan's report when nothing fits.
    #[arg(long, value_name = "BYTES")]
    pub budget: Option<String>,
    /// With --budget: never take a remedy that costs accuracy (head/tail input, the adaptive or
    /// the sampled softmax); exit 3 with the smallest budget that needs none when the budget needs one.
    #[arg(long, requires = "budget")]
    pub keep_accuracy: bool,
    #[command(flatten)]
    pub calibration: CalibrationArgs,
    /// Write a run directory: config.toml, ledger.json, plan.json, metrics.jsonl,
    /// summary.json and checkpoints/ (every train.checkpoint_every steps and at the end).
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue the run in DIR from its last good checkpoint, with its own config.toml. `--set`
    /// may lengthen or re-time it (train.epochs, train.steps, train.eval_every,
    /// train.checkpoint_every; the learning-rate schedule then spans the new end); any other
    /// key is refused (exit 2).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "budget"])]
    pub resume: Option<PathBuf>,
    /// Train as N ranks (row-sharded tables, data-parallel dense layers), here as N threads;
    /// under `mpirun` (a binary built with `--features mpi`) the MPI world size sets it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub ranks: Option<u32>,
    /// Write the initial weights, before the first step, to FILE (safetensors, named as a
    /// checkpoint names them), so another trainer can start from the same numbers
    /// (benches/peers/compare.sh with SAME_INIT=1). One process; not with --resume.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["resume", "ranks"])]
    pub save_init: Option<PathBuf>,
}

/// How the solver's flags reach the plan.
#[derive(Args)]
pub struct BudgetArgs {
    /// Memory budget: `6GiB`, `512MiB`, `8GB` or bytes (default: plan.budget, else the device's
    /// memory minus the reserve when the device reports it).
    #[arg(long, value_name = "BYTES")]
    pub budget: Option<String>,
    /// What to maximise: `batch` (the largest batch, then the most capable optimizers) or
    /// `throughput` (predicted examples/s).
    #[arg(long, value_enum)]
    pub objective: Option<ObjectiveArg>,
    /// The smallest batch the solver may choose (plan.min_batch).
    #[arg(long)]
    pub min_batch: Option<usize>,
    /// The largest batch the solver considers (plan.max_batch).
    #[arg(long)]
    pub max_batch: Option<usize>,
    /// Never take a remedy that costs accuracy (head/tail input, the adaptive or the sampled
    /// softmax): a budget that needs one is refused (exit 3) with the smallest budget that does
    /// not (plan.keep_accuracy).
    #[arg(long)]
    pub keep_accuracy: bool,
    /// Keep a knob at the config's value: train.batch_size, optim.table or optim.dense
    /// (repeatable; knob keys given with --set are pinned too).
    #[arg(long, value_name = "KEY")]
    pub pin: Vec<String>,
    /// Plan for a device with this largest buffer instead of the opened one (with --alignment).
    #[arg(long, value_name = "BYTES")]
    pub max_buffer: Option<String>,
    /// Plan for a device with this allocation alignment in bytes.
    #[arg(long, value_name = "BYTES")]
    pub alignment: Option<u64>,
    #[command(flatten)]
    pub calibration: CalibrationArgs,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ObjectiveArg {
    Batch,
    Throughput,
}

/// The flags that shape one plan, which `--grid` and `--calibrate` do not use.
const ONE_PLAN_FLAGS: [&str; 14] = [
    "config",
    "host_budget",
    "ranks",
    "overrides",
    "budget",
    "objective",
    "min_batch",
    "max_batch",
    "pin",
    "max_buffer",
    "alignment",
    "calibration",
    "verify",
    "search",
];

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Plan each rank of a run across N ranks (`mpirun -np N` or `train --ranks N`): the budget
    /// is per rank; the report says what each rank holds and the bytes each step moves.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub ranks: Option<u32>,
    /// The host's memory for the process (e.g. 4GiB): the plan's host side (the data's rows,
    /// order and batches, the host tier, the process's baseline, and on flex the device's
    /// tensors) is priced, and a plan over it is refused (exit 3).
    #[arg(long, value_name = "BYTES")]
    pub host_budget: Option<String>,
    /// Print one JSON object (batch_size, optimizer, predicted_peak_bytes, budget_bytes, fits, …).
    #[arg(long)]
    pub json: bool,
    /// Run the plan for --steps steps on the device and check the measured peak is under the budget.
    #[arg(long)]
    pub verify: bool,
    /// The ground truth: find the largest batch that runs under the budget from real runs'
    /// measured peaks (with the plan's optimizers), starting at the plan's batch.
    #[arg(long)]
    pub search: bool,
    /// With --search: stop bisecting when the bracket is within this % of the batch (0: one row).
    #[arg(long, default_value_t = 1.0)]
    pub tolerance: f64,
    /// Steps per run of --verify and --search (the first is a warm-up).
    #[arg(long, default_value_t = 2)]
    pub steps: usize,
    /// Run the solver's grid (`small`): plan, --verify and --search at five budgets for two
    /// models; fails when a point misses a bar.
    #[arg(long, value_name = "NAME", conflicts_with_all = ONE_PLAN_FLAGS)]
    pub grid: Option<String>,
    /// With --grid: directory for plan-grid.md and plan-grid.json; with --calibrate: the JSON
    /// file the fitted coefficients are written to.
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Measure the calibration runs on the device and fit the throughput model
    /// (`--objective throughput`) to them.
    #[arg(
        long,
        conflicts_with_all = ONE_PLAN_FLAGS,
        conflicts_with_all = ["grid", "json", "tolerance"]
    )]
    pub calibrate: bool,
    /// With --calibrate: every run's widths, classes, dim and hidden size times N (a GPU's
    /// calibration needs runs near the scale it plans: at 1, sized for a CPU adapter, an H200
    /// ran them launch-bound and the fit mispredicted the seed model's step 5.6x).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "calibrate")]
    pub scale: usize,
}

#[derive(Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Run real steps and read the allocator at every point of the step beside the prediction.
    #[arg(long)]
    pub measure: bool,
    /// Steps run by --measure (the first is a warm-up whose readings are discarded); the compared
    /// prediction takes its batch sizes from the steps read.
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    /// Print one JSON object (predicted_peak_bytes, measured_peak_bytes, categories, points, …).
    #[arg(long)]
    pub json: bool,
    /// Where --measure writes its SVG chart.
    #[arg(long, default_value = "widebag-explain.svg")]
    pub svg: PathBuf,
    /// Run the accuracy grid (`small`: the CI grid; `full`: the grid in docs/memory.md) instead
    /// of one config; fails when any measured point misses the 3% bar.
    #[arg(long, value_name = "NAME")]
    pub grid: Option<String>,
    /// With --grid: directory for grid.md and grid.json.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct SweepArgs {
    /// The sweep file (`configs/sweeps/NAME.toml`): base, set, [grid], [[exclude]].
    #[arg(long, value_name = "FILE.toml")]
    pub config: PathBuf,
    /// The sweep's directory: one directory per run, results.csv, results.md, *.svg.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Override one key of every run, e.g. `--set train.steps=5`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub calibration: CalibrationArgs,
}

#[derive(Args)]
pub struct FrontierArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The budgets, comma-separated (`64MiB,256MiB,1GiB`); run smallest first. The batch is
    /// the config's at every budget (pinned): the solver chooses the optimizers and the layout.
    #[arg(long, value_name = "LIST")]
    pub budgets: String,
    /// The frontier's directory: config.toml, a directory per budget (plan.json, the run as
    /// `train --out` writes it, train.log, row.json), results.csv, results.md, frontier.svg.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Never take a remedy that costs accuracy (plan.keep_accuracy): a budget that needs one is
    /// refused, with the smallest budget that does not.
    #[arg(long)]
    pub keep_accuracy: bool,
    /// Runs at once, started only while their predicted peaks and data fit side by side in the
    /// memory the device computes in (the cores shared between them).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Widths to compare (classes = width), e.g. `8000,24000,80000,240000` (the default).
    #[arg(long, value_name = "LIST")]
    pub widths: Option<String>,
    /// Steps per run (at least 5: one warm-up, two read at every point, the rest timed).
    #[arg(long, default_value_t = 8)]
    pub steps: usize,
    /// Directory for bench.md, bench.json and bench.svg.
    #[arg(long, value_name = "DIR", default_value = "widebag-bench")]
    pub out: PathBuf,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct SynthArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Number of rows to write.
    #[arg(long, default_value_t = 10_000)]
    pub rows: usize,
    /// Output format (`packed`: streamed a block at a time, in memory bounded whatever the
    /// number of rows: how data larger than memory is made for a benchmark).
    #[arg(long, value_enum)]
    pub to: SynthFormat,
    /// `packed`: rows per block.
    #[arg(long, default_value_t = widebag_data::packed::DEFAULT_BLOCK_ROWS)]
    pub block_rows: u32,
    /// Output file.
    pub out: PathBuf,
}

/// What `data synth` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthFormat {
    Libsvm,
    Npz,
    /// widebag's packed dataset.
    Packed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `widebag --help` and every subcommand's help name their guide, and the guide exists.
    #[test]
    fn every_help_names_an_existing_guide() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let cli = Cli::command();
        let mut helps = vec![(
            "widebag".to_string(),
            cli.get_after_help().map(|h| h.to_string()),
        )];
        for sub in cli.get_subcommands() {
            let help = sub.get_after_help().map(|h| h.to_string());
            helps.push((sub.get_name().to_string(), help));
        }
        assert!(helps.len() > 8, "{} commands", helps.len());
        for (name, help) in helps {
            let help = help.unwrap_or_else(|| panic!("`{name} --help` names no guide"));
            let guides: Vec<&str> = help
                .split(|c: char| c.is_whitespace() || ",()".contains(c))
                .map(|w| w.trim_end_matches('.'))
                .filter(|w| w.starts_with("docs/") && w.ends_with(".md"))
                .collect();
            assert!(
                !guides.is_empty(),
                "`{name} --help` names no docs/*.md guide: {help}"
            );
            for g in guides {
                assert!(
                    root.join(g).is_file(),
                    "`{name} --help` names {g}, which is missing"
                );
            }
        }
    }

    #[test]
    fn grid_and_calibrate_refuse_the_one_plan_flags() {
        for args in [
            &["widebag", "plan", "--grid", "small", "--budget", "8GiB"][..],
            &["widebag", "plan", "--grid", "small", "--verify"],
            &["widebag", "plan", "--calibrate", "--json"],
            &["widebag", "plan", "--calibrate", "--grid", "small"],
            &["widebag", "plan", "--calibrate", "--set", "x=1"],
        ] {
            let err = Cli::try_parse_from(args).err().expect("refused");
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{args:?}"
            );
        }
        for args in [
            &[
                "widebag", "plan", "--grid", "small", "--json", "--steps", "3",
            ][..],
            &[
                "widebag",
                "plan",
                "--calibrate",
                "--steps",
                "6",
                "--out",
                "c.json",
            ],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
    }
}
