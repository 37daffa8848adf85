//! scipy.sparse `.npz` CSR files (as written by `scipy.sparse.save_npz`): their reader, writer and
//! streamed pack, over a small zip reader and writer (stored or deflate members, zip64 sizes) and
//! the `.npy` array format.
//!
//! `save_npz` stores `data`, `indices`, `indptr`, `shape` and `format` arrays. widebag writes the
//! same five (so scipy's `load_npz` reads its files) plus, when the rows carry targets other than
//! their own bag, `widebag_target_indptr`, `widebag_target_ids`, `widebag_target_weights` and
//! `widebag_n_classes`, which scipy ignores. A file without them gets each row's bag as target.
//! Errors name the file, the archive member and the byte offset.

mod elements;
mod fault;
mod npy;
pub mod pack;
pub mod read;
pub mod write;
mod zip;

pub use pack::pack_npz;
pub use read::read_npz;
pub use write::write_npz;

#[cfg(test)]
mod tests;
