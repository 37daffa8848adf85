//! A saved run evaluated on its held-out rows: the rows the run's config sets aside (or its test
//! file), transformed as evaluation transforms them, scored with the task's metrics.

use widebag_eval::EvalReport;
use widebag_prepare::Prepared;

use crate::checkpoint::saved::Saved;
use crate::device::Compute;
use crate::error::ModelError;
use crate::eval::{EvalSet, eval_spec, evaluate};
use crate::input::InputTransform;

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
