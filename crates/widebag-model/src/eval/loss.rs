//! The held-out loss: the training step's first three stages (ids, rows, forward) without a
//! backward pass, for one process or each rank's part of the global held-out batches (one
//! process is the one-rank case), after the deferred row updates are applied.

use std::borrow::Cow;

use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_collective::partition::local_rows;
use widebag_csr::CsrBatch;

use crate::error::ModelError;
use crate::model::SparseModel;
use crate::probe::StepProbe;
use crate::ranks::RankBatch;

impl SparseModel {
    /// Mean loss over held-out batches, weighted by their rows, after the deferred row updates
    /// are applied.
    pub fn eval_loss(&mut self, batches: &[CsrBatch]) -> Result<Option<f64>, ModelError> {
        self.held_out_loss_part(batches, &Local)
    }

    /// [`Self::eval_loss`] by every rank of `comm`, each with the same global `batches`: each
    /// rank takes its rows of each, and the loss is the global batch's.
    pub(crate) fn held_out_loss_part(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError> {
        if comm.size() > 1 {
            self.check_rank_kernels("this device")?;
        }
        self.flush_deferred()?;
        self.output.held_out(true);
        let loss = self.held_out_loss_batches(batches, comm);
        self.output.held_out(false);
        loss
    }

    /// [`Self::held_out_loss_part`]'s batches, the output layer set to the held-out loss.
    fn held_out_loss_batches(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError> {
        let mut probe = StepProbe::new(self.device());
        let (mut sum, mut n_rows) = (0.0f64, 0usize);
        for global in batches {
            let batch = match comm.size() {
                1 => Cow::Borrowed(global),
                _ => {
                    let mine = local_rows(global.n_rows(), self.ranks.rank, self.ranks.size);
                    Cow::Owned(global.row_range(mine))
                }
            };
            let part = RankBatch::new(self.ranks, comm, global.n_rows(), batch.n_rows())?;
            self.check_batch(&batch)?;
            let ids = self.part_ids(&batch, &part)?;
            let (_, inputs, rows) = self.part_rows(&batch, &ids, &part)?;
            let forward = self.forward(&batch, &part, inputs, rows, &mut probe)?;
            let loss = forward.loss;
            self.output.end_pass(forward.pass);
            sum += loss as f64 * global.n_rows() as f64;
            n_rows += global.n_rows();
        }
        Ok((n_rows > 0).then(|| sum / n_rows as f64))
    }
}
