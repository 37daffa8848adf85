//! The processes of one run across ranks (`mpirun -np N widebag train`, or `--ranks N` as
//! threads): what they must agree on before the first step (the same run; a configuration that
//! trains across ranks), where each keeps its checkpoints (rank R of N under
//! `checkpoints/rank-R-of-N/`; one process directly under `checkpoints/`), and the step they
//! continue from: the newest one every rank has a good checkpoint of, so a rank that died while
//! writing costs the others their newest one, never a usable one; at another N it is refused.

use widebag_collective::Collective;
use widebag_config::Layout;

use crate::checkpoint::{self, Manifest};
use crate::error::ModelError;
use crate::ranks::Ranks;

/// Rank `rank` of `size`'s checkpoint directory under a run's `checkpoints/`: the root itself
/// for one process.
pub fn rank_dir(root: &std::path::Path, ranks: Ranks) -> std::path::PathBuf {
    match ranks.size {
        1 => root.to_path_buf(),
        _ => root.join(format!("rank-{}-of-{}", ranks.rank, ranks.size)),
    }
}

/// The checkpoint every rank continues from: the newest step each rank holds a good checkpoint
/// of (every rank calls it and reaches the same answer). An error naming the rank counts the
/// checkpoints were written by when they are another N's.
pub(crate) fn resume_point(
    root: &std::path::Path,
    ranks: Ranks,
    comm: &dyn Collective,
) -> Result<std::path::PathBuf, ModelError> {
    let mine = rank_dir(root, ranks);
    let good: Vec<u32> = checkpoint::list(&mine)
        .into_iter()
        .filter(|(_, dir)| Manifest::read_verified(dir).is_ok())
        .map(|(step, _)| step as u32)
        .collect();
    let all = comm.all_to_all_u32(vec![good.clone(); ranks.size])?;
    let common = good
        .iter()
        .rev()
        .find(|s| all.iter().all(|l| l.contains(s)));
    match common {
        Some(&step) => Ok(mine.join(checkpoint::step_dir_name(step as u64))),
        None => {
            let mut written: Vec<String> = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("rank-"))
                .collect();
            written.sort();
            Err(ModelError::Checkpoint(format!(
                "{}: no step that all {} ranks have a good checkpoint of (found: {}); a run \
                 continues at the number of ranks that wrote it",
                root.display(),
                ranks.size,
                match written.is_empty() {
                    true => "nothing".to_string(),
                    false => written.join(", "),
                }
            )))
        }
    }
}

/// Why a configuration cannot train across `ranks` ranks, naming the key; `None` when it can.
pub fn refused_across_ranks(
    config: &widebag_config::Config,
    ranks: usize,
) -> Option<(&'static str, String)> {
    let streams = config.data.shuffle_streams;
    if streams > 1 && !streams.is_multiple_of(ranks.max(1)) {
        return Some((
            "data.shuffle_streams",
            format!(
                "{ranks} ranks cannot share {streams} streams: the number of ranks must divide \
                 it (each rank reads its streams' blocks alone)"
            ),
        ));
    }
    if config.model.layout != Layout::Sparse {
        return Some((
            "model.layout",
            "training across ranks needs the sparse layout".into(),
        ));
    }
    if config.train.cpu_kernels != widebag_config::CpuKernels::Host
        || config.train.device == widebag_config::DeviceChoice::Wgpu
    {
        return Some((
            "train.device",
            "training across ranks runs on the CPU backend with its host kernels for now \
             (--device cpu)"
                .into(),
        ));
    }
    None
}

/// An error on every rank unless all ranks prepared the same run (the config's hash, the data's
/// width and classes filled in): ranks that disagree would exchange mismatched shapes.
pub(crate) fn agree_on_config(
    config: &widebag_config::Config,
    comm: &dyn Collective,
) -> Result<(), ModelError> {
    let hash = u32::from_str_radix(&checkpoint::config_hash(config), 16).unwrap_or(0);
    let all = comm.all_to_all_u32(vec![vec![hash]; comm.size()])?;
    let differ: Vec<usize> = (0..all.len())
        .filter(|&r| all[r].first() != Some(&hash))
        .collect();
    match differ.is_empty() {
        true => Ok(()),
        false => Err(ModelError::Unsupported {
            key: "config",
            message: format!(
                "rank {} prepared a different run from ranks {differ:?} (config hash {hash:08x}): \
                 every rank must read the same config and data",
                comm.rank()
            ),
        }),
    }
}

/// Fault injection for the tests: with `WIDEBAG_FAULT_RANK_EXIT=R:S` rank R's process exits (code
/// 1) as step S starts, as a rank that dies mid-run; the others must not hang.
pub(crate) fn fault_rank_exit(rank: usize, step: u64) {
    let Ok(v) = std::env::var("WIDEBAG_FAULT_RANK_EXIT") else {
        return;
    };
    let parsed = v
        .split_once(':')
        .and_then(|(r, s)| Some((r.parse().ok()?, s.parse().ok()?)));
    if parsed == Some((rank, step)) {
        eprintln!("widebag: rank {rank} exits at step {step} (WIDEBAG_FAULT_RANK_EXIT)");
        std::process::exit(1);
    }
}
