//! A checkpoint's `state.json`: the format and version, the step, epoch and data position to
//! continue from, the config it belongs to (by hash), and each file's size and CRC-32, so a
//! truncated or altered checkpoint is refused before any of it is loaded.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use widebag_data::DataPosition;

use crate::error::CheckpointError;

pub const FORMAT: &str = "widebag-checkpoint";
pub const VERSION: u32 = 1;

/// Size and checksum of one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    pub bytes: u64,
    pub crc32: u32,
}

/// `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// Training steps taken.
    pub step: u64,
    /// Epochs started (data files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Where the training batches continue.
    pub position: DataPosition,
    /// `sparse` or `dense`.
    pub layout: String,
    /// CRC-32 of the resolved config as JSON ([`config_hash`]).
    pub config_hash: String,
    /// The same without the run's length and timing ([`run_hash`]): a run resumed for longer
    /// (`train --resume DIR --set train.epochs=…`) is still this run. Absent in checkpoints
    /// written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_hash: Option<String>,
    pub widebag_version: String,
    pub files: BTreeMap<String, FileSum>,
}

/// The resolved config's fingerprint: CRC-32 of its JSON, the device left out (a run may go on
/// on another device).
pub fn config_hash(config: &widebag_config::Config) -> String {
    let mut c = config.clone();
    c.train.device = widebag_config::DeviceChoice::Auto;
    let json = serde_json::to_string(&c).unwrap_or_default();
    format!("{:08x}", crc32fast::hash(json.as_bytes()))
}

/// [`config_hash`] of the config without its run length and timing
/// (`widebag_config::RUN_LENGTH_KEYS`): the same for a run and the run resumed for longer.
pub fn run_hash(config: &widebag_config::Config) -> String {
    config_hash(&widebag_config::without_run_length(config))
}

impl Manifest {
    /// Whether this checkpoint was written by the run `config` describes: the same resolved
    /// config, or the same but for the run's length and timing.
    pub fn same_run(&self, config: &widebag_config::Config) -> bool {
        self.config_hash == config_hash(config)
            || self.run_hash.as_deref() == Some(&run_hash(config))
    }
}

/// Size and CRC-32 of a file, read in 1 MiB pieces.
pub fn sum_file(path: &Path) -> Result<FileSum, CheckpointError> {
    let io = |e: std::io::Error| CheckpointError::new(path, e.to_string());
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(FileSum {
        bytes,
        crc32: h.finalize(),
    })
}

impl Manifest {
    /// Parses `state.json`'s text and checks the format and version (not the files).
    pub fn parse(text: &str) -> Result<Self, String> {
        let m: Manifest =
            serde_json::from_str(text).map_err(|e| format!("not a checkpoint manifest: {e}"))?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(format!(
                "format {} version {}; this widebag reads {FORMAT} version {VERSION}",
                m.format, m.version
            ));
        }
        if let Some(name) = m
            .files
            .keys()
            .find(|n| n.is_empty() || n.contains(['/', '\\']) || n.contains(".."))
        {
            return Err(format!("file name `{name}` leaves the checkpoint"));
        }
        Ok(m)
    }

    /// Reads `DIR/state.json` and checks the format, the version and every file's sum.
    pub fn read_verified(dir: &Path) -> Result<Self, CheckpointError> {
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| CheckpointError::new(&path, e.to_string()))?;
        let m = Self::parse(&text).map_err(|e| CheckpointError::new(&path, e))?;
        for (name, want) in &m.files {
            let got = sum_file(&dir.join(name))?;
            if &got != want {
                return Err(CheckpointError::new(
                    &dir.join(name),
                    format!(
                        "{} bytes with CRC-32 {:08x}, the manifest says {} bytes with {:08x} \
                         (truncated or altered)",
                        got.bytes, got.crc32, want.bytes, want.crc32
                    ),
                ));
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(files: &str) -> String {
        format!(
            r#"{{"format":"{FORMAT}","version":{VERSION},"step":4,"position":{{"rows":{{"epoch":0,"next":4}}}},
            "layout":"sparse","config_hash":"0","widebag_version":"0","files":{files}}}"#
        )
    }

    #[test]
    fn format_version_and_file_names_are_checked() {
        let ok = Manifest::parse(&manifest(r#"{"a.safetensors":{"bytes":1,"crc32":2}}"#));
        assert!(ok.is_ok(), "{ok:?}");
        let e = Manifest::parse(&manifest(r#"{"../x":{"bytes":1,"crc32":2}}"#)).unwrap_err();
        assert!(e.contains("leaves the checkpoint"), "{e}");
        let e =
            Manifest::parse(&manifest("{}").replace("\"version\":1", "\"version\":9")).unwrap_err();
        assert!(e.contains("version 9"), "{e}");
        assert!(Manifest::parse("{").is_err());
    }
}
