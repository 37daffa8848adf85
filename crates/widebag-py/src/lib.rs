//! `widebag._native`, the extension module of the `widebag` Python package: the command line's
//! own requests and runs (the `widebag` library), called with the GIL released, with SciPy's CSR
//! arrays in and NumPy arrays out. The Python side (`python/widebag/`) shapes them into
//! `Config`, `explain`, `plan`, `train`, `Run` and `load`.

mod config;
mod csr;
mod errors;
mod pack;
mod reports;
mod saved;
mod training;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(config::load_config, m)?)?;
    m.add_function(wrap_pyfunction!(config::known_keys, m)?)?;
    m.add_function(wrap_pyfunction!(reports::explain, m)?)?;
    m.add_function(wrap_pyfunction!(reports::plan, m)?)?;
    m.add_function(wrap_pyfunction!(pack::pack_rows, m)?)?;
    m.add_function(wrap_pyfunction!(training::train, m)?)?;
    m.add_function(wrap_pyfunction!(saved::evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(saved::predict, m)?)?;
    m.add_function(wrap_pyfunction!(saved::export, m)?)?;
    Ok(())
}
