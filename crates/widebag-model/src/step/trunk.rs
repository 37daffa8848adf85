//! The trunk's side of the backward pass: the gradients autodiff holds for the gathered rows and
//! the trunk's parameters, and checkpointing's recompute of the bag and the MLP from the output's
//! `dL/dh` (`model.checkpointing = "mlp"`); the host kernel's output gradients as tensors.

use burn::tensor::{Gradients, Tensor};
use widebag_config::Checkpointing;

use crate::cpu::softmax_ce::ChunkGrad;
use crate::model::WideModel;
use crate::model::bag::{BagInputs, BandIds, BandSegment};
use crate::model::dense_optim::DenseParam;
use crate::model::params::{DenseParams, Linear, OutputParams};
use crate::step::memory::{MemoryMeter, Point};
use crate::tensors::floats;

impl WideModel {
    /// What autodiff's `grads` hold for the rows (the gradient leaves `rows`, one per segment of
    /// `ids`) and the trunk's parameters (`params`), with the output layer's gradients `output`.
    pub(crate) fn trunk_grads(
        &self,
        ids: &BandIds,
        rows: &[Tensor<2>],
        params: &DenseParams<Tensor<2>>,
        grads: &Gradients,
        output: OutputParams<Tensor<2>>,
    ) -> (Vec<(BandSegment, Tensor<2>)>, DenseParams<Tensor<2>>) {
        let rows_grad = ids
            .segments
            .iter()
            .zip(rows)
            .map(|(s, leaf)| (*s, self.row_grad(s, leaf, grads)))
            .collect();
        let grad = |leaf: &Tensor<2>| leaf_grad(leaf, grads);
        let dense = DenseParams {
            bag_bias: grad(&params.bag_bias),
            projections: params.projections.iter().map(grad).collect(),
            hidden: params.hidden.iter().map(|l| l.map(grad)).collect(),
            output,
        };
        (rows_grad, dense)
    }

    /// Whether the trunk is checkpointed (`model.checkpointing = "mlp"`): run off the graph in
    /// the forward pass and recomputed on autodiff in backward.
    pub(crate) fn recomputes_trunk(&self) -> bool {
        self.spec.checkpointing == Checkpointing::Mlp
    }

    /// Step 4b with checkpointing: the bag, the projections and the MLP again from the
    /// gathered `rows`, now gradient leaves, on autodiff (its saved activations alive at
    /// `Point::BackwardInput`), differentiated from `h`'s gradient in `grads`. Returns the
    /// gradients with the leaves they belong to: the rows and the trunk's parameters (the
    /// output layer left empty).
    pub(crate) fn recompute_trunk(
        &self,
        h: &Tensor<2>,
        grads: &Gradients,
        rows: &[Tensor<2>],
        inputs: &BagInputs,
        meter: &mut MemoryMeter,
    ) -> (Gradients, Vec<Tensor<2>>, DenseParams<Tensor<2>>) {
        let dh = leaf_grad(h, grads);
        let rows: Vec<Tensor<2>> = rows.iter().map(|r| r.clone().require_grad()).collect();
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let d = &self.dense;
        let params = DenseParams {
            bag_bias: leaf(&d.bag_bias),
            projections: d.projections.iter().map(leaf).collect(),
            hidden: d.hidden.iter().map(|l| l.map(leaf)).collect(),
            output: OutputParams::Full { chunks: Vec::new() },
        };
        let h = self.forward_hidden(&rows, &params, inputs);
        meter.probe(Point::BackwardInput);
        let grads = (h * Tensor::from_inner(dh)).sum().backward();
        (grads, rows, params)
    }
}

/// The host kernel's per-chunk output gradients as `[hidden, n]` and `[1, n]` tensors.
pub(crate) fn chunk_tensors(
    out: Vec<ChunkGrad>,
    hidden: usize,
    device: &burn::tensor::Device,
) -> Vec<Linear<Tensor<2>>> {
    out.into_iter()
        .map(|g| {
            let n = g.db.len();
            Linear {
                weight: floats(g.dw, [hidden, n], device),
                bias: floats(g.db, [1, n], device),
            }
        })
        .collect()
}

/// A leaf's gradient, zeros when the loss did not reach it.
pub(crate) fn leaf_grad(leaf: &Tensor<2>, grads: &Gradients) -> Tensor<2> {
    leaf.grad(grads)
        .unwrap_or_else(|| leaf.clone().inner().zeros_like())
}
