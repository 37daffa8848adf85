//! Data sources that produce CSR batches: the seeded synthetic generator and the file readers
//! (libsvm, scipy npz, LightGCN interaction lists, text corpora, dictd), statistics, conversion.

pub mod atomic;
pub mod batch_source;
pub mod batches;
pub mod dataset;
pub mod dictd;
pub mod error;
pub mod frequencies;
pub mod held_out;
pub mod input_dropout;
pub mod key_sums;
pub mod labels;
pub mod libsvm;
pub mod lightgcn;
pub mod lines;
pub mod loaded;
pub mod npz;
pub mod open;
pub mod options;
pub mod order;
pub mod packed;
pub mod progress;
pub mod rng;
pub mod sidecar;
pub mod source;
pub mod stats;
pub mod streams;
pub mod synthetic;
pub mod text;
pub mod train_rows;
pub mod vocabulary;

pub use batch_source::{BatchSource, Resident};
pub use batches::{DataPosition, EpochBatches, Shuffle, ShuffleMode};
pub use dataset::{Dataset, RowStore};
pub use error::DataError;
pub use held_out::{HeldOut, load_held_out};
pub use input_dropout::InputDropout;
pub use labels::{LABELS_SUFFIX, LabelOptions};
pub use loaded::Loaded;
pub use open::load;
pub use options::{ReadOptions, TextOptions};
pub use order::{Relabel, Renumbering};
pub use progress::Progress;
pub use source::Source;
pub use streams::Streams;
pub use train_rows::TrainRows;
pub use vocabulary::Vocabulary;
pub use widebag_kinds::{Format, LabelMode, TargetKind, TextMode, TokenFormat};

pub use synthetic::{SyntheticSpec, SyntheticStream, ZipfTable};
