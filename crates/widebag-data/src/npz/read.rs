//! A CSR `.npz` read whole: its members found in the central directory and extracted, the
//! arrays checked (ids within the width, pointers that never fall, finite values) into rows.

use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::npz::fault::{Fault, fault};
use crate::npz::npy::{Npy, parse_npy};
use crate::npz::zip::{central_directory, extract};
use crate::options::ReadOptions;

/// Reads a CSR `.npz`. The width comes from the stored shape (`options.width` may widen it).
pub fn read_npz(path: &Path, options: &ReadOptions) -> Result<Dataset, DataError> {
    let zip = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if zip.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    read_npz_bytes(&zip, options).map_err(|f| f.at(path))
}

fn read_npz_bytes(zip: &[u8], options: &ReadOptions) -> Result<Dataset, Fault> {
    let entries = central_directory(zip)?;
    let mut members = std::collections::BTreeMap::new();
    for e in &entries {
        let key = e.name.strip_suffix(".npy").unwrap_or(&e.name).to_string();
        members.insert(key, (e.name.clone(), extract(zip, e)?));
    }
    let array = |key: &str| -> Result<Option<Npy<'_>>, Fault> {
        members
            .get(key)
            .map(|(name, bytes)| parse_npy(name, bytes))
            .transpose()
    };
    let need = |key: &str| -> Result<Npy<'_>, Fault> {
        array(key)?.ok_or_else(|| {
            fault(
                &format!("{key}.npy"),
                0,
                "missing: not a scipy.sparse save_npz file",
            )
        })
    };
    let (n_rows, n_cols, width) = csr_shape(&need("format")?, &need("shape")?, options)?;
    let values = need("data")?.values()?;
    let indices = need("indices")?.indices(n_cols, "column index")?;
    if indices.len() != values.len() {
        let i = need("indices")?;
        return Err(fault(
            i.name,
            i.data_offset as u64,
            format!("{} indices but {} data values", indices.len(), values.len()),
        ));
    }
    let row_ptr = need("indptr")?.pointers(n_rows as usize, values.len())?;
    let ids: Vec<u32> = indices.into_iter().map(|i| i as u32).collect();
    let (target_ptr, targets, target_weights, n_classes) = match array("widebag_target_indptr")? {
        Some(tp) => {
            let n_classes = n_classes_of(&need("widebag_n_classes")?)?;
            let t = need("widebag_target_ids")?.indices(n_classes, "target class")?;
            let w = need("widebag_target_weights")?.values()?;
            let tp = tp.pointers(n_rows as usize, t.len())?;
            if w.len() != t.len() {
                let a = need("widebag_target_weights")?;
                return Err(fault(a.name, a.data_offset as u64, "one weight per target"));
            }
            let t = t.into_iter().map(|c| c as u32).collect();
            (tp, t, w, n_classes as usize)
        }
        None => (row_ptr.clone(), ids.clone(), values.clone(), width),
    };
    let n_classes = options.n_classes.unwrap_or(0).max(n_classes);
    Ok(Dataset {
        source: Default::default(),
        width,
        n_classes,
        rows: RowStore {
            row_ptr,
            ids,
            values,
            target_ptr,
            targets,
            target_weights,
        },
        skipped_lines: 0,
        notes: vec![format!("scipy CSR matrix {n_rows} × {n_cols}")],
    })
}

/// A CSR matrix's rows, columns and the width read with `options` (which may widen it), from
/// its `format` and `shape` arrays.
pub(super) fn csr_shape(
    format: &Npy,
    shape: &Npy,
    options: &ReadOptions,
) -> Result<(u64, u64, usize), Fault> {
    let fmt = String::from_utf8_lossy(format.data)
        .trim_end_matches('\0')
        .to_string();
    if fmt != "csr" {
        return Err(fault(
            format.name,
            format.data_offset as u64,
            format!("sparse format `{fmt}` is not supported; save a CSR matrix (`.tocsr()`)"),
        ));
    }
    let dims = shape.indices(u64::MAX, "a shape dimension")?;
    let [n_rows, n_cols] = dims[..] else {
        return Err(fault(
            shape.name,
            shape.data_offset as u64,
            "shape must have two dimensions",
        ));
    };
    if n_cols > u64::from(u32::MAX) {
        return Err(fault(
            shape.name,
            shape.data_offset as u64,
            format!("width {n_cols} exceeds 2^32 - 1"),
        ));
    }
    let width = match options.width {
        Some(w) if (w as u64) < n_cols => {
            return Err(fault(
                shape.name,
                shape.data_offset as u64,
                format!("the matrix has {n_cols} columns, more than the set width {w}"),
            ));
        }
        Some(w) => w,
        None => n_cols as usize,
    };
    Ok((n_rows, n_cols, width))
}

/// The classes widebag's `widebag_n_classes` array declares (0 when it is empty).
pub(super) fn n_classes_of(array: &Npy) -> Result<u64, Fault> {
    let n_classes = array.indices(u64::from(u32::MAX), "n_classes")?;
    Ok(*n_classes.first().unwrap_or(&0))
}
