//! The optimizers' update rules, at the bottom of the crate: Adam's scalars for one step
//! ([`adam::AdamStep`]), the dense parameters with their optimizer state and their update on
//! tensors ([`dense::DenseParam`]), the same rule on some columns of one (`columns`), and the learning rate's schedule over the run. The table's
//! row-sparse optimizers, the host kernels and the models all apply these rules; none is written
//! twice.

pub mod adam;
pub mod columns;
pub mod dense;

use widebag_config::{Config, OptimConfig};

/// The optimizer settings with the schedule spanning the run's steps.
pub fn scheduled(config: &Config) -> OptimConfig {
    OptimConfig {
        schedule_steps: config.train.steps as u64,
        ..config.optim.clone()
    }
}
