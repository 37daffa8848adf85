//! `Config`'s loading and checking: the command line's loader (the built-in defaults, the TOML
//! file or the quickstart, then `key=value` overrides), validated once, an error naming the key.
//! A configuration without a data file is checked as one whose rows `widebag.train` will be
//! given (keys that need a data file, such as `train.epochs`, are then valid): training it
//! without rows is refused by the command line's own check.

use std::path::Path;

use pyo3::prelude::*;

use crate::errors;

/// `data.path` while a configuration waits for the rows Python will give it.
pub const ROWS_TO_COME: &str = "<rows given to widebag.train>";

/// The validated configuration of `path` (else the quickstart) with `overrides`
/// (`key=value`, values in TOML), as TOML text.
#[pyfunction]
#[pyo3(signature = (path, overrides))]
pub fn load_config(path: Option<String>, overrides: Vec<String>) -> PyResult<String> {
    let file = path.as_deref().map(Path::new);
    let config = match widebag_config::load(file, &overrides) {
        Ok(c) => c,
        Err(e) => {
            let mut rows = overrides.clone();
            rows.push(format!("data.path=\"{ROWS_TO_COME}\""));
            let with_path = widebag_config::load(file, &rows);
            rows.push("data.format=\"libsvm\"".into());
            let with_format = || widebag_config::load(file, &rows);
            with_path
                .or_else(|_| with_format())
                .map_err(|_| errors::usage(e.to_string()))?
        }
    };
    toml::to_string(&config).map_err(|e| errors::usage(format!("the configuration: {e}")))
}

/// Every key a configuration has, dotted (`train.epochs`).
#[pyfunction]
pub fn known_keys() -> Vec<String> {
    widebag_config::known_keys()
}
