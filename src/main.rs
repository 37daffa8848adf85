//! The `widebag` command line: parses the arguments, turns them into a validated request, runs
//! the command and maps its failure to an exit code (0 ok, 1 run failed, 2 usage or
//! configuration error, 3 does not fit). The commands themselves are the `widebag` library's
//! (`lib.rs`); this binary installs the counting allocator the heap readings come from.

use std::process::ExitCode;

use clap::Parser;

use widebag::args::{BenchCommand, Cli, Command};
use widebag::failure::{self, Outcome};
use widebag::{commands, heap, process, request};

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

fn dispatch(command: &Command) -> Outcome {
    match command {
        Command::Train(args) => commands::train::run(&request::train(args)?),
        Command::Explain(args) => commands::explain::run(&request::explain(args)?),
        Command::Plan(args) => commands::plan::run(&request::plan(args)?),
        Command::Sweep(args) => commands::sweep::run(&request::sweep(args)?),
        Command::Frontier(args) => commands::frontier::run(&request::frontier(args)?),
        Command::Bench {
            command: BenchCommand::SparseVsDense(args),
        } => commands::bench::run(&request::bench(args)?),
        Command::Eval(args) => commands::eval::run(&request::eval(args)?),
        Command::Export(args) => commands::export::run(&request::export(args)?),
        Command::Predict(args) => commands::predict::run(&request::predict(args)?),
        Command::Data { command } => commands::data::run(command),
    }
}

fn main() -> ExitCode {
    process::set_up();
    // `--json` promises one JSON object on stdout for every outcome, a usage error included.
    let json = std::env::args_os().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if json && e.use_stderr() => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or_default();
            let line = line.strip_prefix("error: ").unwrap_or(line);
            eprint!("{text}");
            println!("{}", failure::json(2, line));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    match dispatch(&cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            let text = failure::render(&f.error);
            eprintln!("error: {text}");
            if json && !f.reported {
                println!("{}", failure::json(f.code, &text));
            }
            ExitCode::from(f.code)
        }
    }
}
