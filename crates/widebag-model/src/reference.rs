//! The same model written densely, the way a PyTorch user would: a multi-hot input matrix times
//! a full weight, full logits and `log_softmax`, all through autodiff. Used to check the sparse
//! path's loss and gradients at small widths.

use burn::tensor::Tensor;
use burn::tensor::activation::{log_softmax, relu};
use widebag_csr::CsrBatch;

use crate::ModelError;
use crate::model::WideModel;
use crate::tensors::{floats, scalar, to_vec};

/// Loss and gradients of the dense formulation.
pub struct DenseReference {
    pub loss: f32,
    /// Gradient of the whole `[width, dim]` table, row-major.
    pub table_grad: Vec<f32>,
    /// One per dense parameter, in [`WideModel::dense`] order.
    pub dense_grads: Vec<Vec<f32>>,
}

/// Dense targets `[B, n_classes]`.
fn dense_targets(batch: &CsrBatch, n_classes: usize) -> Vec<f32> {
    let t = batch.targets();
    let mut y = vec![0.0; batch.n_rows() * n_classes];
    for r in 0..batch.n_rows() {
        for k in t.row_ptr[r]..t.row_ptr[r + 1] {
            y[r * n_classes + t.classes[k] as usize] += t.weights[k];
        }
    }
    y
}

pub fn dense_reference(model: &WideModel, batch: &CsrBatch) -> Result<DenseReference, ModelError> {
    let spec = &model.spec;
    let ad = model.device().clone().autodiff();
    let n_rows = batch.n_rows();
    let x = floats(batch.to_dense(), [n_rows, spec.width], &ad);
    let table = floats(model.table.to_vec()?, [spec.width, spec.dim], &ad).require_grad();
    let leaves: Vec<Tensor<2>> = model
        .dense
        .iter()
        .map(|p| p.value.clone().autodiff().require_grad())
        .collect();
    let mut h = relu(x.matmul(table.clone()) + leaves[0].clone());
    for layer in 0..spec.hidden.len() {
        h = relu(h.matmul(leaves[1 + 2 * layer].clone()) + leaves[2 + 2 * layer].clone());
    }
    let out = &leaves[model.output_start()..];
    let w = Tensor::cat(out.iter().step_by(2).cloned().collect(), 1);
    let b = Tensor::cat(out.iter().skip(1).step_by(2).cloned().collect(), 1);
    let logp = log_softmax(h.matmul(w) + b, 1);
    let y = floats(
        dense_targets(batch, spec.n_classes),
        [n_rows, spec.n_classes],
        &ad,
    );
    let loss = (logp * y).sum_dim(1).mean().neg().reshape([1]);
    let grads = loss.backward();
    let table_grad = to_vec(table.grad(&grads).expect("table is a leaf"))?;
    let dense_grads = leaves
        .iter()
        .map(|l| match l.grad(&grads) {
            Some(g) => to_vec(g),
            None => Ok(vec![0.0; l.shape().num_elements()]),
        })
        .collect::<Result<_, _>>()?;
    Ok(DenseReference {
        loss: scalar(loss.inner())?,
        table_grad,
        dense_grads,
    })
}
