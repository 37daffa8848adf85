//! The burn side of widebag, one folder per concept, each importing only from the floors below
//! it (`tests/integration/layers.rs` holds the order; ARCHITECTURE.md draws it). Top to bottom:
//!
//! - `train/`: the training loop for one process or each rank of many (`group`: what the ranks
//!   of one run agree on).
//! - `eval/`: held-out metrics and predictions (`split`: with the model split across ranks);
//!   `export/`: a trained model written for use elsewhere.
//! - `checkpoint/`: a layout saved, read back (`saved`), gathered from ranks (`gather`).
//! - `layout/`: a training layout as the loop sees it ([`layout::Trainable`]: the sparse model,
//!   or the dense baseline).
//! - `step/`: the sparse model's training step, top to bottom (`exchange`: what passes between
//!   the ranks' stages, skipped for one process).
//! - `model/`: the sparse model ([`model::SparseModel`]): the bag, the trunk, its parts.
//! - `output/`: the output layer as one type ([`output::OutputLayer`]) and its kinds.
//! - `table/` (the row-sharded tables outside autodiff, their host tier and row optimizers),
//!   `params/` (the trunk's parameters, their seeded numbers and updates), `entries` (what a
//!   checkpoint holds, by name), `spec` (the model's shapes), `ranks` (a rank and its rows of a
//!   batch), `input` (the input transform).
//! - `cpu/`: flex's host kernels; `cube/`: widebag's CubeCL kernels for wgpu.
//! - `optim/` (the optimizers' update rules) and `probe/` (the step's instruments: memory
//!   readings, stage timer, progress).
//! - At the bottom: the device (`device`), the error type (`error`), tensor helpers (`tensors`)
//!   and `caught`.
//!
//! The re-exports below are for other crates; inside the crate every name is imported from the
//! module that defines it.

pub mod caught;
pub mod checkpoint;
pub mod cpu;
pub mod cube;
pub mod device;
pub mod entries;
pub mod error;
pub mod eval;
pub mod export;
pub mod input;
pub mod layout;
pub mod model;
pub mod optim;
pub mod output;
pub mod params;
pub mod probe;
pub mod products;
pub mod ranks;
pub mod spec;
pub mod step;
pub mod table;
pub mod tensors;
pub mod train;

pub use device::{BackendKind, Compute, open_device};
pub use error::ModelError;
pub use layout::{LayoutFacts, Trainable};
pub use model::SparseModel;
pub use probe::profile::{ProfileReport, Stage, StepProfile};
pub use probe::{Phase, Point, ProbeMode, StepProbe};
pub use ranks::Ranks;
pub use spec::ModelSpec;
pub use step::Grads;
pub use step::done::StepDone;
pub use table::ids::{SortedIdBuf, SortedIds};
pub use train::stats::StepStats;
pub use train::{
    AcrossRanks, CheckpointPlan, Evaluation, Resume, RunOptions, RunSummary, StopRequest, Watch,
    train,
};
