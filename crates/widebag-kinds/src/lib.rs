//! The kinds of data a run reads, by name: file formats, how text becomes rows, how tokens are
//! split, what a synthetic row predicts and how documents are labelled. Plain enums with their
//! config names, owned here so that the data readers (`widebag-data`) and the configuration
//! schema (`widebag-config`) share them without either depending on the other.

use serde::{Deserialize, Serialize};

/// The supported file formats (`--format` on the command line, `data.format` in a config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `label[,label…] [qid:n] idx:val … [# comment]` (svmlight).
    Libsvm,
    /// scipy.sparse CSR `.npz` (`save_npz`).
    Npz,
    /// LightGCN interaction lists, `user item item …`.
    Lightgcn,
    /// A text corpus: one document per line of a file, or one per file in a directory tree.
    Text,
    /// A dictd database (`NAME.index` + `NAME.dict` or `NAME.dict.dz`), one document per entry.
    Dictd,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::Libsvm,
        Format::Npz,
        Format::Lightgcn,
        Format::Text,
        Format::Dictd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Libsvm => "libsvm",
            Format::Npz => "npz",
            Format::Lightgcn => "lightgcn",
            Format::Text => "text",
            Format::Dictd => "dictd",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether `--mode`/`data.mode` applies.
    pub fn is_text(self) -> bool {
        matches!(self, Format::Text | Format::Dictd)
    }
}

/// How raw text is split into tokens before words are taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenFormat {
    /// Plain text.
    #[default]
    Plain,
    /// `word/TAG` tokens (Brown corpus): the tag after the last `/` is dropped.
    Tagged,
}

/// How a data file's rows are shuffled each epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShuffleMode {
    /// One permutation of every row (as PyTorch's `DataLoader(shuffle=True)`): reads anywhere
    /// in the file, and holds one index per row.
    #[default]
    Rows,
    /// A permutation of the blocks, then of the rows within a window of consecutive shuffled
    /// blocks (`data.shuffle_rows` rows): reads a window at a time and holds one window's
    /// indices, for data larger than memory.
    Blocks,
}

/// How documents become rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextMode {
    /// One row per document: its distinct in-vocabulary words with their counts as values, and
    /// the same bag (counts as weights) as target.
    #[default]
    Bow,
    /// One row per in-vocabulary word: the bag of the `window` words on each side as input, the
    /// word as target.
    Cbow,
}

/// What each row predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// One class id per row (next-word style).
    NextId,
    /// A bag of class ids per row (recommender style).
    Bag,
}

/// What a text document's row targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelMode {
    /// The document's own bag of words (counts as weights).
    #[default]
    Bag,
    /// One class: the label cut from the document's file name.
    FileName,
}

impl LabelMode {
    pub fn name(self) -> &'static str {
        match self {
            LabelMode::Bag => "bag",
            LabelMode::FileName => "file_name",
        }
    }
}

/// The first eight bytes of widebag's packed dataset (`widebag data pack`): a file that starts
/// with them is recognised whatever its name, with no `data.format` needed.
pub const PACKED_MAGIC: &[u8; 8] = b"WIDEBAGP";

/// Whether `path` is a packed dataset (it starts with [`PACKED_MAGIC`]); `false` for a
/// directory, a short or unreadable file.
pub fn is_packed(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == PACKED_MAGIC
}
