//! A trained run read back: its layout built from the run's config with zeros where the numbers
//! go (nothing seeded that the checkpoint overwrites) and loaded from a checkpoint (names and
//! shapes checked), or gathered from every rank's checkpoints of a run trained across ranks.

use std::path::Path;

use widebag_prepare::Prepared;

use crate::checkpoint::{self, Manifest, Match};
use crate::device::Compute;
use crate::error::ModelError;
use crate::layout::{self, Trainable};
use crate::params::init::Init;
use crate::ranks::Ranks;

/// A run's model at one of its checkpoints.
pub struct Saved {
    pub layout: Box<dyn Trainable>,
    pub manifest: Manifest,
}

/// The model of `prepared`'s config loaded from the checkpoint in `dir`, or, when `dir` holds a
/// multi-process run's checkpoints (`rank-R-of-N/`), gathered from every rank's.
pub fn load(prepared: &Prepared, compute: &Compute, dir: &Path) -> Result<Saved, ModelError> {
    if let Some(size) = checkpoint::gather::ranks_of(dir) {
        let (model, manifest) = checkpoint::gather::load_gathered(
            &prepared.config,
            &prepared.model_bands,
            compute,
            dir,
            size,
        )?;
        return Ok(Saved {
            layout: Box::new(model),
            manifest,
        });
    }
    let config = &prepared.config;
    let mut layout = layout::build(
        config,
        &prepared.model_bands,
        compute,
        Ranks::ONE,
        Init::Zeros,
    )?;
    let manifest = checkpoint::load(layout.as_mut(), dir, config, Match::Shapes)?;
    Ok(Saved { layout, manifest })
}
