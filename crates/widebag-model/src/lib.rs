//! The burn side of widebag, one folder per concept, dependencies pointing one way (the loop →
//! the step → the layers → the table and the host kernels, never back):
//!
//! - `train/`: the training loop for one process or each rank of many (batches, progress,
//!   checkpoints on schedule, the summary; `group`: what the ranks of one run agree on), and
//!   `eval/`: held-out metrics and predictions (`split`: with the model split across ranks).
//! - `step/`: one training step top to bottom (`exchange`: what passes between the ranks'
//!   stages, skipped for one process), its stage profile and memory readings.
//! - `layout/`: a training layout as the loop sees it (sparse, or the dense baseline).
//! - `model/`: the sparse layout's model (`WideModel`): its spec, the embedding bag over the
//!   input bands, the dense parameters with their optimizers, the seeded initialisation.
//! - `output/`: the full softmax in class chunks, the adaptive softmax, class scores.
//! - `table/`: the row-sharded table outside autodiff, its host tier, I/O and row optimizers.
//! - `cpu/`: flex's host kernels; `checkpoint/` and `export/`: a layout saved, read back, exported.
//! - At the root: the device (`device`), the error type, tensor helpers and `caught`.

pub mod caught;
pub mod checkpoint;
pub mod cpu;
pub mod device;
pub mod error;
pub mod eval;
pub mod export;
pub mod layout;
pub mod model;
pub mod output;
pub mod step;
pub mod table;
pub mod tensors;
pub mod train;

pub use device::{BackendKind, Compute, open_device};
pub use error::ModelError;
pub use layout::{LayoutFacts, TrainLayout};
pub use model::params::DenseParams;
pub use model::{ModelSpec, Ranks, StepStats, WideModel};
pub use step::Grads;
pub use step::memory::{MemoryMeter, MeterMode, Phase, Point};
pub use step::profile::{ProfileReport, Stage, StepProfile};
pub use table::ids::{SortedIdBuf, SortedIds};
pub use train::{
    AcrossRanks, CheckpointPlan, Evaluation, Resume, RunOptions, RunSummary, run_training,
    run_training_in, run_training_with,
};
