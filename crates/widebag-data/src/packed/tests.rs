//! Packed datasets: the round trip, the byte-identical repack, and every kind of damage refused
//! naming the file and the block.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::layout::{PackMeta, VERSION, is_packed};
use super::read::{PackedFile, Part, read_meta};
use super::write::{PackOptions, pack};
use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::loaded::Loaded;
use crate::vocabulary::Vocabulary;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "widebag-packed-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn loaded(rows: RowStore, test: Option<RowStore>, width: usize, n_classes: usize) -> Loaded {
    Loaded {
        dataset: Dataset {
            source: "mem".into(),
            width,
            n_classes,
            rows,
            skipped_lines: 2,
            notes: vec!["a note".into()],
        },
        vocabulary: Some(Vocabulary::from_words(vec![
            ("a".into(), 3),
            ("b".into(), 1),
        ])),
        test,
        labels: None,
    }
}

fn toy() -> Loaded {
    let mut rows = RowStore::new();
    rows.push(&[0, 3], &[1.0, 1.0], &[1], &[1.0]);
    rows.push(&[], &[], &[0, 2], &[0.5, 2.0]);
    rows.push(&[1, 2, 4], &[0.5, 1.0, 3.0], &[2], &[1.0]);
    rows.push(&[4], &[1.0], &[], &[]);
    rows.push(&[2], &[1.0], &[0], &[1.0]);
    let mut test = RowStore::new();
    for r in 0..5u32 {
        test.push(&[], &[], &[r % 3], &[1.0]);
    }
    loaded(rows, Some(test), 5, 3)
}

fn options(block_rows: u32) -> PackOptions {
    PackOptions {
        block_rows,
        stats_samples: 2,
        ..PackOptions::default()
    }
}

fn packed(name: &str, l: &Loaded, block_rows: u32) -> PathBuf {
    let path = dir().join(name);
    pack(l, "libsvm", &path, options(block_rows)).expect("packs");
    path
}

#[test]
fn a_packed_dataset_loads_as_the_rows_it_was_packed_from() {
    let l = toy();
    let path = packed("toy.wbp", &l, 2);
    assert!(is_packed(&path));
    let file = PackedFile::open(&path).expect("opens");
    assert_eq!(file.meta.blocks.len(), 3);
    let back = file.load().expect("loads");
    assert_eq!(back.dataset.rows, l.dataset.rows);
    assert_eq!(back.test, l.test);
    assert_eq!(
        (
            back.dataset.width,
            back.dataset.n_classes,
            back.dataset.skipped_lines
        ),
        (5, 3, 2)
    );
    assert_eq!(back.dataset.notes, l.dataset.notes);
    assert_eq!(back.vocabulary.expect("kept").id("b"), Some(1));
    // The header's statistics are the in-memory ones.
    let stats = crate::stats::compute(&l.dataset, 2, 0);
    assert_eq!(read_meta(&path).expect("meta").stats, stats);
}

#[test]
fn a_recommenders_bag_is_stored_once() {
    let mut rows = RowStore::new();
    rows.push(&[0, 3], &[1.0, 1.0], &[0, 3], &[1.0, 1.0]);
    rows.push(&[], &[], &[], &[]);
    rows.push(&[1], &[1.0], &[1], &[1.0]);
    rows.push(&[2], &[1.0], &[1], &[1.0]);
    let l = loaded(rows, None, 5, 5);
    let path = packed("bag.wbp", &l, 3);
    let file = PackedFile::open(&path).unwrap();
    let flags: Vec<bool> = file.meta.blocks.iter().map(|b| b.targets_are_ids).collect();
    assert_eq!(flags, [true, false]);
    assert_eq!(file.meta.blocks[0].bytes, 4 * (3 + 3));
    assert_eq!(file.load().unwrap().dataset.rows, l.dataset.rows);
}

