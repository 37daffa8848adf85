//! A dataset written as a CSR `.npz` that scipy's `load_npz` reads, with widebag's target arrays
//! when the rows target other than their own bag.

use std::io::Write;
use std::path::Path;

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::npz::npy::{le_bytes, npy_bytes};
use crate::npz::zip::{Method, write_zip};

/// Writes `dataset` as a scipy CSR `.npz` (int32 indices, int32 or int64 pointers, float32 data),
/// adding widebag's target arrays unless every row's target is its own bag.
pub fn write_npz(dataset: &Dataset, path: &Path) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    write_zip(&mut file, &npz_members(dataset), Method::Deflate).map_err(io)?;
    file.flush().map_err(io)
}

/// The `.npy` members [`write_npz`] writes of `dataset`, named.
pub(super) fn npz_members(dataset: &Dataset) -> Vec<(String, Vec<u8>)> {
    let rows = &dataset.rows;
    let n_rows = rows.n_rows();
    let ptr = |p: &[usize]| -> (&'static str, Vec<u8>) {
        if p.last().copied().unwrap_or(0) <= i32::MAX as usize {
            ("<i4", le_bytes(p, |v| (v as i32).to_le_bytes()))
        } else {
            ("<i8", le_bytes(p, |v| (v as i64).to_le_bytes()))
        }
    };
    let mut members = Vec::new();
    let mut add = |name: &str, descr: &str, len: usize, payload: Vec<u8>| {
        members.push((format!("{name}.npy"), npy_bytes(descr, len, &payload)));
    };
    let (pd, pb) = ptr(&rows.row_ptr);
    add(
        "indices",
        "<i4",
        rows.ids.len(),
        le_bytes(&rows.ids, |v| (v as i32).to_le_bytes()),
    );
    add("indptr", pd, rows.row_ptr.len(), pb);
    add("format", "|S3", 1, b"csr".to_vec());
    add(
        "shape",
        "<i8",
        2,
        le_bytes(&[n_rows as i64, dataset.width as i64], i64::to_le_bytes),
    );
    add(
        "data",
        "<f4",
        rows.values.len(),
        le_bytes(&rows.values, f32::to_le_bytes),
    );
    let self_targets = rows.target_ptr == rows.row_ptr
        && rows.targets == rows.ids
        && rows.target_weights == rows.values
        && dataset.n_classes == dataset.width;
    if !self_targets {
        let (td, tb) = ptr(&rows.target_ptr);
        add("widebag_target_indptr", td, rows.target_ptr.len(), tb);
        add(
            "widebag_target_ids",
            "<i4",
            rows.targets.len(),
            le_bytes(&rows.targets, |v| (v as i32).to_le_bytes()),
        );
        add(
            "widebag_target_weights",
            "<f4",
            rows.target_weights.len(),
            le_bytes(&rows.target_weights, f32::to_le_bytes),
        );
        add(
            "widebag_n_classes",
            "<i8",
            1,
            (dataset.n_classes as i64).to_le_bytes().to_vec(),
        );
    }
    members
}
