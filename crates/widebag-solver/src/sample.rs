//! The rows the solver plans with: the first `n_batches × max_batch` rows of the batch source,
//! from which the batch statistics of any batch size up to `max_batch` follow exactly (with
//! the input dropout each step's batch gets at that size).

use std::cell::RefCell;
use std::collections::HashMap;

use widebag_data::{BatchSource, DataError, InputDropout};
use widebag_ledger::step::BatchFacts;

/// Rows as the trainer will see them (duplicates summed per row), kept as CSR ids and target
/// counts. `facts(b)` equals `BatchFacts::sample` of `n_batches` batches of `b` rows for every
/// `b` up to the sampled batch (for a data file, up to an epoch's end).
#[derive(Debug)]
pub struct RowSample {
    width: usize,
    n_batches: usize,
    row_ptr: Vec<usize>,
    ids: Vec<u32>,
    /// Prefix sums of target entries per row.
    target_ptr: Vec<usize>,
    /// The trainer's input dropout: batch `k` (0-based) of a size is step `k + 1`'s.
    dropout: InputDropout,
    /// Scratch for counting distinct ids: the window that last saw each id (+1).
    seen: RefCell<Vec<u32>>,
    /// `facts(b)` by `b`: every estimator of a plan (the remedies' variants each have one)
    /// asks for the same batch sizes, and one count costs `n_batches × b` entries.
    counted: RefCell<HashMap<usize, BatchFacts>>,
}

impl RowSample {
    /// Reads `n_batches` batches of `max_batch` rows from a clone of `source` (the run still sees
    /// them) and keeps their rows.
    pub fn collect(
        source: &BatchSource,
        width: usize,
        max_batch: usize,
        n_batches: usize,
    ) -> Result<Self, DataError> {
        let mut source = source.clone();
        let mut row_ptr = vec![0usize];
        let mut ids = Vec::new();
        let mut target_ptr = vec![0usize];
        // Until n_batches × max_batch rows: a data file's epoch may end in a short batch, and
        // the next (reshuffled) epoch continues the stream as the trainer sees it.
        let wanted = n_batches.max(1) * max_batch.max(1);
        while row_ptr.len() - 1 < wanted {
            let batch = source.next_batch(max_batch.max(1))?;
            if batch.n_rows() == 0 {
                break;
            }
            let ptr = batch.row_ptr();
            let targets = batch.targets();
            for r in 0..batch.n_rows() {
                ids.extend_from_slice(&batch.ids()[ptr[r]..ptr[r + 1]]);
                row_ptr.push(ids.len());
                let n_targets = targets.row_ptr[r + 1] - targets.row_ptr[r];
                target_ptr.push(target_ptr.last().copied().unwrap_or(0) + n_targets);
            }
        }
        Ok(Self::from_parts(width, n_batches, row_ptr, ids, target_ptr))
    }

    /// A sample from CSR parts (`row_ptr` and `target_ptr` start at 0 and have one more entry
    /// than rows).
    pub fn from_parts(
        width: usize,
        n_batches: usize,
        row_ptr: Vec<usize>,
        ids: Vec<u32>,
        target_ptr: Vec<usize>,
    ) -> Self {
        Self {
            width,
            n_batches: n_batches.max(1),
            row_ptr,
            ids,
            target_ptr,
            dropout: InputDropout::NONE,
            seen: RefCell::new(Vec::new()),
            counted: RefCell::new(HashMap::new()),
        }
    }

    /// The same rows, each batch dropped out as the trainer drops that step's batch (a mask
    /// keyed by the entry's place in its batch, so it differs by batch size).
    pub fn with_dropout(mut self, dropout: InputDropout) -> Self {
        self.dropout = dropout;
        self.counted.get_mut().clear();
        self
    }

