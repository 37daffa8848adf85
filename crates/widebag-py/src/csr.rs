//! SciPy's CSR arrays as widebag reads them: `(indptr, indices, data, (rows, columns))`, int64
//! row pointers, int32 column ids and float32 values (the Python side converts other dtypes;
//! SciPy's own int32 ids and float32 values are read in place), checked before any row is used:
//! pointers that do not rise or do not end at the ids' length, a negative id or one past the
//! width, a value that is not finite, each named by its row and column.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::errors;

/// A `scipy.sparse` CSR matrix's arrays, as the Python side hands them over.
#[derive(FromPyObject)]
pub struct CsrArrays<'py> {
    pub indptr: PyReadonlyArray1<'py, i64>,
    pub indices: PyReadonlyArray1<'py, i32>,
    pub data: PyReadonlyArray1<'py, f32>,
    pub shape: (usize, usize),
    /// What the matrix is called in errors (`data`, `targets`, `test`).
    pub name: String,
}

/// A checked CSR matrix borrowed from NumPy's buffers: row `r`'s ids are
/// `ids[ptr[r]..ptr[r + 1]]`.
pub struct Csr<'a> {
    pub ptr: &'a [i64],
    pub ids: &'a [i32],
    pub values: &'a [f32],
    pub n_rows: usize,
    pub width: usize,
}

impl<'a> Csr<'a> {
    /// `a`'s buffers, checked.
    pub fn of(a: &'a CsrArrays<'_>) -> PyResult<Self> {
        let name = &a.name;
        let csr = Self {
            ptr: contiguous(name, "indptr", a.indptr.as_slice())?,
            ids: contiguous(name, "indices", a.indices.as_slice())?,
            values: contiguous(name, "data", a.data.as_slice())?,
            n_rows: a.shape.0,
            width: a.shape.1,
        };
        csr.check(name)?;
        Ok(csr)
    }

    fn check(&self, name: &str) -> PyResult<()> {
        if self.ptr.len() != self.n_rows + 1 {
            return Err(errors::data(format!(
                "{name}: indptr has {} entries for {} rows (rows + 1 expected)",
                self.ptr.len(),
                self.n_rows
            )));
        }
        if self.ids.len() != self.values.len() {
            return Err(errors::data(format!(
                "{name}: {} column ids and {} values",
                self.ids.len(),
                self.values.len()
            )));
        }
        if self.width == 0 || self.width > u32::MAX as usize {
            return Err(errors::data(format!(
                "{name}: {} columns (widebag's ids are 32-bit, at least 1 column)",
                self.width
            )));
        }
        let mut before = 0i64;
        for (r, &end) in self.ptr.iter().enumerate() {
            if end < before || (r == 0 && end != 0) {
                return Err(errors::data(format!(
                    "{name}: indptr[{r}] = {end} after {before}: row pointers start at 0 and \
                     never fall"
                )));
            }
            before = end;
        }
        if before as usize != self.ids.len() {
            return Err(errors::data(format!(
                "{name}: indptr ends at {before}, the matrix has {} entries",
                self.ids.len()
            )));
        }
        for r in 0..self.n_rows {
            let span = self.span(r);
            for (&id, &v) in self.ids[span.clone()].iter().zip(&self.values[span]) {
                if id < 0 || id as usize >= self.width {
                    return Err(errors::data(format!(
                        "{name}: row {r}: column {id} is outside 0..{}",
                        self.width
                    )));
                }
                if !v.is_finite() {
                    return Err(errors::data(format!(
                        "{name}: row {r}, column {id}: value {v} is not finite"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Row `r`'s entries' range.
    pub fn span(&self, r: usize) -> std::ops::Range<usize> {
        self.ptr[r] as usize..self.ptr[r + 1] as usize
    }

    /// Row `r`'s ids as widebag's (checked non-negative and within the width).
    pub fn ids_of(&self, r: usize, out: &mut Vec<u32>) {
        out.clear();
        out.extend(self.ids[self.span(r)].iter().map(|&i| i as u32));
    }

    /// Row `r`'s values.
    pub fn values_of(&self, r: usize) -> &[f32] {
        &self.values[self.span(r)]
    }
}

/// A NumPy array's buffer, or an error naming it when the array is not contiguous.
fn contiguous<'a, T>(
    name: &str,
    what: &str,
    r: Result<&'a [T], numpy::AsSliceError>,
) -> PyResult<&'a [T]> {
    r.map_err(|_| errors::data(format!("{name}.{what}: not a contiguous array")))
}

/// An optional matrix's buffers, checked.
pub fn optional<'a>(a: &'a Option<CsrArrays<'_>>) -> PyResult<Option<Csr<'a>>> {
    a.as_ref().map(Csr::of).transpose()
}

/// Optional labels' buffer (`targets`), or an error when the array is not contiguous.
pub fn label_slice<'a>(l: &'a Option<PyReadonlyArray1<'_, i64>>) -> PyResult<Option<&'a [i64]>> {
    l.as_ref()
        .map(|l| contiguous("targets", "labels", l.as_slice()))
        .transpose()
}

/// Labels, one class per row: checked non-negative and below `n_classes`.
pub fn check_labels(labels: &[i64], n_rows: usize, n_classes: usize) -> PyResult<()> {
    if labels.len() != n_rows {
        return Err(errors::data(format!(
            "targets: {} labels for {n_rows} rows",
            labels.len()
        )));
    }
    if let Some((r, &c)) =
        (labels.iter().enumerate()).find(|(_, c)| **c < 0 || **c as usize >= n_classes)
    {
        return Err(errors::data(format!(
            "targets: row {r}: label {c} is outside 0..{n_classes}"
        )));
    }
    Ok(())
}
