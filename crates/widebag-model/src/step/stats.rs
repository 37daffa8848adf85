//! What one training step did ([`StepStats`]): its loss and batch sizes from the step, its time,
//! memory, learning rate, epoch, evaluation and checkpoint from the loop that ran it.

use serde::Serialize;
use widebag_csr::CsrBatch;

use crate::error::ModelError;

/// What one training step did.
#[derive(Clone, Debug, Serialize)]
pub struct StepStats {
    pub step: u64,
    pub loss: f32,
    pub n_rows: usize,
    pub nnz: usize,
    pub n_unique: usize,
    /// Wall seconds of the step (set by the training loop).
    pub step_s: f64,
    /// Peak bytes in use read so far in the run, after the warm-up (set by the training loop;
    /// `None` without allocator counters).
    pub peak_in_use_bytes: Option<u64>,
    /// The dense layers' learning rate this step (the schedule's; set by the training loop).
    pub lr: f64,
    /// The epoch this step belongs to (data files; set by the training loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The evaluation run after this step, if any (set by the training loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<widebag_eval::EvalReport>,
    /// Whether a checkpoint is written after this step (set by the training loop, which
    /// writes it once the step's callback has returned).
    pub checkpoint_due: bool,
}

impl StepStats {
    /// The step's own figures: its number, the global batch's loss and `batch`'s sizes; the
    /// loop's are set by it.
    pub fn new(step: u64, loss: f32, batch: &CsrBatch) -> Self {
        Self {
            step,
            loss,
            n_rows: batch.n_rows(),
            nnz: batch.nnz(),
            n_unique: batch.unique_ids().len(),
            step_s: 0.0,
            peak_in_use_bytes: None,
            lr: 0.0,
            epoch: None,
            eval: None,
            checkpoint_due: false,
        }
    }

    /// An error naming the step when its loss is not a finite number.
    pub(crate) fn check_finite(&self) -> Result<(), ModelError> {
        match self.loss.is_finite() {
            true => Ok(()),
            false => Err(ModelError::Execution(format!(
                "loss became {} at step {}",
                self.loss, self.step
            ))),
        }
    }
}
