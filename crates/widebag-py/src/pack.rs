//! Rows from Python packed into a run directory (`rows.packed`: widebag's checksummed,
//! memory-mapped format, written as they are read from NumPy's buffers, atomically), so a run
//! trained from a SciPy matrix is prepared, evaluated, exported and resumed as one trained from a
//! file is, by the same code, and the command line reads its run directory.
//!
//! The rows' targets: `labels` (a class per row: libsvm's rows), `bags` (a CSR matrix of weighted
//! classes per row: libsvm's multi-label rows), or neither: each row is the bag of its own ids
//! (a user's items, LightGCN's rows), with `test` the held-out items of each row's user, ranked
//! with the user's training items left out (LightGCN's protocol).

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use widebag_data::packed::stream::{Extent, StreamHeader, pack_rows as pack_stream};
use widebag_data::packed::write::Row;
use widebag_data::packed::{PackMeta, PackOptions};

use crate::csr::{Csr, CsrArrays, check_labels, label_slice, optional};
use crate::errors;

/// What each row is trained to predict.
enum Targets<'a> {
    /// Its own ids (a bag of width's classes).
    Own,
    Labels(&'a [i64], usize),
    Bags(Csr<'a>),
}

impl Targets<'_> {
    /// The rows' format, as the packed file records it (the settings it is read back with).
    fn variant(&self) -> &'static str {
        match self {
            Targets::Own => "lightgcn",
            _ => "libsvm",
        }
    }
}

/// Packs `data`'s rows (with `labels`, `bags`, or each its own bag; `test`: held-out rows of
/// each row's user, with neither) into `out`. Returns the format the run reads them as.
#[pyfunction]
#[pyo3(signature = (out, data, labels=None, n_classes=None, bags=None, test=None))]
pub fn pack_rows(
    py: Python<'_>,
    out: String,
    data: CsrArrays<'_>,
    labels: Option<PyReadonlyArray1<'_, i64>>,
    n_classes: Option<usize>,
    bags: Option<CsrArrays<'_>>,
    test: Option<CsrArrays<'_>>,
) -> PyResult<String> {
    let x = Csr::of(&data)?;
    let targets = match (label_slice(&labels)?, &bags) {
        (Some(_), Some(_)) => return Err(errors::usage("targets: labels or bags, not both")),
        (Some(l), None) => {
            let n = n_classes.ok_or_else(|| errors::usage("labels need n_classes"))?;
            check_labels(l, x.n_rows, n)?;
            Targets::Labels(l, n)
        }
        (None, Some(b)) => Targets::Bags(Csr::of(b)?),
        (None, None) => Targets::Own,
    };
    if let Targets::Bags(b) = &targets
        && b.n_rows != x.n_rows
    {
        return Err(errors::data(format!(
            "targets: {} rows for data's {}",
            b.n_rows, x.n_rows
        )));
    }
    let held = optional(&test)?;
    if let Some(t) = &held {
        if !matches!(targets, Targets::Own) {
            return Err(errors::usage(
                "test: held-out items are for rows that are their own bags (targets=None)",
            ));
        }
        if t.width != x.width {
            return Err(errors::data(format!(
                "test: {} columns for data's {}",
                t.width, x.width
            )));
        }
    }
    let variant = targets.variant();
    let path = std::path::PathBuf::from(&out);
    py.detach(|| write(&path, &x, &targets, held.as_ref()))
        .map_err(|e| errors::data(format!("{out}: {e}")))?;
    Ok(variant.to_string())
}

/// The rows streamed into the packed file at `path`.
fn write(
    path: &std::path::Path,
    x: &Csr,
    targets: &Targets,
    test: Option<&Csr>,
) -> Result<PackMeta, widebag_data::DataError> {
    let n_classes = match targets {
        Targets::Own => x.width,
        Targets::Labels(_, n) => *n,
        Targets::Bags(b) => b.width,
    };
    let header = StreamHeader {
        variant: targets.variant().to_string(),
        width: x.width,
        n_classes,
        extent: Extent::Declared,
        notes: vec!["rows from Python (scipy.sparse CSR)".into()],
        vocabulary: None,
        labels: None,
    };
    let io = |source| widebag_data::DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    pack_stream(header, path, PackOptions::default(), |sink| {
        let (mut ids, mut classes) = (Vec::new(), Vec::new());
        for r in 0..x.n_rows {
            x.ids_of(r, &mut ids);
            let values = x.values_of(r);
            let label;
            let (t, w): (&[u32], &[f32]) = match targets {
                Targets::Own => (&ids, values),
                Targets::Labels(l, _) => {
                    label = [l[r] as u32];
                    (&label, &[1.0])
                }
                Targets::Bags(b) => {
                    b.ids_of(r, &mut classes);
                    (&classes, b.values_of(r))
                }
            };
            let row = Row {
                ids: &ids,
                values,
                targets: t,
                weights: w,
            };
            sink.push(row).map_err(io)?;
        }
        if let Some(t) = test {
            sink.begin_held_out().map_err(io)?;
            for r in 0..t.n_rows {
                t.ids_of(r, &mut ids);
                let values = t.values_of(r);
                let row = Row {
                    ids: &ids,
                    values,
                    targets: &ids,
                    weights: values,
                };
                sink.push(row).map_err(io)?;
            }
        }
        Ok(())
    })
}
