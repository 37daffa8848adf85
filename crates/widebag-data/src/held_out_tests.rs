//! Tests of held-out reading: each format against a small training file, drops counted, errors
//! naming the held-out file.

use std::path::{Path, PathBuf};

use super::*;
use crate::npz::write::write_npz;
use crate::open::load;
use crate::options::TextOptions;
use widebag_kinds::{TextMode, TokenFormat};

/// A fresh directory for one test, named with the process id.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-held-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Loads `train` and reads `test` against it.
fn held(source: &Source, test: &Path) -> Result<HeldOut, DataError> {
    load_held_out(source, test, &load(source).unwrap())
}

fn rows(d: &Dataset) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..d.n_rows())
        .map(|r| (d.rows.row(r).0.to_vec(), d.rows.row_targets(r).0.to_vec()))
        .collect()
}

#[test]
fn libsvm_uses_the_training_base_width_and_classes() {
    let d = dir("svm0");
    // Training has id 0, so it is 0-based; the held-out file alone would be detected 1-based.
    let train = write(&d.join("train.svm"), "0 0:1 2:1\n1 1:1\n2 2:1\n");
    let test = write(
        &d.join("test.svm"),
        "1 1:1 2:0.5 3:1\n5 2:1\n0,7 1:2 # note\n 1:1\n",
    );
    let h = held(&Source::new(&train, Format::Libsvm), &test).unwrap();
    assert_eq!((h.dataset.width, h.dataset.n_classes), (3, 3));
    assert_eq!(h.dataset.source, test);
    assert_eq!(
        rows(&h.dataset),
        vec![(vec![1, 2], vec![1]), (vec![1], vec![0])]
    );
    assert_eq!(h.dataset.rows.row(0).1, &[1.0, 0.5]);
    assert_eq!(
        (h.dropped_ids, h.dropped_targets, h.dropped_rows),
        (1, 2, 2)
    );
    assert!(h.seen.is_none());
    assert_eq!(h.dataset.notes, vec!["0-based ids (the training file's)"]);
    assert!(
        h.notes.iter().any(|n| n.contains("1 ids beyond")),
        "{:?}",
        h.notes
    );
}

#[test]
fn libsvm_one_based_training_rebases_and_locates_id_zero() {
    let d = dir("svm1");
    let train = write(&d.join("train.svm"), "0 1:1 3:1\n1 2:1\n");
    let test = write(&d.join("test.svm"), "1 3:1 4:1\n0 1:1\n");
    let mut source = Source::new(&train, Format::Libsvm);
    let h = held(&source, &test).unwrap();
    assert_eq!(
        rows(&h.dataset),
        vec![(vec![2], vec![1]), (vec![0], vec![0])]
    );
    assert_eq!(h.dropped_ids, 1);
    write(&test, "1 3:1\n0 0:1 2:1\n");
    let e = held(&source, &test).unwrap_err().to_string();
    assert!(e.contains("test.svm:2:3") && e.contains("1-based"), "{e}");
    source.read.skip_bad_lines = true;
    let h = held(&source, &test).unwrap();
    assert_eq!((h.dataset.n_rows(), h.dataset.skipped_lines), (1, 1));
    // An explicit base applies to both files.
    source.read.zero_based = Some(true);
    let h = held(&source, &test).unwrap();
    assert_eq!(rows(&h.dataset)[1], (vec![0, 2], vec![0]));
    assert_eq!(h.dataset.notes, vec!["0-based ids (set)"]);
}

