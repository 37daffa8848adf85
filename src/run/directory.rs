//! Where a training run keeps its files: a new run directory (`--out`, refused where a run
//! already is) or the one `--resume` continues, with the checkpoint it continues from (one
//! process: its newest good one; ranks: the newest step every rank holds, at the same N).

use widebag_collective::Collective;
use widebag_model::train::group::rank_dir;
use widebag_model::{CheckpointPlan, Ranks, Resume, RunOptions};

use crate::failure::Failure;
use crate::request::TrainRequest;
use crate::run_dir::RunDir;

/// The run directory of `--out` (new) or `--resume` (with the step of this rank's newest good
/// checkpoint), and the checkpoint settings it brings. One process continues from its newest
/// good checkpoint; ranks from the newest step every rank has one of, at the same N.
pub fn run_directory(
    req: &TrainRequest,
    options: &mut RunOptions,
    config: &widebag_config::Config,
    comm: &dyn Collective,
) -> Result<Option<(RunDir, Option<u64>)>, Failure> {
    let every = config.train.checkpoint_every as u64;
    let ranks = Ranks::of(comm);
    let alone = ranks.size == 1;
    if let Some(path) = &req.resume {
        let dir = RunDir::create(path).map_err(Failure::run)?;
        let mine = rank_dir(&dir.checkpoints(), ranks);
        options.checkpoints = Some(CheckpointPlan {
            root: dir.checkpoints(),
            every,
        });
        if !alone {
            if !mine.exists() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--resume {}: no checkpoints of rank {} of {} (a run continues at the \
                     number of ranks that wrote it: {})",
                    path.display(),
                    ranks.rank,
                    ranks.size,
                    written_by(&dir.checkpoints())
                )));
            }
            // The step every rank continues from is agreed as the run starts.
            options.resume = Some(Resume::NewestCommon);
            let newest = widebag_model::checkpoint::latest_good(&mine).ok();
            return Ok(Some((dir, newest.map(|(_, m, _)| m.step))));
        }
        let (ckpt, manifest, refused) =
            widebag_model::checkpoint::latest_good(&mine).map_err(Failure::run)?;
        for r in refused {
            eprintln!("widebag: skipped a newer checkpoint: {r}");
        }
        eprintln!(
            "widebag: resuming {} from {} (step {})",
            path.display(),
            ckpt.display(),
            manifest.step
        );
        options.resume = Some(Resume::Checkpoint(ckpt));
        return Ok(Some((dir, Some(manifest.step))));
    }
    let Some(path) = &req.out else {
        return Ok(None);
    };
    if comm.rank() == 0 && (path.join("summary.json").exists() || path.join("checkpoints").exists())
    {
        return Err(Failure::usage(anyhow::anyhow!(
            "--out {}: already holds a run; continue it with --resume {} or choose another \
             directory",
            path.display(),
            path.display()
        )));
    }
    let dir = RunDir::create(path).map_err(Failure::run)?;
    options.checkpoints = Some(CheckpointPlan {
        root: dir.checkpoints(),
        every,
    });
    Ok(Some((dir, None)))
}

/// The rank counts a run's checkpoints were written at (`2 ranks, 3 ranks`), or `none`.
fn written_by(root: &std::path::Path) -> String {
    let sizes = widebag_model::checkpoint::gather::rank_sizes(root);
    match sizes.is_empty() {
        true => "none".to_string(),
        false => {
            let s: Vec<String> = sizes.iter().map(|n| format!("{n} ranks")).collect();
            s.join(", ")
        }
    }
}
