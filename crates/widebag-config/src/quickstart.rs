//! The built-in quickstart (`configs/quickstart.toml`), layered over the schema defaults when no
//! `--config` is given, and its name in error messages.

/// The built-in quickstart, layered over the schema defaults when no `--config` is given.
pub const QUICKSTART_TOML: &str = include_str!("../../../configs/quickstart.toml");
/// How the quickstart is named in error messages.
pub const QUICKSTART_NAME: &str = "<built-in quickstart: configs/quickstart.toml>";