    pub fn n_rows(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// The largest batch whose statistics this sample determines.
    pub fn max_batch(&self) -> usize {
        self.n_rows() / self.n_batches
    }

    /// Rows, nnz, distinct ids and targets: the largest of each over the first `n_batches`
    /// batches of `batch_size` rows, as the trainer's ledger samples them.
    pub fn facts(&self, batch_size: usize) -> BatchFacts {
        if let Some(f) = self.counted.borrow().get(&batch_size) {
            return *f;
        }
        let f = self.count(batch_size);
        self.counted.borrow_mut().insert(batch_size, f);
        f
    }

    /// [`Self::facts`], counted.
    fn count(&self, batch_size: usize) -> BatchFacts {
        let n = self.n_rows();
        let b = batch_size.max(1);
        let mut seen = self.seen.borrow_mut();
        if seen.len() < self.width {
            seen.resize(self.width, 0);
        }
        seen.iter_mut().for_each(|s| *s = 0);
        let mut out = BatchFacts::default();
        for k in 0..self.n_batches {
            let start = k * b;
            if start >= n {
                break;
            }
            let end = (start + b).min(n);
            let stamp = k as u32 + 1;
            let window = &self.ids[self.row_ptr[start]..self.row_ptr[end]];
            let mask = self.dropout.mask(k as u64 + 1);
            let (mut unique, mut kept) = (0u64, 0u64);
            for (e, &id) in window.iter().enumerate() {
                if !mask.keeps(e) {
                    continue;
                }
                kept += 1;
                let s = &mut seen[id as usize];
                if *s != stamp {
                    *s = stamp;
                    unique += 1;
                }
            }
            out.n_rows = out.n_rows.max((end - start) as u64);
            out.nnz = out.nnz.max(kept);
            out.n_unique = out.n_unique.max(unique);
            out.n_targets = out
                .n_targets
                .max((self.target_ptr[end] - self.target_ptr[start]) as u64);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use widebag_data::{SyntheticSpec, SyntheticStream};
    use widebag_ledger::step::Sampling;

    #[test]
    fn facts_equal_the_trainers_sampling_at_every_batch_size() {
        let spec = SyntheticSpec {
            width: 500,
            n_classes: 300,
            seed: 7,
            ..SyntheticSpec::default()
        };
        let source = BatchSource::Synthetic(SyntheticStream::new(spec).unwrap());
        let sample = RowSample::collect(&source, 500, 64, 8).unwrap();
        assert_eq!(sample.max_batch(), 64);
        let dropped = RowSample::collect(&source, 500, 64, 8)
            .unwrap()
            .with_dropout(InputDropout::new(0.5, 3));
        for b in [1, 2, 3, 7, 16, 31, 64] {
            let sampling = |p| Sampling {
                batch_size: b,
                n_batches: 8,
                first_step: 1,
                dropout: InputDropout::new(p, 3),
            };
            let want = BatchFacts::sample(&source, &sampling(0.0)).unwrap();
            assert_eq!(sample.facts(b), want, "batch {b}");
            // The trainer's dropout: the same masks, and fewer entries and rows to gather.
            let want = BatchFacts::sample(&source, &sampling(0.5)).unwrap();
            assert_eq!(dropped.facts(b), want, "batch {b}, dropout 0.5");
            if b >= 16 {
                assert!(want.nnz < sample.facts(b).nnz, "batch {b}");
            }
        }
    }

    #[test]
    fn a_data_file_smaller_than_the_sample_continues_into_the_next_epoch() {
        use std::sync::Arc;
        use widebag_data::{Dataset, EpochBatches, RowStore, Shuffle, TrainRows};
        let mut rows = RowStore::new();
        for r in 0..10u32 {
            rows.push(&[r, (r + 3) % 10], &[1.0, 1.0], &[r % 4], &[1.0]);
        }
        let data = Arc::new(TrainRows::memory(Dataset {
            source: "mem".into(),
            width: 10,
            n_classes: 4,
            rows,
            skipped_lines: 0,
            notes: vec![],
        }));
        let source = BatchSource::Rows(EpochBatches::new(data, 1, Shuffle::default()));
        let sample = RowSample::collect(&source, 10, 4, 8).unwrap();
        assert!(sample.max_batch() >= 4, "{}", sample.max_batch());
        let f = sample.facts(4);
        assert_eq!((f.n_rows, f.n_targets), (4, 4));
        assert!(f.n_unique <= 8 && f.nnz == 8);
    }
}
