//! Data sources that produce CSR batches: the seeded synthetic generator and the file readers
//! (libsvm, scipy npz, LightGCN interaction lists, text corpora, dictd), statistics, conversion.

pub mod atomic;
pub mod batch_source;
pub mod batches;
pub mod dataset;
pub mod dictd;
pub mod documents_pack;
pub mod frequencies;
pub mod held_out;
pub mod input_dropout;
pub mod key_sums;
pub mod labels;
pub mod libsvm;
pub mod libsvm_pack;
pub mod libsvm_shape;
pub mod lightgcn;
pub mod lightgcn_pack;
pub mod lines;
pub mod npz;
pub mod open;
pub mod order;
pub mod packed;
pub mod progress;
pub mod rng;
pub mod source;
pub mod stats;
pub mod streams;
pub mod synthetic;
pub mod text;
pub mod text_pack;
mod token_spill;
pub mod train_rows;
pub mod words;

use std::path::PathBuf;

pub use batch_source::{BatchSource, Resident};
pub use batches::{DataPosition, EpochBatches, Shuffle, ShuffleMode};
pub use dataset::{Dataset, RowStore};
pub use held_out::{HeldOut, load_held_out};
pub use input_dropout::InputDropout;
pub use labels::{LABELS_SUFFIX, LabelOptions};
pub use open::load;
pub use order::{Relabel, Renumbering};
pub use progress::Progress;
pub use source::{Loaded, Source};
pub use streams::Streams;
pub use text::{TextOptions, Vocabulary};
pub use train_rows::TrainRows;
pub use widebag_kinds::{Format, LabelMode, TargetKind, TextMode, TokenFormat};

pub use synthetic::{SyntheticSpec, SyntheticStream, ZipfTable};

/// Errors from data sources. Each names the setting or location at fault.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("invalid data setting `{key}`: {message}")]
    InvalidSpec { key: &'static str, message: String },
    #[error(transparent)]
    Csr(#[from] widebag_csr::CsrError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: member `{member}` at byte {offset}: {message}", path.display())]
    Archive {
        path: PathBuf,
        member: String,
        offset: u64,
        message: String,
    },
    #[error("{}: the file holds no rows", path.display())]
    Empty { path: PathBuf },
}

/// Options shared by the file readers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadOptions {
    /// Ids are 0-based (`Some(true)`), 1-based (`Some(false)`), or detected (`None`).
    pub zero_based: Option<bool>,
    /// Input width; taken from the data when unset.
    pub width: Option<usize>,
    /// Number of classes; taken from the data when unset.
    pub n_classes: Option<usize>,
    /// Skip malformed lines (and count them) instead of failing.
    pub skip_bad_lines: bool,
}
