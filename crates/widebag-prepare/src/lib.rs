//! Run preparation (no burn): from a validated `Config` to a `Prepared` run — data loaded (or
//! the synthetic stream), ids renumbered by frequency, `"auto"` band cutoffs chosen against byte
//! budgets, bands resolved once, held-out rows split off.

pub mod bands;
mod error;
mod file;
mod given;
mod original_ids;
mod prepared;
mod source;
mod split;

pub use bands::{AUTO_BANDS, BandReport};
pub use error::PrepareError;
pub use file::{open_data, with_packed_settings};
pub use given::hold_out;
pub use original_ids::original_ids;
pub use prepared::{
    DataSummary, PrepareOptions, Prepared, SYNTHETIC_EVAL_FIRST_ROW, Sidecars, stats_for,
};
pub use source::{source, synthetic_spec};
