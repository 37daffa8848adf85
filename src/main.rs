//! The `widebag` command line: parses the arguments, turns them into a validated request, runs
//! the command and maps its failure to an exit code (0 ok, 1 run failed, 2 usage or
//! configuration error, 3 does not fit).

mod args;
mod chart;
mod commands;
mod failure;
mod heap;
mod measure;
mod output;
mod prerun;
mod process;
mod request;
mod run_args;
mod run_dir;

use std::process::ExitCode;

use clap::Parser;

use args::{BenchCommand, Cli, Command};
use failure::Outcome;

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

fn dispatch(command: &Command) -> Outcome {
    match command {
        Command::Train(args) => commands::train::run(&request::train(args)?),
        Command::Explain(args) => commands::explain::run(&request::explain(args)?),
        Command::Plan(args) => commands::plan::run(&request::plan(args)?),
        Command::Sweep(args) => commands::sweep::run(&request::sweep(args)?),
        Command::Bench {
            command: BenchCommand::SparseVsDense(args),
        } => commands::bench::run(&request::bench(args)?),
        Command::Eval(args) => commands::eval::run(args),
        Command::Export(args) => commands::export::run(args),
        Command::Predict(args) => commands::predict::run(args),
        Command::Data { command } => commands::data::run(command),
    }
}

fn main() -> ExitCode {
    process::set_up();
    let cli = Cli::parse();
    match dispatch(&cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", failure::render(&f.error));
            ExitCode::from(f.code)
        }
    }
}
