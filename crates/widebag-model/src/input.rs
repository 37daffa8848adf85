//! What the model does to a batch's input bag before its first layer ([`InputTransform`]):
//! normalisation, and for training batches input dropout keyed by each entry's place in its
//! batch (the masks the ledger's batch sampling reads too). Held-out batches are normalised and
//! never dropped out.

use widebag_csr::CsrBatch;
use widebag_data::InputDropout;

/// What the model does to a training batch's input bag before its first layer.
#[derive(Clone, Copy, Debug)]
pub struct InputTransform {
    normalize: bool,
    dropout: InputDropout,
}

impl InputTransform {
    pub fn of(config: &widebag_config::Config) -> Self {
        Self {
            normalize: config.data.normalize,
            dropout: InputDropout::new(config.model.input_dropout, config.train.seed),
        }
    }

    /// Step `step`'s batch (1-based): normalised, then its dropout mask, a pure function of
    /// the seed and the step (the one the ledger's sampling reads).
    pub(crate) fn train(&self, batch: CsrBatch, step: u64) -> CsrBatch {
        self.dropout.apply(self.eval(batch), step)
    }

    /// One rank's rows of a training batch, normalised by [`Self::eval`] already, whose entries
    /// follow `first_entry` of the whole batch's: dropped out as the whole batch would be.
    pub(crate) fn dropout_part(&self, batch: CsrBatch, step: u64, first_entry: usize) -> CsrBatch {
        self.dropout.apply_from(batch, step, first_entry)
    }

    /// Whether training batches lose entries to dropout.
    pub(crate) fn drops(&self) -> bool {
        self.dropout.drops()
    }

    /// A held-out batch: normalised, never dropped out.
    pub fn eval(&self, batch: CsrBatch) -> CsrBatch {
        if self.normalize {
            batch.l2_normalized()
        } else {
            batch
        }
    }
}
