//! Host kernels for the flex CPU backend, where burn's op-by-op tensors allocate, fault in and
//! copy a `[batch, classes]` buffer for every step of the softmax: the full softmax's forward and
//! backward fused over cache-sized class blocks, the dense optimizers in one pass (over a whole
//! parameter, or over the columns a sampled output layer touched), and zero-copy access to a flex
//! tensor's buffer. The numbers are those of the tensor path (tested against it and against the
//! definitions).

pub mod access;
pub mod bf16_products;
mod blocks;
pub mod column_update;
pub mod dense_update;
pub mod host_layer;
pub mod rounding;
pub mod score_blocks;
pub mod softmax_ce;
pub mod vexp;

pub use blocks::ChunkRef;
