//! CSR mini-batches for very wide sparse inputs: validated rows, their targets, and the batch's
//! sorted unique ids with each entry's local position among them.
//!
//! A [`CsrBatch`] is what the embedding-bag layer consumes. It holds an `n_rows × width` sprs
//! matrix in CSR form (column ids sorted within each row, duplicates summed), one target per row,
//! the sorted unique ids of the batch and, for every stored entry, the index of its id in that
//! unique list. Assembly ([`CsrBatch::from_rows`]) normalises the rows in parallel with rayon.

mod batch;
mod error;
mod row;
mod targets;
mod transform;

pub use batch::CsrBatch;
pub use error::CsrError;
pub use row::SparseRow;
pub use targets::{RowTarget, Targets};
pub use transform::DropoutMask;
