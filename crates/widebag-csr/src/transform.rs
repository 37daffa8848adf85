//! What a model does to its input bag before the first layer: L2 normalisation (Mult-DAE's
//! `F.normalize`) and, in training, dropout of entries with the survivors scaled by 1/(1 − p),
//! drawn from a counter-based hash so a batch's mask is a pure function of seed, step and entry;
//! a batch's rows `range` as a batch of its own (a rank's part of a global batch); and a column
//! of each row's own beside its entries (a LightGCN user's id column).

use sprs::CsMatI;

use crate::batch::CsrBatch;
use crate::error::CsrError;
use crate::targets::Targets;

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `z`.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which entries of a batch [`CsrBatch::dropout`] keeps: entry `e` (its place in the batch)
/// survives when a hash of `(seed, e)` clears `p`'s threshold (so a mask can be read without
/// the batch, as the ledger's sampling does).
#[derive(Clone, Copy, Debug)]
pub struct DropoutMask {
    seed: u64,
    threshold: u64,
}

impl DropoutMask {
    pub fn new(p: f64, seed: u64) -> Self {
        Self {
            seed,
            threshold: (p.max(0.0) * (u64::MAX as f64)) as u64,
        }
    }

    /// Whether entry `e` of the batch survives.
    #[inline]
    pub fn keeps(&self, e: usize) -> bool {
        self.threshold == 0 || mix64(self.seed ^ mix64(e as u64)) >= self.threshold
    }
}

impl CsrBatch {
    /// Each row's values scaled to unit L2 norm (rows of norm 0 unchanged), as
    /// `torch.nn.functional.normalize(x, dim=1)` with its `eps = 1e-12` floor.
    pub fn l2_normalized(&self) -> CsrBatch {
        let mut values = self.values().to_vec();
        let ptr = self.row_ptr();
        for r in 0..self.n_rows() {
            let row = &mut values[ptr[r]..ptr[r + 1]];
            let norm = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
            let scale = 1.0 / norm.max(1e-12);
            row.iter_mut().for_each(|v| *v = (*v as f64 * scale) as f32);
        }
        self.with_values(values)
    }

    /// Each row's values divided by their summed `|value|` (rows summing to 0 unchanged): a
    /// bag's sum of rows becomes their mean (`model.pooling = "mean"`).
    pub fn mean_pooled(&self) -> CsrBatch {
        let mut values = self.values().to_vec();
        let ptr = self.row_ptr();
        for r in 0..self.n_rows() {
            let row = &mut values[ptr[r]..ptr[r + 1]];
            let total = row.iter().map(|&v| (v as f64).abs()).sum::<f64>();
            if total > 0.0 {
                row.iter_mut().for_each(|v| *v = (*v as f64 / total) as f32);
            }
        }
        self.with_values(values)
    }

    /// Input dropout: each entry kept with probability `1 − p` (scaled by `1 / (1 − p)`) or
    /// removed, by a hash of `(seed, entry)`; the targets are kept whole (a denoising
    /// autoencoder reconstructs the full bag). `p = 0` returns the batch unchanged.
    pub fn dropout(&self, p: f64, seed: u64) -> CsrBatch {
        self.dropout_from(p, seed, 0)
    }

    /// [`Self::dropout`] of rows that are part of a larger batch whose entries before them
    /// number `first_entry`: each entry is kept or dropped as it would be in the whole batch
    /// (one rank's rows of a global batch).
    pub fn dropout_from(&self, p: f64, seed: u64, first_entry: usize) -> CsrBatch {
        if p <= 0.0 {
            return self.clone();
        }
        let keep = DropoutMask::new(p, seed);
        let scale = (1.0 / (1.0 - p)) as f32;
        let (ids, values, ptr) = (self.ids(), self.values(), self.row_ptr());
        let (mut out_ptr, mut out_ids, mut out_values) = (vec![0usize], Vec::new(), Vec::new());
        for r in 0..self.n_rows() {
            for e in ptr[r]..ptr[r + 1] {
                if keep.keeps(first_entry + e) {
                    out_ids.push(ids[e]);
                    out_values.push(values[e] * scale);
                }
            }
            out_ptr.push(out_ids.len());
        }
        let shape = (self.n_rows(), self.width());
        let matrix = CsMatI::new(shape, out_ptr, out_ids, out_values);
        CsrBatch::from_parts(matrix, self.targets().clone())
    }

