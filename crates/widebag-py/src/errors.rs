//! Failures as Python exceptions, with the command line's messages: a usage or configuration
//! failure (exit 2) as `widebag.ConfigError` (a `ValueError`), a run that does not fit (exit 3) as
//! `widebag.DoesNotFit`, a failed run (exit 1) as `widebag.RunFailed` (a `RuntimeError`); bad rows
//! as `widebag.DataError` (a `ValueError`). The classes live in `widebag/errors.py`.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;
use widebag::failure::Failure;

/// An exception of `widebag.errors`' class `name` carrying `message` (a `RuntimeError` should the
/// module be missing, as when the extension is imported alone).
pub fn raise(name: &str, message: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("widebag.errors")
            .and_then(|m| m.getattr(name))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(c) => PyErr::from_type(c, message),
            Err(_) if name == "ConfigError" || name == "DataError" => {
                PyValueError::new_err(message)
            }
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

/// The exception a command's failure maps to, by its exit code.
pub fn failure(f: Failure) -> PyErr {
    let message = widebag::failure::render(&f.error);
    let name = match f.code {
        2 => "ConfigError",
        3 => "DoesNotFit",
        _ => "RunFailed",
    };
    raise(name, message)
}

/// Bad rows handed over from Python (`widebag.DataError`).
pub fn data(message: impl Into<String>) -> PyErr {
    raise("DataError", message.into())
}

/// A bad argument or configuration (`widebag.ConfigError`).
pub fn usage(message: impl Into<String>) -> PyErr {
    raise("ConfigError", message.into())
}
