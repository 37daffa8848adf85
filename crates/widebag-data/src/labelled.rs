//! A directory of documents labelled by their file names ([`crate::labels`]) read whole: the
//! training rows target their class (the sorted distinct labels, numbered from 0); held-out
//! documents get the training class ids (`None`: a label training never saw).

use std::path::Path;

use widebag_kinds::{Format, TextMode};

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::labels::{LabelOptions, class_counts, class_index, classes_note};
use crate::options::TextOptions;
use crate::text::{self, DocClasses};
use crate::vocabulary::Vocabulary;

/// The documents of the directory `dir` with their labels (cut from their names by `label`), and
/// the files skipped as bad.
fn documents(
    label: &LabelOptions,
    dir: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<String>, Vec<String>, usize), DataError> {
    let (named, skipped) = text::named_file_documents(dir, skip_bad_lines)?;
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
    let (docs, labels, skipped) = documents(label, dir, skip_bad_lines)?;
    let index = class_index(train_labels);
    let classes = labels.iter().map(|l| index.get(l).copied()).collect();
    Ok(LabelledDocuments {
        docs,
        classes,
        skipped,
    })
}

#[cfg(test)]
#[path = "labels_tests.rs"]
mod tests;
