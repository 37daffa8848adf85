//! A command's failure and the exit code it maps to: 1 the run failed, 2 usage or configuration,
//! 3 does not fit.

/// A failure with the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
    /// The command already printed its `--json` object for this outcome (a plan that does not
    /// fit prints the plan): the error is not printed as a second object.
    pub reported: bool,
}

impl Failure {
    /// A bad flag, configuration or input (exit 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
            reported: false,
        }
    }

    /// The run itself failed (exit 1).
    pub fn run(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 1,
            error: error.into(),
            reported: false,
        }
    }

    /// The same failure, its `--json` object already printed by the command.
    pub fn reported(self) -> Self {
        Self {
            reported: true,
            ..self
        }
    }

    /// The run does not fit the budget or the device (exit 3).
    pub fn does_not_fit(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 3,
            error: error.into(),
            reported: false,
        }
    }
}

/// The error and its causes on one line, each cause once: a cause whose text an outer message
/// already holds (libraries put their source's text in their own message) is not repeated.
pub fn render(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// What an exit code means, in the words `--json` reports it with.
pub fn meaning(code: u8) -> &'static str {
    match code {
        0 => "ok",
        1 => "the run failed",
        2 => "usage or configuration error",
        3 => "does not fit",
        _ => "failed",
    }
}

/// The one JSON object `--json` prints on stdout when a command fails: the exit code, its
/// meaning and the error on one line.
pub fn json(code: u8, error: &str) -> serde_json::Value {
    serde_json::json!({
        "status": "error",
        "exit_code": code,
        "meaning": meaning(code),
        "error": error,
    })
}

/// What every command returns.
pub type Outcome = Result<(), Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_appears_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let inner = anyhow::Error::new(io).context("x.svm: No such file or directory");
        let e = inner.context("data.path: x.svm: No such file or directory");
        assert_eq!(render(&e), "data.path: x.svm: No such file or directory");
        let e = anyhow::anyhow!("disk full")
            .context("writing a.json")
            .context("training");
        assert_eq!(render(&e), "training: writing a.json: disk full");
    }
}
