//! The full softmax's parameters, whichever path computes it: the weight and bias cut into
//! class chunks (`[last hidden, n]` and `[1, n]` each, at their global class offsets; across
//! ranks, this rank's block of classes), and what every full-softmax layer does with them alike:
//! list them, check a batch, and take a rank's columns back into the whole layer.

use burn::tensor::{Device, Tensor};
use widebag_config::DenseOptim;
use widebag_ledger::shapes::{ClassChunk, class_chunks};

use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::params::Linear;
use crate::params::init::{Init, full_output};
use crate::ranks::Ranks;
use crate::spec::ModelSpec;
use crate::tensors::{floats, to_vec};

/// The full softmax's class chunks and their parameters.
pub struct FullParams {
    pub chunks: Vec<ClassChunk>,
    pub layer: Vec<Linear<DenseParam>>,
}

impl FullParams {
    /// Rank `ranks.rank`'s block of `spec`'s classes in chunks of `spec.class_chunk` (all of
    /// them for one rank), each chunk at its global offset so it starts as the whole layer's
    /// same columns.
    pub fn new(
        spec: &ModelSpec,
        ranks: Ranks,
        optim: DenseOptim,
        init: Init,
        device: &Device,
    ) -> Self {
        let block = ranks.class_block(spec.n_classes);
        let chunks: Vec<ClassChunk> = class_chunks(block.len(), spec.class_chunk)
            .into_iter()
            .map(|c| ClassChunk {
                offset: c.offset + block.start,
                n: c.n,
            })
            .collect();
        let layer = full_output(spec, &chunks, optim, init, device);
        Self { chunks, layer }
    }

    /// Every parameter: each chunk's weight, then its bias.
    pub fn params(&self) -> Vec<&DenseParam> {
        self.layer
            .iter()
            .flat_map(|l| [&l.weight, &l.bias])
            .collect()
    }

    /// [`Self::params`] by mutable reference.
    pub fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.layer
            .iter_mut()
            .flat_map(|l| [&mut l.weight, &mut l.bias])
            .collect()
    }

    /// The `(weight, bias)` pairs lent to the host kernels.
    pub fn pairs(&mut self) -> Vec<(&mut DenseParam, &mut DenseParam)> {
        self.layer
            .iter_mut()
            .map(|l| (&mut l.weight, &mut l.bias))
            .collect()
    }

    /// Each chunk's values as plain tensors (handles, no copy).
    pub fn tensors(&self) -> Vec<(Tensor<2>, Tensor<2>)> {
        self.layer
            .iter()
            .map(|l| (l.weight.value.clone(), l.bias.value.clone()))
            .collect()
    }

    /// The columns of `part` (another rank's block of the same layer: chunks at their global
    /// offsets, weights `[last, n]`) written into this layer's chunks where they fall.
    pub fn gather_owned(
        &mut self,
        part_chunks: &[ClassChunk],
        part: &[&DenseParam],
    ) -> Result<(), ModelError> {
        for (c, pair) in part_chunks.iter().zip(part.chunks(2)) {
            let w = to_vec(pair[0].value.clone())?;
            let b = to_vec(pair[1].value.clone())?;
            let last = w.len() / c.n.max(1);
            for (mine, lin) in self.chunks.iter().zip(self.layer.iter_mut()) {
                let start = c.offset.max(mine.offset);
                let end = (c.offset + c.n).min(mine.offset + mine.n);
                if start >= end {
                    continue;
                }
                let device = lin.weight.value.device();
                let mut to_w = to_vec(lin.weight.value.clone())?;
                let mut to_b = to_vec(lin.bias.value.clone())?;
                for row in 0..last {
                    let from = row * c.n + start - c.offset;
                    let to = row * mine.n + start - mine.offset;
                    to_w[to..to + end - start].copy_from_slice(&w[from..from + end - start]);
                }
                to_b[start - mine.offset..end - mine.offset]
                    .copy_from_slice(&b[start - c.offset..end - c.offset]);
                lin.weight.value = floats(to_w, [last, mine.n], &device);
                lin.bias.value = floats(to_b, [1, mine.n], &device);
            }
        }
        Ok(())
    }
}
