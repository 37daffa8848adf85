//! A run directory, as `train --out` and every sweep run write it: `config.toml` (the config
//! that reproduces the run), `ledger.json`, `plan.json`, `metrics.jsonl` (one line per step and
//! one per evaluation), `summary.json` (the run's summary) and `checkpoints/`. Files are written
//! atomically; the metrics log is appended as the run goes and, on resume, cut back to the
//! checkpoint's step.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use widebag_config::Config;
use widebag_model::StepStats;

/// A run's directory.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub path: PathBuf,
}

impl RunDir {
    /// The directory at `path`, created if needed.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Where checkpoints go.
    pub fn checkpoints(&self) -> PathBuf {
        self.file("checkpoints")
    }

    /// Writes `name` atomically.
    pub fn write(&self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.file(name);
        widebag_data::atomic::write_atomic(&path, bytes)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Writes `value` as pretty JSON to `name`, atomically.
    pub fn write_json(&self, name: &str, value: &impl Serialize) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(value).expect("serialises");
        self.write(name, json.as_bytes())
    }

    /// Writes `config.toml` ([`config_text`]).
    pub fn write_config(&self, config: &Config) -> anyhow::Result<()> {
        self.write("config.toml", config_text(config)?.as_bytes())
    }

    /// Opens `metrics.jsonl` for appending: a new log, or (resuming after `keep_through`) the
    /// lines of steps up to that step kept and the rest dropped.
    pub fn metrics(&self, keep_through: Option<u64>) -> anyhow::Result<MetricsLog> {
        let path = self.file("metrics.jsonl");
        let kept = match keep_through {
            Some(step) => std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v.get("step")?.as_u64())
                        .is_some_and(|s| s <= step)
                })
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            None => String::new(),
        };
        widebag_data::atomic::write_atomic(&path, kept.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(MetricsLog {
            path,
            out: std::io::BufWriter::new(file),
            error: None,
        })
    }
}

/// A config as `config.toml` holds it (`train.steps` left out when `train.epochs` replaces it).
pub fn config_text(config: &Config) -> anyhow::Result<String> {
    let mut table = toml::Table::try_from(config).context("serialising the config")?;
    if config.train.epochs.is_some()
        && let Some(toml::Value::Table(train)) = table.get_mut("train")
    {
        train.remove("steps");
    }
    toml::to_string(&table).context("serialising the config")
}

/// `metrics.jsonl`: a line per step (`step`, `epoch`, `loss`, `lr`, `step_s`,
/// `examples_per_s`, the device's `peak_in_use_bytes`, the process's `heap_in_use_bytes` and
/// `rss_bytes` now) and a line per evaluation (`step`, `epoch`, `eval`).
pub struct MetricsLog {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    error: Option<std::io::Error>,
}

impl MetricsLog {
    pub fn step(&mut self, s: &StepStats) {
        let line = serde_json::json!({
            "step": s.step,
            "epoch": s.epoch,
            "loss": s.loss,
            "lr": s.lr,
            "step_s": s.step_s,
            "examples_per_s": s.n_rows as f64 / s.step_s.max(1e-12),
            "peak_in_use_bytes": s.peak_in_use_bytes,
            "heap_in_use_bytes": crate::heap::in_use_bytes(),
            "rss_bytes": crate::heap::rss_bytes(),
        });
        self.line(&line);
        if let Some(report) = &s.eval {
            let line = serde_json::json!({"step": s.step, "epoch": s.epoch, "eval": report});
            self.line(&line);
        }
        if s.checkpoint_due {
            // The lines a checkpoint covers are on disk before it is written.
            if let Err(e) = self
                .out
                .flush()
                .and_then(|_| self.out.get_ref().sync_data())
            {
                self.error.get_or_insert(e);
            }
        }
    }

    fn line(&mut self, line: &serde_json::Value) {
        if let Err(e) = writeln!(self.out, "{line}") {
            self.error.get_or_insert(e);
        }
    }

    /// Flushes and reports the first write error, naming the file.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.out
            .flush()
            .and(self.error.map_or(Ok(()), Err))
            .with_context(|| format!("writing {}", self.path.display()))
    }
}
