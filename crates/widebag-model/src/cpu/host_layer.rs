//! An output layer's softmax weights held as host matrices for a pass on flex (the full
//! softmax's class chunks, or the adaptive softmax's head and tail clusters): taken out of their
//! parameters' tensors without a copy for the pass, and put back before anything else reads
//! them.

use burn::tensor::{Device, Tensor};

use crate::error::ModelError;
use crate::optim::dense::DenseParam;

use super::access::HostMatrix;
use super::blocks::ChunkRef;

/// Each class chunk's `(weight [hidden, n], bias [1, n])`; for the adaptive softmax the head
/// first, then each tail cluster's.
pub struct HostLayer {
    chunks: Vec<(HostMatrix, HostMatrix)>,
}

impl HostLayer {
    /// The buffers of each `(weight, bias)` pair, moved out of their parameters (empty tensors
    /// stand in until [`Self::restore`]).
    pub fn take(pairs: Vec<(&mut DenseParam, &mut DenseParam)>) -> Result<Self, ModelError> {
        let chunks = pairs
            .into_iter()
            .map(|(w, b)| Ok((take(w)?, take(b)?)))
            .collect::<Result<_, ModelError>>()?;
        Ok(Self { chunks })
    }

    /// Puts the buffers back into the pairs [`Self::take`] took them from.
    pub fn restore(self, pairs: Vec<(&mut DenseParam, &mut DenseParam)>, device: &Device) {
        for ((w, b), (hw, hb)) in pairs.into_iter().zip(self.chunks) {
            w.value = hw.into_tensor(device);
            b.value = hb.into_tensor(device);
        }
    }

    pub fn refs(&self) -> Vec<ChunkRef<'_>> {
        self.chunks
            .iter()
            .map(|(w, b)| ChunkRef {
                w: w.as_slice(),
                b: b.as_slice(),
            })
            .collect()
    }

    /// The full softmax's chunks, or the adaptive softmax's head then its clusters.
    pub fn chunk(&self, k: usize) -> ChunkRef<'_> {
        let (w, b) = &self.chunks[k];
        ChunkRef {
            w: w.as_slice(),
            b: b.as_slice(),
        }
    }

    /// `[rows, cols]` of chunk `k`'s weight.
    pub fn weight_shape(&self, k: usize) -> [usize; 2] {
        [self.chunks[k].0.rows, self.chunks[k].0.cols]
    }

    /// Classes of each chunk.
    pub fn chunk_classes(&self) -> Vec<usize> {
        self.chunks.iter().map(|(_, b)| b.cols).collect()
    }
}

/// `p`'s values, an empty tensor standing in.
fn take(p: &mut DenseParam) -> Result<HostMatrix, ModelError> {
    let device = p.value.device();
    HostMatrix::take(std::mem::replace(
        &mut p.value,
        Tensor::empty([0, 0], &device),
    ))
}
