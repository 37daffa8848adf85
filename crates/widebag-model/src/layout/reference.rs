//! The sparse model's numbers recomputed through the dense layout ([`DenseModel`]: multi-hot input
//! times a full weight, full logits, all through autodiff), to check the sparse path's loss and
//! gradients at small widths (tests only: feature `test-support`).

use burn::tensor::Tensor;
use widebag_config::{DenseOptim, OptimConfig};
use widebag_csr::CsrBatch;

use crate::error::ModelError;
use crate::layout::dense::DenseModel;
use crate::model::SparseModel;
use crate::optim::dense::DenseParam;
use crate::params::{Linear, TrunkParams};
use crate::tensors::{floats, to_vec};

/// Loss and gradients of the dense formulation.
pub struct DenseReference {
    pub loss: f32,
    /// Gradient of the whole `[width, dim]` table, row-major.
    pub table_grad: Vec<f32>,
    /// One per dense parameter of the sparse model, in [`SparseModel::dense_params`] order.
    pub dense_grads: Vec<Vec<f32>>,
}

/// The dense layout holding `model`'s current weights (the table as one weight, the output
/// chunks concatenated), with SGD state and no buffer limit.
pub fn dense_from_wide(model: &SparseModel) -> Result<DenseModel, ModelError> {
    let s = &model.spec;
    if s.bands.output_split() {
        return Err(ModelError::Shape(
            "the dense layout is the unsplit baseline: it has no adaptive softmax".into(),
        ));
    }
    if model.bands.len() > 1 {
        return Err(ModelError::Shape(
            "the dense layout is the unsplit baseline: it has no head/tail bands".into(),
        ));
    }
    let device = model.device().clone();
    let sgd = |name: &str, value: Tensor<2>| DenseParam::new(name, value, DenseOptim::Sgd);
    let table = floats(model.bands[0].table.to_vec()?, [s.width, s.dim], &device);
    // The output layer's chunks, each weight then its bias, joined along the classes.
    let chunks = model.output.params();
    let cat = |first: usize| -> Tensor<2> {
        let parts: Vec<Tensor<2>> = chunks
            .iter()
            .skip(first)
            .step_by(2)
            .map(|p| p.value.clone())
            .collect();
        Tensor::cat(parts, 1)
    };
    let params = TrunkParams {
        bag_bias: sgd("input.bias", model.trunk.bag_bias.value.clone()),
        projections: Vec::new(),
        hidden: (model.trunk.hidden.iter())
            .map(|l| l.map(|p| sgd(&p.name, p.value.clone())))
            .collect(),
    };
    let output = Linear {
        weight: sgd("output.weight", cat(0)),
        bias: sgd("output.bias", cat(1)),
    };
    let optim = OptimConfig {
        dense: DenseOptim::Sgd,
        ..OptimConfig::default()
    };
    // The reference checks numbers, not buffer limits.
    let mut spec = s.clone();
    spec.max_buffer_bytes = u64::MAX;
    let input_weight = sgd("input.weight", table);
    Ok(DenseModel::from_parts(
        &spec,
        input_weight,
        (params, output),
        &optim,
        device,
    ))
}

/// The dense formulation's loss and gradients of `batch` at `model`'s weights.
pub fn dense_reference(
    model: &SparseModel,
    batch: &CsrBatch,
) -> Result<DenseReference, ModelError> {
    let out = dense_from_wide(model)?.gradients(batch)?;
    let mut dense_grads = vec![to_vec(out.trunk.bag_bias)?];
    for l in out.trunk.hidden {
        dense_grads.push(to_vec(l.weight)?);
        dense_grads.push(to_vec(l.bias)?);
    }
    let output = out
        .output
        .as_ref()
        .expect("gradients() returns the output layer's");
    for chunk in model.output.class_chunks() {
        let part = |t: &Tensor<2>| to_vec(t.clone().narrow(1, chunk.offset, chunk.n));
        dense_grads.push(part(&output.weight)?);
        dense_grads.push(part(&output.bias)?);
    }
    Ok(DenseReference {
        loss: out.loss,
        table_grad: to_vec(out.input_weight)?,
        dense_grads,
    })
}
