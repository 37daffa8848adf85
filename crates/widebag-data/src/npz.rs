//! scipy.sparse `.npz` CSR files (as written by `scipy.sparse.save_npz`): a small zip reader and
//! writer (stored or deflate members, zip64 sizes) and the `.npy` array format.
//!
//! `save_npz` stores `data`, `indices`, `indptr`, `shape` and `format` arrays. widebag writes the
//! same five (so scipy's `load_npz` reads its files) plus, when the rows carry targets other than
//! their own bag, `widebag_target_indptr`, `widebag_target_ids`, `widebag_target_weights` and
//! `widebag_n_classes`, which scipy ignores. A file without them gets each row's bag as target.
//! Errors name the file, the archive member and the byte offset.

use std::io::{Read, Write};
use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::{DataError, ReadOptions};

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;

/// An error inside an archive, before the file path is attached.
#[derive(Debug)]
struct Fault {
    member: String,
    offset: u64,
    message: String,
}

fn fault(member: &str, offset: u64, message: impl Into<String>) -> Fault {
    Fault {
        member: member.to_string(),
        offset,
        message: message.into(),
    }
}

impl Fault {
    fn at(self, path: &Path) -> DataError {
        DataError::Archive {
            path: path.to_path_buf(),
            member: self.member,
            offset: self.offset,
            message: self.message,
        }
    }
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// One archive member, located through the central directory.
struct Entry {
    name: String,
    method: u16,
    crc32: u32,
    compressed_bytes: u64,
    uncompressed_bytes: u64,
    local_offset: u64,
}

/// The central directory of a zip archive held in memory.
fn central_directory(zip: &[u8]) -> Result<Vec<Entry>, Fault> {
    const ARCHIVE: &str = "(archive)";
    if zip.len() < 22 {
        return Err(fault(
            ARCHIVE,
            0,
            format!(
                "{} bytes is too short for a zip archive (truncated?)",
                zip.len()
            ),
        ));
    }
    // The end-of-central-directory record is in the last 22 + 65535 bytes.
    let lowest = zip.len().saturating_sub(22 + 0xffff);
    let eocd = (lowest..=zip.len() - 22)
        .rev()
        .find(|&i| le_u32(zip, i) == Some(EOCD_SIG))
        .ok_or_else(|| {
            fault(
                ARCHIVE,
                zip.len() as u64,
                "no end-of-central-directory record: not a zip archive, or truncated",
            )
        })?;
    let mut n_entries = u64::from(le_u16(zip, eocd + 10).unwrap_or(0));
    let mut cd_offset = u64::from(le_u32(zip, eocd + 16).unwrap_or(0));
    if eocd >= 20 && le_u32(zip, eocd - 20) == Some(ZIP64_LOCATOR_SIG) {
        let z = le_u64(zip, eocd - 12).unwrap_or(u64::MAX) as usize;
        if le_u32(zip, z) != Some(ZIP64_EOCD_SIG) {
            return Err(fault(
                ARCHIVE,
                z as u64,
                "the zip64 end-of-central-directory record is missing",
            ));
        }
        n_entries = le_u64(zip, z + 32).unwrap_or(0);
        cd_offset = le_u64(zip, z + 48).unwrap_or(u64::MAX);
    }
    let mut entries = Vec::new();
    let mut at = usize::try_from(cd_offset).unwrap_or(usize::MAX);
    for _ in 0..n_entries {
        let bad = |m: &str| fault(ARCHIVE, at as u64, m.to_string());
        if le_u32(zip, at) != Some(CENTRAL_SIG) {
            return Err(bad("expected a central-directory header (corrupted?)"));
        }
        let field16 = |o| le_u16(zip, at + o).ok_or_else(|| bad("truncated header"));
        let field32 = |o| le_u32(zip, at + o).ok_or_else(|| bad("truncated header"));
        let method = field16(10)?;
        let crc32 = field32(16)?;
        let mut compressed_bytes = u64::from(field32(20)?);
        let mut uncompressed_bytes = u64::from(field32(24)?);
        let name_len = usize::from(field16(28)?);
        let extra_len = usize::from(field16(30)?);
        let comment_len = usize::from(field16(32)?);
        let mut local_offset = u64::from(field32(42)?);
        let name_bytes = zip
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| bad("truncated member name"))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let extra = zip
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or_else(|| bad("truncated extra field"))?;
        // Zip64 extra field: the 8-byte values of the fields saturated at 0xffffffff, in order.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = le_u16(extra, e).unwrap_or(0);
            let len = usize::from(le_u16(extra, e + 2).unwrap_or(0));
            if id == 1 {
                let mut p = e + 4;
                for field in [
                    &mut uncompressed_bytes,
                    &mut compressed_bytes,
                    &mut local_offset,
                ] {
                    if *field == u64::from(u32::MAX) {
                        *field = le_u64(extra, p).ok_or_else(|| bad("truncated zip64 field"))?;
                        p += 8;
                    }
                }
            }
            e += 4 + len;
        }
        entries.push(Entry {
            name,
            method,
            crc32,
            compressed_bytes,
            uncompressed_bytes,
            local_offset,
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(entries)
}

/// The uncompressed bytes of one member, CRC-checked.
fn extract(zip: &[u8], entry: &Entry) -> Result<Vec<u8>, Fault> {
    let at = usize::try_from(entry.local_offset).unwrap_or(usize::MAX);
    let bad = |o: usize, m: &str| fault(&entry.name, o as u64, m.to_string());
    if le_u32(zip, at) != Some(LOCAL_SIG) {
        return Err(bad(at, "expected a local file header (corrupted?)"));
    }
    let name_len = usize::from(le_u16(zip, at + 26).ok_or_else(|| bad(at, "truncated header"))?);
    let extra_len = usize::from(le_u16(zip, at + 28).ok_or_else(|| bad(at, "truncated header"))?);
    let start = at + 30 + name_len + extra_len;
    let end = usize::try_from(entry.compressed_bytes)
        .ok()
        .and_then(|n| start.checked_add(n))
        .filter(|&e| e <= zip.len())
        .ok_or_else(|| {
            bad(
                start,
                &format!(
                    "member data ({} bytes) runs past the end of the file (truncated?)",
                    entry.compressed_bytes
                ),
            )
        })?;
    let raw = &zip[start..end];
    let data = match entry.method {
        0 => raw.to_vec(),
        8 => {
            let mut out = Vec::with_capacity(entry.uncompressed_bytes.min(1 << 30) as usize);
            flate2::read::DeflateDecoder::new(raw)
                .read_to_end(&mut out)
                .map_err(|e| bad(start, &format!("deflate data is corrupted: {e}")))?;
            out
        }
        m => {
            return Err(bad(
                at,
                &format!("compression method {m} is not supported (only stored and deflate)"),
            ));
        }
    };
    if data.len() as u64 != entry.uncompressed_bytes {
        return Err(bad(
            start,
            &format!(
                "member holds {} bytes, the directory says {} (corrupted?)",
                data.len(),
                entry.uncompressed_bytes
            ),
        ));
    }
    let crc = crc32fast::hash(&data);
    if crc != entry.crc32 {
        return Err(bad(
            start,
            &format!(
                "CRC-32 {crc:08x} does not match the recorded {:08x} (corrupted)",
                entry.crc32
            ),
        ));
    }
    Ok(data)
}

/// Element types of `.npy` arrays that widebag reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    Bytes(usize),
}

impl Dtype {
    fn parse(descr: &str) -> Option<Self> {
        let (order, code) = descr.split_at(1);
        if !matches!(order, "<" | "|" | "=") {
            return None;
        }
        Some(match code {
            "b1" => Self::Bool,
            "i1" => Self::I8,
            "u1" => Self::U8,
            "i2" => Self::I16,
            "u2" => Self::U16,
            "i4" => Self::I32,
            "u4" => Self::U32,
            "i8" => Self::I64,
            "u8" => Self::U64,
            "f4" => Self::F32,
            "f8" => Self::F64,
            s if s.starts_with('S') => Self::Bytes(s[1..].parse().ok()?),
            _ => return None,
        })
    }
    fn size(self) -> usize {
        match self {
            Self::Bool | Self::I8 | Self::U8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
            Self::Bytes(n) => n,
        }
    }
}

/// A parsed `.npy` array: its element type, shape and raw little-endian payload.
struct Npy<'a> {
    name: &'a str,
    dtype: Dtype,
    len: usize,
    data: &'a [u8],
    data_offset: usize,
}

fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

fn parse_npy<'a>(name: &'a str, bytes: &'a [u8]) -> Result<Npy<'a>, Fault> {
    let bad = |o: usize, m: String| fault(name, o as u64, m);
    if bytes.get(..6) != Some(b"\x93NUMPY") {
        return Err(bad(0, "not a .npy array (bad magic)".into()));
    }
    let (header_len, header_start) = match bytes.get(6) {
        Some(1) => (le_u16(bytes, 8).map(usize::from), 10),
        Some(2 | 3) => (le_u32(bytes, 8).map(|v| v as usize), 12),
        v => return Err(bad(6, format!(".npy version {v:?} is not supported"))),
    };
    let header_len = header_len.ok_or_else(|| bad(8, "truncated .npy header".into()))?;
    let header = bytes
        .get(header_start..header_start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad(header_start, "truncated or non-text .npy header".into()))?;
    let descr = header_value(header, "descr")
        .map(|d| d.trim_matches(['\'', '"']))
        .ok_or_else(|| bad(header_start, "the .npy header has no 'descr'".into()))?;
    let dtype = Dtype::parse(descr).ok_or_else(|| {
        bad(
            header_start,
            format!("element type `{descr}` is not supported (little-endian numbers only)"),
        )
    })?;
    let shape = header_value(header, "shape")
        .ok_or_else(|| bad(header_start, "the .npy header has no 'shape'".into()))?;
    let dims: Vec<usize> = shape
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            bad(
                header_start,
                format!("shape `{shape}` is not a tuple of sizes"),
            )
        })?;
    if header_value(header, "fortran_order") == Some("True") && dims.len() > 1 {
        return Err(bad(
            header_start,
            "Fortran-ordered arrays are not supported".into(),
        ));
    }
    let len = dims.iter().product::<usize>();
    let data_offset = header_start + header_len;
    let want = len.saturating_mul(dtype.size());
    let data = bytes
        .get(data_offset..)
        .filter(|d| d.len() == want)
        .ok_or_else(|| {
            bad(
                data_offset,
                format!(
                    "holds {} payload bytes, shape {shape} of `{descr}` needs {want} (truncated?)",
                    bytes.len().saturating_sub(data_offset)
                ),
            )
        })?;
    Ok(Npy {
        name,
        dtype,
        len,
        data,
        data_offset,
    })
}

