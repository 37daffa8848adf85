//! The `.npy` array format inside an `.npz`: header parsing, the element types widebag reads,
//! and 1-D arrays written as numpy writes them.

use super::fault::{Fault, fault};
use super::zip::{le_u16, le_u32};

/// Element types of `.npy` arrays that widebag reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dtype {
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
    pub(super) fn parse(descr: &str) -> Option<Self> {
        // Checked: a header's text is the file's (an empty or non-ASCII type is refused).
        let (order, code) = descr.split_at_checked(1)?;
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
    pub(super) fn size(self) -> usize {
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
pub(super) struct Npy<'a> {
    pub(super) name: &'a str,
    pub(super) dtype: Dtype,
    pub(super) len: usize,
    pub(super) data: &'a [u8],
    pub(super) data_offset: usize,
}

pub(super) fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

/// What a `.npy` header says: the element type, the element count, where the payload starts,
/// and the header's own words for the shape and type (for messages).
pub(super) struct Header {
    pub(super) dtype: Dtype,
    pub(super) len: usize,
    pub(super) data_offset: usize,
    pub(super) shape: String,
    pub(super) descr: String,
}

impl Header {
    /// The payload bytes the shape and type need.
    pub(super) fn payload_bytes(&self) -> usize {
        self.len.saturating_mul(self.dtype.size())
    }

    /// The fault of a payload of `held` bytes that is not the [`Self::payload_bytes`] needed.
    pub(super) fn wrong_payload(&self, name: &str, held: usize) -> Fault {
        let (shape, descr, want) = (&self.shape, &self.descr, self.payload_bytes());
        fault(
            name,
            self.data_offset as u64,
            format!(
                "holds {held} payload bytes, shape {shape} of `{descr}` needs {want} (truncated?)"
            ),
        )
    }
}

/// The bytes before a `.npy` header's text: `Some(header_start + header_len)` once `prefix`
/// holds them (10 bytes for version 1, 12 for 2 and 3), `None` while it is shorter.
pub(super) fn header_end(name: &str, prefix: &[u8]) -> Result<Option<usize>, Fault> {
    let bad = |o: usize, m: String| fault(name, o as u64, m);
    if prefix.len() >= 6 && prefix.get(..6) != Some(b"\x93NUMPY") {
        return Err(bad(0, "not a .npy array (bad magic)".into()));
    }
    let (header_len, header_start) = match prefix.get(6) {
        None => return Ok(None),
        Some(1) => (le_u16(prefix, 8).map(usize::from), 10),
        Some(2 | 3) => (le_u32(prefix, 8).map(|v| v as usize), 12),
        v => return Err(bad(6, format!(".npy version {v:?} is not supported"))),
    };
    Ok(header_len.map(|n| header_start + n))
}

/// Parses the header at the start of `bytes` (the payload may follow, or not).
pub(super) fn parse_header(name: &str, bytes: &[u8]) -> Result<Header, Fault> {
    let bad = |o: usize, m: String| fault(name, o as u64, m);
    let header_start = match bytes.get(6) {
        Some(1) => 10,
        _ => 12,
    };
    let end = header_end(name, bytes)?.ok_or_else(|| match bytes.len() < 6 {
        true => bad(0, "not a .npy array (bad magic)".into()),
        false => bad(8, "truncated .npy header".into()),
    })?;
    let header = bytes
        .get(header_start..end)
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
    let len = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            bad(
                header_start,
                format!("shape {shape} has more elements than 2^64"),
            )
        })?;
    Ok(Header {
        dtype,
        len,
        data_offset: end,
        shape: shape.to_string(),
        descr: descr.to_string(),
    })
}

pub(super) fn parse_npy<'a>(name: &'a str, bytes: &'a [u8]) -> Result<Npy<'a>, Fault> {
    let header = parse_header(name, bytes)?;
    let data = bytes
        .get(header.data_offset..)
        .filter(|d| d.len() == header.payload_bytes())
        .ok_or_else(|| {
            let held = bytes.len().saturating_sub(header.data_offset);
            header.wrong_payload(name, held)
        })?;
    Ok(Npy {
        name,
        dtype: header.dtype,
        len: header.len,
        data,
        data_offset: header.data_offset,
    })
}

impl Dtype {
    /// One element's value (`bytes`: its [`Self::size`] little-endian bytes) as f64 (integers
    /// exactly up to 2^53); `None` for bytes, which are not numbers.
    pub(super) fn number(self, bytes: &[u8]) -> Option<f64> {
        if let Dtype::Bytes(_) = self {
            return None;
        }
        let mut b = [0u8; 8];
        b[..bytes.len()].copy_from_slice(bytes);
        Some(match self {
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
            Dtype::Bytes(_) => return None,
        })
    }

    /// Whether elements of this type are integers (row pointers, ids, classes).
    pub(super) fn is_integer(self) -> bool {
        !matches!(self, Dtype::F32 | Dtype::F64 | Dtype::Bytes(_))
    }
}

impl Npy<'_> {
    /// Elements as f64 (integers exactly up to 2^53), with each element's byte offset.
    pub(super) fn numbers(&self) -> Result<Vec<f64>, Fault> {
        let s = self.dtype.size();
        (0..self.len)
            .map(|i| {
                (self.dtype.number(&self.data[i * s..(i + 1) * s]))
                    .ok_or_else(|| self.fault(i, "holds bytes where numbers are expected"))
            })
            .collect()
    }

    pub(super) fn fault(&self, index: usize, message: &str) -> Fault {
        fault(
            self.name,
            (self.data_offset + index * self.dtype.size()) as u64,
            format!("element {index}: {message}"),
        )
    }

    /// Non-negative integers below `limit` (checked per element).
    pub(super) fn indices(&self, limit: u64, what: &str) -> Result<Vec<u64>, Fault> {
        if !self.dtype.is_integer() {
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
    pub(super) fn values(&self) -> Result<Vec<f32>, Fault> {
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
    pub(super) fn pointers(&self, n_rows: usize, nnz: usize) -> Result<Vec<usize>, Fault> {
        let p = self.indices(u64::MAX, "a row pointer")?;
        // Checked against the pointers the file holds, so a shape claiming 2^60 (or 2^64 - 1)
        // rows is refused without allocating or overflowing anything.
        if p.len().checked_sub(1) != Some(n_rows) {
            return Err(fault(
                self.name,
                self.data_offset as u64,
                format!(
                    "holds {} pointers, {} rows need {}",
                    p.len(),
                    n_rows,
                    n_rows as u128 + 1
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

/// `.npy` bytes of a 1-D array (version 1.0 header, padded to 64 bytes as numpy does).
pub(super) fn npy_bytes(descr: &str, len: usize, payload: &[u8]) -> Vec<u8> {
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

pub(super) fn le_bytes<T: Copy, const N: usize>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}
