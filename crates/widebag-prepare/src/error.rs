//! `PrepareError`: what went wrong preparing a run, always with the config key at fault.

use widebag_data::DataError;

/// A run that could not be prepared. Every variant names the configuration key whose value led
/// to it; data errors keep the file, line and column their reader gave.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A setting that does not fit the data (or each other).
    #[error("invalid data setting `{key}`: {message}")]
    Setting { key: &'static str, message: String },
    /// Reading or batching the data named by `key` failed.
    #[error("{key}: {source}")]
    Data {
        key: &'static str,
        #[source]
        source: DataError,
    },
}

impl PrepareError {
    /// The configuration key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            PrepareError::Setting { key, .. } | PrepareError::Data { key, .. } => key,
        }
    }

    pub(crate) fn setting(key: &'static str, message: impl Into<String>) -> Self {
        PrepareError::Setting {
            key,
            message: message.into(),
        }
    }

    /// Wraps a data error under `key`; a data error that already names its setting keeps it.
    pub(crate) fn data(key: &'static str) -> impl FnOnce(DataError) -> Self {
        move |e| match e {
            DataError::InvalidSpec { key, message } => PrepareError::Setting { key, message },
            source => PrepareError::Data { key, source },
        }
    }
}
