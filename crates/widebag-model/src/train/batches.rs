//! Training batches on their way to the step: the background thread that assembles the next
//! batches — whole, or one rank's rows of each ([`prefetch`]) — through the input transform.

use std::sync::mpsc;

use widebag_csr::CsrBatch;
use widebag_data::{BatchSource, DataError, DataPosition};

use crate::input::InputTransform;

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

/// Every batch of steps `steps` read before training starts ([`prefetch`]'s, drained): a
/// measured run's producer thread allocates nothing while the heap is read.
pub(crate) fn read_all(
    stream: BatchSource,
    batch_size: usize,
    steps: std::ops::RangeInclusive<u64>,
    transform: InputTransform,
    part: (usize, usize),
) -> mpsc::Receiver<Fetched> {
    let producer = prefetch(stream, batch_size, steps, transform, part);
    let (tx, rx) = mpsc::channel();
    for fetched in producer.iter() {
        let _ = tx.send(fetched);
    }
    rx
}
