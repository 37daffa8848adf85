//! The `.npz` format: a round trip through the writer and the reader, damage refused naming the
//! member and the byte, and `.npy` headers.

use super::npy::{Dtype, le_bytes, npy_bytes, parse_npy};
use super::read::read_npz;
use super::write::write_npz;
use crate::dataset::{Dataset, RowStore};
use crate::options::ReadOptions;

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
