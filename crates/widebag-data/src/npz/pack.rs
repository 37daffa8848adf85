//! An `.npz` CSR file packed streamed from a memory map: each array member is decoded as the rows
//! need it (`elements`: a stored member straight from the map, a deflated one inflated),
//! checked element by element as [`super::read::read_npz`] checks its arrays, and its CRC-32
//! checked at its end. Memory holds a row and each member's read buffer, never an array,
//! whatever the file's size; the packed bytes are those of the file read whole and packed.

use std::path::Path;

use crate::dataset::RowStore;
use crate::error::DataError;
use crate::npz::elements::{Elements, finite, integer};
use crate::npz::fault::{Fault, fault};
use crate::npz::npy::parse_npy;
use crate::npz::read::{csr_shape, n_classes_of};
use crate::npz::zip::{Entry, central_directory, extract};
use crate::options::ReadOptions;
use crate::packed::layout::PackMeta;
use crate::packed::stream::{Extent, StreamHeader, pack_rows};
use crate::packed::write::{PackOptions, Row};

/// Rows read ahead of the writer at a time, and batches of them in flight.
const BATCH_ROWS: u64 = 16_384;
const AHEAD: usize = 2;

/// A row-pointer array read pointer by pointer: from 0, never decreasing, within the entries.
struct Pointers<'z> {
    elements: Elements<'z>,
    nnz: u64,
    last: u64,
}

impl<'z> Pointers<'z> {
    /// The pointer array of `entry`, which must hold `n_rows + 1` integers starting at 0.
    fn open(zip: &'z [u8], entry: &'z Entry, n_rows: u64, nnz: u64) -> Result<Self, Fault> {
        let mut elements = Elements::open(zip, entry)?;
        let h = &elements.header;
        if !h.dtype.is_integer() {
            let message = format!("a row pointer must be integers, found {:?}", h.dtype);
            return Err(fault(&entry.name, h.data_offset as u64, message));
        }
        if (h.len as u64).checked_sub(1) != Some(n_rows) {
            let message = format!(
                "holds {} pointers, {} rows need {}",
                h.len,
                n_rows,
                n_rows as u128 + 1
            );
            return Err(fault(&entry.name, h.data_offset as u64, message));
        }
        if elements.integer(u64::MAX, "a row pointer")? != 0 {
            return Err(elements.element_fault(0, "the first row pointer must be 0"));
        }
        Ok(Self {
            elements,
            nnz,
            last: 0,
        })
    }

    /// The entries of the next row.
    fn next_len(&mut self) -> Result<usize, Fault> {
        let index = self.elements.next;
        let p = self.elements.integer(u64::MAX, "a row pointer")?;
        if p < self.last {
            return Err(self.elements.element_fault(index, "row pointers decrease"));
        }
        if p > self.nnz {
            let message = format!("the row pointer {p} is past the {} entries", self.nnz);
            return Err(self.elements.element_fault(index, &message));
        }
        let len = p - self.last;
        self.last = p;
        Ok(len as usize)
    }

    /// Ends the array: its last pointer is the number of entries, its CRC-32 checked.
    fn finish(&mut self) -> Result<(), Fault> {
        if self.last != self.nnz {
            let (last, nnz, index) = (self.last, self.nnz, self.elements.len() - 1);
            let message = format!("the last row pointer is {last}, but there are {nnz} entries");
            return Err(self.elements.element_fault(index, &message));
        }
        self.elements.flow.finish()
    }
}

/// The members of a CSR `.npz`, opened and checked against each other, ready to stream.
struct Csr<'z> {
    n_rows: u64,
    n_cols: u64,
    width: usize,
    n_classes: usize,
    rows: Pointers<'z>,
    ids: Elements<'z>,
    values: Elements<'z>,
    /// widebag's own targets; `None`: each row's bag is its target.
    targets: Option<(Pointers<'z>, Elements<'z>, Elements<'z>)>,
}

