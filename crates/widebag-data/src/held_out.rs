//! Held-out (test) files read against a training file: the training width, id numbering, index
//! base and vocabulary apply, and what training does not know is dropped and counted, not refused.
//!
//! Per format:
//! - **libsvm**: ids are rebased with the training file's index base (an explicit
//!   `zero_based` setting wins, then the held-out file's own widebag header, then the base the
//!   training read set or detected). Ids at or past the training width and labels at or past the
//!   training classes are dropped; a row left with no label is dropped.
//! - **npz**: read with its own shape, then the same drops as libsvm.
//! - **lightgcn**: `user item item …` lines of held-out items. One row per user with at least one
//!   known held-out item, in user order: input = the user's training items (value 1; empty for a
//!   user past the training rows), targets = the held-out items (weight 1 each), `seen` = the
//!   training items. Users without held-out items are no rows (noted, not counted as dropped).
//! - **text** and **dictd**: documents tokenized as in training and formed into rows by the same
//!   code ([`text::rows::form_rows`]) over the training vocabulary. Bow targets are the
//!   document's own bag; a document with no known word is dropped. CBOW windows span the known
//!   words, as in training. The held-out path of dictd is another dictd database (any of
//!   `NAME.index`, `NAME.dict`, `NAME.dict.dz`, `NAME`).
//! - **text** with `data.label = "file_name"` ([`crate::labels`], [`text::labelled`]): a
//!   directory whose documents target the training class of their file-name label; a document
//!   whose label training never saw is dropped (counted in `dropped_rows` and `dropped_targets`).
//!   A document with no known word stays, an empty input with its class, as in training.
//!
//! Rows are in the loaded training numbering, before any frequency [`crate::order::Relabel`];
//! apply the training's relabel to `dataset` (and its class renumbering to `seen`) as to the
//! training rows.

use std::collections::BTreeMap;
use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::loaded::Loaded;
use crate::options::ReadOptions;
use crate::source::Source;
use crate::text::rows::DocClasses;
use crate::{dictd, libsvm, lightgcn, npz, text};
use widebag_kinds::Format;

/// Held-out rows read against a training file.
#[derive(Clone, Debug)]
pub struct HeldOut {
    /// Rows in the training numbering (ids < training width, classes < training n_classes);
    /// `dataset.source` is the held-out path and `dataset.notes` the reader's notes.
    pub dataset: Dataset,
    /// lightgcn: for each held-out row (same order as `dataset`), the class ids the model must not
    /// recommend (the user's training items) as that row's `ids` (values 1, no targets).
    /// `None` for the other formats.
    pub seen: Option<RowStore>,
    /// lightgcn: the user id of each held-out row (same order as `dataset`).
    pub users: Option<Vec<u32>>,
    /// Input id occurrences unknown to training, dropped (text: unknown word tokens).
    pub dropped_ids: u64,
    /// Target class occurrences unknown to training, dropped. Text: unknown word tokens too (each
    /// would have been a target: in bow part of the document's bag, in cbow a centre word); with
    /// file-name labels, the documents whose label training never saw.
    pub dropped_targets: u64,
    /// Rows left with no target at all, dropped (a lightgcn user whose held-out items are all
    /// unknown, a libsvm row with no known label, a bow document with no known word or, with
    /// file-name labels, with an unknown label).
    pub dropped_rows: u64,
    /// Human-readable notes, e.g. "2 unknown word tokens dropped".
    pub notes: Vec<String>,
}

/// What was dropped while rows were kept.
#[derive(Default)]
struct Drops {
    ids: u64,
    targets: u64,
    rows: u64,
}

/// Reads `test_path` (a file in `source.format`) against `train`, the loaded training `source`.
pub fn load_held_out(
    source: &Source,
    test_path: &Path,
    train: &Loaded,
) -> Result<HeldOut, DataError> {
    let (mut held, notes) = match source.format {
        Format::Libsvm => read_libsvm(source, test_path, train)?,
        Format::Npz => read_npz(test_path, &train.dataset)?,
        Format::Lightgcn => read_lightgcn(source, test_path, &train.dataset)?,
        Format::Text | Format::Dictd => read_text(source, test_path, train)?,
    };
    held.dataset.source = test_path.to_path_buf();
    held.notes = dropped_notes(&held, source.format);
    held.notes.extend(notes);
    Ok(held)
}

