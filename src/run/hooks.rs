//! What a caller other than the terminal brings to a run ([`Hooks`]): a callback per step (the
//! Python package's progress bar and its check for Ctrl-C), whether the terminal's own bar
//! shows, and the request that stops the run at a step boundary, checkpointed.

use widebag_model::{StepStats, StopRequest};

/// A callback that sees every step's stats, and the run's steps.
pub type OnStep<'a> = Box<dyn FnMut(&StepStats, u64) + 'a>;

/// A run's hooks: the terminal's bar alone by default.
pub struct Hooks<'a> {
    /// Rank 0's progress bar on stderr.
    pub bar: bool,
    /// Called with every step's stats and the run's last step, after the metrics log has its
    /// line.
    pub on_step: Option<OnStep<'a>>,
    /// Raised, the run stops after the step it sees (`widebag_model::ModelError::Stopped`).
    pub stop: Option<StopRequest>,
}

impl Default for Hooks<'_> {
    fn default() -> Self {
        Self {
            bar: true,
            on_step: None,
            stop: None,
        }
    }
}
