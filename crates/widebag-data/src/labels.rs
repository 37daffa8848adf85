//! Document classes from file names: with `data.label = "file_name"` each file of a text
//! directory (bow mode) becomes one row whose target is a single class (weight 1), the label cut
//! from the file's name by `data.label_chars` (Brown: `[1, 2]`, the genre letter of `ca01`).
//!
//! Classes are the sorted distinct labels of the TRAINING documents, numbered from 0; their names
//! are kept ([`crate::loaded::Loaded::labels`]) and saved as `labels.tsv` beside the vocabulary
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

use crate::dataset::Dataset;
use crate::error::DataError;
use widebag_kinds::{Format, LabelMode, TextMode};

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

    /// The part of [`Source::variant`](crate::source::Source::variant) that tells label modes
    /// apart (empty for `Bag`).
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
}

pub(crate) fn class_index(names: &[String]) -> HashMap<String, u32> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect()
}

/// Documents per class of `dataset` (rows whose single target is that class).
pub(crate) fn class_counts(n_classes: usize, dataset: &Dataset) -> Vec<u64> {
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
