//! `SparseRow`, one input row, and the checks and concatenation that turn rows into CSR arrays:
//! sorted by id, duplicates summed, every id and value checked.

use crate::error::CsrError;

/// One input row: parallel arrays of ids and values, in any order, duplicates allowed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseRow {
    pub ids: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseRow {
    /// A bag of ids, each with value 1 (repeats are summed into counts during assembly).
    pub fn bag(ids: Vec<u32>) -> Self {
        let values = vec![1.0; ids.len()];
        Self { ids, values }
    }

    /// The same row with ids sorted and repeated ids' values summed (the form a batch holds).
    pub fn canonical(&self) -> Self {
        let mut pairs: Vec<(u32, f32)> = self
            .ids
            .iter()
            .copied()
            .zip(self.values.iter().copied())
            .collect();
        pairs.sort_by_key(|&(id, _)| id);
        let mut out = Self {
            ids: Vec::with_capacity(pairs.len()),
            values: Vec::with_capacity(pairs.len()),
        };
        for (id, v) in pairs {
            if out.ids.last() == Some(&id) {
                *out.values.last_mut().expect("same length") += v;
            } else {
                out.ids.push(id);
                out.values.push(v);
            }
        }
        out
    }
}

/// Sorts a row by id, sums duplicates and checks every id and value.
pub(crate) fn normalize_row(
    row_index: usize,
    row: &SparseRow,
    width: usize,
) -> Result<SparseRow, CsrError> {
    if row.ids.len() != row.values.len() {
        return Err(CsrError::LengthMismatch {
            row: row_index,
            n_ids: row.ids.len(),
            n_values: row.values.len(),
        });
    }
    let mut pairs: Vec<(u32, f32)> = Vec::with_capacity(row.ids.len());
    for (&id, &value) in row.ids.iter().zip(&row.values) {
        if id as usize >= width {
            return Err(CsrError::IdOutOfRange {
                row: row_index,
                id: id as u64,
                width,
            });
        }
        if !value.is_finite() {
            return Err(CsrError::NonFiniteValue {
                row: row_index,
                id,
                value,
            });
        }
        pairs.push((id, value));
    }
    pairs.sort_unstable_by_key(|&(id, _)| id);
    let mut out = SparseRow {
        ids: Vec::with_capacity(pairs.len()),
        values: Vec::with_capacity(pairs.len()),
    };
    for (id, value) in pairs {
        if out.ids.last() == Some(&id) {
            *out.values.last_mut().expect("values parallel to ids") += value;
        } else {
            out.ids.push(id);
            out.values.push(value);
        }
    }
    Ok(out)
}

/// Concatenates normalised rows into CSR arrays.
pub(crate) fn concat_rows(rows: &[SparseRow]) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let mut row_ptr = Vec::with_capacity(rows.len() + 1);
    row_ptr.push(0usize);
    for row in rows {
        row_ptr.push(row_ptr.last().copied().unwrap_or(0) + row.ids.len());
    }
    let nnz = *row_ptr.last().unwrap_or(&0);
    let mut ids = Vec::with_capacity(nnz);
    let mut values = Vec::with_capacity(nnz);
    for row in rows {
        ids.extend_from_slice(&row.ids);
        values.extend_from_slice(&row.values);
    }
    (row_ptr, ids, values)
}

/// Returns the first error by row index, so the report is deterministic under rayon.
pub(crate) fn first_error<T>(results: Vec<Result<T, CsrError>>) -> Result<Vec<T>, CsrError> {
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_sorts_and_sums() {
        let r = SparseRow {
            ids: vec![5, 2, 5, 0],
            values: vec![1.0, 0.5, 2.0, 1.0],
        };
        let c = r.canonical();
        assert_eq!(c.ids, vec![0, 2, 5]);
        assert_eq!(c.values, vec![1.0, 0.5, 3.0]);
    }
}