/// The non-zero drop counts, worded for `format`.
fn dropped_notes(held: &HeldOut, format: Format) -> Vec<String> {
    let (w, k) = (held.dataset.width, held.dataset.n_classes);
    let mut notes = Vec::new();
    let mut note = |n: u64, what: String| {
        if n > 0 {
            notes.push(format!("{n} {what} dropped"));
        }
    };
    if format.is_text() {
        // The dropped documents are noted by `read_text`, which knows why.
        note(held.dropped_ids, "unknown word tokens".into());
        return notes;
    }
    if format != Format::Lightgcn {
        note(
            held.dropped_ids,
            format!("ids beyond the training width {w}"),
        );
    }
    note(
        held.dropped_targets,
        format!("targets beyond the training classes {k}"),
    );
    note(held.dropped_rows, "rows left with no target".into());
    notes
}

/// A held-out result around `rows`, in the training's width and classes.
fn held_out(test_path: &Path, train: &Dataset, rows: RowStore, skipped: usize) -> HeldOut {
    HeldOut {
        dataset: Dataset {
            source: test_path.to_path_buf(),
            width: train.width,
            n_classes: train.n_classes,
            rows,
            skipped_lines: skipped,
            notes: Vec::new(),
        },
        seen: None,
        users: None,
        dropped_ids: 0,
        dropped_targets: 0,
        dropped_rows: 0,
        notes: Vec::new(),
    }
}

/// Appends the known part of one row to `out`, or counts it dropped when no target is left.
fn push_known(
    out: &mut RowStore,
    drops: &mut Drops,
    (ids, values): (&[u32], &[f32]),
    (targets, weights): (&[u32], &[f32]),
    (width, n_classes): (usize, usize),
) {
    let (kept_ids, kept_values): (Vec<u32>, Vec<f32>) = ids
        .iter()
        .zip(values)
        .filter(|&(&i, _)| (i as usize) < width)
        .unzip();
    let (kept_targets, kept_weights): (Vec<u32>, Vec<f32>) = targets
        .iter()
        .zip(weights)
        .filter(|&(&c, _)| (c as usize) < n_classes)
        .unzip();
    drops.ids += (ids.len() - kept_ids.len()) as u64;
    drops.targets += (targets.len() - kept_targets.len()) as u64;
    if kept_targets.is_empty() {
        drops.rows += 1;
    } else {
        out.push(&kept_ids, &kept_values, &kept_targets, &kept_weights);
    }
}

impl HeldOut {
    fn with_drops(mut self, drops: Drops) -> Self {
        self.dropped_ids = drops.ids;
        self.dropped_targets = drops.targets;
        self.dropped_rows = drops.rows;
        self
    }
}

/// libsvm: the training file's index base, width and classes.
fn read_libsvm(
    source: &Source,
    test_path: &Path,
    train: &Loaded,
) -> Result<(HeldOut, Vec<String>), DataError> {
    let train_zero_based = source
        .read
        .zero_based
        .or_else(|| libsvm::read::zero_based_of(&train.dataset))
        .ok_or_else(|| DataError::InvalidSpec {
            key: "data.zero_based",
            message: format!(
                "the index base of the training file {} is unknown (its dataset carries no base                  note); set it",
                source.path.display()
            ),
        })?;
    // An explicit setting, else the held-out file's own widebag header, else the training base.
    let parse_options = ReadOptions {
        zero_based: source.read.zero_based,
        width: None,
        n_classes: None,
        skip_bad_lines: source.read.skip_bad_lines,
    };
    let parsed = libsvm::read::parse_file(test_path, &parse_options)?;
    if parsed.lines.is_empty() && parsed.skipped == 0 {
        return Err(DataError::Empty {
            path: test_path.to_path_buf(),
        });
    }
    let zero_based = parsed.options.zero_based.unwrap_or(train_zero_based);
    let base = u32::from(!zero_based);
    let shape = (train.dataset.width, train.dataset.n_classes);
    let mut skipped = parsed.skipped;
    let mut rows = RowStore::new();
    let mut drops = Drops::default();
    for (line, p) in &parsed.lines {
        if let Some(i) = p.ids.iter().position(|&id| id < base) {
            if source.read.skip_bad_lines {
                skipped += 1;
                continue;
            }
            return Err(DataError::Parse {
                path: test_path.to_path_buf(),
                line: *line,
                column: p.columns[i] as usize,
                message: "index 0 in a 1-based file (the training file's ids are 1-based; set                           the index base to 0 if both are 0-based)"
                    .into(),
            });
        }
        let ids: Vec<u32> = p.ids.iter().map(|&i| i - base).collect();
        let ones = vec![1.0; p.labels.len()];
        let row = (&ids[..], &p.values[..]);
        push_known(&mut rows, &mut drops, row, (&p.labels, &ones), shape);
    }
    let mut held = held_out(test_path, &train.dataset, rows, skipped).with_drops(drops);
    let how = match (source.read.zero_based, parsed.options.zero_based) {
        (Some(_), _) => "set",
        (None, Some(_)) => "from its header",
        (None, None) => "the training file's",
    };
    held.dataset.notes = vec![format!("{base}-based ids ({how})")];
    Ok((held, Vec::new()))
}

