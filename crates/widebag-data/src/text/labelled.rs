//! A directory of documents labelled by their file names ([`crate::labels`]) read whole: the
//! training rows target their class (the sorted distinct labels, numbered from 0); held-out
//! documents get the training class ids (`None`: a label training never saw).

use std::path::Path;

use widebag_kinds::{Format, TextMode};

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::labels::{LabelOptions, class_counts, class_index, classes_note};
use crate::options::TextOptions;
use crate::text::corpus::named_file_documents;
use crate::text::rows::{DocClasses, count_vocabulary, form_rows_as};
use crate::vocabulary::Vocabulary;

/// The documents of the directory `dir` with their labels (cut from their names by `label`), and
/// the files skipped as bad.
fn documents(
    label: &LabelOptions,
    dir: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<String>, Vec<String>, usize), DataError> {
    let (named, skipped) = named_file_documents(dir, skip_bad_lines)?;
    let mut docs = Vec::with_capacity(named.len());
    let mut labels = Vec::with_capacity(named.len());
    for (path, doc) in named {
        labels.push(label.label_of(&path)?);
        docs.push(doc);
    }
    Ok((docs, labels, skipped))
}

/// Reads the training directory `path` (`data.label = "file_name"`): its rows (each
/// document's bag of words as input, its class as target), the vocabulary, and the class names
/// (the sorted distinct labels, class id order).
pub fn read_labelled(
    path: &Path,
    format: Format,
    text_options: &TextOptions,
    label: &LabelOptions,
    skip_bad_lines: bool,
) -> Result<(Dataset, Vocabulary, Vec<String>), DataError> {
    label.check(format, text_options.mode, path)?;
    let (docs, labels, skipped) = documents(label, path, skip_bad_lines)?;
    let vocab = count_vocabulary(path, &docs, text_options)?;
    let mut names: Vec<String> = labels.clone();
    names.sort_unstable();
    names.dedup();
    let index = class_index(&names);
    let ids: Vec<Option<u32>> = labels.iter().map(|l| index.get(l).copied()).collect();
    let classes = DocClasses {
        ids: &ids,
        n_classes: names.len(),
    };
    let formed = form_rows_as(
        path,
        &docs,
        text_options,
        skipped,
        (&vocab, false),
        Some(classes),
    );
    let mut dataset = formed.dataset;
    let counts = class_counts(names.len(), &dataset);
    dataset.notes.push(classes_note(label, &names, &counts));
    Ok((dataset, vocab, names))
}

/// Held-out documents read against training classes.
#[derive(Clone, Debug)]
pub struct LabelledDocuments {
    pub docs: Vec<String>,
    /// Each document's class in the training numbering; `None`: a label training never saw.
    pub classes: Vec<Option<u32>>,
    /// Files skipped as bad (`skip_bad_lines`).
    pub skipped: usize,
}

/// Held-out documents of the directory `dir` with their classes in the training numbering
/// (`train_labels`, class id order), read as the training source was (`format`, `text_mode`,
/// `label`, `skip_bad_lines`).
pub fn held_out_documents(
    (format, text_mode): (Format, TextMode),
    label: &LabelOptions,
    skip_bad_lines: bool,
    dir: &Path,
    train_labels: &[String],
) -> Result<LabelledDocuments, DataError> {
    label.check(format, text_mode, dir)?;
    let (docs, labels, skipped) = documents(label, dir, skip_bad_lines)?;
    let index = class_index(train_labels);
    let classes = labels.iter().map(|l| index.get(l).copied()).collect();
    Ok(LabelledDocuments {
        docs,
        classes,
        skipped,
    })
}

/// Tests of file-name labels: class ids from a character range, held-out documents in the
/// training numbering, the statistics key and the `labels.tsv` sidecar.
#[cfg(test)]
mod tests {
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
}
