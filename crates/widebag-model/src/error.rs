//! The model crate's error type.

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
    /// Row ids handed to a table that are not sorted and distinct, or out of its range.
    #[error("row ids must be sorted, distinct and within the table: {0}")]
    Ids(String),
    /// A checkpoint that cannot be written, or is refused when read (it names the file).
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A setting the device cannot run (it names the key).
    #[error("{key}: {message}")]
    Unsupported { key: &'static str, message: String },
    #[error(transparent)]
    Data(#[from] widebag_data::DataError),
    /// A collective of a multi-process step did not complete (a rank is gone or late).
    #[error("across ranks: {0}")]
    Collective(#[from] widebag_collective::CollectiveError),
    /// Stopped on request ([`crate::train::options::StopRequest`]) after step `step`, with the
    /// checkpoint of that step where the run writes checkpoints.
    #[error("stopped on request after step {step}{}", checkpoint_note(.checkpoint))]
    Stopped {
        step: u64,
        checkpoint: Option<std::path::PathBuf>,
    },
}

/// `: checkpoint DIR`, or nothing without one.
fn checkpoint_note(dir: &Option<std::path::PathBuf>) -> String {
    dir.as_ref()
        .map_or(String::new(), |d| format!(": checkpoint {}", d.display()))
}

impl From<widebag_checkpoint::CheckpointError> for ModelError {
    fn from(e: widebag_checkpoint::CheckpointError) -> Self {
        ModelError::Checkpoint(e.to_string())
    }
}