#[test]
fn libsvm_errors_name_the_held_out_file() {
    let d = dir("svme");
    let train = write(&d.join("train.svm"), "0 1:1\n");
    let source = Source::new(&train, Format::Libsvm);
    let empty = write(&d.join("empty.svm"), "");
    let e = held(&source, &empty).unwrap_err().to_string();
    assert!(e.contains("empty.svm") && e.contains("no rows"), "{e}");
    let bad = write(&d.join("bad.svm"), "0 1:1\n0 1:x\n");
    let e = held(&source, &bad).unwrap_err().to_string();
    assert!(e.contains("bad.svm:2:5"), "{e}");
    let e = held(&source, &d.join("missing.svm"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.svm"), "{e}");
    // A training dataset with no base note, and no setting, cannot fix the base.
    let mut loaded = load(&source).unwrap();
    loaded.dataset.notes.clear();
    let e = load_held_out(&source, &bad, &loaded)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("data.zero_based") && e.contains("train.svm"),
        "{e}"
    );
}

fn dataset(width: usize, n_classes: usize, rows: &[(&[u32], &[u32])]) -> Dataset {
    let mut store = RowStore::new();
    for (ids, targets) in rows {
        let (ones, weights) = (vec![1.0; ids.len()], vec![1.0; targets.len()]);
        store.push(ids, &ones, targets, &weights);
    }
    Dataset {
        source: "mem".into(),
        width,
        n_classes,
        rows: store,
        skipped_lines: 0,
        notes: vec![],
    }
}

#[test]
fn npz_keeps_the_training_width_and_classes() {
    let d = dir("npz");
    let train = d.join("train.npz");
    write_npz(&dataset(4, 3, &[(&[0, 3], &[2]), (&[1], &[0])]), &train).unwrap();
    let test = d.join("test.npz");
    let test_rows: &[(&[u32], &[u32])] = &[(&[0, 5], &[1]), (&[1], &[4]), (&[2], &[0, 3])];
    write_npz(&dataset(6, 5, test_rows), &test).unwrap();
    let h = held(&Source::new(&train, Format::Npz), &test).unwrap();
    assert_eq!((h.dataset.width, h.dataset.n_classes), (4, 3));
    assert_eq!(
        rows(&h.dataset),
        vec![(vec![0], vec![1]), (vec![2], vec![0])]
    );
    assert_eq!(
        (h.dropped_ids, h.dropped_targets, h.dropped_rows),
        (1, 2, 1)
    );
    std::fs::write(&test, b"PK\x03\x04 not a zip").unwrap();
    let e = held(&Source::new(&train, Format::Npz), &test).unwrap_err();
    assert!(e.to_string().contains("test.npz"), "{e}");
}

#[test]
fn lightgcn_rows_are_users_with_held_out_items() {
    let d = dir("lgcn");
    let train = write(&d.join("train.txt"), "0 1 2\n1 3\n2 0\n");
    // User 0: item 9 is past the width 4; user 1: only unknown items; user 2: no item;
    // user 3 has no line; user 5 is past the training users.
    let test = write(&d.join("test.txt"), "0 3 9\n1 7\n2\n5 1\n0 3 0\n");
    let h = held(&Source::new(&train, Format::Lightgcn), &test).unwrap();
    assert_eq!((h.dataset.width, h.dataset.n_classes), (4, 4));
    assert_eq!(
        rows(&h.dataset),
        vec![(vec![1, 2], vec![0, 3]), (vec![], vec![1])]
    );
    assert_eq!(h.dataset.rows.row(0).1, &[1.0, 1.0]);
    let seen = h.seen.as_ref().unwrap();
    assert_eq!(seen.n_rows(), 2);
    assert_eq!(seen.row(0).0, &[1, 2]);
    assert_eq!(seen.row(1).0, &[] as &[u32]);
    assert_eq!(
        (h.dropped_ids, h.dropped_targets, h.dropped_rows),
        (0, 2, 1)
    );
    assert!(
        h.notes.iter().any(|n| n.contains("2 of 3 training users")),
        "{:?}",
        h.notes
    );
    assert!(
        h.notes
            .iter()
            .any(|n| n.contains("1 held-out users are past"))
    );
    write(&test, "0 3\n1 x\n");
    let e = held(&Source::new(&train, Format::Lightgcn), &test).unwrap_err();
    assert!(e.to_string().contains("test.txt:2:3"), "{e}");
}

fn text_source(path: &Path, mode: TextMode) -> Source {
    let mut s = Source::new(path, Format::Text);
    s.text = TextOptions {
        mode,
        window: 1,
        ..TextOptions::default()
    };
    s
}

#[test]
fn text_bow_uses_the_training_vocabulary() {
    let d = dir("bow");
    let train = write(&d.join("train.txt"), "a b c\nb a\n");
    let source = text_source(&train, TextMode::Bow);
    let loaded = load(&source).unwrap();
    let v = loaded.vocabulary.as_ref().unwrap();
    let test = write(&d.join("test.txt"), "A z, z b!\nq\n\nc c\n");
    let h = load_held_out(&source, &test, &loaded).unwrap();
    let (a, b, c) = (v.id("a").unwrap(), v.id("b").unwrap(), v.id("c").unwrap());
    assert_eq!(
        rows(&h.dataset),
        vec![(vec![a, b], vec![a, b]), (vec![c], vec![c])]
    );
    assert_eq!(h.dataset.rows.row_targets(1).1, &[2.0]);
    assert_eq!((h.dataset.width, h.dataset.n_classes), (3, 3));
    assert_eq!(
        (h.dropped_ids, h.dropped_targets, h.dropped_rows),
        (3, 3, 2)
    );
    assert!(
        h.notes
            .contains(&"3 unknown word tokens dropped".to_string())
    );
    // The training file itself read as held-out gives the training rows.
    let again = load_held_out(&source, &train, &loaded).unwrap();
    assert_eq!(again.dataset.rows, loaded.dataset.rows);
    assert_eq!((again.dropped_ids, again.dropped_rows), (0, 0));
}

#[test]
fn text_tree_of_tagged_files_and_missing_vocabulary() {
    let d = dir("tree");
    for (name, text) in [
        ("train/ca01", "The/at cat/nn sat/vbd"),
        ("test/cb01", "The/at dog/nn"),
    ] {
        std::fs::create_dir_all(d.join(name).parent().unwrap()).unwrap();
        write(&d.join(name), text);
    }
    let mut source = text_source(&d.join("train"), TextMode::Bow);
    source.text.tokens = TokenFormat::Tagged;
    let loaded = load(&source).unwrap();
    let h = load_held_out(&source, &d.join("test"), &loaded).unwrap();
    let the = loaded.vocabulary.as_ref().unwrap().id("the").unwrap();
    assert_eq!(rows(&h.dataset), vec![(vec![the], vec![the])]);
    assert_eq!(h.dropped_ids, 1); // "dog"; the tags were never words
    let mut bare = loaded.clone();
    bare.vocabulary = None;
    let e = load_held_out(&source, &d.join("test"), &bare).unwrap_err();
    assert!(e.to_string().contains("no vocabulary"), "{e}");
    let e = load_held_out(&source, &d.join("absent"), &loaded).unwrap_err();
    assert!(e.to_string().contains("absent"), "{e}");
}

#[test]
fn text_cbow_windows_span_known_words() {
    let d = dir("cbow");
    let train = write(&d.join("train.txt"), "a b c\nb a\n");
    let source = text_source(&train, TextMode::Cbow);
    let loaded = load(&source).unwrap();
    let test = write(&d.join("test.txt"), "a z b c\nq\n");
    let h = load_held_out(&source, &test, &loaded).unwrap();
    // a=0, b=1, c=2; "z" and "q" are unknown, so the windows run over "a b c".
    assert_eq!(
        rows(&h.dataset),
        vec![
            (vec![1], vec![0]),
            (vec![0, 2], vec![1]),
            (vec![1], vec![2])
        ]
    );
    assert_eq!(
        (h.dropped_ids, h.dropped_targets, h.dropped_rows),
        (2, 2, 0)
    );
    let again = load_held_out(&source, &train, &loaded).unwrap();
    assert_eq!(again.dataset.rows, loaded.dataset.rows);
}

/// A dictd database `NAME.index` + `NAME.dict` of `entries`, one headword per entry.
fn dictd_db(dir: &Path, name: &str, entries: &[&str]) -> PathBuf {
    let mut text = String::new();
    let mut index = String::new();
    let digits = |mut n: usize| {
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = Vec::new();
        loop {
            s.insert(0, B64[n % 64]);
            n /= 64;
            if n == 0 {
                break;
            }
        }
        String::from_utf8(s).unwrap()
    };
    for e in entries {
        let head = e.split_whitespace().next().unwrap();
        index.push_str(&format!(
            "{head}\t{}\t{}\n",
            digits(text.len()),
            digits(e.len())
        ));
        text.push_str(e);
    }
    write(&dir.join(format!("{name}.dict")), &text);
    write(&dir.join(format!("{name}.index")), &index)
}

#[test]
fn dictd_held_out_is_another_database() {
    let d = dir("dictd");
    let train = dictd_db(
        &d,
        "train",
        &["cat\n a small animal\n", "dog\n an animal\n"],
    );
    let test = dictd_db(&d, "test", &["cow\n a large animal\n", "zebu\n none\n"]);
    let source = Source::new(d.join("train"), Format::Dictd);
    let loaded = load(&source).unwrap();
    assert_eq!(loaded.dataset.n_rows(), 2);
    let h = load_held_out(&source, &test, &loaded).unwrap();
    let v = loaded.vocabulary.as_ref().unwrap();
    let (a, animal) = (v.id("a").unwrap(), v.id("animal").unwrap());
    let mut bag = vec![a, animal];
    bag.sort_unstable();
    assert_eq!(rows(&h.dataset), vec![(bag.clone(), bag)]);
    // "cow", "large" in the first entry; "zebu", "none" in the second, which has no known word.
    assert_eq!((h.dropped_ids, h.dropped_rows), (4, 1));
    let e = load_held_out(&source, &d.join("nothing"), &loaded).unwrap_err();
    assert!(e.to_string().contains("nothing"), "{e}");
    assert_eq!(train, d.join("train.index"));
}
