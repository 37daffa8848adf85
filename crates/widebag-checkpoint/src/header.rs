//! A safetensors header, read and checked against the file it opens: at most safetensors' own
//! 100 MB, inside the file, every tensor's byte range inside the data and exactly the size its
//! dtype and shape need, so no later read is sized by an unchecked number.

use std::collections::BTreeMap;
use std::io::Read;

/// safetensors' own cap on a header.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct Entry {
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte range relative to the start of the data.
    pub data_offsets: [u64; 2],
}

impl Entry {
    pub fn n_bytes(&self) -> u64 {
        self.data_offsets[1] - self.data_offsets[0]
    }
}

/// A checked header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Where the tensors' data starts in the file (8 + the header's length).
    pub data_start: u64,
    pub entries: BTreeMap<String, Entry>,
    pub metadata: BTreeMap<String, String>,
}

/// Bytes per element of the dtypes widebag writes (`F32`, `U64`); `None` for any other.
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    match dtype {
        "F32" => Some(4),
        "U64" => Some(8),
        _ => None,
    }
}

impl Header {
    /// Reads the header from the start of a file of `file_bytes` bytes. The error is the
    /// message, without the path (the caller names the file).
    pub fn read(mut file: impl Read, file_bytes: u64) -> Result<Self, String> {
        let mut n = [0u8; 8];
        file.read_exact(&mut n)
            .map_err(|_| "shorter than a safetensors header".to_string())?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER_BYTES || 8 + n > file_bytes {
            return Err(format!(
                "a header of {n} bytes does not fit a {file_bytes}-byte file"
            ));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header).map_err(|e| e.to_string())?;
        let mut raw: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| format!("header: {e}"))?;
        let metadata = match raw.remove("__metadata__") {
            Some(m) => serde_json::from_value(m).map_err(|e| format!("metadata: {e}"))?,
            None => BTreeMap::new(),
        };
        let data_start = 8 + n;
        let mut entries = BTreeMap::new();
        for (name, v) in raw {
            let e: Entry =
                serde_json::from_value(v).map_err(|e| format!("tensor `{name}`: {e}"))?;
            let [a, b] = e.data_offsets;
            let elems = e
                .shape
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
            let fits = a <= b
                && data_start
                    .checked_add(b)
                    .is_some_and(|end| end <= file_bytes)
                && dtype_bytes(&e.dtype)
                    .and_then(|w| elems?.checked_mul(w))
                    .is_some_and(|need| need == b - a);
            if !fits {
                return Err(format!(
                    "tensor `{name}`: {} {:?} at bytes {a}..{b} does not fit",
                    e.dtype, e.shape
                ));
            }
            entries.insert(name, e);
        }
        Ok(Self {
            data_start,
            entries,
            metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data_bytes: usize) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend(std::iter::repeat_n(0u8, data_bytes));
        f
    }

    fn read(f: &[u8]) -> Result<Header, String> {
        Header::read(f, f.len() as u64)
    }

    #[test]
    fn a_sane_header_is_read() {
        let f = file(
            r#"{"__metadata__":{"step":"3"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}"#,
            24,
        );
        let h = read(&f).unwrap();
        assert_eq!(h.entries["w"].n_bytes(), 24);
        assert_eq!(h.metadata["step"], "3");
        assert_eq!(h.data_start, f.len() as u64 - 24);
    }

    #[test]
    fn ranges_and_sizes_that_the_file_does_not_hold_are_refused() {
        for (header, data) in [
            (
                r#"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}"#,
                20,
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}"#,
                24,
            ),
            (
                r#"{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}"#,
                4,
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#,
                8,
            ),
            (
                r#"{"w":{"dtype":"U64","shape":[1],"data_offsets":[18446744073709551608,18446744073709551615]}}"#,
                8,
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#,
                0,
            ),
        ] {
            let err = read(&file(header, data)).unwrap_err();
            assert!(err.contains("does not fit"), "{header}: {err}");
        }
    }

    #[test]
    fn a_header_longer_than_the_file_is_refused_before_it_is_read() {
        let mut f = u64::MAX.to_le_bytes().to_vec();
        f.extend_from_slice(b"{}");
        assert!(read(&f).unwrap_err().contains("does not fit"));
        assert!(read(&f[..3]).unwrap_err().contains("shorter"));
    }
}