impl Npy<'_> {
    /// Elements as f64 (integers exactly up to 2^53), with each element's byte offset.
    fn numbers(&self) -> Result<Vec<f64>, Fault> {
        let s = self.dtype.size();
        let d = self.data;
        let at = |i: usize| &d[i * s..(i + 1) * s];
        let arr = |i: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            b[..s].copy_from_slice(at(i));
            b
        };
        (0..self.len)
            .map(|i| {
                let b = arr(i);
                Ok(match self.dtype {
                    Dtype::Bool | Dtype::U8 => f64::from(b[0]),
                    Dtype::I8 => f64::from(b[0] as i8),
                    Dtype::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
                    Dtype::U16 => f64::from(u16::from_le_bytes([b[0], b[1]])),
                    Dtype::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                    Dtype::U32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                    Dtype::I64 => i64::from_le_bytes(b) as f64,
                    Dtype::U64 => u64::from_le_bytes(b) as f64,
                    Dtype::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                    Dtype::F64 => f64::from_le_bytes(b),
                    Dtype::Bytes(_) => {
                        return Err(self.fault(i, "holds bytes where numbers are expected"));
                    }
                })
            })
            .collect()
    }

    fn fault(&self, index: usize, message: &str) -> Fault {
        fault(
            self.name,
            (self.data_offset + index * self.dtype.size()) as u64,
            format!("element {index}: {message}"),
        )
    }

    /// Non-negative integers below `limit` (checked per element).
    fn indices(&self, limit: u64, what: &str) -> Result<Vec<u64>, Fault> {
        if matches!(self.dtype, Dtype::F32 | Dtype::F64 | Dtype::Bytes(_)) {
            return Err(fault(
                self.name,
                self.data_offset as u64,
                format!("{what} must be integers, found {:?}", self.dtype),
            ));
        }
        self.numbers()?
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                if v >= 0.0 && v < limit as f64 {
                    Ok(v as u64)
                } else {
                    Err(self.fault(i, &format!("{what} {v} is outside [0, {limit})")))
                }
            })
            .collect()
    }

    /// Finite values as f32.
    fn values(&self) -> Result<Vec<f32>, Fault> {
        self.numbers()?
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let f = v as f32;
                if f.is_finite() {
                    Ok(f)
                } else {
                    Err(self.fault(i, &format!("value {v} is not finite (as f32)")))
                }
            })
            .collect()
    }

    /// A row-pointer array: starts at 0, never decreases, ends at `nnz`.
    fn pointers(&self, n_rows: usize, nnz: usize) -> Result<Vec<usize>, Fault> {
        let p = self.indices(u64::MAX, "a row pointer")?;
        if p.len() != n_rows + 1 {
            return Err(fault(
                self.name,
                self.data_offset as u64,
                format!(
                    "holds {} pointers, {} rows need {}",
                    p.len(),
                    n_rows,
                    n_rows + 1
                ),
            ));
        }
        if p[0] != 0 {
            return Err(self.fault(0, "the first row pointer must be 0"));
        }
        for i in 1..p.len() {
            if p[i] < p[i - 1] {
                return Err(self.fault(i, "row pointers decrease"));
            }
        }
        if p[n_rows] as usize != nnz {
            return Err(self.fault(
                n_rows,
                &format!(
                    "the last row pointer is {}, but there are {nnz} entries",
                    p[n_rows]
                ),
            ));
        }
        Ok(p.into_iter().map(|v| v as usize).collect())
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
    let format = need("format")?;
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
    let shape = need("shape")?;
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
            let n_classes = need("widebag_n_classes")?.indices(u64::from(u32::MAX), "n_classes")?;
            let n_classes = *n_classes.first().unwrap_or(&0);
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

/// `.npy` bytes of a 1-D array (version 1.0 header, padded to 64 bytes as numpy does).
fn npy_bytes(descr: &str, len: usize, payload: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({len},), }}");
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(payload);
    out
}

