//! A trained run read back: its layout rebuilt from the run's config and loaded from a
//! checkpoint (names and shapes checked), then evaluated on held-out rows or asked for its top
//! classes.

use std::path::Path;

use widebag_eval::EvalReport;
use widebag_prepare::Prepared;

use crate::checkpoint::{self, Manifest, Match};
use crate::eval::{EvalSet, eval_spec, evaluate};
use crate::layout::{self, TrainLayout};
use crate::train::batches::InputTransform;
use crate::{Compute, ModelError};

/// A run's model at one of its checkpoints.
pub struct Saved {
    pub layout: Box<dyn TrainLayout>,
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
    let mut layout = layout::build(&prepared.config, &prepared.model_bands, compute)?;
    let manifest = checkpoint::load(layout.as_mut(), dir, &prepared.config, Match::Shapes)?;
    Ok(Saved { layout, manifest })
}

/// The task's metrics on `prepared`'s held-out rows (`None` without any).
pub fn evaluate_held_out(
    saved: &mut Saved,
    prepared: &Prepared,
    compute: &Compute,
) -> Result<Option<EvalReport>, ModelError> {
    if prepared.eval.is_empty() {
        return Ok(None);
    }
    let transform = InputTransform::of(&prepared.config);
    let set = EvalSet {
        batches: prepared
            .eval
            .iter()
            .map(|b| transform.eval(b.clone()))
            .collect(),
        seen: prepared.eval_seen.clone(),
    };
    let spec = eval_spec(&prepared.config);
    evaluate(saved.layout.as_mut(), &set, &spec, compute.backend).map(Some)
}
