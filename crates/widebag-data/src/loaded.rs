//! A loaded source: its dataset, with what came with the rows (a text's vocabulary, LightGCN's
//! held-out items, the class names of documents labelled by file names).

use crate::dataset::{Dataset, RowStore};
use crate::labels;
use crate::vocabulary::Vocabulary;

/// A loaded source.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub dataset: Dataset,
    /// Text formats: the vocabulary (id order).
    pub vocabulary: Option<Vocabulary>,
    /// lightgcn: held-out items per user row.
    pub test: Option<RowStore>,
    /// `text` with `data.label = "file_name"`: the class names, class id → label (sorted).
    pub labels: Option<Vec<String>>,
}

impl Loaded {
    /// The class names as the `labels.tsv` sidecar (`label<TAB>documents`, class id order), for
    /// [`crate::sidecar::save_sidecar`] with [`labels::LABELS_SUFFIX`]; `None` when the rows have
    /// no named classes.
    pub fn labels_tsv(&self) -> Option<String> {
        let names = self.labels.as_ref()?;
        Some(labels::labels_tsv(names, &self.dataset))
    }
}
