//! The burn side of widebag: device selection, row-sharded tables, the embedding bag, the chunked
//! softmax output, row-sparse and dense optimizers, and the training step.

pub mod dense;
pub mod device;
pub mod memory;
pub mod model;
pub mod optim;
pub mod reference;
pub mod softmax;
pub mod table;
pub mod tensors;
pub mod train;

pub use device::{BackendKind, Compute, open_device};
pub use memory::{MemoryMeter, MeterMode, Phase, Point};
pub use model::{Grads, ModelSpec, StepStats, WideModel};
pub use train::{Model, RunOptions, RunSummary, run_training, run_training_with};

/// Errors from the model crate.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("no wgpu adapter could be opened: {0}")]
    NoAdapter(String),
    #[error("device execution failed: {0}")]
    Execution(String),
    #[error("reading tensor data back from the device: {0}")]
    Read(String),
    #[error("batch does not fit the model: {0}")]
    Shape(String),
    #[error(transparent)]
    Data(#[from] widebag_data::DataError),
}