    /// Rows `range` of the batch, with their targets, as a batch (its unique ids its own).
    pub fn row_range(&self, range: std::ops::Range<usize>) -> CsrBatch {
        let ptr = self.row_ptr();
        let (lo, hi) = (ptr[range.start], ptr[range.end]);
        let row_ptr: Vec<usize> = ptr[range.start..=range.end]
            .iter()
            .map(|p| p - lo)
            .collect();
        let matrix = CsMatI::new(
            (range.len(), self.width()),
            row_ptr,
            self.ids()[lo..hi].to_vec(),
            self.values()[lo..hi].to_vec(),
        );
        let t = self.targets();
        let (tlo, thi) = (t.row_ptr[range.start], t.row_ptr[range.end]);
        let targets = Targets {
            n_classes: t.n_classes,
            row_ptr: t.row_ptr[range.start..=range.end]
                .iter()
                .map(|p| p - tlo)
                .collect(),
            classes: t.classes[tlo..thi].to_vec(),
            weights: t.weights[tlo..thi].to_vec(),
            single_class: t.single_class,
        };
        CsrBatch::from_parts(matrix, targets)
    }

    /// The batch `width` wide with each row's own column beside its entries (a LightGCN user's
    /// id column, `data.user_vector`): row `r` gains column `columns[r]` (when `Some`) with
    /// `value`. Each such column is past the row's ids and below `width` (at least the batch's
    /// width), so a row's ids stay sorted and distinct; the targets are unchanged.
    pub fn with_row_columns(
        &self,
        columns: &[Option<u32>],
        value: f32,
        width: usize,
    ) -> Result<CsrBatch, CsrError> {
        if columns.len() != self.n_rows() || width < self.width() {
            return Err(CsrError::Structure(format!(
                "{} row columns for {} rows, {width} wide for a batch {} wide",
                columns.len(),
                self.n_rows(),
                self.width()
            )));
        }
        if !value.is_finite() {
            return Err(CsrError::NonFiniteValue {
                row: 0,
                id: columns.iter().flatten().next().copied().unwrap_or(0),
                value,
            });
        }
        let (ids, values, ptr) = (self.ids(), self.values(), self.row_ptr());
        let extra = columns.iter().flatten().count();
        let mut out_ptr = Vec::with_capacity(ptr.len());
        out_ptr.push(0usize);
        let mut out_ids = Vec::with_capacity(ids.len() + extra);
        let mut out_values = Vec::with_capacity(ids.len() + extra);
        for (r, column) in columns.iter().enumerate() {
            out_ids.extend_from_slice(&ids[ptr[r]..ptr[r + 1]]);
            out_values.extend_from_slice(&values[ptr[r]..ptr[r + 1]]);
            if let Some(c) = *column {
                let after = ptr[r + 1] == ptr[r] || ids[ptr[r + 1] - 1] < c;
                if !after || c as usize >= width {
                    return Err(CsrError::IdOutOfRange {
                        row: r,
                        id: c as u64,
                        width,
                    });
                }
                out_ids.push(c);
                out_values.push(value);
            }
            out_ptr.push(out_ids.len());
        }
        let matrix = CsMatI::try_new((self.n_rows(), width), out_ptr, out_ids, out_values)
            .map_err(|(_, _, _, e)| CsrError::Structure(e.to_string()))?;
        Ok(CsrBatch::from_parts(matrix, self.targets().clone()))
    }

    fn with_values(&self, values: Vec<f32>) -> CsrBatch {
        let m = self.matrix();
        let shape = (m.rows(), m.cols());
        let matrix = CsMatI::new(shape, self.row_ptr().to_vec(), self.ids().to_vec(), values);
        CsrBatch::from_parts(matrix, self.targets().clone())
    }
}

#[cfg(test)]
mod tests {
    use crate::batch::CsrBatch;
    use crate::row::SparseRow;
    use crate::targets::RowTarget;

