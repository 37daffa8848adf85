//! The sparse model's numbers recomputed through the dense layout ([`DenseModel`]: multi-hot input
//! times a full weight, full logits, all through autodiff), to check the sparse path's loss and
//! gradients at small widths (tests only: feature `test-support`).

use burn::tensor::Tensor;
use widebag_config::{DenseOptim, OptimConfig};
use widebag_csr::CsrBatch;

use crate::ModelError;
use crate::layout::dense::DenseModel;
use crate::model::WideModel;
use crate::model::dense_optim::DenseParam;
use crate::model::params::{DenseParams, Linear, OutputParams};
use crate::tensors::{floats, to_vec};

/// Loss and gradients of the dense formulation.
pub struct DenseReference {
    pub loss: f32,
    /// Gradient of the whole `[width, dim]` table, row-major.
    pub table_grad: Vec<f32>,
    /// One per dense parameter of the sparse model, in [`DenseParams::iter`] order.
    pub dense_grads: Vec<Vec<f32>>,
}

/// The dense layout holding `model`'s current weights (the table as one weight, the output
/// chunks concatenated), with SGD state and no buffer limit.
pub fn dense_from_wide(model: &WideModel) -> Result<DenseModel, ModelError> {
    let s = &model.spec;
    let OutputParams::Full { chunks } = &model.dense.output else {
        return Err(ModelError::Shape(
            "the dense layout is the unsplit baseline: it has no adaptive softmax".into(),
        ));
    };
    if model.bands.len() > 1 {
        return Err(ModelError::Shape(
            "the dense layout is the unsplit baseline: it has no head/tail bands".into(),
        ));
    }
    let device = model.device().clone();
    let sgd = |name: &str, value: Tensor<2>| DenseParam::new(name, value, DenseOptim::Sgd);
    let table = floats(model.bands[0].table.to_vec()?, [s.width, s.dim], &device);
    let cat = |part: fn(&Linear<DenseParam>) -> &DenseParam| -> Tensor<2> {
        let parts: Vec<Tensor<2>> = chunks.iter().map(|l| part(l).value.clone()).collect();
        Tensor::cat(parts, 1)
    };
    let params = DenseParams {
        bag_bias: sgd("input.bias", model.dense.bag_bias.value.clone()),
        projections: Vec::new(),
        hidden: (model.dense.hidden.iter())
            .map(|l| l.map(|p| sgd(&p.name, p.value.clone())))
            .collect(),
        output: OutputParams::Full {
            chunks: vec![Linear {
                weight: sgd("output.weight", cat(|l| &l.weight)),
                bias: sgd("output.bias", cat(|l| &l.bias)),
            }],
        },
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
        params,
        &optim,
        device,
    ))
}

pub fn dense_reference(model: &WideModel, batch: &CsrBatch) -> Result<DenseReference, ModelError> {
    let out = dense_from_wide(model)?.gradients(batch)?;
    let mut dense_grads = vec![to_vec(out.dense.bag_bias)?];
    for l in out.dense.hidden {
        dense_grads.push(to_vec(l.weight)?);
        dense_grads.push(to_vec(l.bias)?);
    }
    let OutputParams::Full { chunks: output } = out.dense.output else {
        unreachable!("the dense layout's output is the full softmax");
    };
    for chunk in &model.chunks {
        let part = |t: &Tensor<2>| to_vec(t.clone().narrow(1, chunk.offset, chunk.n));
        dense_grads.push(part(&output[0].weight)?);
        dense_grads.push(part(&output[0].bias)?);
    }
    Ok(DenseReference {
        loss: out.loss,
        table_grad: to_vec(out.input_weight)?,
        dense_grads,
    })
}
