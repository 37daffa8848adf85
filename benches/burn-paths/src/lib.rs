//! Shared set-up of the burn-side benches (`benches/burn_paths.rs`); the package holds no
//! library code of its own.
