//! The `[data]` section's synthetic generator settings as a `widebag_data::SyntheticSpec`.

use widebag_data::SyntheticSpec;

use crate::Config;

/// Synthetic data settings from the config.
pub fn synthetic_spec(config: &Config) -> SyntheticSpec {
    SyntheticSpec {
        width: config.data.width,
        n_classes: config.data.n_classes(),
        nnz_mean: config.data.nnz,
        nnz_spread: config.data.nnz_spread,
        zipf_exponent: config.data.zipf_exponent,
        signal_share: config.data.signal_share,
        target: config.data.target,
        seed: config.train.seed,
    }
}