/// The members of `zip` as [`super::read::read_npz`] checks them, before any row.
fn open_csr<'z>(
    zip: &'z [u8],
    entries: &'z [Entry],
    options: &ReadOptions,
) -> Result<Csr<'z>, Fault> {
    let member = |key: &str| -> Option<&'z Entry> {
        entries
            .iter()
            .find(|e| e.name.strip_suffix(".npy").unwrap_or(&e.name) == key)
    };
    let need = |key: &str| -> Result<&'z Entry, Fault> {
        member(key).ok_or_else(|| {
            let name = format!("{key}.npy");
            fault(&name, 0, "missing: not a scipy.sparse save_npz file")
        })
    };
    // The small members whole: the format, the shape, the classes.
    let small = |e: &'z Entry| extract(zip, e);
    let (format, shape) = (small(need("format")?)?, small(need("shape")?)?);
    let format = parse_npy(&need("format")?.name, &format)?;
    let shape = parse_npy(&need("shape")?.name, &shape)?;
    let (n_rows, n_cols, width) = csr_shape(&format, &shape, options)?;
    let values = Elements::open(zip, need("data")?)?;
    let ids = Elements::open(zip, need("indices")?)?;
    if !ids.header.dtype.is_integer() {
        let (h, name) = (&ids.header, &need("indices")?.name);
        let message = format!("column index must be integers, found {:?}", h.dtype);
        return Err(fault(name, h.data_offset as u64, message));
    }
    if ids.len() != values.len() {
        let message = format!("{} indices but {} data values", ids.len(), values.len());
        let name = &need("indices")?.name;
        return Err(fault(name, ids.header.data_offset as u64, message));
    }
    let nnz = ids.len() as u64;
    let rows = Pointers::open(zip, need("indptr")?, n_rows, nnz)?;
    let (targets, n_classes) = match member("widebag_target_indptr") {
        Some(tp) => {
            let classes = need("widebag_n_classes")?;
            let classes_bytes = small(classes)?;
            let n_classes = n_classes_of(&parse_npy(&classes.name, &classes_bytes)?)?;
            let t = Elements::open(zip, need("widebag_target_ids")?)?;
            if !t.header.dtype.is_integer() {
                let (h, name) = (&t.header, &need("widebag_target_ids")?.name);
                let message = format!("target class must be integers, found {:?}", h.dtype);
                return Err(fault(name, h.data_offset as u64, message));
            }
            let w = Elements::open(zip, need("widebag_target_weights")?)?;
            let tp = Pointers::open(zip, tp, n_rows, t.len() as u64)?;
            if w.len() != t.len() {
                let name = &need("widebag_target_weights")?.name;
                return Err(fault(
                    name,
                    w.header.data_offset as u64,
                    "one weight per target",
                ));
            }
            (Some((tp, t, w)), n_classes as usize)
        }
        None => (None, width),
    };
    Ok(Csr {
        n_rows,
        n_cols,
        width,
        n_classes: options.n_classes.unwrap_or(0).max(n_classes),
        rows,
        ids,
        values,
        targets,
    })
}

/// Reads the next `n` ids (below `limit`, named `what`) and values into `ids` and `values`.
fn take_row(
    (ids_in, values_in): (&mut Elements<'_>, &mut Elements<'_>),
    n: usize,
    (limit, what): (u64, &str),
    (ids, values): (&mut Vec<u32>, &mut Vec<f32>),
) -> Result<(), Fault> {
    ids.clear();
    values.clear();
    ids_in.take(n, |v| integer(v, limit, what).map(|v| ids.push(v as u32)))?;
    values_in.take(n, |v| finite(v).map(|v| values.push(v)))
}

/// Packs the CSR `.npz` at `path` into `out` streamed (atomically, as `pack_rows`), reading it
/// through a memory map; `options.progress` is told the file's bytes as they are consumed.
pub fn pack_npz(
    path: &Path,
    read: &ReadOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() == 0 {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    #[allow(unsafe_code, reason = "memmap2's map is unsafe: see SAFETY")]
    // SAFETY: the map is read only; a file changed under it by another process is the hazard
    // every mapped reader accepts, and each member's CRC-32 is checked at its end.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let at = |f: Fault| f.at(path);
    let entries = central_directory(&map).map_err(at)?;
    let mut csr = open_csr(&map, &entries, read).map_err(at)?;
    let header = StreamHeader {
        variant: variant.to_string(),
        width: csr.width,
        n_classes: csr.n_classes,
        extent: Extent::Declared,
        notes: vec![format!("scipy CSR matrix {} × {}", csr.n_rows, csr.n_cols)],
        vocabulary: None,
        labels: None,
    };
    let progress = options.progress.clone();
    pack_rows(header, out, options, |sink| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(RowStore, u64), Fault>>(AHEAD);
        std::thread::scope(|scope| {
            // The members are inflated and checked a batch of rows ahead of the writer.
            let reader = scope.spawn(move || {
                let mut reported = 0;
                let mut send = |rows: Result<RowStore, Fault>, csr: &Csr<'_>| {
                    let bytes = csr.consumed_bytes();
                    let sent = tx.send(rows.map(|rows| (rows, bytes - reported)));
                    reported = bytes;
                    sent.is_ok()
                };
                let mut r = 0;
                while r < csr.n_rows {
                    let n = (csr.n_rows - r).min(BATCH_ROWS);
                    let rows = csr.rows_ahead(n);
                    let failed = rows.is_err();
                    if !send(rows, &csr) || failed {
                        return;
                    }
                    r += n;
                }
                let ended = csr.finish();
                if ended.is_err() {
                    send(ended.map(|()| RowStore::new()), &csr);
                }
            });
            let rx = rx;
            for rows in rx.iter() {
                let (rows, bytes) = rows.map_err(at)?;
                for r in 0..rows.n_rows() {
                    sink.push(Row::of(&rows, r))
                        .map_err(|source| DataError::Io {
                            path: out.to_path_buf(),
                            source,
                        })?;
                }
                progress.advance(bytes);
            }
            drop(rx);
            reader
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            Ok(())
        })
    })
}

