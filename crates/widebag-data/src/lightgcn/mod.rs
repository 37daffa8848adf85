//! Interaction lists in the LightGCN format (`user item item …` per line), as in the Gowalla
//! split. Each user becomes one row: the bag of its training items (value 1), with the same bag
//! as target (autoencoder-style recommenders). The test file loads alongside, aligned by user, so
//! held-out items can be scored against the training bag.

pub mod line;
pub mod pack;
pub mod read;

pub use pack::pack_lightgcn;
pub use read::{Interactions, read_lightgcn};
