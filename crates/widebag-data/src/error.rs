//! The errors of data sources: each names the setting, or the file and the place in it, at fault.

use std::path::PathBuf;

/// Errors from data sources. Each names the setting or location at fault.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("invalid data setting `{key}`: {message}")]
    InvalidSpec { key: &'static str, message: String },
    #[error(transparent)]
    Csr(#[from] widebag_csr::CsrError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: member `{member}` at byte {offset}: {message}", path.display())]
    Archive {
        path: PathBuf,
        member: String,
        offset: u64,
        message: String,
    },
    #[error("{}: the file holds no rows", path.display())]
    Empty { path: PathBuf },
}
