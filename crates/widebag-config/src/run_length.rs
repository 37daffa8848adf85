//! The keys that only lengthen or re-time a run — how many steps or epochs it takes, how often it
//! evaluates and checkpoints — and the config without them: what a run resumed with
//! `train --resume DIR --set train.epochs=20` may change, and what stays the same run.

use crate::schema::Config;

/// The keys a resumed run may change: they only lengthen it or re-time its evaluations and
/// checkpoints. Every other key changes the model, the data or the optimizer.
pub const RUN_LENGTH_KEYS: [&str; 4] = [
    "train.epochs",
    "train.steps",
    "train.eval_every",
    "train.checkpoint_every",
];

/// Whether `key` is one of [`RUN_LENGTH_KEYS`].
pub fn is_run_length_key(key: &str) -> bool {
    RUN_LENGTH_KEYS.contains(&key)
}

/// `config` with its run length and timing ([`RUN_LENGTH_KEYS`]) at the defaults: two configs
/// of the same run, one resumed for longer, agree on it.
pub fn without_run_length(config: &Config) -> Config {
    let defaults = Config::default();
    let mut c = config.clone();
    c.train.epochs = defaults.train.epochs;
    c.train.steps = defaults.train.steps;
    c.train.eval_every = defaults.train.eval_every;
    c.train.checkpoint_every = defaults.train.checkpoint_every;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_length_key_is_a_key_and_the_rest_of_the_config_is_kept() {
        let known = crate::known_keys();
        for key in RUN_LENGTH_KEYS {
            assert!(known.iter().any(|k| k == key), "{key} is not a config key");
        }
        let mut longer = Config::default();
        longer.train.steps = 4_000;
        longer.train.epochs = Some(20);
        longer.train.eval_every = 3;
        longer.train.checkpoint_every = 7;
        assert_eq!(
            without_run_length(&longer),
            without_run_length(&Config::default())
        );
        longer.optim.lr = 0.5;
        assert_ne!(
            without_run_length(&longer),
            without_run_length(&Config::default())
        );
    }
}
