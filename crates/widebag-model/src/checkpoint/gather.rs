//! A multi-process run's checkpoints gathered into the single-process model, so `eval`,
//! `export` and `predict` read a run trained across ranks as they read any other: each rank's
//! checkpoint (`checkpoints/rank-R-of-N/step-…`, at the newest step every rank holds) is loaded
//! into that rank's part of the model, its blocks of every table are laid end to end, its class
//! blocks of the full softmax put back in place, each tail cluster of the adaptive softmax taken
//! from its owner and the replicated dense layers from rank 0. Weights only: the optimizers'
//! state stays in the ranks' checkpoints.

use std::path::{Path, PathBuf};

use widebag_config::Config;
use widebag_config::bands::ModelBands;

use crate::ModelError;
use crate::checkpoint::{self, Manifest, Match};
use crate::device::Compute;
use crate::layout::TrainLayout;
use crate::model::params::OutputParams;
use crate::model::{Ranks, WideModel};
use crate::tensors::{floats, to_vec};

/// The rank counts that wrote checkpoints under `root` (its `rank-R-of-N` directories), sorted.
pub fn rank_sizes(root: &Path) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("rank-")?
                .split_once("-of-")?
                .1
                .parse()
                .ok()
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// How many ranks wrote the checkpoints under `root`, if any did (the most, if several runs).
pub fn ranks_of(root: &Path) -> Option<usize> {
    rank_sizes(root).into_iter().max()
}

/// Rank `rank` of `size`'s checkpoint directory under `root`.
fn rank_root(root: &Path, rank: usize, size: usize) -> PathBuf {
    root.join(format!("rank-{rank}-of-{size}"))
}

/// The newest step that each of the `size` ranks under `root` has a good checkpoint of.
pub fn common_step(root: &Path, size: usize) -> Result<u64, ModelError> {
    let good = |rank: usize| -> Vec<u64> {
        checkpoint::list(&rank_root(root, rank, size))
            .into_iter()
            .filter(|(_, dir)| Manifest::read_verified(dir).is_ok())
            .map(|(step, _)| step)
            .collect()
    };
    let first = good(0);
    let others: Vec<Vec<u64>> = (1..size).map(good).collect();
    first
        .into_iter()
        .rev()
        .find(|s| others.iter().all(|o| o.contains(s)))
        .ok_or_else(|| {
            ModelError::Checkpoint(format!(
                "{}: no step that all {size} ranks have a good checkpoint of",
                root.display()
            ))
        })
}

/// The single-process model of `config` with the weights of the `size` ranks' checkpoints
/// under `root` at their newest common step, and rank 0's manifest of it.
pub fn load_gathered(
    config: &Config,
    bands: &ModelBands,
    compute: &Compute,
    root: &Path,
    size: usize,
) -> Result<(WideModel, Manifest), ModelError> {
    let step = common_step(root, size)?;
    let mut full = WideModel::new(config, bands, compute)?;
    let mut tables: Vec<Vec<f32>> = vec![Vec::new(); full.bands.len()];
    let (last, n_classes) = (full.spec.last_hidden(), full.spec.n_classes);
    let mut weight = vec![0.0f32; last * n_classes];
    let mut bias = vec![0.0f32; n_classes];
    let mut manifest = None;
    for rank in 0..size {
        let mut part = WideModel::new_rank(config, bands, compute, Ranks { rank, size })?;
        let dir = rank_root(root, rank, size).join(checkpoint::step_dir_name(step));
        let m = checkpoint::load(&mut part, &dir, config, Match::Shapes)?;
        // Each rank's block of every band, in rank order: the band's rows.
        for (k, band) in part.bands.iter().enumerate() {
            for s in 0..band.table.shard_ranges().len() {
                tables[k].extend_from_slice(&band.table.read_shard(s)?);
            }
        }
        if let OutputParams::Full { chunks } = &part.dense.output {
            // Each class chunk keeps its global offset: its columns of the whole layer.
            for (c, lin) in part.chunks.iter().zip(chunks) {
                let w = to_vec(lin.weight.value.clone())?;
                let b = to_vec(lin.bias.value.clone())?;
                for row in 0..last {
                    let at = row * n_classes + c.offset;
                    weight[at..at + c.n].copy_from_slice(&w[row * c.n..(row + 1) * c.n]);
                }
                bias[c.offset..c.offset + c.n].copy_from_slice(&b);
            }
        }
        // Each tail cluster of the adaptive softmax from its owner (rank `k mod N`), which alone
        // updated it.
        if let (
            OutputParams::Adaptive { clusters: to, .. },
            OutputParams::Adaptive { clusters: from, .. },
        ) = (&mut full.dense.output, &part.dense.output)
        {
            for (k, (to, from)) in to.iter_mut().zip(from).enumerate() {
                if k % size == rank {
                    to.proj.value = from.proj.value.clone();
                    to.weight.value = from.weight.value.clone();
                    to.bias.value = from.bias.value.clone();
                }
            }
        }
        if rank == 0 {
            // The replicated dense layers (and the adaptive softmax's head).
            let own = match &part.dense.output {
                OutputParams::Full { .. } => part.dense.output.iter().count(),
                OutputParams::Adaptive { clusters, .. } => 3 * clusters.len(),
            };
            let replicated = full.dense.iter().count() - own;
            for (to, from) in full
                .dense
                .iter_mut()
                .zip(part.dense.iter())
                .take(replicated)
            {
                to.value = from.value.clone();
            }
            manifest = Some(m);
        }
    }
    for (band, rows) in full.bands.iter_mut().zip(tables) {
        let dim = band.band.dim;
        for (s, (first, n)) in band.table.shard_ranges().into_iter().enumerate() {
            band.table
                .write_shard(s, rows[first * dim..(first + n) * dim].to_vec())?;
        }
    }
    let device = full.device().clone();
    if let OutputParams::Full { chunks } = &mut full.dense.output {
        for (c, lin) in full.chunks.iter().zip(chunks.iter_mut()) {
            let mut w = Vec::with_capacity(last * c.n);
            for row in 0..last {
                let at = row * n_classes + c.offset;
                w.extend_from_slice(&weight[at..at + c.n]);
            }
            lin.weight.value = floats(w, [last, c.n], &device);
            lin.bias.value = floats(bias[c.offset..c.offset + c.n].to_vec(), [1, c.n], &device);
        }
    }
    let manifest = manifest.ok_or_else(|| ModelError::Checkpoint("no ranks".into()))?;
    full.set_step(manifest.step);
    Ok((full, manifest))
}
