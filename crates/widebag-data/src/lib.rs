//! Data sources that produce CSR batches: the seeded synthetic generator and the file readers
//! (libsvm, scipy npz, LightGCN interaction lists, text corpora, dictd), statistics, conversion,
//! widebag's packed format, and the training batches drawn from them.
//!
//! The modules stand in layers, bottom first; each imports from its own layer and those below,
//! never from one above, and always from the module that defines the name (the re-exports here
//! are for other crates):
//! 1. helpers: `error`, `options`, `atomic`, `rng`, `progress`, `key_sums`, `lines`, `sidecar`;
//! 2. what a reader yields and is given: `dataset`, `vocabulary`, `labels`, `loaded`, `order`,
//!    `frequencies`, `source`, `stats`;
//! 3. `packed`, widebag's packed file;
//! 4. the formats, each a folder with its reader and its streamed pack (`libsvm`, `lightgcn`,
//!    `npz`, `text`), and the `synthetic` generator;
//! 5. `dictd`, whose entries are documents of the text pipeline;
//! 6. loading any source: `open` (`load`) and `held_out`;
//! 7. `batches`: the rows a run reads, walked into training batches.

// 1. Helpers.
pub mod atomic;
pub mod error;
pub mod key_sums;
pub mod lines;
pub mod options;
pub mod progress;
pub mod rng;
pub mod sidecar;

// 2. What a reader yields and is given.
pub mod dataset;
pub mod frequencies;
pub mod labels;
pub mod loaded;
pub mod order;
pub mod source;
pub mod stats;
pub mod vocabulary;

// 3. The packed file.
pub mod packed;

// 4. The formats and the generator.
pub mod libsvm;
pub mod lightgcn;
pub mod npz;
pub mod synthetic;
pub mod text;

// 5. dictd, over the text pipeline.
pub mod dictd;

// 6. Loading.
pub mod held_out;
pub mod open;

// 7. Training batches.
pub mod batches;

pub use batches::batch_source::{BatchSource, Resident};
pub use batches::epochs::{DataPosition, EpochBatches, Shuffle};
pub use batches::input_dropout::InputDropout;
pub use batches::streams::Streams;
pub use batches::train_rows::TrainRows;
pub use batches::user_columns::UserColumns;
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
pub use synthetic::{SyntheticSpec, SyntheticStream, ZipfTable};
pub use vocabulary::Vocabulary;
pub use widebag_kinds::{Format, LabelMode, ShuffleMode, TargetKind, TextMode, TokenFormat};
