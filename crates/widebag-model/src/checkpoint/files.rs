//! safetensors files of a checkpoint: written with one tensor's bytes in memory at a time (a
//! table shard is read from its table only when the writer reaches it), and read back tensor
//! by tensor from the byte ranges its header names, after checking that the header is sane
//! and every range lies inside the file.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use burn::tensor::Tensor;
use safetensors::tensor::{Dtype, View};

use widebag_checkpoint::{CheckpointError, Header};

use crate::entries::{CheckpointEntry, CheckpointFile, Slot};
use crate::error::ModelError;
use crate::table::ShardedTable;
use crate::tensors::to_vec;

/// One tensor as the writer sees it.
enum Lazy<'a> {
    Shard(&'a ShardedTable, usize, Vec<usize>),
    Dense(&'a Tensor<2>, Vec<usize>),
    Steps(&'a [u64], Vec<usize>),
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl View for Lazy<'_> {
    fn dtype(&self) -> Dtype {
        match self {
            Lazy::Steps(..) => Dtype::U64,
            _ => Dtype::F32,
        }
    }
    fn shape(&self) -> &[usize] {
        match self {
            Lazy::Shard(_, _, s) | Lazy::Dense(_, s) | Lazy::Steps(_, s) => s,
        }
    }
    fn data(&self) -> Cow<'_, [u8]> {
        // A read-back failure here cannot be returned through the trait: it writes no bytes,
        // so the file's size check fails and the write is refused.
        match self {
            Lazy::Shard(t, s, _) => t
                .read_shard(*s)
                .map(|v| f32_bytes(&v))
                .unwrap_or_default()
                .into(),
            Lazy::Dense(t, _) => to_vec((*t).clone())
                .map(|v| f32_bytes(&v))
                .unwrap_or_default()
                .into(),
            Lazy::Steps(v, _) => v
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        }
    }
    fn data_len(&self) -> usize {
        self.shape().iter().product::<usize>()
            * 4
            * if matches!(self, Lazy::Steps(..)) {
                2
            } else {
                1
            }
    }
}

/// Writes the entries of `file` to `path` (safetensors with `metadata`).
pub fn write(
    slots: &[CheckpointEntry<'_>],
    file: CheckpointFile,
    metadata: HashMap<String, String>,
    path: &Path,
) -> Result<(), ModelError> {
    let mut views: Vec<(String, Lazy<'_>)> = Vec::new();
    for n in slots.iter().filter(|n| n.file == file) {
        match &n.slot {
            Slot::Table(t) => {
                for (s, (_, rows)) in t.shard_ranges().into_iter().enumerate() {
                    views.push((
                        format!("{}.shard{s}", n.name),
                        Lazy::Shard(t, s, vec![rows, t.dim()]),
                    ));
                }
            }
            Slot::Dense(t) => views.push((
                n.name.clone(),
                Lazy::Dense(t, t.shape().dims::<2>().to_vec()),
            )),
            Slot::Steps(v) => views.push((n.name.clone(), Lazy::Steps(v, vec![v.len()]))),
        }
    }
    let expected: u64 = views.iter().map(|(_, v)| v.data_len() as u64).sum();
    safetensors::serialize_to_file(views, Some(metadata), path)
        .map_err(|e| ModelError::Checkpoint(format!("writing {}: {e}", path.display())))?;
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if len < expected {
        return Err(ModelError::Checkpoint(format!(
            "{}: {len} bytes written, {expected} expected (a tensor could not be read)",
            path.display()
        )));
    }
    Ok(())
}

/// One tensor's entry in a header.
/// An open safetensors file: its header, checked against the file's size.
pub struct Reader {
    file: std::fs::File,
    path: std::path::PathBuf,
    header: Header,
}

impl Reader {
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let bad = |m: String| ModelError::from(CheckpointError::new(path, m));
        let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
        let size = file.metadata().map_err(|e| bad(e.to_string()))?.len();
        let header = Header::read(&file, size).map_err(bad)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            header,
        })
    }

    /// The header's `__metadata__`.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.header.metadata
    }

    fn bytes(&mut self, name: &str, dtype: &str, shape: &[usize]) -> Result<Vec<u8>, ModelError> {
        let path = self.path.display().to_string();
        let e = self
            .header
            .entries
            .get(name)
            .ok_or_else(|| ModelError::Checkpoint(format!("{path}: no tensor `{name}`")))?;
        if e.dtype != dtype || e.shape != shape {
            return Err(ModelError::Checkpoint(format!(
                "{path}: tensor `{name}` is {} {:?}, this model needs {dtype} {shape:?}",
                e.dtype, e.shape
            )));
        }
        let [a, b] = e.data_offsets;
        let mut out = vec![0u8; (b - a) as usize];
        let io = |e: std::io::Error| ModelError::Checkpoint(format!("{path}: {e}"));
        self.file
            .seek(SeekFrom::Start(self.header.data_start + a))
            .map_err(io)?;
        self.file.read_exact(&mut out).map_err(io)?;
        Ok(out)
    }

    fn f32s(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let b = self.bytes(name, "F32", shape)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Fills the entries of `file` from this file, shard by shard.
    pub fn load(
        &mut self,
        slots: &mut [CheckpointEntry<'_>],
        file: CheckpointFile,
    ) -> Result<(), ModelError> {
        for n in slots.iter_mut().filter(|n| n.file == file) {
            match &mut n.slot {
                Slot::Table(t) => {
                    let dim = t.dim();
                    for (s, (_, rows)) in t.shard_ranges().into_iter().enumerate() {
                        let v = self.f32s(&format!("{}.shard{s}", n.name), &[rows, dim])?;
                        t.write_shard(s, v)?;
                    }
                }
                Slot::Dense(t) => {
                    let shape = t.shape().dims::<2>();
                    let v = self.f32s(&n.name, &shape)?;
                    **t = crate::tensors::floats(v, shape, &t.device());
                }
                Slot::Steps(v) => {
                    let b = self.bytes(&n.name, "U64", &[v.len()])?;
                    **v = b
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect();
                }
            }
        }
        Ok(())
    }
}
