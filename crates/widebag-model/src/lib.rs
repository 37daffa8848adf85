//! The burn side of widebag: device selection, row-sharded tables, the embedding bag, the chunked
//! softmax and adaptive softmax outputs, row-sparse and dense optimizers, the sparse and dense
//! training layouts, and the training loop.

pub mod adaptive;
mod adaptive_host;
mod adaptive_ranks;
pub mod bag;
mod batches;
mod catch_up;
pub mod caught;
pub mod checkpoint;
pub mod cpu;
pub mod dense;
pub mod dense_optim;
pub mod device;
mod device_round;
pub mod error;
pub mod eval;
mod eval_ranks;
pub mod export;
mod export_files;
pub mod gather;
mod host_rows;
pub mod host_store;
pub mod ids;
pub mod init;
pub mod layout;
pub mod memory;
pub mod model;
pub mod params;
pub mod profile;
pub mod progress;
#[cfg(any(test, feature = "test-support"))]
pub mod reference;
pub mod saved;
pub mod scores;
pub mod softmax;
pub mod step;
mod step_ranks;
pub mod table;
mod table_io;
pub mod table_optim;
pub mod tensors;
pub mod train;
pub mod train_ranks;

#[cfg(test)]
mod model_tests;

pub use device::{BackendKind, Compute, open_device};
pub use error::ModelError;
pub use ids::{SortedIdBuf, SortedIds};
pub use layout::{LayoutFacts, TrainLayout};
pub use memory::{MemoryMeter, MeterMode, Phase, Point};
pub use model::{ModelSpec, Ranks, StepStats, WideModel};
pub use params::DenseParams;
pub use profile::{ProfileReport, Stage, StepProfile};
pub use step::Grads;
pub use train::{
    CheckpointPlan, Evaluation, RunOptions, RunSummary, run_training, run_training_with,
};
