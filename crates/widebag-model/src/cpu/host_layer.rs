//! The output layer's softmax weights held as host matrices for a step on flex (the full
//! softmax's class chunks, or the adaptive softmax's head and tail clusters, whose projections
//! stay on autodiff): taken out of the model's parameters without a copy for the step, and put
//! back before the dense update.

use burn::tensor::{Device, Tensor};

use crate::ModelError;
use crate::model::dense_optim::DenseParam;
use crate::model::params::OutputParams;

use super::access::HostMatrix;
use super::blocks::ChunkRef;

/// Each class chunk's `(weight [hidden, n], bias [1, n])`; for the adaptive softmax the head
/// first, then each tail cluster's.
pub struct HostLayer {
    chunks: Vec<(HostMatrix, HostMatrix)>,
}

impl HostLayer {
    /// The layer's buffers, moved out of `output` (empty tensors stand in until
    /// [`Self::restore`]).
    pub fn take(output: &mut OutputParams<DenseParam>) -> Result<Self, ModelError> {
        let chunks = pairs(output)
            .into_iter()
            .map(|(w, b)| Ok((take(w)?, take(b)?)))
            .collect::<Result<_, ModelError>>()?;
        Ok(Self { chunks })
    }

    /// A copy of the layer's values, leaving `output` as it is.
    pub fn copy_of(output: &OutputParams<DenseParam>) -> Result<Self, ModelError> {
        let mut output = output.clone();
        Self::take(&mut output)
    }

    /// Puts the buffers back where [`Self::take`] found them.
    pub fn restore(self, output: &mut OutputParams<DenseParam>, device: &Device) {
        for ((w, b), (hw, hb)) in pairs(output).into_iter().zip(self.chunks) {
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

/// The `(weight, bias)` pairs the host kernel takes: the full softmax's chunks, or the adaptive
/// softmax's head and each cluster's (not its projection).
fn pairs(output: &mut OutputParams<DenseParam>) -> Vec<(&mut DenseParam, &mut DenseParam)> {
    match output {
        OutputParams::Full { chunks } => chunks
            .iter_mut()
            .map(|l| (&mut l.weight, &mut l.bias))
            .collect(),
        OutputParams::Adaptive { head, clusters } => {
            std::iter::once((&mut head.weight, &mut head.bias))
                .chain(clusters.iter_mut().map(|c| (&mut c.weight, &mut c.bias)))
                .collect()
        }
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
