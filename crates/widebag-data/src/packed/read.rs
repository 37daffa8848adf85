//! Reading a packed dataset: the prelude and metadata are checked when the file is opened (the
//! magic, the version, the metadata's CRC-32, and that the blocks tile the file exactly as the
//! metadata says, so a truncated file or a header that disagrees with the body is refused
//! before any row is read); each block's CRC-32 and counts are checked at its first read. Every
//! error names the file and the block.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::loaded::Loaded;
use crate::packed::layout::{Block, MAGIC, PRELUDE_BYTES, PackMeta, VERSION, frequencies_fit};
use crate::vocabulary::Vocabulary;

/// Which rows of the file: the dataset's, or (LightGCN) the held-out ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Rows,
    Test,
}

/// One block's sections, read in place from the map (little-endian 4-byte words; [`words`]).
#[derive(Clone, Copy, Debug)]
pub struct BlockView<'a> {
    /// Each row's end in `ids` (cumulative; the first row starts at 0).
    pub row_end: &'a [u8],
    pub ids: &'a [u8],
    /// `None`: every value is 1.
    pub values: Option<&'a [u8]>,
    /// Each row's end in `targets` (cumulative).
    pub target_end: &'a [u8],
    pub targets: &'a [u8],
    /// `None`: every weight is 1.
    pub weights: Option<&'a [u8]>,
}

/// A section's little-endian 4-byte words.
pub fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// A packed dataset opened through a memory map.
pub struct PackedFile {
    path: PathBuf,
    map: memmap2::Mmap,
    pub meta: PackMeta,
    /// Per block (the rows' blocks, then the held-out ones): whether its checksum was checked.
    checked: Vec<AtomicBool>,
}

impl PackedFile {
    /// Bytes it holds on the heap (its pages are the file's, not anonymous memory): the block
    /// table, the checked flags, the vocabulary and the class names.
    pub fn heap_bytes(&self) -> u64 {
        let m = &self.meta;
        let blocks = m.blocks.len() + m.test_blocks.as_ref().map_or(0, Vec::len);
        let words: usize = (m.vocabulary.iter().flatten())
            .map(|(w, _)| w.len() + size_of::<(String, u64)>())
            .sum();
        let labels: usize = m.labels.iter().flatten().map(|l| l.len() + 24).sum();
        (blocks * (size_of::<Block>() + 1) + words + labels) as u64
    }
}

