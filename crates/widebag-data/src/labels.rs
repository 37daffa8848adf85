//! Document classes from file names: with `data.label = "file_name"` each file of a text
//! directory (bow mode) becomes one row whose target is a single class (weight 1), the label cut
//! from the file's name by `data.label_chars` (Brown: `[1, 2]`, the genre letter of `ca01`).
//!
//! Classes are the sorted distinct labels of the TRAINING documents, numbered from 0; their names
//! are kept ([`crate::Loaded::labels`]) and saved as `labels.tsv` beside the vocabulary
//! ([`labels_tsv`], [`LABELS_SUFFIX`]). Held-out documents get the training class ids; a document
//! whose label training never saw is dropped and counted.
//!
//! Every file under the directory is a document (names starting with `.` aside), so the directory
//! must hold the documents only: a corpus' own metadata files (Brown's `README`, `CONTENTS`,
//! `cats.txt`) would become documents with labels of their own. A file whose name is too short
//! for `label_chars` is refused, naming the file; the training note lists every class with its
//! document count, so a stray label shows.

use std::collections::HashMap;
use std::path::Path;

pub use widebag_kinds::LabelMode;

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::text::{self, DocClasses, TextMode, TextOptions, Vocabulary};
use widebag_kinds::Format;

/// Suffix of the class-name sidecar kept beside the data (as `vocab.tsv` is).
pub const LABELS_SUFFIX: &str = "labels.tsv";

/// How documents are labelled (`data.label`, `data.label_chars`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabelOptions {
    pub mode: LabelMode,
    /// `FileName`: the label is the characters `start..end` of the file name; `0..0` is the
    /// whole name.
    pub start: usize,
    pub end: usize,
}

impl LabelOptions {
    /// Labels cut from file names, characters `start..end` (`0, 0`: the whole name).
    pub fn file_name(start: usize, end: usize) -> Self {
        Self {
            mode: LabelMode::FileName,
            start,
            end,
        }
    }

    pub fn is_file_name(&self) -> bool {
        self.mode == LabelMode::FileName
    }

    /// The part of [`crate::Source::variant`] that tells label modes apart (empty for `Bag`).
    pub fn variant(&self) -> String {
        match self.mode {
            LabelMode::Bag => String::new(),
            LabelMode::FileName => format!("-label-name{}-{}", self.start, self.end),
        }
    }

    /// Whether `FileName` applies: the text format in bow mode, `path` a directory, a character
    /// range with start < end (or both 0). `Bag` always applies.
    pub fn check(&self, format: Format, mode: TextMode, path: &Path) -> Result<(), DataError> {
        if !self.is_file_name() {
            return Ok(());
        }
        let bad = |message: String| {
            Err(DataError::InvalidSpec {
                key: "data.label",
                message,
            })
        };
        if format != Format::Text {
            return bad(format!(
                "\"file_name\" applies to format = \"text\" (one document per file of a \
                 directory); the format is \"{}\"",
                format.name()
            ));
        }
        if mode != TextMode::Bow {
            return bad("\"file_name\" needs mode = \"bow\" (one row per document)".into());
        }
        if path.is_file() {
            return bad(format!(
                "\"file_name\" needs a directory of documents (one per file); {} is a file",
                path.display()
            ));
        }
        if self.start >= self.end && (self.start, self.end) != (0, 0) {
            return Err(DataError::InvalidSpec {
                key: "data.label_chars",
                message: format!(
                    "[{}, {}]: start must be below end ([0, 0] takes the whole name)",
                    self.start, self.end
                ),
            });
        }
        Ok(())
    }

    /// The label of the document at `path`: its file name, or the characters `start..end` of it.
    pub fn label_of(&self, path: &Path) -> Result<String, DataError> {
        let name =
            path.file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| DataError::InvalidSpec {
                    key: "data.label",
                    message: format!("{}: the file name is not UTF-8", path.display()),
                })?;
        if (self.start, self.end) == (0, 0) {
            return Ok(name.to_string());
        }
        let chars = name.chars().count();
        if chars < self.end {
            return Err(DataError::InvalidSpec {
                key: "data.label_chars",
                message: format!(
                    "{}: the file name `{name}` has {chars} characters, too few for [{}, {}] \
                     (is it a document?)",
                    path.display(),
                    self.start,
                    self.end
                ),
            });
        }
        Ok(name
            .chars()
            .skip(self.start)
            .take(self.end - self.start)
            .collect())
    }

    /// The documents of the directory `dir` with their labels, and the files skipped as bad.
    fn documents(
        &self,
        dir: &Path,
        skip_bad_lines: bool,
    ) -> Result<(Vec<String>, Vec<String>, usize), DataError> {
        let (named, skipped) = text::named_file_documents(dir, skip_bad_lines)?;
        let mut docs = Vec::with_capacity(named.len());
        let mut labels = Vec::with_capacity(named.len());
        for (path, doc) in named {
            labels.push(self.label_of(&path)?);
            docs.push(doc);
        }
        Ok((docs, labels, skipped))
    }
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
    let (docs, labels, skipped) = label.documents(path, skip_bad_lines)?;
    let vocab = text::count_vocabulary(path, &docs, text_options)?;
    let mut names: Vec<String> = labels.clone();
    names.sort_unstable();
    names.dedup();
    let index = class_index(&names);
    let ids: Vec<Option<u32>> = labels.iter().map(|l| index.get(l).copied()).collect();
    let classes = DocClasses {
        ids: &ids,
        n_classes: names.len(),
    };
    let formed = text::form_rows_as(
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
    let (docs, labels, skipped) = label.documents(dir, skip_bad_lines)?;
    let index = class_index(train_labels);
    let classes = labels.iter().map(|l| index.get(l).copied()).collect();
    Ok(LabelledDocuments {
        docs,
        classes,
        skipped,
    })
}

pub(crate) fn class_index(names: &[String]) -> HashMap<String, u32> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect()
}

/// Documents per class of `dataset` (rows whose single target is that class).
fn class_counts(n_classes: usize, dataset: &Dataset) -> Vec<u64> {
    let mut counts = vec![0u64; n_classes];
    for r in 0..dataset.n_rows() {
        if let ([c], _) = dataset.rows.row_targets(r)
            && let Some(n) = counts.get_mut(*c as usize)
        {
            *n += 1;
        }
    }
    counts
}

/// "15 classes from file names (characters 1..2): a 44, b 27, …" (the first 30 classes), from
/// each class's document `counts`.
pub(crate) fn classes_note(label: &LabelOptions, names: &[String], counts: &[u64]) -> String {
    const SHOWN: usize = 30;
    let mut listed: Vec<String> = names
        .iter()
        .zip(counts)
        .take(SHOWN)
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    if names.len() > SHOWN {
        listed.push("…".into());
    }
    let chars = match (label.start, label.end) {
        (0, 0) => "whole names".to_string(),
        (s, e) => format!("characters {s}..{e}"),
    };
    format!(
        "{} classes from file names ({chars}): {}",
        names.len(),
        listed.join(", ")
    )
}

/// `label<TAB>documents` lines in class id order: the class names of a labelled dataset with
/// the rows of each in `dataset` (the `labels.tsv` sidecar, [`LABELS_SUFFIX`]).
pub fn labels_tsv(names: &[String], dataset: &Dataset) -> String {
    let counts = class_counts(names.len(), dataset);
    names
        .iter()
        .zip(counts)
        .map(|(n, c)| format!("{n}\t{c}\n"))
        .collect()
}

#[cfg(test)]
#[path = "labels_tests.rs"]
mod tests;