impl Csr<'_> {
    /// The stored bytes its members have consumed (for the progress bar).
    fn consumed_bytes(&self) -> u64 {
        let mut streams = vec![&self.rows.elements, &self.ids, &self.values];
        if let Some((tp, t, w)) = &self.targets {
            streams.extend([&tp.elements, t, w]);
        }
        streams.iter().map(|e| e.flow.consumed_bytes()).sum()
    }

    /// The next `n` rows, read and checked.
    fn rows_ahead(&mut self, n: u64) -> Result<RowStore, Fault> {
        let mut rows = RowStore::new();
        let (mut ids, mut values) = (Vec::new(), Vec::new());
        let (mut targets, mut weights) = (Vec::new(), Vec::new());
        let column = (self.n_cols, "column index");
        for _ in 0..n {
            let k = self.rows.next_len()?;
            take_row(
                (&mut self.ids, &mut self.values),
                k,
                column,
                (&mut ids, &mut values),
            )?;
            match &mut self.targets {
                Some((tp, t, w)) => {
                    let k = tp.next_len()?;
                    let class = (self.n_classes as u64, "target class");
                    take_row((t, w), k, class, (&mut targets, &mut weights))?;
                    rows.push(&ids, &values, &targets, &weights);
                }
                None => rows.push(&ids, &values, &ids, &values),
            }
        }
        Ok(rows)
    }

    /// Ends every member: the last row pointers, each member's bytes and CRC-32.
    fn finish(&mut self) -> Result<(), Fault> {
        (self.rows.finish())
            .and_then(|()| self.ids.flow.finish())
            .and_then(|()| self.values.flow.finish())?;
        match &mut self.targets {
            Some((tp, t, w)) => (tp.finish())
                .and_then(|()| t.flow.finish())
                .and_then(|()| w.flow.finish()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::dataset::{Dataset, RowStore};
    use crate::loaded::Loaded;
    use crate::npz::read::read_npz;
    use crate::npz::write::npz_members;
    use crate::npz::zip::{Method, write_zip};
    use crate::packed::write::pack;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("widebag-npz-stream-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// `n_rows` rows of up to 40 ids below 5,000 (some empty), targeting one class each when
    /// `classes` is set, else their own bag.
    fn dataset(n_rows: usize, classes: bool) -> Dataset {
        let mut rows = RowStore::new();
        let mut x = 99u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u32
        };
        for r in 0..n_rows {
            let mut ids: Vec<u32> = (0..(r % 41)).map(|_| next() % 5000).collect();
            ids.sort_unstable();
            ids.dedup();
            let values: Vec<f32> = ids.iter().map(|&i| 1.0 + (i % 3) as f32).collect();
            match classes {
                true => rows.push(&ids, &values, &[next() % 12], &[1.0]),
                false => rows.push(&ids, &values, &ids, &values),
            }
        }
        Dataset {
            source: "mem".into(),
            width: 5000,
            n_classes: if classes { 12 } else { 5000 },
            rows,
            skipped_lines: 0,
            notes: vec![],
        }
    }

    fn write(d: &Dataset, path: &Path, method: Method) {
        let mut f = std::fs::File::create(path).unwrap();
        write_zip(&mut f, &npz_members(d), method).unwrap();
    }

    fn options() -> PackOptions {
        PackOptions {
            block_rows: 1000,
            ..PackOptions::default()
        }
    }

    /// The streamed pack of `path`, or its error, into a fresh name; no output on an error.
    fn streamed(path: &Path, out: &Path) -> Result<PackMeta, DataError> {
        let _ = std::fs::remove_file(out);
        let packed = pack_npz(path, &ReadOptions::default(), "npz", out, options());
        if packed.is_err() {
            assert!(!out.exists());
        }
        packed
    }

    #[test]
    fn streamed_pack_is_the_whole_reads_pack_byte_for_byte() {
        let d = dir("same");
        for (classes, method) in [
            (false, Method::Deflate),
            (true, Method::Deflate),
            (true, Method::Stored),
            (false, Method::Stored),
        ] {
            let data = dataset(30_000, classes);
            let path = d.join("m.npz");
            write(&data, &path, method);
            assert!(
                std::fs::metadata(&path).unwrap().len() > 1 << 20,
                "over several chunks"
            );
            let (a, b) = (d.join("streamed.wbp"), d.join("whole.wbp"));
            let meta = streamed(&path, &a).unwrap();
            let loaded = Loaded {
                dataset: read_npz(&path, &ReadOptions::default()).unwrap(),
                vocabulary: None,
                test: None,
                labels: None,
            };
            let whole = pack(&loaded, "npz", &b, options()).unwrap();
            assert_eq!(meta, whole, "{classes} {method:?}");
            let bytes = std::fs::read(&a).unwrap();
            assert!(bytes == std::fs::read(&b).unwrap(), "{classes} {method:?}");
            // Both are packs: against the plain reader's rows, decoded by the documented layout.
            crate::packed::by_hand::assert_holds(&a, &loaded);
        }
    }

    #[test]
    fn damage_is_refused_naming_the_member() {
        let d = dir("damage");
        let (path, out) = (d.join("m.npz"), d.join("out.wbp"));
        for method in [Method::Stored, Method::Deflate] {
            write(&dataset(5_000, true), &path, method);
            let good = std::fs::read(&path).unwrap();
            // A byte flipped inside each member in turn: the member's name and a byte offset.
            let names = [
                "indices.npy",
                "indptr.npy",
                "data.npy",
                "widebag_target_ids.npy",
            ];
            for name in names {
                let at = good
                    .windows(name.len())
                    .position(|w| w == name.as_bytes())
                    .unwrap();
                let mut bad = good.clone();
                bad[at + name.len() + 300] ^= 0x55;
                std::fs::write(&path, &bad).unwrap();
                let e = streamed(&path, &out).unwrap_err().to_string();
                assert!(
                    e.contains(name) && e.contains("m.npz"),
                    "{method:?} {name}: {e}"
                );
            }
            // Truncated: no central directory.
            std::fs::write(&path, &good[..good.len() * 2 / 3]).unwrap();
            let e = streamed(&path, &out).unwrap_err().to_string();
            assert!(e.contains("truncated"), "{e}");
            std::fs::write(&path, b"").unwrap();
            assert!(matches!(
                streamed(&path, &out),
                Err(DataError::Empty { .. })
            ));
        }
        // Elements out of range: an id past the stored width, a class past the classes.
        let mut data = dataset(200, true);
        data.width = 10;
        write(&data, &path, Method::Deflate);
        let e = streamed(&path, &out).unwrap_err().to_string();
        assert!(
            e.contains("indices.npy") && e.contains("column index"),
            "{e}"
        );
        let mut data = dataset(200, true);
        data.n_classes = 3;
        write(&data, &path, Method::Stored);
        let e = streamed(&path, &out).unwrap_err().to_string();
        assert!(
            e.contains("widebag_target_ids.npy") && e.contains("target class"),
            "{e}"
        );
        // Row pointers that decrease (stored, CRC fixed up: the pointers themselves are wrong).
        let mut members = npz_members(&dataset(50, false));
        let (_, indptr) = members.iter_mut().find(|(n, _)| n == "indptr.npy").unwrap();
        let n = indptr.len();
        indptr[n - 8..n - 4].copy_from_slice(&0i32.to_le_bytes());
        let mut f = std::fs::File::create(&path).unwrap();
        write_zip(&mut f, &members, Method::Stored).unwrap();
        drop(f);
        let e = streamed(&path, &out).unwrap_err().to_string();
        assert!(e.contains("indptr.npy") && e.contains("decrease"), "{e}");
    }
}
