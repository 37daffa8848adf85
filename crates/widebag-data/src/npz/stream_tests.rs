//! Tests of the streamed `.npz` pack: byte for byte the pack of the file read whole (deflated
//! and stored members, with and without widebag's targets, rows over several read chunks), and
//! corruption, truncation and bad elements refused naming the member, with no output left.

use std::path::PathBuf;

use super::*;
use crate::dataset::{Dataset, RowStore};
use crate::loaded::Loaded;
use crate::npz::zip::{Method, write_zip};
use crate::npz::{npz_members, read_npz};
use crate::packed::write::pack;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-npz-stream-{name}-{}", std::process::id()));
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
