//! The on-disk checkpoint format, without burn: `state.json` (the manifest: step, data position,
//! config hash, each file's size and CRC-32) and the checks on a safetensors header (sizes,
//! offsets inside the file), so the parts of a checkpoint that a damaged or crafted file
//! controls can be tested and fuzzed on their own. The model crate reads the tensors through
//! them.

mod error;
pub mod header;
pub mod manifest;

pub use error::CheckpointError;
pub use header::{Entry, Header};
pub use manifest::{FORMAT, FileSum, Manifest, VERSION, config_hash, run_hash, sum_file};