/// The toy's rows as written above, literally: ids, values, targets, weights.
fn toy_rows() -> Vec<super::by_hand::Row> {
    vec![
        (vec![0, 3], vec![1.0, 1.0], vec![1], vec![1.0]),
        (vec![], vec![], vec![0, 2], vec![0.5, 2.0]),
        (vec![1, 2, 4], vec![0.5, 1.0, 3.0], vec![2], vec![1.0]),
        (vec![4], vec![1.0], vec![], vec![]),
        (vec![2], vec![1.0], vec![0], vec![1.0]),
    ]
}

#[test]
fn the_file_holds_the_rows_in_its_documented_layout() {
    // Decoded by hand from the layout's documentation, not by the reader: each block's row
    // ends, ids, values only where one is not 1, target ends, targets, weights only where one
    // is not 1; a bag's targets left out.
    use super::by_hand::{Row, assert_rows, decode};
    let l = toy();
    for block_rows in [1, 2, 3, 5, 8] {
        let file = decode(&packed(&format!("layout-{block_rows}.wbp"), &l, block_rows));
        assert_rows(
            &format!("toy, {block_rows}-row blocks"),
            &file.rows,
            &toy_rows(),
        );
        let test: Vec<Row> = (0..5)
            .map(|r| (vec![], vec![], vec![r % 3], vec![1.0]))
            .collect();
        assert_rows("toy held out", file.test.as_ref().expect("held out"), &test);
        let blocks = file.meta["blocks"].as_array().unwrap().len();
        assert_eq!(blocks, 5usize.div_ceil(block_rows as usize));
    }
    // Two-row blocks: rows 0-1 store weights (0.5, 2.0) but no values, rows 2-3 values but no
    // weights, row 4 neither; the sections' bytes say so.
    let file = decode(&packed("layout-flags.wbp", &l, 2));
    let flags: Vec<(bool, bool, u64)> = file.meta["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let f = |k: &str| b[k].as_bool().unwrap();
            (f("values"), f("weights"), b["bytes"].as_u64().unwrap())
        })
        .collect();
    // Words: 2 ends + ids + values? + 2 target ends + targets + weights?.
    assert_eq!(
        flags,
        [
            (false, true, 4 * (2 + 2 + 2 + 3 + 3)),
            (true, false, 4 * (2 + 4 + 4 + 2 + 1)),
            (false, false, 4 * (1 + 1 + 1 + 1)),
        ]
    );
    // A recommender's bag: its targets are its ids, stored once.
    let mut rows = RowStore::new();
    rows.push(&[0, 3], &[1.0, 1.0], &[0, 3], &[1.0, 1.0]);
    rows.push(&[2], &[1.0], &[2], &[1.0]);
    let file = decode(&packed("layout-bag.wbp", &loaded(rows, None, 5, 5), 2));
    let want: Vec<Row> = vec![
        (vec![0, 3], vec![1.0, 1.0], vec![0, 3], vec![1.0, 1.0]),
        (vec![2], vec![1.0], vec![2], vec![1.0]),
    ];
    assert_rows("bag", &file.rows, &want);
    assert_eq!(file.meta["blocks"][0]["bytes"], 4 * (2 + 3));
    assert!(file.test.is_none());
}

#[test]
fn packing_twice_gives_the_same_bytes() {
    let l = toy();
    let (a, b) = (packed("a.wbp", &l, 3), packed("b.wbp", &l, 3));
    assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
}

#[test]
fn an_ordinary_file_is_not_packed() {
    let p = dir().join("plain.svm");
    std::fs::write(&p, "1 1:1\n").unwrap();
    assert!(!is_packed(&p));
    assert!(!is_packed(&dir()));
    assert!(!is_packed(Path::new("/nonexistent/widebag")));
}

fn refusal(path: &Path) -> String {
    match PackedFile::open(path).and_then(|f| f.load()) {
        Err(e @ DataError::Archive { .. }) => e.to_string(),
        Err(e) => panic!("not an archive error: {e}"),
        Ok(_) => panic!("damaged file read"),
    }
}

