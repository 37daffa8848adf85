//! Flags that set a config key (`--device`, `--objective`, `--min-batch`, `--max-batch`) as
//! overrides layered after `--set`, and the one loader every request's config goes through:
//! defaults, then the file, then `--set`, then the flags, validated once, an error naming the
//! flag behind the failing key.

use std::path::Path;

use widebag_config::{Config, ConfigError, Origin};

use crate::args::{ConfigArgs, DeviceArg, DeviceArgs};
use crate::failure::Failure;

/// A flag that sets a config key: `--min-batch 8` is `plan.min_batch=8`.
pub(super) struct FlagOverride {
    /// As the user typed it, for error messages.
    flag: String,
    key: &'static str,
    /// The value as TOML.
    value: String,
}

impl FlagOverride {
    pub(super) fn new(
        flag: &str,
        shown: impl std::fmt::Display,
        key: &'static str,
        value: String,
    ) -> Self {
        Self {
            flag: format!("{flag} {shown}"),
            key,
            value,
        }
    }

    /// The `key=value` override it becomes.
    pub(super) fn arg(&self) -> String {
        format!("{}={}", self.key, self.value)
    }
}

fn device_name(d: DeviceArg) -> &'static str {
    match d {
        DeviceArg::Auto => "auto",
        DeviceArg::Wgpu => "wgpu",
        DeviceArg::Cpu => "cpu",
    }
}

pub(super) fn device_flag(d: &DeviceArgs) -> Option<FlagOverride> {
    let name = device_name(d.device?);
    Some(FlagOverride::new(
        "--device",
        name,
        "train.device",
        format!("\"{name}\""),
    ))
}

/// Names the flag behind a configuration error: the flag that set the failing key, or the flags
/// that set other keys of its section (`--min-batch 5000` fails as `plan.max_batch`).
pub(super) fn name_flags(e: ConfigError, flags: &[FlagOverride]) -> anyhow::Error {
    if let ConfigError::Invalid {
        key,
        origin: Origin::Set { arg },
        message,
    } = &e
        && let Some(f) = flags.iter().find(|f| f.arg() == *arg)
    {
        return anyhow::anyhow!("{}: key `{key}`: {message}", f.flag);
    }
    if let ConfigError::Invalid { key, .. } = &e {
        let section = key.split('.').next().unwrap_or_default();
        let related: Vec<&str> = flags
            .iter()
            .filter(|f| f.key.split('.').next() == Some(section))
            .map(|f| f.flag.as_str())
            .collect();
        if !related.is_empty() {
            return anyhow::anyhow!("{e} (given {})", related.join(", "));
        }
    }
    e.into()
}

/// The built-in defaults, then `file` (else the quickstart), then `--set`, then the flags'
/// overrides, validated once.
pub(super) fn load(
    file: Option<&Path>,
    overrides: &[String],
    flags: &[FlagOverride],
) -> Result<Config, Failure> {
    let mut all = overrides.to_vec();
    all.extend(flags.iter().map(FlagOverride::arg));
    widebag_config::load(file, &all).map_err(|e| Failure::usage(name_flags(e, flags)))
}

/// The configuration of `--config`/`--set` and the given flags.
pub(super) fn load_args(args: &ConfigArgs, flags: &[FlagOverride]) -> Result<Config, Failure> {
    load(args.config.as_deref(), &args.overrides, flags)
}
