//! scipy.sparse `.npz` CSR files (as written by `scipy.sparse.save_npz`): a small zip reader and
//! writer (stored or deflate members, zip64 sizes) and the `.npy` array format.
//!
//! `save_npz` stores `data`, `indices`, `indptr`, `shape` and `format` arrays. widebag writes the
//! same five (so scipy's `load_npz` reads its files) plus, when the rows carry targets other than
//! their own bag, `widebag_target_indptr`, `widebag_target_ids`, `widebag_target_weights` and
//! `widebag_n_classes`, which scipy ignores. A file without them gets each row's bag as target.
//! Errors name the file, the archive member and the byte offset.

mod elements;
mod npy;
mod stream;
mod zip;

pub use stream::pack_npz;

use std::io::Write;
use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::options::ReadOptions;
use npy::{Npy, le_bytes, npy_bytes, parse_npy};
use zip::{Method, central_directory, extract, write_zip};

/// An error inside an archive, before the file path is attached.
#[derive(Debug)]
pub(super) struct Fault {
    pub(super) member: String,
    pub(super) offset: u64,
    pub(super) message: String,
}

pub(super) fn fault(member: &str, offset: u64, message: impl Into<String>) -> Fault {
    Fault {
        member: member.to_string(),
        offset,
        message: message.into(),
    }
}

impl Fault {
    pub(super) fn at(self, path: &Path) -> DataError {
        DataError::Archive {
            path: path.to_path_buf(),
            member: self.member,
            offset: self.offset,
            message: self.message,
        }
    }
}

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
fn csr_shape(format: &Npy, shape: &Npy, options: &ReadOptions) -> Result<(u64, u64, usize), Fault> {
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
fn n_classes_of(array: &Npy) -> Result<u64, Fault> {
    let n_classes = array.indices(u64::from(u32::MAX), "n_classes")?;
    Ok(*n_classes.first().unwrap_or(&0))
}

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
fn npz_members(dataset: &Dataset) -> Vec<(String, Vec<u8>)> {
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

#[cfg(test)]
mod tests {
    use super::npy::Dtype;
    use super::*;

    fn sample() -> Dataset {
        let mut rows = RowStore::new();
        rows.push(&[0, 5], &[1.0, 2.5], &[3], &[1.0]);
        rows.push(&[], &[], &[1, 2], &[0.5, 0.5]);
        rows.push(&[7], &[-1.0], &[0], &[1.0]);
        Dataset {
            source: "mem".into(),
            width: 8,
            n_classes: 4,
            rows,
            skipped_lines: 0,
            notes: vec![],
        }
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("widebag-npz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn round_trip_keeps_rows_and_targets() {
        let p = tmp("rt.npz");
        let d = sample();
        write_npz(&d, &p).unwrap();
        let back = read_npz(&p, &ReadOptions::default()).unwrap();
        assert_eq!(back.rows, d.rows);
        assert_eq!((back.width, back.n_classes), (8, 4));
    }

    #[test]
    fn corruption_and_truncation_name_member_and_offset() {
        let p = tmp("bad.npz");
        write_npz(&sample(), &p).unwrap();
        let good = std::fs::read(&p).unwrap();
        std::fs::write(&p, &good[..good.len() / 2]).unwrap();
        let e = read_npz(&p, &ReadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.npz") && e.contains("truncated"), "{e}");
        let mut flipped = good.clone();
        flipped[50] ^= 0xff; // inside the first member's deflate stream (header 30 + name 11 bytes)
        std::fs::write(&p, &flipped).unwrap();
        let e = read_npz(&p, &ReadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("indices.npy") && e.contains("byte"), "{e}");
    }

    #[test]
    fn npy_header_parsing() {
        let b = npy_bytes("<i8", 2, &le_bytes(&[3i64, 9], i64::to_le_bytes));
        assert_eq!(b.len() % 64, 16);
        let a = parse_npy("shape.npy", &b).unwrap();
        assert_eq!(a.indices(100, "x").unwrap(), vec![3, 9]);
        assert!(a.indices(5, "x").unwrap_err().message.contains("element 1"));
        assert_eq!(Dtype::parse(">i4"), None);
        // An empty or non-ASCII type: refused, not a panic (found by the npz fuzz target).
        assert_eq!(Dtype::parse(""), None);
        assert_eq!(Dtype::parse("éi4"), None);
    }
}