    #[test]
    fn a_row_range_is_the_batch_of_those_rows() {
        let rows: Vec<SparseRow> = (0..5u32)
            .map(|r| SparseRow {
                ids: vec![r, r + 3, 9],
                values: vec![1.0, r as f32, 2.0],
            })
            .collect();
        let targets: Vec<RowTarget> = (0..5).map(|r| RowTarget::Class(r % 3)).collect();
        let whole = CsrBatch::from_rows(&rows, &targets, 10, 3).unwrap();
        let part = whole.row_range(1..4);
        let want = CsrBatch::from_rows(&rows[1..4], &targets[1..4], 10, 3).unwrap();
        assert_eq!(part.row_ptr(), want.row_ptr());
        assert_eq!(part.ids(), want.ids());
        assert_eq!(part.values(), want.values());
        assert_eq!(part.unique_ids(), want.unique_ids());
        assert_eq!(part.targets(), want.targets());
        assert_eq!(whole.row_range(0..5).ids(), whole.ids());
    }

    fn batch() -> CsrBatch {
        let rows = vec![
            SparseRow {
                ids: vec![0, 3, 5],
                values: vec![3.0, 4.0, 0.0],
            },
            SparseRow {
                ids: vec![],
                values: vec![],
            },
        ];
        let targets = vec![RowTarget::Class(1), RowTarget::Class(2)];
        CsrBatch::from_rows(&rows, &targets, 8, 4).unwrap()
    }

    #[test]
    fn rows_scale_to_unit_norm_and_empty_rows_stay() {
        let b = batch().l2_normalized();
        assert_eq!(b.values(), &[0.6, 0.8, 0.0]);
        assert_eq!(b.row_ptr(), &[0, 3, 3]);
    }

    #[test]
    fn dropout_keeps_about_1_minus_p_scaled_and_is_a_function_of_the_seed() {
        let rows: Vec<SparseRow> = (0..200)
            .map(|r| SparseRow {
                ids: (0..50).map(|i| (r * 7 + i * 13) % 1000).collect(),
                values: vec![1.0; 50],
            })
            .collect();
        let targets = vec![RowTarget::Class(0); 200];
        let b = CsrBatch::from_rows(&rows, &targets, 1000, 2).unwrap();
        let d = b.dropout(0.5, 7);
        let kept = d.nnz() as f64 / b.nnz() as f64;
        assert!((kept - 0.5).abs() < 0.03, "{kept}");
        assert!(d.values().iter().all(|&v| v == 2.0));
        assert_eq!(d.targets(), b.targets());
        assert_eq!(d.ids(), b.dropout(0.5, 7).ids());
        assert_ne!(d.ids(), b.dropout(0.5, 8).ids());
        // Every kept id is one of the row's, and the unique ids are those kept.
        let mut want: Vec<u32> = d.ids().to_vec();
        want.sort_unstable();
        want.dedup();
        assert_eq!(d.unique_ids(), &want[..]);
        assert_eq!(b.dropout(0.0, 7).ids(), b.ids());
    }

    #[test]
    fn row_columns_go_beside_each_row_and_past_the_width_only() {
        let rows = vec![
            SparseRow::bag(vec![0, 2]),
            SparseRow::bag(vec![]),
            SparseRow::bag(vec![1]),
        ];
        let targets: Vec<RowTarget> = rows.iter().cloned().map(RowTarget::Bag).collect();
        let b = CsrBatch::from_rows(&rows, &targets, 3, 3).unwrap();
        let u = b
            .with_row_columns(&[Some(3), None, Some(5)], 2.0, 6)
            .unwrap();
        assert_eq!(u.width(), 6);
        assert_eq!(u.row_ptr(), &[0, 3, 3, 5]);
        assert_eq!(u.ids(), &[0, 2, 3, 1, 5]);
        assert_eq!(u.values(), &[1.0, 1.0, 2.0, 1.0, 2.0]);
        assert_eq!(u.targets(), b.targets());
        assert_eq!(u.unique_ids(), &[0, 1, 2, 3, 5]);
        assert!(
            b.with_row_columns(&[Some(2), None, None], 1.0, 6).is_err(),
            "not past the row"
        );
        assert!(
            b.with_row_columns(&[None, Some(2), None], 1.0, 6).is_ok(),
            "an empty row"
        );
        assert!(
            b.with_row_columns(&[Some(6), None, None], 1.0, 6).is_err(),
            "past the new width"
        );
        assert!(
            b.with_row_columns(&[None, None], 1.0, 6).is_err(),
            "a column per row"
        );
        assert!(
            b.with_row_columns(&[None, None, None], f32::NAN, 6)
                .is_err()
        );
    }
}
