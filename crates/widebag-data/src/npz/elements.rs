//! One array member of an `.npz` read element by element from the mapped file: a stored member
//! straight from the map, a deflated one through an inflater, a chunk at a time, its bytes
//! counted and its CRC-32 checked at its end, so memory holds a chunk, never the array.

use std::io::Read;

use super::fault::{Fault, fault};
use super::npy::{Header, header_end, parse_header};
use super::zip::{Entry, raw_member};

/// Decompressed bytes read from a member at a time.
const CHUNK_BYTES: usize = 1 << 18;
/// The largest `.npy` header read (numpy writes a few hundred bytes).
const MOST_HEADER_BYTES: usize = 1 << 20;

/// A member's stored bytes, as they are read.
enum Raw<'z> {
    Stored(&'z [u8]),
    Deflate(flate2::read::DeflateDecoder<&'z [u8]>),
}

/// One member's decompressed bytes, read a chunk at a time with their CRC-32 and count kept.
pub(super) struct Inflow<'z> {
    entry: &'z Entry,
    /// Where the member's stored bytes start in the file (a deflate or CRC fault's offset).
    start: usize,
    raw: Raw<'z>,
    raw_bytes: usize,
    crc: crc32fast::Hasher,
    /// Decompressed bytes read so far.
    read_bytes: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl<'z> Inflow<'z> {
    fn open(zip: &'z [u8], entry: &'z Entry) -> Result<Self, Fault> {
        let (start, raw) = raw_member(zip, entry)?;
        let raw_bytes = raw.len();
        let raw = match entry.method == 8 {
            true => Raw::Deflate(flate2::read::DeflateDecoder::new(raw)),
            false => Raw::Stored(raw),
        };
        Ok(Self {
            entry,
            start,
            raw,
            raw_bytes,
            crc: crc32fast::Hasher::new(),
            read_bytes: 0,
            buf: Vec::new(),
            pos: 0,
        })
    }

    fn fault(&self, message: String) -> Fault {
        fault(&self.entry.name, self.start as u64, message)
    }

    /// The stored bytes consumed so far (for the progress bar).
    pub(super) fn consumed_bytes(&self) -> u64 {
        match &self.raw {
            Raw::Stored(rest) => (self.raw_bytes - rest.len()) as u64,
            Raw::Deflate(d) => d.total_in(),
        }
    }

    fn available(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
    }

    /// Reads until `want` bytes are available; `false` when the member ends first. More bytes
    /// than the directory claims is a fault (so a crafted stream never reads on unbounded).
    fn fill(&mut self, want: usize) -> Result<bool, Fault> {
        while self.buf.len() - self.pos < want {
            self.buf.drain(..self.pos);
            self.pos = 0;
            let have = self.buf.len();
            let ask = CHUNK_BYTES.max(want - have);
            self.buf.resize(have + ask, 0);
            let got = match &mut self.raw {
                Raw::Stored(rest) => rest.read(&mut self.buf[have..]),
                Raw::Deflate(d) => d.read(&mut self.buf[have..]),
            };
            let got = got.map_err(|e| self.fault(format!("deflate data is corrupted: {e}")))?;
            self.crc.update(&self.buf[have..have + got]);
            self.buf.truncate(have + got);
            self.read_bytes += got as u64;
            if self.read_bytes > self.entry.uncompressed_bytes {
                return Err(self.fault(format!(
                    "member holds more than the {} bytes the directory says (corrupted?)",
                    self.entry.uncompressed_bytes
                )));
            }
            if got == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Reads the member to its end: its bytes counted and its CRC-32 checked against the
    /// directory's.
    pub(super) fn finish(&mut self) -> Result<(), Fault> {
        loop {
            self.pos = self.buf.len();
            if !self.fill(1)? {
                break;
            }
        }
        if self.read_bytes != self.entry.uncompressed_bytes {
            return Err(self.fault(format!(
                "member holds {} bytes, the directory says {} (corrupted?)",
                self.read_bytes, self.entry.uncompressed_bytes
            )));
        }
        let crc = self.crc.clone().finalize();
        if crc != self.entry.crc32 {
            return Err(self.fault(format!(
                "CRC-32 {crc:08x} does not match the recorded {:08x} (corrupted)",
                self.entry.crc32
            )));
        }
        Ok(())
    }
}

/// One `.npy` array member read element by element.
pub(super) struct Elements<'z> {
    pub(super) flow: Inflow<'z>,
    pub(super) header: Header,
    /// The next element's index.
    pub(super) next: usize,
}

impl<'z> Elements<'z> {
    /// Opens the member and reads its `.npy` header; a payload the header's shape does not
    /// account for (by the directory's size) is refused before any element is read.
    pub(super) fn open(zip: &'z [u8], entry: &'z Entry) -> Result<Self, Fault> {
        let mut flow = Inflow::open(zip, entry)?;
        let name = entry.name.as_str();
        flow.fill(12)?;
        if let Some(end) = header_end(name, flow.available())? {
            if end > MOST_HEADER_BYTES {
                let message = format!("the .npy header claims {end} bytes (corrupted?)");
                return Err(fault(name, 8, message));
            }
            flow.fill(end)?;
        }
        let header = parse_header(name, flow.available())?;
        flow.consume(header.data_offset);
        let held = entry
            .uncompressed_bytes
            .saturating_sub(header.data_offset as u64);
        let size = header.dtype.size();
        if size == 0 {
            let message = format!("element type `{}` has no bytes", header.descr);
            return Err(fault(name, header.data_offset as u64, message));
        }
        let fits = header.len.checked_mul(size).is_some();
        if !fits || held != header.payload_bytes() as u64 {
            return Err(header.wrong_payload(name, held as usize));
        }
        Ok(Self {
            flow,
            header,
            next: 0,
        })
    }

    pub(super) fn len(&self) -> usize {
        self.header.len
    }

    /// A fault at element `index`; a member whose CRC-32 fails is reported as that instead
    /// (the element is then corrupted, not wrong).
    pub(super) fn element_fault(&mut self, index: usize, message: &str) -> Fault {
        if let Err(f) = self.flow.finish() {
            return f;
        }
        let offset = self.header.data_offset + index * self.header.dtype.size();
        fault(
            &self.flow.entry.name,
            offset as u64,
            format!("element {index}: {message}"),
        )
    }

    /// Hands the next `n` elements to `each` as f64 (with their index); an element `each`
    /// refuses (its message) is a fault naming it.
    pub(super) fn take(
        &mut self,
        n: usize,
        mut each: impl FnMut(f64) -> Result<(), String>,
    ) -> Result<(), Fault> {
        let size = self.header.dtype.size();
        if !self.flow.fill(n * size)? {
            // The header and the directory agreed, so the stream itself is short.
            return Err(self.flow.finish().err().unwrap_or_else(|| {
                let message = "the member ends before its elements (corrupted?)";
                self.flow.fault(message.into())
            }));
        }
        let (dtype, first) = (self.header.dtype, self.next);
        let mut failed = None;
        for (i, bytes) in self.flow.available()[..n * size]
            .chunks_exact(size)
            .enumerate()
        {
            let checked = (dtype.number(bytes))
                .ok_or_else(|| "holds bytes where numbers are expected".to_string())
                .and_then(&mut each);
            if let Err(message) = checked {
                failed = Some((first + i, message));
                break;
            }
        }
        if let Some((index, message)) = failed {
            return Err(self.element_fault(index, &message));
        }
        self.flow.consume(n * size);
        self.next += n;
        Ok(())
    }

    /// One non-negative integer below `limit`.
    pub(super) fn integer(&mut self, limit: u64, what: &str) -> Result<u64, Fault> {
        let mut got = 0;
        self.take(1, |v| integer(v, limit, what).map(|v| got = v))?;
        Ok(got)
    }
}

/// `v` as a non-negative integer below `limit`, or the element's message.
pub(super) fn integer(v: f64, limit: u64, what: &str) -> Result<u64, String> {
    match v >= 0.0 && v < limit as f64 {
        true => Ok(v as u64),
        false => Err(format!("{what} {v} is outside [0, {limit})")),
    }
}

/// `v` as a finite f32, or the element's message.
pub(super) fn finite(v: f64) -> Result<f32, String> {
    let f = v as f32;
    match f.is_finite() {
        true => Ok(f),
        false => Err(format!("value {v} is not finite (as f32)")),
    }
}
