//! The run configuration: typed sections with the quickstart as defaults, TOML files, `--set`
//! overrides, and errors that name the file, the line and the key.
//!
//! Loading is layered: built-in defaults, then an optional TOML file, then `--set key=value`
//! overrides in order. Every key is checked against the schema (an unknown key is refused with the
//! nearest valid one), the merged table is deserialised with the failing key's path, and every
//! value is range-checked. The error says where the offending value came from.

pub use widebag_kinds::{Format, LabelMode, ShuffleMode, TargetKind, TextMode, TokenFormat};

mod band_keys;
pub mod bands;
mod choices;
mod error;
mod layers;
mod loader;
mod locate;
mod quickstart;
mod run_length;
mod sampling;
mod schema;
pub mod sweep;
mod task;
pub mod units;
mod validate;

pub use band_keys::*;
pub use choices::*;
pub use error::{ConfigError, Origin};
pub use loader::{ConfigLoader, known_keys, load, nearest_key, parse_override_value};
pub use quickstart::{QUICKSTART_NAME, QUICKSTART_TOML};
pub use run_length::{RUN_LENGTH_KEYS, is_run_length_key, without_run_length};
pub use sampling::{Pooling, Proposal, SamplingConfig, Score, check_negatives};
pub use schema::*;
pub use task::TaskKind;
pub use validate::validate;
