//! A command's failure and the exit code it maps to: 1 the run failed, 2 usage or configuration,
//! 3 does not fit.

/// A failure with the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// A bad flag, configuration or input (exit 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }

    /// The run itself failed (exit 1).
    pub fn run(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }

    /// The run does not fit the budget or the device (exit 3).
    pub fn does_not_fit(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 3,
            error: error.into(),
        }
    }
}

/// What every command returns.
pub type Outcome = Result<(), Failure>;
