//! `CsrBatch`: a validated CSR mini-batch (sprs matrix, targets, the batch's sorted unique ids
//! and each entry's place among them), assembled from rows in parallel with rayon.

use rayon::prelude::*;
use sprs::CsMatI;

use crate::error::CsrError;
use crate::row::{SparseRow, concat_rows, first_error, normalize_row};
use crate::targets::{RowTarget, Targets};

/// A validated CSR mini-batch.
#[derive(Clone, Debug)]
pub struct CsrBatch {
    matrix: CsMatI<f32, u32, usize>,
    row_ptr: Vec<usize>,
    targets: Targets,
    unique_ids: Vec<u32>,
    local_pos: Vec<u32>,
}

impl CsrBatch {
    /// Assembles a batch from rows and targets: rows are sorted, duplicate ids summed, every id
    /// checked against `width` and every value for finiteness, all in parallel.
    pub fn from_rows(
        rows: &[SparseRow],
        targets: &[RowTarget],
        width: usize,
        n_classes: usize,
    ) -> Result<Self, CsrError> {
        if width > u32::MAX as usize {
            return Err(CsrError::WidthTooLarge { width });
        }
        if rows.len() != targets.len() {
            return Err(CsrError::TargetCountMismatch {
                n_rows: rows.len(),
                n_targets: targets.len(),
            });
        }
        let normalized = first_error(
            rows.par_iter()
                .enumerate()
                .map(|(r, row)| normalize_row(r, row, width))
                .collect(),
        )?;
        let targets = Targets::from_rows(targets, n_classes)?;
        let (row_ptr, ids, values) = concat_rows(&normalized);
        let matrix = CsMatI::try_new((rows.len(), width), row_ptr, ids, values)
            .map_err(|(_, _, _, e)| CsrError::Structure(e.to_string()))?;
        Ok(Self::from_parts(matrix, targets))
    }

    /// Wraps an already valid CSR matrix (sorted, deduplicated indices) and its targets.
    pub(crate) fn from_parts(matrix: CsMatI<f32, u32, usize>, targets: Targets) -> Self {
        let ids = matrix.indices();
        let mut unique_ids = ids.to_vec();
        unique_ids.par_sort_unstable();
        unique_ids.dedup();
        let local_pos = ids
            .par_iter()
            .map(|id| {
                unique_ids
                    .binary_search(id)
                    .expect("every id is among the unique ids") as u32
            })
            .collect();
        Self {
            row_ptr: matrix.proper_indptr().into_owned(),
            matrix,
            targets,
            unique_ids,
            local_pos,
        }
    }

    /// Bytes this batch holds on the heap: the matrix's row pointers, ids and values, the copy
    /// of its row pointers, the targets, the unique ids (a sorted copy of the ids, deduplicated
    /// in place: it keeps their capacity) and each entry's place among them.
    pub fn heap_bytes(&self) -> u64 {
        let word = size_of::<usize>();
        let t = &self.targets;
        let bytes = (self.matrix.indptr().len() + self.row_ptr.capacity() + t.row_ptr.capacity())
            * word
            + self.nnz() * (4 + 4)
            + (t.classes.capacity() + t.weights.capacity()) * 4
            + (self.unique_ids.capacity() + self.local_pos.capacity()) * 4;
        bytes as u64
    }