fn le_bytes<T: Copy, const N: usize>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}

/// Writes a zip archive of deflated members (names and contents).
fn write_zip(out: &mut impl Write, members: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    let too_big = || std::io::Error::other("an npz member of 4 GiB or more needs zip64 writing");
    let mut central = Vec::new();
    let mut offset: u64 = 0;
    for (name, data) in members {
        let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(data)?;
        let packed = enc.finish()?;
        let crc = crc32fast::hash(data);
        let (packed_len, data_len) = (
            u32::try_from(packed.len()).map_err(|_| too_big())?,
            u32::try_from(data.len()).map_err(|_| too_big())?,
        );
        let local_offset = u32::try_from(offset).map_err(|_| too_big())?;
        let mut common = Vec::new();
        common.extend_from_slice(&20u16.to_le_bytes()); // version needed
        common.extend_from_slice(&0u16.to_le_bytes()); // flags
        common.extend_from_slice(&8u16.to_le_bytes()); // deflate
        common.extend_from_slice(&0u16.to_le_bytes()); // time
        common.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
        common.extend_from_slice(&crc.to_le_bytes());
        common.extend_from_slice(&packed_len.to_le_bytes());
        common.extend_from_slice(&data_len.to_le_bytes());
        common.extend_from_slice(&(name.len() as u16).to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes()); // extra length
        let mut local = LOCAL_SIG.to_le_bytes().to_vec();
        local.extend_from_slice(&common);
        local.extend_from_slice(name.as_bytes());
        out.write_all(&local)?;
        out.write_all(&packed)?;
        central.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        central.extend_from_slice(&common);
        central.extend_from_slice(&[0u8; 6]); // comment length, disk, internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attrs
        central.extend_from_slice(&local_offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        offset += (local.len() + packed.len()) as u64;
    }
    let cd_offset = u32::try_from(offset).map_err(|_| too_big())?;
    out.write_all(&central)?;
    let mut end = EOCD_SIG.to_le_bytes().to_vec();
    end.extend_from_slice(&[0u8; 4]); // disk numbers
    end.extend_from_slice(&(members.len() as u16).to_le_bytes());
    end.extend_from_slice(&(members.len() as u16).to_le_bytes());
    end.extend_from_slice(&(central.len() as u32).to_le_bytes());
    end.extend_from_slice(&cd_offset.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    out.write_all(&end)
}

/// Writes `dataset` as a scipy CSR `.npz` (int32 indices, int32 or int64 pointers, float32 data),
/// adding widebag's target arrays unless every row's target is its own bag.
pub fn write_npz(dataset: &Dataset, path: &Path) -> Result<(), DataError> {
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
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    write_zip(&mut file, &members).map_err(io)?;
    file.flush().map_err(io)
}

#[cfg(test)]
mod tests {
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
    }
}
