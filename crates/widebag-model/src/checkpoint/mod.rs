//! Checkpoints: every weight and optimizer state of a layout (safetensors, loadable by numpy
//! and PyTorch), the data position, the step and the config, written into a temporary
//! directory, synced and renamed into place, so the last good checkpoint is never damaged; and
//! read back after their sums, format and config are checked. Layout on disk:
//! `RUN/checkpoints/step-00000100/{weights.safetensors, optimizer.safetensors, state.json}`.

pub mod gather;
pub mod saved;

pub mod files;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use widebag_config::Config;
use widebag_data::DataPosition;

use crate::entries::CheckpointFile;
use crate::error::ModelError;
use crate::layout::Trainable;
use widebag_checkpoint::manifest;
pub use widebag_checkpoint::{Manifest, config_hash, run_hash};

/// Checkpoints kept in a run directory (older ones are removed once a newer one is complete).
pub const KEEP: usize = 2;

const PARTS: [(&str, CheckpointFile); 2] = [
    ("weights.safetensors", CheckpointFile::Weights),
    ("optimizer.safetensors", CheckpointFile::Optimizer),
];

fn io(path: &Path) -> impl Fn(std::io::Error) -> ModelError + '_ {
    move |e| ModelError::Checkpoint(format!("{}: {e}", path.display()))
}

/// Where the run stands when a checkpoint is taken.
#[derive(Clone, Copy, Debug)]
pub struct RunPoint {
    pub step: u64,
    pub epoch: Option<u64>,
    pub position: DataPosition,
}

/// The directory name of the checkpoint after `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:08}")
}

/// Writes a checkpoint of `layout` at `point` under `root` (deferred updates are applied
/// first) and removes all but the newest [`KEEP`]. Returns its directory.
pub fn save(
    layout: &mut dyn Trainable,
    point: RunPoint,
    config: &Config,
    root: &Path,
) -> Result<PathBuf, ModelError> {
    layout.flush_deferred()?;
    std::fs::create_dir_all(root).map_err(io(root))?;
    let name = step_dir_name(point.step);
    let tmp = root.join(format!(".{name}.tmp"));
    let dst = root.join(&name);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir(&tmp).map_err(io(&tmp))?;
    let result = write_into(layout, point, config, &tmp);
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dst.exists() {
        std::fs::remove_dir_all(&dst).map_err(io(&dst))?;
    }
    std::fs::rename(&tmp, &dst).map_err(io(&dst))?;
    widebag_data::atomic::sync_dir(root).map_err(io(root))?;
    prune(root, KEEP)?;
    Ok(dst)
}

/// Writes `layout`'s weights alone (no optimizer state, no manifest) to the safetensors file
/// `path`, through a temporary sibling renamed into place: the numbers a peer starts from.
pub fn save_weights(layout: &mut dyn Trainable, path: &Path) -> Result<(), ModelError> {
    layout.flush_deferred()?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{}.tmp", name.unwrap_or_default()));
    let mut metadata = HashMap::new();
    metadata.insert(
        "widebag".to_string(),
        format!("{} initial weights", layout.name()),
    );
    let written = files::write(&layout.entries(), CheckpointFile::Weights, metadata, &tmp)
        .and_then(|()| {
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(io(path))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn write_into(
    layout: &mut dyn Trainable,
    point: RunPoint,
    config: &Config,
    dir: &Path,
) -> Result<(), ModelError> {
    // One key: safetensors writes a map's keys in no fixed order, and identical runs should
    // write identical files.
    let mut metadata = HashMap::new();
    metadata.insert(
        "widebag".to_string(),
        format!(
            "{} {} step {}",
            manifest::FORMAT,
            manifest::VERSION,
            point.step
        ),
    );
    let mut files = BTreeMap::new();
    {
        let slots = layout.entries();
        for (file, part) in PARTS {
            let path = dir.join(file);
            files::write(&slots, part, metadata.clone(), &path)?;
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io(&path))?;
            files.insert(file.to_string(), manifest::sum_file(&path)?);
            fault_pause();
        }
    }
    let m = Manifest {
        format: manifest::FORMAT.to_string(),
        version: manifest::VERSION,
        step: point.step,
        epoch: point.epoch,
        position: point.position,
        layout: layout.name().to_string(),
        config_hash: config_hash(config),
        run_hash: Some(run_hash(config)),
        widebag_version: env!("CARGO_PKG_VERSION").to_string(),
        files,
    };
    let path = dir.join("state.json");
    let json = serde_json::to_string_pretty(&m).expect("a manifest serialises");
    widebag_data::atomic::write_atomic(&path, json.as_bytes()).map_err(io(&path))
}

/// Fault injection for the tests: with `WIDEBAG_FAULT_CHECKPOINT_PAUSE_MS` set, a checkpoint
/// write waits that long after each file, so a test can kill the process in mid-write.
fn fault_pause() {
    if let Some(ms) = std::env::var("WIDEBAG_FAULT_CHECKPOINT_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Complete checkpoints under `root`, oldest first: `(step, directory)`.
pub fn list(root: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step = name.strip_prefix("step-")?.parse().ok()?;
            Some((step, e.path()))
        })
        .collect();
    out.sort();
    out
}

fn prune(root: &Path, keep: usize) -> Result<(), ModelError> {
    let all = list(root);
    for (_, dir) in &all[..all.len().saturating_sub(keep)] {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    Ok(())
}

/// The newest checkpoint under `root` that passes its checks, with the reasons newer ones
/// were refused; an error naming every refusal when none passes.
pub fn latest_good(root: &Path) -> Result<(PathBuf, Manifest, Vec<String>), ModelError> {
    let mut refused = Vec::new();
    for (_, dir) in list(root).into_iter().rev() {
        match Manifest::read_verified(&dir) {
            Ok(m) => return Ok((dir, m, refused)),
            Err(e) => refused.push(e.to_string()),
        }
    }
    Err(ModelError::Checkpoint(if refused.is_empty() {
        format!("no checkpoint under {}", root.display())
    } else {
        format!(
            "no usable checkpoint under {}: {}",
            root.display(),
            refused.join("; ")
        )
    }))
}

/// What a loaded checkpoint must agree with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// The same run (resume): the whole config, the device aside, or the same but for the run's
    /// length and timing (a run resumed for longer).
    SameRun,
    /// The model only (evaluate, export, predict): every tensor's name and shape.
    Shapes,
}

/// Loads the checkpoint in `dir` into `layout` (built from `config`) after checking it; returns
/// its manifest.
pub fn load(
    layout: &mut dyn Trainable,
    dir: &Path,
    config: &Config,
    want: Match,
) -> Result<Manifest, ModelError> {
    let m = Manifest::read_verified(dir)?;
    if want == Match::SameRun && !m.same_run(config) {
        return Err(ModelError::Checkpoint(format!(
            "{}: written for config {} but this run's config is {} (resume with the run \
             directory's own config.toml)",
            dir.display(),
            m.config_hash,
            config_hash(config)
        )));
    }
    if m.layout != layout.name() {
        return Err(ModelError::Checkpoint(format!(
            "{}: a {} layout's checkpoint, not {}'s",
            dir.display(),
            m.layout,
            layout.name()
        )));
    }
    let mut slots = layout.entries();
    for (file, part) in PARTS {
        files::Reader::open(&dir.join(file))?.load(&mut slots, part)?;
    }
    drop(slots);
    layout.set_step(m.step);
    Ok(m)
}
