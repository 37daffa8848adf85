//! What one training step did ([`StepDone`]): its number, the global batch's loss and this
//! process's batch sizes. The loop adds its own figures and reports the step
//! (`crate::train::stats::StepStats`).

use widebag_csr::CsrBatch;

use crate::error::ModelError;

/// What one training step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepDone {
    /// The step's number, 1-based.
    pub step: u64,
    /// The global batch's mean loss.
    pub loss: f32,
    /// This process's rows, stored entries and distinct ids.
    pub n_rows: usize,
    pub nnz: usize,
    pub n_unique: usize,
}

impl StepDone {
    /// Step `step` on `batch`, with the global batch's `loss`.
    pub fn new(step: u64, loss: f32, batch: &CsrBatch) -> Self {
        Self {
            step,
            loss,
            n_rows: batch.n_rows(),
            nnz: batch.nnz(),
            n_unique: batch.unique_ids().len(),
        }
    }

    /// An error naming the step when its loss is not a finite number.
    pub fn check_finite(&self) -> Result<(), ModelError> {
        match self.loss.is_finite() {
            true => Ok(()),
            false => Err(ModelError::Execution(format!(
                "loss became {} at step {}",
                self.loss, self.step
            ))),
        }
    }
}
