//! `frontier`'s request: the configuration (with `--device` and `--keep-accuracy` as the
//! overrides they are, the batch and the knob keys of `--set` pinned, so each run's plan keeps
//! them), the budgets parsed and ordered, the directory and the number of runs at once.

use std::path::PathBuf;

use widebag_config::Config;
use widebag_config::units::parse_bytes;

use super::flags::{FlagOverride, device_flag, load_args};
use super::plan::keep_accuracy_flag;
use crate::args::FrontierArgs;
use crate::failure::Failure;

/// `widebag frontier`.
pub struct FrontierRequest {
    /// The run's configuration, every run's: `--set` knob keys and the batch are in `plan.pin`.
    pub config: Config,
    /// Each budget as typed and in bytes, smallest first, no two equal.
    pub budgets: Vec<(String, u64)>,
    pub out: PathBuf,
    pub jobs: usize,
    pub json: bool,
}

pub fn frontier(args: &FrontierArgs) -> Result<FrontierRequest, Failure> {
    let mut flags: Vec<FlagOverride> = device_flag(&args.device).into_iter().collect();
    if args.keep_accuracy {
        flags.push(keep_accuracy_flag());
    }
    let mut config = load_args(&args.config, &flags)?;
    // Knob keys given with --set are pinned when `train --budget` plans; every run of the
    // frontier reads its config from a file, so they are pinned there. So is the batch: the
    // frontier measures what each layout costs at the configured batch (and its schedule), not
    // what a larger batch does.
    let keys = args
        .config
        .overrides
        .iter()
        .filter_map(|o| o.split('=').next());
    for key in keys.map(str::trim).chain(["train.batch_size"]) {
        if widebag_config::PLAN_KNOBS.contains(&key) && !config.plan.pin.iter().any(|p| p == key) {
            config.plan.pin.push(key.to_string());
        }
    }
    Ok(FrontierRequest {
        config,
        budgets: budgets(&args.budgets)?,
        out: args.out.clone(),
        jobs: args.jobs as usize,
        json: args.json,
    })
}

/// `--budgets 64MiB,256MiB`: each parsed, ordered smallest first, repeats dropped.
fn budgets(list: &str) -> Result<Vec<(String, u64)>, Failure> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for text in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let bytes = parse_bytes(text)
            .map_err(|e| Failure::usage(anyhow::anyhow!("--budgets: `{text}`: {e}")))?;
        if !out.iter().any(|(_, b)| *b == bytes) {
            out.push((text.to_string(), bytes));
        }
    }
    if out.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--budgets: no budget given (e.g. --budgets 64MiB,256MiB,1GiB)"
        )));
    }
    out.sort_by_key(|(_, b)| *b);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_parsed_ordered_and_unique() {
        let Ok(b) = budgets("1GiB, 64MiB,,1024MiB,256MiB") else {
            panic!("parses")
        };
        let texts: Vec<&str> = b.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(texts, ["64MiB", "256MiB", "1GiB"]);
        assert_eq!(b[2].1, 1 << 30);
        let e = budgets("64MiB,lots").err().unwrap();
        assert_eq!(e.code, 2);
        assert!(e.error.to_string().contains("`lots`"), "{}", e.error);
        assert!(budgets(" , ").is_err());
    }
}
