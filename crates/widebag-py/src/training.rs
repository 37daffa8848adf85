//! `widebag.train`: the command line's `train` request (from the same arguments), run in this
//! process with the GIL released. Each step calls back into Python with the step's stats (the
//! progress bar) and looks for a signal: Ctrl-C stops the run at that step's boundary, with a
//! checkpoint of it in the run directory, and raises `KeyboardInterrupt` naming it.

use std::sync::Mutex;

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use widebag::commands::train::{Finished, train_one};
use widebag::run::hooks::Hooks;
use widebag_model::{ModelError, StepStats, StopRequest};

use crate::errors;
use crate::reports::command;

/// Trains `argv`'s `widebag train` (`--out DIR` always: the run directory is what Python reads
/// back), calling `on_step(stats_json, last_step)` after every step. Returns the summary's
/// JSON.
#[pyfunction]
#[pyo3(signature = (argv, on_step=None))]
pub fn train(py: Python<'_>, argv: Vec<String>, on_step: Option<Py<PyAny>>) -> PyResult<String> {
    let widebag::args::Command::Train(args) = command(argv)? else {
        return Err(errors::usage("not a train command"));
    };
    let req = widebag::request::train(&args).map_err(errors::failure)?;
    let stop = StopRequest::default();
    let raised: Mutex<Option<PyErr>> = Mutex::new(None);
    let finished = py.detach(|| {
        let watch = |s: &StepStats, total: u64| {
            let outcome = Python::attach(|py| -> PyResult<()> {
                if let Some(f) = &on_step {
                    let line = serde_json::to_string(s).unwrap_or_default();
                    f.call1(py, (line, total))?;
                }
                py.check_signals()
            });
            if let Err(e) = outcome {
                stop.raise();
                let mut slot = raised.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
            }
        };
        let hooks = Hooks {
            bar: false,
            on_step: Some(Box::new(watch)),
            stop: Some(stop.clone()),
        };
        train_one(&req, hooks)
    });
    let raised = raised.into_inner().unwrap_or_else(|p| p.into_inner());
    match finished {
        Ok(Finished::Trained(summary)) => {
            serde_json::to_string(&summary).map_err(|e| errors::usage(e.to_string()))
        }
        Ok(Finished::Complete { dir, step }) => Err(errors::usage(format!(
            "{} is complete: its last checkpoint is at step {step}",
            dir.display()
        ))),
        Err(f) => {
            let stopped = f.error.chain().find_map(|c| match c.downcast_ref() {
                Some(ModelError::Stopped { step, checkpoint }) => Some((*step, checkpoint.clone())),
                _ => None,
            });
            match (stopped, raised) {
                (Some((step, checkpoint)), Some(e)) => {
                    let at = checkpoint
                        .map_or(String::new(), |c| format!(": checkpoint {}", c.display()));
                    let is_interrupt =
                        Python::attach(|py| e.is_instance_of::<PyKeyboardInterrupt>(py));
                    match is_interrupt {
                        true => Err(PyKeyboardInterrupt::new_err(format!(
                            "widebag: stopped after step {step}{at}"
                        ))),
                        false => Err(e),
                    }
                }
                _ => Err(errors::failure(f)),
            }
        }
    }
}
