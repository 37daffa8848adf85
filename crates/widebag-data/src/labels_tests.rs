//! Tests of file-name labels: class ids from a character range, held-out documents in the
//! training numbering, the statistics key and the `labels.tsv` sidecar.

use std::path::{Path, PathBuf};

use super::*;
use crate::held_out::load_held_out;
use crate::labels::{LABELS_SUFFIX, LabelOptions};
use crate::open::load;
use crate::sidecar::save_sidecar;
use crate::source::Source;
use widebag_kinds::{Format, TextMode, TokenFormat};

/// A fresh directory for one test, named with the process id, holding `files` (name, text).
fn tree(test: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-labels-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for (name, text) in files {
        let p = d.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    d
}

/// A tagged-text source over `path` labelled by the characters `start..end` of file names.
fn brown_like(path: &Path, start: usize, end: usize) -> Source {
    let mut s = Source::new(path, Format::Text);
    s.text.tokens = TokenFormat::Tagged;
    s.label = LabelOptions::file_name(start, end);
    s
}

fn classes(d: &Dataset) -> Vec<u32> {
    (0..d.n_rows())
        .map(|r| {
            let (t, w) = d.rows.row_targets(r);
            assert_eq!((t.len(), w), (1, &[1.0][..]), "row {r}");
            t[0]
        })
        .collect()
}

#[test]
fn labels_from_a_character_range_are_sorted_classes() {
    let d = tree(
        "range",
        &[
            ("cr01", "The/at cat/nn"),
            ("ca01", "The/at dog/nn the/at"),
            ("sub/cb07", "A/at cat/nn"),
            ("ca02", "./."),
            (".hidden", "x/nn"),
        ],
    );
    let loaded = load(&brown_like(&d, 1, 2)).unwrap();
    // Path order: ca01, ca02, cr01, sub/cb07; classes a=0, b=1, r=2.
    assert_eq!(
        loaded.labels,
        Some(vec!["a".into(), "b".into(), "r".into()])
    );
    let data = &loaded.dataset;
    assert_eq!(classes(data), vec![0, 0, 2, 1]);
    assert_eq!((data.n_classes, data.width), (3, 4));
    let v = loaded.vocabulary.as_ref().unwrap();
    let (the, dog) = (v.id("the").unwrap(), v.id("dog").unwrap());
    // The input is still the document's bag of words with counts; an empty document stays.
    let mut bag = vec![(the, 2.0), (dog, 1.0)];
    bag.sort_unstable_by_key(|&(i, _)| i);
    let (ids, values) = data.rows.row(0);
    assert_eq!(
        ids.iter()
            .copied()
            .zip(values.iter().copied())
            .collect::<Vec<_>>(),
        bag
    );
    assert!(data.rows.row(1).0.is_empty());
    let note = data.notes.last().unwrap();
    assert_eq!(
        note,
        "3 classes from file names (characters 1..2): a 2, b 1, r 1"
    );
    // Batches carry single-class targets.
    let batch = data.batch(&[0, 2]).unwrap();
    let t = batch.targets();
    assert!(t.single_class);
    assert_eq!((t.n_classes, &t.classes[..]), (3, &[0, 2][..]));
    // The whole name: one class per file here.
    let whole = load(&brown_like(&d, 0, 0)).unwrap();
    let names = whole.labels.unwrap();
    assert_eq!(names, vec!["ca01", "ca02", "cb07", "cr01"]);
    assert_eq!(classes(&whole.dataset), vec![0, 1, 3, 2]);
}

#[test]
fn labels_tsv_counts_documents_per_class() {
    let d = tree("tsv", &[("ca01", "a/x"), ("ca02", "b/x"), ("cn01", "c/x")]);
    let loaded = load(&brown_like(&d, 1, 2)).unwrap();
    assert_eq!(loaded.labels_tsv().unwrap(), "a\t2\nn\t1\n");
    let p = save_sidecar(&d, LABELS_SUFFIX, &loaded.labels_tsv().unwrap()).unwrap();
    assert!(
        p.to_string_lossy().ends_with(".labels.tsv"),
        "{}",
        p.display()
    );
    let bags = load(&Source::new(&d, Format::Text)).unwrap();
    assert_eq!((&bags.labels, bags.labels_tsv()), (&None, None));
}

#[test]
fn held_out_uses_training_ids_and_drops_unknown_labels() {
    let train = tree(
        "held-train",
        &[("ca01", "cat/nn"), ("cb01", "dog/nn"), ("cc01", "cow/nn")],
    );
    let test = tree(
        "held-test",
        &[
            ("cc09", "cow/nn cat/nn"),
            ("cz01", "cat/nn"),
            ("cz02", "dog/nn"),
            ("ca09", "zebra/nn"),
        ],
    );
    let source = brown_like(&train, 1, 2);
    let loaded = load(&source).unwrap();
    let h = load_held_out(&source, &test, &loaded).unwrap();
    // ca09 (no known word) stays with its class; cz01 and cz02 ("z") are dropped.
    assert_eq!(classes(&h.dataset), vec![0, 2]);
    assert!(h.dataset.rows.row(0).0.is_empty());
    assert_eq!((h.dataset.width, h.dataset.n_classes), (3, 3));
    assert_eq!(
        (h.dropped_ids, h.dropped_targets, h.dropped_rows),
        (1, 2, 2)
    );
    assert!(
        h.notes
            .contains(&"2 documents with a label unknown to training dropped".to_string()),
        "{:?}",
        h.notes
    );
    // The training directory read as held-out gives the training rows.
    let again = load_held_out(&source, &train, &loaded).unwrap();
    assert_eq!(again.dataset.rows, loaded.dataset.rows);
    let mut bare = loaded.clone();
    bare.labels = None;
    let e = load_held_out(&source, &test, &bare).unwrap_err();
    assert!(e.to_string().contains("data.label"), "{e}");
}

#[test]
fn bad_settings_and_short_names_name_the_key_and_file() {
    let d = tree("bad", &[("ca01", "a/x"), ("README", "x")]);
    let e = load(&brown_like(&d, 1, 8)).unwrap_err().to_string();
    assert!(
        e.contains("data.label_chars") && e.contains("README"),
        "{e}"
    );
    let e = load(&brown_like(&d, 2, 1)).unwrap_err().to_string();
    assert!(
        e.contains("data.label_chars") && e.contains("[2, 1]"),
        "{e}"
    );
    let mut cbow = brown_like(&d, 1, 2);
    cbow.text.mode = TextMode::Cbow;
    let e = load(&cbow).unwrap_err().to_string();
    assert!(e.contains("data.label") && e.contains("bow"), "{e}");
    let e = load(&brown_like(&d.join("ca01"), 1, 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("data.label") && e.contains("is a file"), "{e}");
    let mut dictd = brown_like(&d, 1, 2);
    dictd.format = Format::Dictd;
    let e = load(&dictd).unwrap_err().to_string();
    assert!(e.contains("data.label") && e.contains("dictd"), "{e}");
}

#[test]
fn the_statistics_key_tells_label_modes_apart() {
    let bag = Source::new("corpus", Format::Text);
    assert_eq!(bag.variant(), "text-bow-min1-max0");
    let one = brown_like(Path::new("corpus"), 1, 2);
    let whole = brown_like(Path::new("corpus"), 0, 0);
    assert_eq!(one.variant(), "text-bow-min1-max0-label-name1-2");
    assert_ne!(one.variant(), whole.variant());
    assert_ne!(bag.variant(), whole.variant());
}
