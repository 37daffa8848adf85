//! `CheckpointError`: a checkpoint file that cannot be used, with its path and what is wrong.

/// A checkpoint file that cannot be used, with the path and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct CheckpointError {
    pub path: std::path::PathBuf,
    pub message: String,
}

impl CheckpointError {
    pub fn new(path: &std::path::Path, message: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}
