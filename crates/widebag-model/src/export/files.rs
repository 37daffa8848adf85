//! Streamed writers of the two formats a model is exported in: safetensors (an 8-byte header
//! length, a JSON header of dtypes, shapes and byte ranges, then the raw little-endian data)
//! and numpy's `.npy` (version 1.0), each written piece by piece so a 240,000-row matrix never
//! sits in one buffer. Both go through a temporary file renamed into place.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::error::ModelError;

/// A tensor of a safetensors file: its name, shape and element type (`F32`, `I64`).
pub struct Spec {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: &'static str,
}

impl Spec {
    pub fn f32(name: impl Into<String>, shape: Vec<usize>) -> Self {
        Self {
            name: name.into(),
            shape,
            dtype: "F32",
        }
    }
    fn bytes(&self) -> u64 {
        self.shape.iter().product::<usize>() as u64 * 4 * if self.dtype == "I64" { 2 } else { 1 }
    }
}

fn err(path: &Path) -> impl Fn(std::io::Error) -> ModelError + '_ {
    move |e| ModelError::Checkpoint(format!("writing {}: {e}", path.display()))
}

/// Writes a safetensors file of `specs` (in the file in this order); `fill(i, out)` writes
/// tensor `i`'s bytes. The written size is checked against the header.
pub fn write_safetensors(
    path: &Path,
    specs: &[Spec],
    metadata: &BTreeMap<String, String>,
    mut fill: impl FnMut(usize, &mut dyn Write) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert(
            "__metadata__".into(),
            serde_json::to_value(metadata).expect("strings"),
        );
    }
    let mut offset = 0u64;
    for s in specs {
        let end = offset + s.bytes();
        header.insert(
            s.name.clone(),
            serde_json::json!({"dtype": s.dtype, "shape": s.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut text = serde_json::to_string(&header).expect("a header serialises");
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let total = offset;
    let mut failure = None;
    widebag_data::atomic::write_atomic_with(path, |w| {
        w.write_all(&(text.len() as u64).to_le_bytes())?;
        w.write_all(text.as_bytes())?;
        let mut counted = Counted { inner: w, bytes: 0 };
        for i in 0..specs.len() {
            if let Err(e) = fill(i, &mut counted) {
                failure = Some(e);
                return Err(std::io::Error::other("a tensor could not be written"));
            }
        }
        if counted.bytes != total {
            return Err(std::io::Error::other(format!(
                "{} data bytes written, the header says {total}",
                counted.bytes
            )));
        }
        Ok(())
    })
    .map_err(|e| failure.take().unwrap_or_else(|| err(path)(e)))
}

/// Writes a `.npy` of f32 `shape`; `fill(out)` writes the row-major data.
pub fn write_npy(
    path: &Path,
    shape: &[usize],
    fill: impl FnOnce(&mut dyn Write) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    while !(10 + dict.len() + 1).is_multiple_of(64) {
        dict.push(' ');
    }
    dict.push('\n');
    let mut failure = None;
    widebag_data::atomic::write_atomic_with(path, |w| {
        w.write_all(b"\x93NUMPY\x01\x00")?;
        w.write_all(&(dict.len() as u16).to_le_bytes())?;
        w.write_all(dict.as_bytes())?;
        fill(w).map_err(|e| {
            failure = Some(e);
            std::io::Error::other("the data could not be written")
        })
    })
    .map_err(|e| failure.take().unwrap_or_else(|| err(path)(e)))
}

/// f32 values as little-endian bytes.
pub fn put_f32(out: &mut dyn Write, values: &[f32]) -> Result<(), ModelError> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    out.write_all(&bytes)
        .map_err(|e| ModelError::Checkpoint(format!("writing: {e}")))
}

struct Counted<'a, W: Write> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
