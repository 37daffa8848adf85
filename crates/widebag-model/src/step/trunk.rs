//! The trunk's side of the backward pass: the gradients autodiff holds for the gathered rows and
//! the trunk's parameters, and checkpointing's recompute of the bag and the MLP from the output's
//! `dL/dh` (`model.checkpointing = "mlp"`).

use burn::tensor::{Gradients, Tensor};
use widebag_config::Checkpointing;

use crate::model::SparseModel;
use crate::model::bag::BagInputs;
use crate::optim::dense::DenseParam;
use crate::params::TrunkParams;
use crate::probe::{Point, StepProbe};
use crate::table::bands::{BandIds, BandSegment};
use crate::tensors::leaf_grad;

impl SparseModel {
    /// What autodiff's `grads` hold for the rows (the gradient leaves `rows`, one per segment of
    /// `ids`) and the trunk's parameters (`params`).
    pub(crate) fn trunk_grads(
        &self,
        ids: &BandIds,
        rows: &[Tensor<2>],
        params: &TrunkParams<Tensor<2>>,
        grads: &Gradients,
    ) -> (Vec<(BandSegment, Tensor<2>)>, TrunkParams<Tensor<2>>) {
        let rows_grad = ids
            .segments
            .iter()
            .zip(rows)
            .map(|(s, leaf)| (*s, self.row_grad(s, leaf, grads)))
            .collect();
        let trunk = params.map(|leaf| leaf_grad(leaf, grads));
        (rows_grad, trunk)
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
        probe: &mut StepProbe,
    ) -> (Gradients, Vec<Tensor<2>>, TrunkParams<Tensor<2>>) {
        let dh = leaf_grad(h, grads);
        let rows: Vec<Tensor<2>> = rows.iter().map(|r| r.clone().require_grad()).collect();
        let params = self
            .trunk
            .map(|p: &DenseParam| p.value.clone().autodiff().require_grad());
        let h = self.forward_hidden(&rows, &params, inputs);
        probe.detail(Point::BackwardInput);
        let grads = (h * Tensor::from_inner(dh)).sum().backward();
        (grads, rows, params)
    }
}
