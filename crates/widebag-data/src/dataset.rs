//! An in-memory dataset of parsed rows in flat CSR form, and batches drawn from it.

use std::path::PathBuf;

use serde::Serialize;
use widebag_csr::{CsrBatch, CsrError, RowTarget, SparseRow};

/// Rows and their targets as flat arrays: row `r` owns `ids[row_ptr[r]..row_ptr[r+1]]` and
/// `targets[target_ptr[r]..target_ptr[r+1]]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowStore {
    pub row_ptr: Vec<usize>,
    pub ids: Vec<u32>,
    pub values: Vec<f32>,
    pub target_ptr: Vec<usize>,
    pub targets: Vec<u32>,
    pub target_weights: Vec<f32>,
}

impl RowStore {
    /// Bytes its rows occupy on the heap: the buffers' lengths (a buffer's capacity past its
    /// length was never written, and pages never written are not resident).
    pub fn heap_bytes(&self) -> u64 {
        let word = size_of::<usize>();
        ((self.row_ptr.len() + self.target_ptr.len()) * word
            + (self.ids.len() + self.values.len()) * 4
            + (self.targets.len() + self.target_weights.len()) * 4) as u64
    }

    pub fn new() -> Self {
        Self {
            row_ptr: vec![0],
            target_ptr: vec![0],
            ..Self::default()
        }
    }

    pub fn n_rows(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// An empty store with room for `n_rows` rows of `nnz` ids and `n_targets` targets in all.
    pub fn with_capacity(n_rows: usize, nnz: usize, n_targets: usize) -> Self {
        let mut store = Self {
            row_ptr: Vec::with_capacity(n_rows + 1),
            ids: Vec::with_capacity(nnz),
            values: Vec::with_capacity(nnz),
            target_ptr: Vec::with_capacity(n_rows + 1),
            targets: Vec::with_capacity(n_targets),
            target_weights: Vec::with_capacity(n_targets),
        };
        store.clear();
        store
    }

    /// Drops every row, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        for v in [&mut self.row_ptr, &mut self.target_ptr] {
            v.clear();
            v.push(0);
        }
        self.ids.clear();
        self.values.clear();
        self.targets.clear();
        self.target_weights.clear();
    }

    pub fn nnz(&self) -> usize {
        self.ids.len()
    }

    /// Appends one row.
    pub fn push(&mut self, ids: &[u32], values: &[f32], targets: &[u32], weights: &[f32]) {
        self.ids.extend_from_slice(ids);
        self.values.extend_from_slice(values);
        self.row_ptr.push(self.ids.len());
        self.targets.extend_from_slice(targets);
        self.target_weights.extend_from_slice(weights);
        self.target_ptr.push(self.targets.len());
    }

    pub fn row(&self, r: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.row_ptr[r], self.row_ptr[r + 1]);
        (&self.ids[a..b], &self.values[a..b])
    }

    pub fn row_targets(&self, r: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.target_ptr[r], self.target_ptr[r + 1]);
        (&self.targets[a..b], &self.target_weights[a..b])
    }
}

/// A parsed dataset.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub source: PathBuf,
    pub width: usize,
    pub n_classes: usize,
    pub rows: RowStore,
    /// Lines skipped under `--skip-bad-lines`.
    pub skipped_lines: usize,
    /// Extra facts a reader reports (e.g. the index base it detected).
    pub notes: Vec<String>,
}

/// Summary of a dataset's shape.
#[derive(Clone, Debug, Serialize)]
pub struct Shape {
    pub rows: usize,
    pub width: usize,
    pub n_classes: usize,
    pub nnz_total: usize,
    pub empty_rows: usize,
}

impl Dataset {
    pub fn n_rows(&self) -> usize {
        self.rows.n_rows()
    }

    pub fn shape(&self) -> Shape {
        Shape {
            rows: self.n_rows(),
            width: self.width,
            n_classes: self.n_classes,
            nnz_total: self.rows.nnz(),
            empty_rows: (0..self.n_rows())
                .filter(|&r| self.rows.row_ptr[r] == self.rows.row_ptr[r + 1])
                .count(),
        }
    }

    /// The rows `indices` as a validated batch. A row with exactly one target of weight 1
    /// becomes a class target; any other becomes a bag.
    pub fn batch(&self, indices: &[usize]) -> Result<CsrBatch, CsrError> {
        self.rows.batch(indices, self.width, self.n_classes)
    }
}

impl RowStore {
    /// Rows `indices` as a validated batch of `width` columns and `n_classes` classes (a row
    /// with exactly one target of weight 1 is a class target, any other a bag).
    pub fn batch(
        &self,
        indices: &[usize],
        width: usize,
        n_classes: usize,
    ) -> Result<CsrBatch, CsrError> {
        let mut rows = Vec::with_capacity(indices.len());
        let mut targets = Vec::with_capacity(indices.len());
        for &r in indices {
            let (ids, values) = self.row(r);
            rows.push(SparseRow {
                ids: ids.to_vec(),
                values: values.to_vec(),
            });
            let (t, w) = self.row_targets(r);
            targets.push(if t.len() == 1 && w[0] == 1.0 {
                RowTarget::Class(t[0])
            } else {
                RowTarget::Bag(SparseRow {
                    ids: t.to_vec(),
                    values: w.to_vec(),
                })
            });
        }
        CsrBatch::from_rows(&rows, &targets, width, n_classes.max(1))
    }
}