/// npz: read with its own shape, then kept to the training width and classes.
fn read_npz(test_path: &Path, train: &Dataset) -> Result<(HeldOut, Vec<String>), DataError> {
    let test = npz::read::read_npz(test_path, &ReadOptions::default())?;
    let shape = (train.width, train.n_classes);
    let mut rows = RowStore::new();
    let mut drops = Drops::default();
    for r in 0..test.n_rows() {
        let (row, targets) = (test.rows.row(r), test.rows.row_targets(r));
        push_known(&mut rows, &mut drops, row, targets, shape);
    }
    let mut held = held_out(test_path, train, rows, 0).with_drops(drops);
    held.dataset.notes = test.notes;
    Ok((held, Vec::new()))
}

/// lightgcn: one row per user with known held-out items.
fn read_lightgcn(
    source: &Source,
    test_path: &Path,
    train: &Dataset,
) -> Result<(HeldOut, Vec<String>), DataError> {
    let (lines, skipped) = lightgcn::read::read_file(test_path, &source.read)?;
    if lines.is_empty() && skipped == 0 {
        return Err(DataError::Empty {
            path: test_path.to_path_buf(),
        });
    }
    let mut by_user: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (user, items) in lines {
        by_user.entry(user).or_default().extend(items);
    }
    let shape = TrainShape {
        users: train.n_rows(),
        width: train.width,
        n_classes: train.n_classes,
    };
    let items = |u: usize| train.rows.row(u).0.to_vec();
    Ok(lightgcn_held_out(test_path, by_user, shape, items, skipped))
}

/// The training rows a held-out file is read against: users (rows), width and classes.
#[derive(Clone, Copy, Debug)]
pub struct TrainShape {
    pub users: usize,
    pub width: usize,
    pub n_classes: usize,
}

