//! The sparse model's numbers recomputed through the dense layout ([`DenseModel`]: multi-hot input
//! times a full weight, full logits and `log_softmax`, all through autodiff), to check the sparse
//! path's loss and gradients at small widths.

use burn::tensor::Tensor;
use widebag_config::{DenseOptim, OptimConfig};
use widebag_csr::CsrBatch;

use crate::ModelError;
use crate::dense::DenseModel;
use crate::model::WideModel;
use crate::tensors::to_vec;

/// Loss and gradients of the dense formulation.
pub struct DenseReference {
    pub loss: f32,
    /// Gradient of the whole `[width, dim]` table, row-major.
    pub table_grad: Vec<f32>,
    /// One per dense parameter, in [`WideModel::dense`] order.
    pub dense_grads: Vec<Vec<f32>>,
}

pub fn dense_reference(model: &WideModel, batch: &CsrBatch) -> Result<DenseReference, ModelError> {
    let optim = OptimConfig {
        dense: DenseOptim::Sgd,
        ..OptimConfig::default()
    };
    let mut dense = DenseModel::from_wide(model, &optim)?;
    // The reference checks numbers, not buffer limits.
    dense.spec.max_buffer_bytes = u64::MAX;
    let out = dense.gradients(batch)?;
    let n = out.grads.len();
    let (w, b) = (&out.grads[n - 2], &out.grads[n - 1]);
    let mut dense_grads = Vec::with_capacity(model.dense.len());
    for g in &out.grads[1..n - 2] {
        dense_grads.push(to_vec(g.clone())?);
    }
    for chunk in &model.chunks {
        let part = |t: &Tensor<2>| to_vec(t.clone().narrow(1, chunk.offset, chunk.n));
        dense_grads.push(part(w)?);
        dense_grads.push(part(b)?);
    }
    Ok(DenseReference {
        loss: out.loss,
        table_grad: to_vec(out.grads[0].clone())?,
        dense_grads,
    })
}
