//! `ConfigError` and `Origin`: what is wrong with a configuration, and where the value came from
//! (file and line, a `--set` argument, or the built-in defaults).

use std::path::PathBuf;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    Default,
    File { path: PathBuf, line: Option<usize> },
    Set { arg: String },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => write!(f, "built-in default"),
            Origin::File {
                path,
                line: Some(l),
            } => write!(f, "{}:{l}", path.display()),
            Origin::File { path, line: None } => write!(f, "{}", path.display()),
            Origin::Set { arg } => write!(f, "--set {arg}"),
        }
    }
}

/// Configuration errors. Each names the key (where there is one) and where the value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read config file: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: invalid TOML: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: unknown key `{key}`{}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownKey {
        key: String,
        origin: Origin,
        suggestion: Option<String>,
    },
    #[error("{arg}: expected `key=value`")]
    BadOverride { arg: String },
    #[error("{origin}: key `{key}`: {message}")]
    Invalid {
        key: String,
        origin: Origin,
        message: String,
    },
}
