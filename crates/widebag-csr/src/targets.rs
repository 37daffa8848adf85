//! Per-row targets (one class, or a weighted bag of classes) and a batch's targets in CSR form.

use rayon::prelude::*;

use crate::error::CsrError;
use crate::row::{SparseRow, concat_rows, first_error, normalize_row};

/// The target of one row.
#[derive(Clone, Debug, PartialEq)]
pub enum RowTarget {
    /// One class id (next-word style).
    Class(u32),
    /// A weighted bag of class ids (recommender style); weights are counts or ratings.
    Bag(SparseRow),
}

/// Targets of a whole batch, in CSR form: row `r` owns entries `row_ptr[r]..row_ptr[r+1]`.
/// A single-class target is a bag of one entry with weight 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Targets {
    pub n_classes: usize,
    pub row_ptr: Vec<usize>,
    pub classes: Vec<u32>,
    pub weights: Vec<f32>,
    /// True when every row has exactly one class with weight 1.
    pub single_class: bool,
}

impl Targets {
    /// Total target weight of row `r` (1 for single-class targets).
    pub fn row_weight(&self, r: usize) -> f32 {
        self.weights[self.row_ptr[r]..self.row_ptr[r + 1]]
            .iter()
            .sum()
    }

    /// Each row's weights divided by the row's total, so every row is a distribution (softmax
    /// cross-entropy against it). Single-class targets and rows of total 0 are unchanged.
    pub fn normalised(&self) -> Targets {
        let mut out = self.clone();
        if self.single_class {
            return out;
        }
        for r in 0..self.row_ptr.len() - 1 {
            let total = self.row_weight(r);
            if total != 0.0 && total != 1.0 {
                for w in &mut out.weights[self.row_ptr[r]..self.row_ptr[r + 1]] {
                    *w /= total;
                }
            }
        }
        out
    }
}

impl Targets {
    /// Validates and assembles per-row targets.
    pub fn from_rows(targets: &[RowTarget], n_classes: usize) -> Result<Self, CsrError> {
        let normalized = first_error(
            targets
                .par_iter()
                .enumerate()
                .map(|(r, t)| match t {
                    RowTarget::Class(c) => {
                        if *c as usize >= n_classes {
                            Err(CsrError::TargetOutOfRange {
                                row: r,
                                class: *c as u64,
                                n_classes,
                            })
                        } else {
                            Ok(SparseRow {
                                ids: vec![*c],
                                values: vec![1.0],
                            })
                        }
                    }
                    RowTarget::Bag(bag) => {
                        let row = normalize_row(r, bag, n_classes).map_err(|e| match e {
                            CsrError::IdOutOfRange { row, id, .. } => CsrError::TargetOutOfRange {
                                row,
                                class: id,
                                n_classes,
                            },
                            other => other,
                        })?;
                        if let Some((&class, &weight)) = row
                            .ids
                            .iter()
                            .zip(&row.values)
                            .find(|&(_, &w)| !(w.is_finite() && w >= 0.0))
                        {
                            return Err(CsrError::BadTargetWeight {
                                row: r,
                                class,
                                weight,
                            });
                        }
                        Ok(row)
                    }
                })
                .collect(),
        )?;
        let single_class = targets.iter().all(|t| matches!(t, RowTarget::Class(_)));
        let (row_ptr, classes, weights) = concat_rows(&normalized);
        Ok(Self {
            n_classes,
            row_ptr,
            classes,
            weights,
            single_class,
        })
    }
}
