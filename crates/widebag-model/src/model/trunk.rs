//! The trunk's forward pass: the embedding bag of the gathered rows, its bias and activation,
//! then each hidden layer, on the autodiff device, up to the last hidden representation `h` the
//! output layer reads.

use burn::tensor::Tensor;

use crate::model::SparseModel;
use crate::model::bag::BagInputs;
use crate::params::{Linear, TrunkParams};
use crate::tensors::activate;

impl SparseModel {
    /// Forward through the bag and the hidden layers, on the autodiff device, with `params`'
    /// bag bias, projections and hidden layers.
    pub(crate) fn forward_hidden(
        &self,
        rows: &[Tensor<2>],
        params: &TrunkParams<Tensor<2>>,
        inputs: &BagInputs,
    ) -> Tensor<2> {
        let x = self.bag_sum(rows, &params.projections, inputs);
        let acts = &self.spec.activations;
        let mut h = activate(x + params.bag_bias.clone(), acts[0]);
        for (Linear { weight, bias }, &act) in params.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        h
    }
}