#[test]
fn a_flipped_byte_in_any_block_is_refused_naming_the_block() {
    let l = toy();
    let path = packed("flip.wbp", &l, 2);
    let meta = read_meta(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let all: Vec<_> = meta
        .blocks
        .iter()
        .chain(meta.test_blocks.iter().flatten())
        .collect();
    for (i, b) in all.iter().enumerate() {
        for at in [b.offset, b.offset + b.bytes - 1] {
            let mut damaged = bytes.clone();
            damaged[at as usize] ^= 0x10;
            let p = dir().join(format!("flip-{i}-{at}.wbp"));
            std::fs::write(&p, &damaged).unwrap();
            let e = refusal(&p);
            assert!(e.contains(&format!("block {i}")), "{e}");
            assert!(e.contains(&p.display().to_string()), "{e}");
            // The header alone still reads: the damage is found at the block's first read.
            assert!(read_meta(&p).is_ok());
            let f = PackedFile::open(&p).unwrap();
            let part = if i < meta.blocks.len() {
                Part::Rows
            } else {
                Part::Test
            };
            let k = if i < meta.blocks.len() {
                i
            } else {
                i - meta.blocks.len()
            };
            assert!(f.block(part, k).is_err());
        }
    }
}

#[test]
fn row_ends_that_fall_or_overrun_are_refused_though_the_checksum_matches() {
    let l = toy();
    let path = packed("ends.wbp", &l, 2);
    let bytes = std::fs::read(&path).unwrap();
    let meta = read_meta(&path).unwrap();
    let b = &meta.blocks[0];
    assert!(
        b.rows >= 2 && b.nnz > 0,
        "the toy's first block has rows to damage"
    );
    let at = b.offset as usize;
    // The first row's end past the second's (falling), then the last row's end past the ids.
    let second = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
    let last = at + 4 * (b.rows as usize - 1);
    for (name, word_at, value) in [
        ("fall", at, second + 1),
        ("overrun", last, b.nnz as u32 + 1),
    ] {
        let mut damaged = bytes.clone();
        damaged[word_at..word_at + 4].copy_from_slice(&value.to_le_bytes());
        let mut m = meta.clone();
        let body = &damaged[at..at + b.bytes as usize];
        m.blocks[0].crc32 = crc32fast::hash(body);
        let json = serde_json::to_vec(&m).unwrap();
        let offset = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
        damaged.truncate(offset);
        damaged.extend_from_slice(&json);
        damaged[24..28].copy_from_slice(&(json.len() as u32).to_le_bytes());
        damaged[28..32].copy_from_slice(&crc32fast::hash(&json).to_le_bytes());
        let p = dir().join(format!("ends-{name}.wbp"));
        std::fs::write(&p, &damaged).unwrap();
        let e = refusal(&p);
        assert!(
            e.contains("block 0") && e.contains("row ends"),
            "{name}: {e}"
        );
        let f = PackedFile::open(&p).unwrap();
        assert!(f.gather(Part::Rows, &[0]).is_err(), "{name}");
    }
}

#[test]
fn truncation_a_wrong_version_and_a_disagreeing_header_are_refused() {
    let l = toy();
    let path = packed("whole.wbp", &l, 2);
    let bytes = std::fs::read(&path).unwrap();
    let write = |name: &str, b: &[u8]| {
        let p = dir().join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    for cut in [0, 7, 31, 40, bytes.len() - 1] {
        let e = refusal(&write(&format!("cut-{cut}.wbp"), &bytes[..cut]));
        assert!(e.contains("prelude") || e.contains("truncated"), "{e}");
    }
    let mut next = bytes.clone();
    next[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
    let e = refusal(&write("next.wbp", &next));
    assert!(e.contains(&format!("version {}", VERSION + 1)), "{e}");
    let mut meta_flip = bytes.clone();
    let n = meta_flip.len();
    meta_flip[n - 3] ^= 1;
    assert!(refusal(&write("meta.wbp", &meta_flip)).contains("CRC-32"));
    // A header whose checksum matches but whose counts disagree with the body.
    let mut meta = read_meta(&path).unwrap();
    meta.n_rows += 1;
    let json = serde_json::to_vec(&meta).unwrap();
    let offset = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let mut liar = bytes[..offset].to_vec();
    liar.extend_from_slice(&json);
    liar[24..28].copy_from_slice(&(json.len() as u32).to_le_bytes());
    liar[28..32].copy_from_slice(&crc32fast::hash(&json).to_le_bytes());
    let e = refusal(&write("liar.wbp", &liar));
    assert!(e.contains("the totals say 6"), "{e}");
}

#[test]
fn the_stored_frequencies_are_the_rows_and_a_damaged_section_is_refused() {
    let l = toy();
    let path = packed("freq.wbp", &l, 2);
    let file = PackedFile::open(&path).unwrap();
    let want = crate::frequencies::of_store(&l.dataset.rows, 5, 3);
    assert_eq!(file.frequencies().unwrap(), want);
    // Without the section (a claimed width far beyond the data), the blocks are counted.
    let mut wide = l.clone();
    wide.dataset.width = 1 << 21;
    let p = packed("wide.wbp", &wide, 2);
    let file = PackedFile::open(&p).unwrap();
    assert!(file.meta.frequencies.is_none());
    let (ids, classes) = file.frequencies().unwrap();
    assert_eq!((&ids[..5], &classes[..]), (&want.0[..], &want.1[..]));
    let section = read_meta(&path).unwrap().frequencies.unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[section.offset as usize + 3] ^= 4;
    let p = dir().join("freq-flip.wbp");
    std::fs::write(&p, &bytes).unwrap();
    let e = PackedFile::open(&p)
        .unwrap()
        .frequencies()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("frequencies") && e.contains("freq-flip.wbp"),
        "{e}"
    );
}

#[test]
fn a_failed_pack_leaves_the_old_file_and_no_temporary() {
    let l = toy();
    let path = packed("keep.wbp", &l, 2);
    let before = std::fs::read(&path).unwrap();
    assert!(pack(&l, "libsvm", &path, options(0)).is_err());
    let missing = dir().join("no-such-dir").join("x.wbp");
    assert!(pack(&l, "libsvm", &missing, options(2)).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let stray = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().contains(".tmp-"));
    assert!(!stray);
}

fn arb_rows() -> impl Strategy<Value = RowStore> {
    let row = (
        prop::collection::vec((0u32..50, prop::bool::ANY), 0..6),
        prop::collection::vec((0u32..7, prop::bool::ANY), 0..3),
    );
    prop::collection::vec(row, 1..40).prop_map(|rows| {
        let mut s = RowStore::new();
        for (ids, targets) in rows {
            let (i, v): (Vec<u32>, Vec<f32>) = ids
                .into_iter()
                .map(|(id, one)| (id, if one { 1.0 } else { 0.25 }))
                .unzip();
            let (t, w): (Vec<u32>, Vec<f32>) = targets
                .into_iter()
                .map(|(c, one)| (c, if one { 1.0 } else { 3.0 }))
                .unzip();
            s.push(&i, &v, &t, &w);
        }
        s
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn any_rows_round_trip_at_any_block_size(rows in arb_rows(), block_rows in 1u32..9) {
        let l = loaded(rows, None, 50, 7);
        let path = dir().join(format!("prop-{block_rows}.wbp"));
        pack(&l, "libsvm", &path, options(block_rows)).unwrap();
        let back = PackedFile::open(&path).unwrap().load().unwrap();
        prop_assert_eq!(&back.dataset.rows, &l.dataset.rows);
        // And by the documented layout, not the reader.
        super::by_hand::assert_holds(&path, &l);
    }
}

/// `l` packed streamed: its rows pushed in chunks of `chunk` rows (1: one at a time), then its
/// held-out rows, as [`super::stream::pack_rows`] takes them.
fn streamed(l: &Loaded, path: &Path, block_rows: u32, chunk: usize) -> PackMeta {
    use super::stream::{Extent, StreamHeader, pack_rows};
    let d = &l.dataset;
    let header = StreamHeader {
        variant: "libsvm".into(),
        width: d.width,
        n_classes: d.n_classes,
        extent: Extent::Declared,
        notes: d.notes.clone(),
        vocabulary: l.vocabulary.as_ref().map(|v| v.words.clone()),
        labels: None,
    };
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    fn push_all(
        sink: &mut super::stream::RowSink,
        store: &RowStore,
        chunk: usize,
    ) -> std::io::Result<()> {
        for start in (0..store.n_rows()).step_by(chunk) {
            let mut part = RowStore::new();
            for r in start..(start + chunk).min(store.n_rows()) {
                let row = super::write::Row::of(store, r);
                part.push(row.ids, row.values, row.targets, row.weights);
            }
            match chunk {
                1 => sink.push(super::write::Row::of(&part, 0))?,
                _ => sink.push_rows(&part)?,
            }
        }
        Ok(())
    }
    pack_rows(header, path, options(block_rows), |sink| {
        push_all(sink, &d.rows, chunk).map_err(io)?;
        if let Some(test) = &l.test {
            sink.begin_held_out().map_err(io)?;
            push_all(sink, test, chunk).map_err(io)?;
        }
        (0..d.skipped_lines).for_each(|_| sink.skip_line());
        Ok(())
    })
    .expect("packs streamed")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn rows_streamed_one_at_a_time_or_in_chunks_pack_to_the_same_bytes(
        rows in arb_rows(),
        test in arb_rows(),
        block_rows in 1u32..9,
        chunk in 1usize..12,
    ) {
        let l = loaded(rows, Some(test), 50, 7);
        let whole = dir().join(format!("whole-{block_rows}-{chunk}.wbp"));
        let meta = pack(&l, "libsvm", &whole, options(block_rows)).unwrap();
        let path = dir().join(format!("streamed-{block_rows}-{chunk}.wbp"));
        prop_assert_eq!(streamed(&l, &path, block_rows, chunk), meta);
        prop_assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&whole).unwrap());
        // Both are packs: against the rows themselves, decoded by the documented layout.
        super::by_hand::assert_holds(&path, &l);
    }
}

#[test]
fn a_streamed_pack_refuses_rows_beyond_its_shape_and_keeps_the_rows_own_error() {
    use super::stream::{Extent, StreamHeader, pack_rows};
    let header = |extent| StreamHeader {
        variant: "t".into(),
        width: 4,
        n_classes: 2,
        extent,
        notes: Vec::new(),
        vocabulary: None,
        labels: None,
    };
    let path = dir().join("beyond.wbp");
    let mut rows = RowStore::new();
    rows.push(&[0, 1], &[1.0, 1.0], &[1], &[1.0]);
    rows.push(&[3, 9], &[1.0, 1.0], &[0], &[1.0]);
    // Beyond the declared shape: the row is named, whether pushed alone or in a chunk.
    for chunked in [false, true] {
        let e = pack_rows(header(Extent::Declared), &path, options(4), |sink| {
            let pushed = match chunked {
                true => sink.push_rows(&rows),
                false => (0..2).try_for_each(|r| sink.push(super::write::Row::of(&rows, r))),
            };
            pushed.map_err(|source| DataError::Io {
                path: path.clone(),
                source,
            })
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("row 1: id or class 9 beyond"), "{e}");
        assert!(!path.exists());
    }
    // Grown to the rows: the shape is theirs; the held-out rows begin once.
    let meta = pack_rows(header(Extent::Grows), &path, options(1), |sink| {
        let io = |source| DataError::Io {
            path: path.clone(),
            source,
        };
        sink.push_rows(&rows).map_err(io)?;
        sink.begin_held_out().map_err(io)?;
        assert!(sink.begin_held_out().is_err(), "only once");
        Ok(())
    })
    .unwrap();
    assert_eq!((meta.width, meta.n_classes, meta.blocks.len()), (10, 2, 2));
    // The rows' own error comes back as it is, with no output left.
    let _ = std::fs::remove_file(&path);
    let e = pack_rows(header(Extent::Grows), &path, options(1), |sink| {
        sink.push_rows(&rows).expect("taken");
        Err(DataError::Empty {
            path: "rows.txt".into(),
        })
    })
    .unwrap_err();
    assert!(matches!(e, DataError::Empty { .. }), "{e}");
    assert!(!path.exists());
}
