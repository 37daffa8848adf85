//! Tests only: a packed file decoded by hand from the layout its documentation states
//! ([`super::layout`]'s module comment), with none of the writer's or the reader's code — the
//! independent reference the packing tests compare against. Only the prelude's fields, the
//! metadata's JSON (as untyped JSON) and each block's sections are read here.

use std::path::Path;

use crate::dataset::RowStore;

/// One row: its ids, their values, its targets and their weights.
pub(crate) type Row = (Vec<u32>, Vec<f32>, Vec<u32>, Vec<f32>);

/// A packed file's rows and held-out rows, decoded by hand.
#[derive(Debug)]
pub(crate) struct ByHand {
    pub rows: Vec<Row>,
    pub test: Option<Vec<Row>>,
    pub meta: serde_json::Value,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// `n` little-endian u32s from `*at`, moving `*at` past them.
fn words(b: &[u8], at: &mut usize, n: usize) -> Vec<u32> {
    let out = (0..n).map(|k| u32_at(b, *at + 4 * k)).collect();
    *at += 4 * n;
    out
}

/// Row `r`'s slice of `items` by the cumulative `ends`.
fn part<T: Copy>(items: &[T], ends: &[u32], r: usize) -> Vec<T> {
    let start = if r == 0 { 0 } else { ends[r - 1] as usize };
    items[start..ends[r] as usize].to_vec()
}

/// The rows of the blocks `blocks` (the metadata's JSON list) of the file's bytes `b`.
fn decode_blocks(b: &[u8], blocks: &serde_json::Value) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, block) in blocks
        .as_array()
        .expect("a list of blocks")
        .iter()
        .enumerate()
    {
        let field = |k: &str| {
            block[k]
                .as_u64()
                .unwrap_or_else(|| panic!("block {i}: {k}"))
        };
        let flag = |k: &str| {
            block[k]
                .as_bool()
                .unwrap_or_else(|| panic!("block {i}: {k}"))
        };
        let (offset, bytes) = (field("offset") as usize, field("bytes") as usize);
        let (n, nnz, n_targets) = (
            field("rows") as usize,
            field("nnz") as usize,
            field("n_targets") as usize,
        );
        let body = &b[offset..offset + bytes];
        assert_eq!(
            crc32fast::hash(body) as u64,
            field("crc32"),
            "block {i}: CRC-32"
        );
        let mut at = offset;
        let ends = words(b, &mut at, n);
        assert_eq!(
            ends.last().map_or(0, |&e| e as usize),
            nnz,
            "block {i}: ends"
        );
        let ids = words(b, &mut at, nnz);
        let values: Vec<f32> = match flag("values") {
            true => words(b, &mut at, nnz)
                .into_iter()
                .map(f32::from_bits)
                .collect(),
            false => vec![1.0; nnz],
        };
        let (target_ends, targets, weights) = if flag("targets_are_ids") {
            assert!(!flag("weights"), "block {i}: a bag has no weights");
            (ends.clone(), ids.clone(), vec![1.0; nnz])
        } else {
            let target_ends = words(b, &mut at, n);
            let targets = words(b, &mut at, n_targets);
            let weights = match flag("weights") {
                true => words(b, &mut at, n_targets)
                    .into_iter()
                    .map(f32::from_bits)
                    .collect(),
                false => vec![1.0; n_targets],
            };
            (target_ends, targets, weights)
        };
        assert_eq!(at, offset + bytes, "block {i}: its sections fill its bytes");
        for r in 0..n {
            rows.push((
                part(&ids, &ends, r),
                part(&values, &ends, r),
                part(&targets, &target_ends, r),
                part(&weights, &target_ends, r),
            ));
        }
    }
    rows
}

/// Decodes the packed file at `path` by its documented layout.
pub(crate) fn decode(path: &Path) -> ByHand {
    let b = std::fs::read(path).expect("reads the packed file");
    assert_eq!(&b[0..8], b"WIDEBAGP", "the magic");
    assert_eq!(u32_at(&b, 8), 3, "the layout's version");
    assert_eq!(u32_at(&b, 12), 0, "the prelude's zero word");
    let (offset, len) = (u64_at(&b, 16) as usize, u32_at(&b, 24) as usize);
    let json = &b[offset..offset + len];
    assert_eq!(offset + len, b.len(), "the metadata is last");
    assert_eq!(
        crc32fast::hash(json),
        u32_at(&b, 28),
        "the metadata's CRC-32"
    );
    let meta: serde_json::Value = serde_json::from_slice(json).expect("JSON metadata");
    let rows = decode_blocks(&b, &meta["blocks"]);
    assert_eq!(rows.len() as u64, meta["n_rows"].as_u64().unwrap());
    let nnz: usize = rows.iter().map(|r| r.0.len()).sum();
    assert_eq!(nnz as u64, meta["nnz"].as_u64().unwrap());
    let test = match &meta["test_blocks"] {
        serde_json::Value::Null => None,
        blocks => Some(decode_blocks(&b, blocks)),
    };
    ByHand { rows, test, meta }
}

/// The rows of `store`, read row by row through its accessors.
pub(crate) fn rows_of(store: &RowStore) -> Vec<Row> {
    (0..store.n_rows())
        .map(|r| {
            let (ids, values) = store.row(r);
            let (targets, weights) = store.row_targets(r);
            (
                ids.to_vec(),
                values.to_vec(),
                targets.to_vec(),
                weights.to_vec(),
            )
        })
        .collect()
}

/// The file's rows, decoded by hand, are `want`, row by row and value by value (bit for bit).
pub(crate) fn assert_rows(what: &str, got: &[Row], want: &[Row]) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            (&g.0, &g.2),
            (&w.0, &w.2),
            "{what}: row {r}'s ids and targets"
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&g.1), bits(&w.1), "{what}: row {r}'s values");
        assert_eq!(bits(&g.3), bits(&w.3), "{what}: row {r}'s weights");
    }
}

/// The packed file at `path`, decoded by hand, holds `loaded`'s rows and held-out rows (those a
/// plain reader formed from the source), row by row and value by value.
pub(crate) fn assert_holds(path: &Path, loaded: &crate::loaded::Loaded) {
    let what = path.display().to_string();
    let file = decode(path);
    assert_rows(&what, &file.rows, &rows_of(&loaded.dataset.rows));
    match (&file.test, &loaded.test) {
        (Some(got), Some(want)) => assert_rows(&format!("{what} (held out)"), got, &rows_of(want)),
        (None, None) => {}
        (got, want) => panic!(
            "{what}: held-out rows {} in the file, {} read",
            got.is_some(),
            want.is_some()
        ),
    }
    let width = |v: &serde_json::Value| v.as_u64().expect("a number") as usize;
    assert_eq!(width(&file.meta["width"]), loaded.dataset.width, "{what}");
    assert_eq!(
        width(&file.meta["n_classes"]),
        loaded.dataset.n_classes,
        "{what}"
    );
}
