//! What the model does to a batch's input bag before its first layer ([`InputTransform`]):
//! normalisation, for training batches input dropout, then pooling (`model.pooling`), keyed by each entry's place in its
//! batch (the masks the ledger's batch sampling reads too). Held-out batches are normalised and
//! never dropped out.

use widebag_config::Pooling;
use widebag_csr::CsrBatch;
use widebag_data::InputDropout;

/// What the model does to a training batch's input bag before its first layer.
#[derive(Clone, Copy, Debug)]
pub struct InputTransform {
    normalize: bool,
    dropout: InputDropout,
    pooling: Pooling,
}

impl InputTransform {
    pub fn of(config: &widebag_config::Config) -> Self {
        Self {
            normalize: config.data.normalize,
            dropout: InputDropout::new(config.model.input_dropout, config.train.seed),
            pooling: config.model.pooling,
        }
    }

    /// Step `step`'s batch (1-based): normalised, then its dropout mask, a pure function of
    /// the seed and the step (the one the ledger's sampling reads).
    pub(crate) fn train(&self, batch: CsrBatch, step: u64) -> CsrBatch {
        self.pool(self.dropout.apply(self.normalized(batch), step))
    }

    /// One rank's rows of a training batch, normalised by [`Self::eval`] already, whose entries
    /// follow `first_entry` of the whole batch's: dropped out as the whole batch would be.
    pub(crate) fn dropout_part(&self, batch: CsrBatch, step: u64, first_entry: usize) -> CsrBatch {
        self.pool(self.dropout.apply_from(batch, step, first_entry))
    }

    /// Whether training batches lose entries to dropout.
    pub(crate) fn drops(&self) -> bool {
        self.dropout.drops()
    }

    /// A held-out batch: normalised, never dropped out.
    pub fn eval(&self, batch: CsrBatch) -> CsrBatch {
        self.pool(self.normalized(batch))
    }

    /// `data.normalize`'s unit L2 norm.
    fn normalized(&self, batch: CsrBatch) -> CsrBatch {
        match self.normalize {
            true => batch.l2_normalized(),
            false => batch,
        }
    }

    /// `model.pooling`: the mean of a bag's rows (after dropout: of the rows it kept).
    fn pool(&self, batch: CsrBatch) -> CsrBatch {
        match self.pooling {
            Pooling::Mean => batch.mean_pooled(),
            Pooling::Sum => batch,
        }
    }
}
