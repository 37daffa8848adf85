//! Data sources that produce CSR batches: the seeded synthetic generator and the file readers
//! (libsvm, scipy npz, LightGCN interaction lists, text corpora, dictd), statistics, conversion.

pub mod atomic;
pub mod batches;
pub mod dataset;
pub mod dictd;
pub mod error;
pub mod frequencies;
pub mod held_out;
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
pub mod synthetic;
pub mod text;
pub mod vocabulary;

pub use batches::batch_source::{BatchSource, Resident};
pub use batches::epochs::{DataPosition, EpochBatches, Shuffle};
pub use batches::input_dropout::InputDropout;
pub use batches::streams::Streams;
pub use batches::train_rows::TrainRows;
pub use dataset::{Dataset, RowStore};
pub use error::DataError;
pub use held_out::{HeldOut, load_held_out};
pub use labels::{LABELS_SUFFIX, LabelOptions};
pub use loaded::Loaded;
pub use open::load;
pub use options::{ReadOptions, TextOptions};
pub use order::{Relabel, Renumbering};
pub use progress::Progress;
pub use source::Source;
pub use vocabulary::Vocabulary;
pub use widebag_kinds::{Format, LabelMode, ShuffleMode, TargetKind, TextMode, TokenFormat};

pub use synthetic::{SyntheticSpec, SyntheticStream, ZipfTable};