fn damaged(path: &Path, member: impl Into<String>, offset: u64, message: String) -> DataError {
    DataError::Archive {
        path: path.to_path_buf(),
        member: member.into(),
        offset,
        message,
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The metadata's offset, length and CRC-32 from the prelude.
fn prelude(path: &Path, b: &[u8]) -> Result<(u64, u32, u32), DataError> {
    let bad = |m: &str| damaged(path, "prelude", 0, m.to_string());
    if b.len() < PRELUDE_BYTES || &b[..8] != MAGIC {
        return Err(bad("not a widebag packed dataset (no WIDEBAGP magic)"));
    }
    let version = le_u32(b, 8);
    if version != VERSION {
        return Err(bad(&format!(
            "packed with layout version {version}; this widebag reads version {VERSION} \
             (pack the source again)"
        )));
    }
    if le_u32(b, 12) != 0 {
        return Err(bad("reserved bytes are not zero"));
    }
    let offset = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
    Ok((offset, le_u32(b, 24), le_u32(b, 28)))
}

/// Bytes a block of these counts takes.
fn block_bytes(b: &Block) -> u64 {
    let targets = match b.targets_are_ids {
        true => 0,
        false => b.rows as u64 + b.n_targets * (1 + b.weights as u64),
    };
    4 * (b.rows as u64 + b.nnz * (1 + b.values as u64) + targets)
}

/// Checks that the blocks tile `[PRELUDE_BYTES, meta_offset)` and agree with the totals.
fn check_layout(path: &Path, meta: &PackMeta, meta_offset: u64) -> Result<(), DataError> {
    let header = |m: String| damaged(path, "metadata", meta_offset, m);
    if meta.version != VERSION {
        return Err(header(format!("says version {}", meta.version)));
    }
    let mut at = PRELUDE_BYTES as u64;
    let parts = [&meta.blocks[..], meta.test_blocks.as_deref().unwrap_or(&[])];
    let mut i = 0;
    for blocks in parts {
        for (k, b) in blocks.iter().enumerate() {
            let name = format!("block {i}");
            i += 1;
            if b.offset != at {
                return Err(header(format!("{name} starts at {}, not {at}", b.offset)));
            }
            let ids_as_targets = b.targets_are_ids && (b.weights || b.n_targets != b.nnz);
            // Every block but a part's last is full: row r is in block r / block_rows.
            let short = k + 1 < blocks.len() && b.rows != meta.block_rows;
            if b.bytes != block_bytes(b)
                || b.rows == 0
                || b.rows > meta.block_rows
                || short
                || ids_as_targets
            {
                return Err(header(format!(
                    "{name} of {} rows, {} ids and {} targets cannot take {} bytes",
                    b.rows, b.nnz, b.n_targets, b.bytes
                )));
            }
            at = at
                .checked_add(b.bytes)
                .ok_or_else(|| header("overflow".into()))?;
        }
    }
    if let Some(f) = &meta.frequencies {
        let want = 8 * (meta.width + meta.n_classes);
        if f.offset != at || f.bytes != want || !frequencies_fit(meta) {
            return Err(header(format!(
                "the frequencies take {} bytes at {}, not {want} at {at}",
                f.bytes, f.offset
            )));
        }
        at += f.bytes;
    }
    if at != meta_offset {
        return Err(header(format!(
            "the blocks end at byte {at}, the metadata starts at {meta_offset}"
        )));
    }
    let rows: u64 = meta.blocks.iter().map(|b| b.rows as u64).sum();
    let nnz: u64 = meta.blocks.iter().map(|b| b.nnz).sum();
    if (rows, nnz) != (meta.n_rows, meta.nnz) {
        return Err(header(format!(
            "the blocks hold {rows} rows and {nnz} ids; the totals say {} and {}",
            meta.n_rows, meta.nnz
        )));
    }
    Ok(())
}

/// Reads and checks the prelude and the metadata, and that they describe a file of `len` bytes.
fn read_meta_from(path: &Path, mut f: std::fs::File, len: u64) -> Result<PackMeta, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut head = [0u8; PRELUDE_BYTES];
    f.read_exact(&mut head).map_err(|_| {
        damaged(
            path,
            "prelude",
            0,
            format!("the file is {len} bytes: truncated"),
        )
    })?;
    let (offset, meta_len, crc) = prelude(path, &head)?;
    if offset.checked_add(meta_len as u64) != Some(len) {
        return Err(damaged(
            path,
            "metadata",
            offset,
            format!(
                "says {meta_len} bytes at {offset}, the file is {len} bytes: truncated or \
                 extended"
            ),
        ));
    }
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut json = vec![0u8; meta_len as usize];
    f.read_exact(&mut json).map_err(io)?;
    if crc32fast::hash(&json) != crc {
        return Err(damaged(path, "metadata", offset, "CRC-32 mismatch".into()));
    }
    let meta: PackMeta = serde_json::from_slice(&json)
        .map_err(|e| damaged(path, "metadata", offset, format!("not readable: {e}")))?;
    check_layout(path, &meta, offset)?;
    Ok(meta)
}

/// The metadata of the packed dataset at `path`, checked, without reading any block: what
/// `data stats`, `plan` and `explain` need, in one small read.
pub fn read_meta(path: &Path) -> Result<PackMeta, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    read_meta_from(path, f, len)
}

/// Appends each row end of `ends` (4-byte words, from 0 in its block) to the running offsets
/// `ptr`.
fn extend_ptr(ptr: &mut Vec<usize>, ends: &[u8]) {
    let base = *ptr.last().expect("offsets start at 0");
    ptr.extend(words(ends).map(|e| base + e as usize));
}

/// Row `r`'s range in a section whose rows end at `ends` (cumulative 4-byte words).
pub fn row_range(ends: &[u8], r: usize) -> std::ops::Range<usize> {
    let start = if r == 0 {
        0
    } else {
        word(ends, r - 1) as usize
    };
    start..word(ends, r) as usize
}

