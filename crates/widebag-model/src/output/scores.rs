//! What class scores an output layer hands to evaluation and prediction, one class chunk at a
//! time: the full softmax's logits by its class chunks (on flex by class blocks on the host),
//! the adaptive softmax's log-probabilities by head and tail cluster.

use burn::tensor::Tensor;

use crate::cpu::ChunkRef;
use crate::error::ModelError;

/// What the visited scores are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreKind {
    /// Logits: `log p = score − logsumexp(all scores of the row)`.
    Logits,
    /// Log-probabilities already.
    LogProbs,
}

/// Receives `[rows, n]` scores of the classes `class_start..class_start + n`.
pub type Visit<'a> = dyn FnMut(usize, Tensor<2>) -> Result<(), ModelError> + 'a;

/// Receives `h` (`[rows, hidden]`, row-major), `hidden`, the full softmax's class chunks and
/// each chunk's first class, to score them by class block.
pub type BlockScorer<'a> = dyn FnMut(&[f32], usize, &[ChunkRef], &[usize]) + 'a;

/// Whether a [`BlockScorer`] reads the layer's chunks, or has this evaluation's copy of them
/// already (a screened ranking's packed layer): then a layer that would copy its chunks to
/// lend them (cosine scores' unit columns) lends none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunksWanted {
    Lent,
    AlreadyPacked,
}
