//! Training batches on their way to the step: the input transform (normalisation, input
//! dropout keyed by each entry's place in its batch) and the background thread that assembles
//! the next batches — whole, or one rank's rows of each ([`prefetch`]).

use std::sync::mpsc;

use widebag_csr::CsrBatch;
use widebag_data::{BatchSource, DataError, DataPosition, InputDropout};

/// What the model does to a training batch's input bag before its first layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InputTransform {
    normalize: bool,
    dropout: InputDropout,
}

impl InputTransform {
    pub(crate) fn of(config: &widebag_config::Config) -> Self {
        Self {
            normalize: config.data.normalize,
            dropout: InputDropout::new(config.model.input_dropout, config.train.seed),
        }
    }

    /// Step `step`'s batch (1-based): normalised, then its dropout mask, a pure function of
    /// the seed and the step (the one the ledger's sampling reads).
    fn train(&self, batch: CsrBatch, step: u64) -> CsrBatch {
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
    pub(crate) fn eval(&self, batch: CsrBatch) -> CsrBatch {
        if self.normalize {
            batch.l2_normalized()
        } else {
            batch
        }
    }
}

/// This process's rows of a training batch (transformed; across ranks not yet dropped out:
/// the loop drops them where the lower ranks' entries end), the global batch's rows and where
/// the data stands after it.
pub(crate) type Fetched = Result<(CsrBatch, usize, DataPosition), DataError>;

/// Streams the batches of steps `first..=last` from a background thread (two in flight): whole
/// for one process; for rank `rank` of `ranks`, its rows of each global batch, read alone
/// (`BatchSource::next_batch_part`).
pub(crate) fn prefetch(
    mut stream: BatchSource,
    batch_size: usize,
    steps: std::ops::RangeInclusive<u64>,
    transform: InputTransform,
    (rank, ranks): (usize, usize),
) -> mpsc::Receiver<Fetched> {
    let (tx, rx) = mpsc::sync_channel(2);
    std::thread::spawn(move || {
        for step in steps {
            let batch = match ranks {
                1 => stream
                    .next_batch(batch_size)
                    .map(|b| (transform.train(b, step), stream.position()))
                    .map(|(b, at)| (b.n_rows(), b, at)),
                _ => {
                    let part = |n| widebag_collective::partition::local_rows(n, rank, ranks);
                    stream
                        .next_batch_part(batch_size, part)
                        .map(|(b, n)| (n, transform.eval(b), stream.position()))
                }
            };
            if tx.send(batch.map(|(n, b, at)| (b, n, at))).is_err() {
                break;
            }
        }
    });
    rx
}