/// lightgcn: one held-out row per user of `by_user` (in user order) with known held-out items:
/// input the user's training items (`train_items(u)` for `u < shape.users`, else empty),
/// targets the held-out items, `seen` the training items. Also the notes to show.
pub fn lightgcn_held_out(
    test_path: &Path,
    by_user: BTreeMap<u32, Vec<u32>>,
    shape: TrainShape,
    train_items: impl Fn(usize) -> Vec<u32>,
    skipped: usize,
) -> (HeldOut, Vec<String>) {
    let mut rows = RowStore::new();
    let mut seen = RowStore::new();
    let mut users = Vec::new();
    let mut drops = Drops::default();
    let (mut users_with_items, mut beyond) = (0usize, 0usize);
    for (user, mut items) in by_user {
        items.sort_unstable();
        items.dedup();
        if items.is_empty() {
            continue;
        }
        let train_items = match user as usize {
            u if u < shape.users => train_items(u),
            _ => Vec::new(),
        };
        let (train_items, ones) = (&train_items[..], &vec![1.0; train_items.len()][..]);
        let before = drops.rows;
        let weights = vec![1.0; items.len()];
        let row = (train_items, ones);
        push_known(
            &mut rows,
            &mut drops,
            row,
            (&items, &weights),
            (shape.width, shape.n_classes),
        );
        if drops.rows == before {
            seen.push(train_items, ones, &[], &[]);
            users.push(user);
            if (user as usize) < shape.users {
                users_with_items += 1;
            } else {
                beyond += 1;
            }
        }
    }
    let mut notes = Vec::new();
    let without = shape.users - users_with_items;
    if without > 0 {
        notes.push(format!(
            "{without} of {} training users have no known held-out items (not rows)",
            shape.users
        ));
    }
    if beyond > 0 {
        notes.push(format!(
            "{beyond} held-out users are past the {} training users (empty input)",
            shape.users
        ));
    }
    let mut held = HeldOut {
        dataset: Dataset {
            source: test_path.to_path_buf(),
            width: shape.width,
            n_classes: shape.n_classes,
            rows,
            skipped_lines: skipped,
            notes: Vec::new(),
        },
        seen: Some(seen),
        users: Some(users),
        dropped_ids: 0,
        dropped_targets: 0,
        dropped_rows: 0,
        notes: Vec::new(),
    }
    .with_drops(drops);
    held.notes = dropped_notes(&held, Format::Lightgcn);
    held.notes.extend(notes.iter().cloned());
    (held, notes)
}

/// text and dictd: the training tokenizer, row forming and vocabulary.
fn read_text(
    source: &Source,
    test_path: &Path,
    train: &Loaded,
) -> Result<(HeldOut, Vec<String>), DataError> {
    let vocab = train
        .vocabulary
        .as_ref()
        .ok_or_else(|| DataError::InvalidSpec {
            key: "data.format",
            message: format!(
                "the loaded training data {} has no vocabulary to read {} with",
                source.path.display(),
                test_path.display()
            ),
        })?;
    let skip = source.read.skip_bad_lines;
    let (docs, classes, skipped) = match source.format {
        Format::Dictd => {
            let (docs, skipped, _) = dictd::read::dictd_documents(test_path, skip)?;
            (docs, None, skipped)
        }
        _ if source.label.is_file_name() => {
            let names = train
                .labels
                .as_ref()
                .ok_or_else(|| DataError::InvalidSpec {
                    key: "data.label",
                    message: format!(
                        "the loaded training data {} has no class labels to read {} with",
                        source.path.display(),
                        test_path.display()
                    ),
                })?;
            let l = text::labelled::held_out_documents(
                (source.format, source.text.mode),
                &source.label,
                source.read.skip_bad_lines,
                test_path,
                names,
            )?;
            (l.docs, Some(l.classes), l.skipped)
        }
        _ => {
            let (docs, skipped) = text::corpus::corpus_documents(test_path, skip)?;
            (docs, None, skipped)
        }
    };
    if docs.is_empty() && skipped == 0 {
        return Err(DataError::Empty {
            path: test_path.to_path_buf(),
        });
    }
    let doc_classes = classes.as_deref().map(|ids| DocClasses {
        ids,
        n_classes: train.dataset.n_classes,
    });
    // Bag targets need a known word; a class target stands without one.
    let vocab_rows = (vocab, classes.is_none());
    let formed = text::rows::form_rows_as(
        test_path,
        &docs,
        &source.text,
        skipped,
        vocab_rows,
        doc_classes,
    );
    let mut held = held_out(test_path, &train.dataset, formed.dataset.rows, skipped);
    held.dataset.notes = formed.dataset.notes;
    held.dropped_ids = formed.unknown_tokens;
    held.dropped_targets = match classes {
        Some(_) => formed.unknown_labels,
        None => formed.unknown_tokens,
    };
    held.dropped_rows = formed.dropped_documents + formed.unknown_labels;
    let mut notes = Vec::new();
    for (n, why) in [
        (formed.dropped_documents, "with no known word"),
        (formed.unknown_labels, "with a label unknown to training"),
    ] {
        if n > 0 {
            notes.push(format!("{n} documents {why} dropped"));
        }
    }
    Ok((held, notes))
}

/// Tests of held-out reading: each format against a small training file, drops counted, errors
/// naming the held-out file.
#[cfg(test)]
mod tests {
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
}
