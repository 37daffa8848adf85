//! Input dropout as the trainer applies it to its training batches (Mult-DAE's): training
//! batch `step` (1-based) loses each entry by a mask that is a pure function of the run's seed,
//! the step and the entry's place in the batch. The trainer drops with it, and the ledger's
//! batch sampling reads the same masks, so the rows a step gathers are the ones it prices.

use widebag_csr::{CsrBatch, DropoutMask};

use crate::rng::hash2;

/// `model.input_dropout` and `train.seed` of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InputDropout {
    /// The probability an entry is dropped (0: none).
    pub p: f64,
    pub seed: u64,
}

impl InputDropout {
    /// No dropout: every batch as it is.
    pub const NONE: Self = Self { p: 0.0, seed: 0 };

    pub fn new(p: f64, seed: u64) -> Self {
        Self { p, seed }
    }

    /// Whether batches lose entries.
    pub fn drops(&self) -> bool {
        self.p > 0.0
    }

    /// The mask of training batch `step`.
    pub fn mask(&self, step: u64) -> DropoutMask {
        DropoutMask::new(self.p, self.step_seed(step))
    }

    /// Training batch `step`, dropped out (survivors scaled by `1 / (1 − p)`).
    pub fn apply(&self, batch: CsrBatch, step: u64) -> CsrBatch {
        self.apply_from(batch, step, 0)
    }

    /// Rows of training batch `step` whose entries follow `first_entry` of the whole batch's
    /// (one rank's part), dropped out as the whole batch would be.
    pub fn apply_from(&self, batch: CsrBatch, step: u64, first_entry: usize) -> CsrBatch {
        match self.drops() {
            true => batch.dropout_from(self.p, self.step_seed(step), first_entry),
            false => batch,
        }
    }

    fn step_seed(&self, step: u64) -> u64 {
        hash2(self.seed ^ 0x000d_4090_u64, step)
    }
}

#[cfg(test)]
mod tests {
    use widebag_csr::{RowTarget, SparseRow};

    use super::*;

    #[test]
    fn the_mask_is_the_batchs_dropout() {
        let rows: Vec<SparseRow> = (0..40u32)
            .map(|r| SparseRow {
                ids: (0..(r % 7 + 1)).map(|k| (r * 13 + k * 5) % 97).collect(),
                values: vec![1.0; (r % 7 + 1) as usize],
            })
            .collect();
        let targets = vec![RowTarget::Class(0); rows.len()];
        let batch = CsrBatch::from_rows(&rows, &targets, 97, 1).unwrap();
        let d = InputDropout::new(0.5, 11);
        for step in 1..4 {
            let dropped = d.apply(batch.clone(), step);
            let mask = d.mask(step);
            let kept: Vec<u32> = (0..batch.nnz())
                .filter(|&e| mask.keeps(e))
                .map(|e| batch.ids()[e])
                .collect();
            assert_eq!(dropped.ids(), kept.as_slice());
            assert!(kept.len() < batch.nnz() && !kept.is_empty());
        }
        assert_eq!(
            InputDropout::NONE.apply(batch.clone(), 1).ids(),
            batch.ids()
        );
    }
}
