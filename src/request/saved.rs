//! Requests that read a trained run (`eval`, `export`, `predict`): the run directory's config
//! (with the device flag), and the checkpoint to load (the last good one unless named).

use std::path::PathBuf;

use widebag_config::Config;

use super::{device_flag, load};
use crate::args::RunArgs;
use crate::failure::Failure;

/// A trained run to read.
pub struct SavedRun {
    pub dir: PathBuf,
    pub config: Config,
    pub checkpoint: PathBuf,
}

pub fn saved_run(args: &RunArgs) -> Result<SavedRun, Failure> {
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
