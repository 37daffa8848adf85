//! A run resumed for longer (`train --resume DIR --set train.epochs=20`): what changed, said in
//! one line on stderr and kept at the top of the run's `config.toml` (which then holds the new
//! length, so a later `--resume` continues the longer run). The learning-rate schedule is a
//! function of the step and the run's length, so it spans the new end: stretched, as if the run
//! had been configured that long from its start (the steps already taken keep the rates they
//! had). The line gives the rate the next step takes and the one it would have taken.

use widebag_config::{Config, OptimConfig, RUN_LENGTH_KEYS};

use crate::run_dir::{RunDir, config_text};

/// The value of run-length key `key` in `config`, as config.toml writes it.
fn value(config: &Config, key: &str) -> String {
    let t = &config.train;
    match key {
        "train.epochs" => t.epochs.map_or("unset".to_string(), |e| e.to_string()),
        "train.steps" => t.steps.to_string(),
        "train.eval_every" => t.eval_every.to_string(),
        _ => t.checkpoint_every.to_string(),
    }
}

/// The rate the schedule of `optim` over `steps` steps gives step `step`.
fn rate(optim: &OptimConfig, steps: usize, step: u64) -> f64 {
    OptimConfig {
        schedule_steps: steps as u64,
        ..optim.clone()
    }
    .lr_at(step)
}

/// What lengthening `written` to `config` (resolved to `steps` steps, resumed after step
/// `from`) changes, in one line.
pub fn note(written: &Config, config: &Config, steps: usize, from: u64) -> String {
    let changed: Vec<String> = RUN_LENGTH_KEYS
        .iter()
        .filter(|k| value(written, k) != value(config, k))
        .map(|k| format!("{k} {} → {}", value(written, k), value(config, k)))
        .collect();
    // An epoch count scales the steps (the batches of an epoch stay the same).
    let old_steps = match (written.train.epochs, config.train.epochs) {
        (Some(old), Some(new)) if new > 0 => steps * old / new,
        _ => written.train.steps,
    };
    let (next, was) = (
        rate(&config.optim, steps, from + 1),
        rate(&config.optim, old_steps, from + 1),
    );
    let schedule = config.optim.schedule.name();
    format!(
        "lengthened at step {from}: {} (train.steps {old_steps} → {steps}); the {schedule} \
         learning-rate schedule spans the new end (stretched): step {} takes {next:.3e} where \
         it would have taken {was:.3e}",
        changed.join(", "),
        from + 1
    )
}

/// Writes `config` as `dir`'s `config.toml`, the notes already at its top kept and `note` added
/// under them.
pub fn record(dir: &RunDir, config: &Config, note: &str) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(dir.file("config.toml")).unwrap_or_default();
    let mut text: String = old
        .lines()
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&format!("# {note}\n"));
    text.push_str(&config_text(config)?);
    dir.write("config.toml", text.as_bytes())
}