/// The 4-byte word `i` of a section.
fn word(bytes: &[u8], i: usize) -> u32 {
    le_u32(bytes, 4 * i)
}

impl PackedFile {
    /// Opens `path`: the prelude and metadata are read and checked, the body is mapped (no
    /// block is read yet).
    pub fn open(path: &Path) -> Result<Self, DataError> {
        if cfg!(target_endian = "big") {
            return Err(DataError::InvalidSpec {
                key: "data.path",
                message: "packed datasets are read on little-endian machines only".into(),
            });
        }
        let io = |source| DataError::Io {
            path: path.to_path_buf(),
            source,
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        let meta = read_meta_from(path, f.try_clone().map_err(io)?, len)?;
        #[allow(unsafe_code, reason = "memmap2's map is unsafe: see SAFETY")]
        // SAFETY: the map is read only; a file changed under it by another process is the
        // hazard every mapped reader accepts, and each block is checked against its CRC-32.
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io)?;
        let n = meta.blocks.len() + meta.test_blocks.as_ref().map_or(0, Vec::len);
        Ok(Self {
            path: path.to_path_buf(),
            map,
            meta,
            checked: (0..n).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The blocks of `part`.
    pub fn blocks(&self, part: Part) -> &[Block] {
        match part {
            Part::Rows => &self.meta.blocks,
            Part::Test => self.meta.test_blocks.as_deref().unwrap_or(&[]),
        }
    }

    /// Block `i` of `part`, checked (CRC-32, counts, ids and targets in range) at its first read.
    pub fn block(&self, part: Part, i: usize) -> Result<BlockView<'_>, DataError> {
        let blocks = self.blocks(part);
        let first = match part {
            Part::Rows => 0,
            Part::Test => self.meta.blocks.len(),
        };
        let b = blocks.get(i).ok_or_else(|| {
            damaged(
                &self.path,
                format!("block {}", first + i),
                0,
                "no such block".into(),
            )
        })?;
        let bad = |m: String| damaged(&self.path, format!("block {}", first + i), b.offset, m);
        let bytes = &self.map[b.offset as usize..(b.offset + b.bytes) as usize];
        let checked = &self.checked[first + i];
        if !checked.load(Ordering::Acquire) && crc32fast::hash(bytes) != b.crc32 {
            return Err(bad("CRC-32 mismatch: the block is damaged".into()));
        }
        let (rows, nnz, nt) = (b.rows as usize, b.nnz as usize, b.n_targets as usize);
        let (row_end, rest) = bytes.split_at(4 * rows);
        let (ids, rest) = rest.split_at(4 * nnz);
        let (values, rest) = match b.values {
            true => {
                let (v, rest) = rest.split_at(4 * nnz);
                (Some(v), rest)
            }
            false => (None, rest),
        };
        let (target_end, targets, weights) = match b.targets_are_ids {
            true => (row_end, ids, None),
            false => {
                let (target_end, rest) = rest.split_at(4 * rows);
                let (targets, rest) = rest.split_at(4 * nt);
                (target_end, targets, b.weights.then_some(rest))
            }
        };
        let view = BlockView {
            row_end,
            ids,
            values,
            target_end,
            targets,
            weights,
        };
        if !checked.load(Ordering::Acquire) {
            self.check_view(&view, b).map_err(bad)?;
            checked.store(true, Ordering::Release);
        }
        Ok(view)
    }

    /// Counts and ranges of a block whose checksum matched (a file written by another tool).
    fn check_view(&self, v: &BlockView<'_>, b: &Block) -> Result<(), String> {
        // Each section's row ends rise (never fall) from 0 and the last is the section's count.
        let ends_fit = |ends: &[u8], n: u64| {
            let mut last = 0u32;
            words(ends).all(|e| {
                let rising = e >= last;
                last = e;
                rising
            }) && u64::from(last) == n
        };
        if !ends_fit(v.row_end, b.nnz) || !ends_fit(v.target_end, b.n_targets) {
            return Err("its row ends disagree with its counts".into());
        }
        if let Some(id) = words(v.ids).find(|&id| id as u64 >= self.meta.width) {
            return Err(format!(
                "id {id} is at or beyond the width {}",
                self.meta.width
            ));
        }
        let classes = self.meta.n_classes.max(1);
        if let Some(t) = words(v.targets).find(|&t| t as u64 >= classes) {
            return Err(format!("target {t} is at or beyond {classes} classes"));
        }
        Ok(())
    }

    /// Each id's summed `|value|` and each class's summed `|weight|` over the rows: the stored
    /// section (its checksum checked), or counted from every block when the file has none.
    pub fn frequencies(&self) -> Result<(Vec<f64>, Vec<f64>), DataError> {
        let (width, n_classes) = (self.meta.width as usize, self.meta.n_classes as usize);
        let Some(f) = &self.meta.frequencies else {
            let (mut ids, mut classes) = (vec![0.0; width], vec![0.0; n_classes]);
            for i in 0..self.meta.blocks.len() {
                let v = self.block(Part::Rows, i)?;
                let floats = |b: Option<&[u8]>, n: usize| match b {
                    Some(x) => words(x).map(f32::from_bits).collect(),
                    None => vec![1.0f32; n],
                };
                let (k, t): (Vec<u32>, Vec<u32>) =
                    (words(v.ids).collect(), words(v.targets).collect());
                crate::frequencies::add(&mut ids, &k, &floats(v.values, k.len()));
                crate::frequencies::add(&mut classes, &t, &floats(v.weights, t.len()));
            }
            return Ok((ids, classes));
        };
        let bytes = &self.map[f.offset as usize..(f.offset + f.bytes) as usize];
        if crc32fast::hash(bytes) != f.crc32 {
            return Err(damaged(
                &self.path,
                "frequencies",
                f.offset,
                "CRC-32 mismatch: the section is damaged".into(),
            ));
        }
        let mut all = bytes
            .chunks_exact(8)
            .map(|w| f64::from_le_bytes(w.try_into().expect("8 bytes")));
        let ids = all.by_ref().take(width).collect();
        Ok((ids, all.collect()))
    }

    /// Every row of `part`, in memory.
    pub fn rows(&self, part: Part) -> Result<RowStore, DataError> {
        let blocks = self.blocks(part);
        let mut store = RowStore::new();
        let (rows, nnz): (u64, u64) = blocks
            .iter()
            .fold((0, 0), |(r, n), b| (r + b.rows as u64, n + b.nnz));
        store.row_ptr.reserve(rows as usize);
        store.ids.reserve(nnz as usize);
        store.values.reserve(nnz as usize);
        store.targets.reserve(rows as usize);
        for i in 0..blocks.len() {
            let v = self.block(part, i)?;
            let floats = |b: &[u8]| words(b).map(f32::from_bits).collect::<Vec<_>>();
            extend_ptr(&mut store.row_ptr, v.row_end);
            store.ids.extend(words(v.ids));
            match v.values {
                Some(x) => store.values.extend(floats(x)),
                None => store.values.resize(store.ids.len(), 1.0),
            }
            extend_ptr(&mut store.target_ptr, v.target_end);
            store.targets.extend(words(v.targets));
            match v.weights {
                Some(x) => store.target_weights.extend(floats(x)),
                None => store.target_weights.resize(store.targets.len(), 1.0),
            }
        }
        Ok(store)
    }

    /// The whole dataset in memory, as the source it was packed from loads.
    pub fn load(&self) -> Result<Loaded, DataError> {
        let m = &self.meta;
        let dataset = Dataset {
            source: self.path.clone(),
            width: m.width as usize,
            n_classes: m.n_classes as usize,
            rows: self.rows(Part::Rows)?,
            skipped_lines: m.skipped_lines as usize,
            notes: m.notes.clone(),
        };
        let test = match m.test_blocks {
            Some(_) => Some(self.rows(Part::Test)?),
            None => None,
        };
        Ok(Loaded {
            dataset,
            vocabulary: m.vocabulary.clone().map(Vocabulary::from_words),
            test,
            labels: m.labels.clone(),
        })
    }
}
