//! A multi-process run's checkpoints gathered into the single-process model, so `eval`,
//! `export` and `predict` read a run trained across ranks as they read any other: each rank's
//! checkpoint (`checkpoints/rank-R-of-N/step-…`, at the newest step every rank holds) is loaded
//! into that rank's part of the model, its blocks of every table are laid end to end, its class
//! blocks of the full softmax put back in place, each tail cluster of the adaptive softmax taken
//! from its owner (the output layer's own `gather_owned`) and the replicated dense layers from
//! rank 0. Weights only: the optimizers' state stays in the ranks' checkpoints. Every model is
//! built with zeros: the checkpoints set every value read.

use std::path::{Path, PathBuf};

use widebag_config::Config;
use widebag_config::bands::ModelBands;

use crate::checkpoint::{self, Manifest, Match};
use crate::device::Compute;
use crate::error::ModelError;
use crate::layout::Trainable;
use crate::model::SparseModel;
use crate::params::init::Init;
use crate::ranks::Ranks;

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
) -> Result<(SparseModel, Manifest), ModelError> {
    let step = common_step(root, size)?;
    let mut full = SparseModel::new_rank(config, bands, compute, Ranks::ONE, Init::Zeros)?;
    let mut tables: Vec<Vec<f32>> = vec![Vec::new(); full.bands.len()];
    let mut manifest = None;
    for rank in 0..size {
        let ranks = Ranks { rank, size };
        let mut part = SparseModel::new_rank(config, bands, compute, ranks, Init::Zeros)?;
        let dir = rank_root(root, rank, size).join(checkpoint::step_dir_name(step));
        let m = checkpoint::load(&mut part, &dir, config, Match::Shapes)?;
        // Each rank's block of every band, in rank order: the band's rows.
        for (k, band) in part.bands.iter().enumerate() {
            for s in 0..band.table.shard_ranges().len() {
                tables[k].extend_from_slice(&band.table.read_shard(s)?);
            }
        }
        // What the rank alone holds of the output layer: its classes of the full softmax, the
        // tail clusters of the adaptive softmax it owns (rank `k mod N`, which alone updated
        // them).
        full.output.gather_owned(part.output.as_ref(), ranks)?;
        if rank == 0 {
            // The replicated dense layers (and the adaptive softmax's head).
            let replicated = part.trunk.iter().count() + part.output.replicated();
            for (to, from) in full
                .dense_params_mut()
                .into_iter()
                .zip(part.dense_params())
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
    let manifest = manifest.ok_or_else(|| ModelError::Checkpoint("no ranks".into()))?;
    full.set_step(manifest.step);
    Ok((full, manifest))
}