    pub fn n_rows(&self) -> usize {
        self.matrix.rows()
    }
    pub fn width(&self) -> usize {
        self.matrix.cols()
    }
    pub fn nnz(&self) -> usize {
        self.matrix.nnz()
    }
    /// Row pointers (`n_rows + 1` offsets into ids and values).
    pub fn row_ptr(&self) -> &[usize] {
        &self.row_ptr
    }
    /// Column ids, sorted within each row, no duplicates within a row.
    pub fn ids(&self) -> &[u32] {
        self.matrix.indices()
    }
    pub fn values(&self) -> &[f32] {
        self.matrix.data()
    }
    pub fn targets(&self) -> &Targets {
        &self.targets
    }
    /// The batch's distinct ids, sorted ascending.
    pub fn unique_ids(&self) -> &[u32] {
        &self.unique_ids
    }
    /// For each stored entry, the index of its id in [`Self::unique_ids`].
    pub fn local_pos(&self) -> &[u32] {
        &self.local_pos
    }
    /// For each stored entry, the row it belongs to.
    pub fn entry_rows(&self) -> Vec<u32> {
        let row_ptr = self.row_ptr();
        let mut out = Vec::with_capacity(self.nnz());
        for r in 0..self.n_rows() {
            out.extend(std::iter::repeat_n(r as u32, row_ptr[r + 1] - row_ptr[r]));
        }
        out
    }
    /// The underlying sprs matrix.
    pub fn matrix(&self) -> &CsMatI<f32, u32, usize> {
        &self.matrix
    }
    /// Rows present in the batch as a dense `n_rows × width` row-major matrix (tests and the
    /// dense baseline only: this is exactly the allocation the sparse path avoids).
    pub fn to_dense(&self) -> Vec<f32> {
        let width = self.width();
        let mut out = vec![0.0; self.n_rows() * width];
        for (r, row) in self.matrix.outer_iterator().enumerate() {
            for (id, &v) in row.iter() {
                out[r * width + id] += v;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn classes(n: usize) -> Vec<RowTarget> {
        (0..n).map(|i| RowTarget::Class(i as u32 % 3)).collect()
    }

    #[test]
    fn duplicates_are_summed_and_sorted() {
        let rows = vec![SparseRow {
            ids: vec![5, 1, 5, 3],
            values: vec![1.0, 2.0, 0.5, 1.0],
        }];
        let b = CsrBatch::from_rows(&rows, &classes(1), 10, 3).unwrap();
        assert_eq!(b.ids(), &[1, 3, 5]);
        assert_eq!(b.values(), &[2.0, 1.0, 1.5]);
        assert_eq!(b.unique_ids(), &[1, 3, 5]);
        assert_eq!(b.local_pos(), &[0, 1, 2]);
    }

    #[test]
    fn rejects_bad_ids_and_values() {
        let rows = vec![SparseRow::bag(vec![1]), SparseRow::bag(vec![10])];
        assert_eq!(
            CsrBatch::from_rows(&rows, &classes(2), 10, 3).unwrap_err(),
            CsrError::IdOutOfRange {
                row: 1,
                id: 10,
                width: 10
            }
        );
        let rows = vec![SparseRow {
            ids: vec![2],
            values: vec![f32::NAN],
        }];
        assert!(matches!(
            CsrBatch::from_rows(&rows, &classes(1), 10, 3),
            Err(CsrError::NonFiniteValue { row: 0, id: 2, .. })
        ));
        let rows = vec![SparseRow::bag(vec![1])];
        assert!(matches!(
            CsrBatch::from_rows(&rows, &[RowTarget::Class(7)], 10, 3),
            Err(CsrError::TargetOutOfRange {
                row: 0,
                class: 7,
                ..
            })
        ));
    }

    #[test]
    fn empty_rows_are_allowed() {
        let rows = vec![SparseRow::default(), SparseRow::bag(vec![4, 4])];
        let b = CsrBatch::from_rows(&rows, &classes(2), 10, 3).unwrap();
        assert_eq!(b.row_ptr(), &[0, 0, 1]);
        assert_eq!(b.values(), &[2.0]);
        assert_eq!(b.entry_rows(), vec![1]);
    }

    #[test]
    fn bag_targets_are_normalised() {
        let rows = vec![SparseRow::bag(vec![1])];
        let t = vec![RowTarget::Bag(SparseRow::bag(vec![2, 0, 2]))];
        let b = CsrBatch::from_rows(&rows, &t, 10, 3).unwrap();
        assert_eq!(b.targets().classes, vec![0, 2]);
        assert_eq!(b.targets().weights, vec![1.0, 2.0]);
        assert_eq!(b.targets().row_weight(0), 3.0);
        assert!(!b.targets().single_class);
    }

    fn arb_rows(width: u32) -> impl Strategy<Value = Vec<SparseRow>> {
        prop::collection::vec(
            prop::collection::vec((0..width, -4.0f32..4.0), 0..12).prop_map(|pairs| {
                let (ids, values) = pairs.into_iter().unzip();
                SparseRow { ids, values }
            }),
            1..20,
        )
    }

    proptest! {
        #[test]
        fn csr_matches_dense_accumulation(rows in arb_rows(50)) {
            let b = CsrBatch::from_rows(&rows, &classes(rows.len()), 50, 3).unwrap();
            // Dense reference: accumulate every (id, value) pair.
            let mut dense = vec![0.0f32; rows.len() * 50];
            for (r, row) in rows.iter().enumerate() {
                for (&id, &v) in row.ids.iter().zip(&row.values) {
                    dense[r * 50 + id as usize] += v;
                }
            }
            let got = b.to_dense();
            prop_assert_eq!(got.len(), dense.len());
            for (a, e) in got.iter().zip(&dense) {
                prop_assert!((a - e).abs() <= 1e-5);
            }
            // Ids strictly increasing within each row.
            for r in 0..b.n_rows() {
                let ids = &b.ids()[b.row_ptr()[r]..b.row_ptr()[r + 1]];
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
            // Unique ids sorted, distinct, and local positions point at the right id.
            prop_assert!(b.unique_ids().windows(2).all(|w| w[0] < w[1]));
            for (k, &id) in b.ids().iter().enumerate() {
                prop_assert_eq!(b.unique_ids()[b.local_pos()[k] as usize], id);
            }
            let mut all: Vec<u32> = rows.iter().flat_map(|r| r.ids.iter().copied()).collect();
            all.sort_unstable();
            all.dedup();
            prop_assert_eq!(all.as_slice(), b.unique_ids());
            prop_assert_eq!(b.entry_rows().len(), b.nnz());
        }
    }
}
