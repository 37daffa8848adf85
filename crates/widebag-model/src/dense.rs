//! The dense layout: the naive baseline written the way a PyTorch user writes it. A dense
//! `[batch, width]` input, a dense `[width, dim]` first-layer weight on autodiff, full
//! `[batch, classes]` logits, `log_softmax` and dense `[batch, classes]` targets; every weight
//! gets a dense gradient and the dense optimizer. Same parameters, initialisation and loss as the
//! sparse layout, so the two give the same numbers on the same batch.

use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor};
use widebag_config::{Config, OptimConfig};
use widebag_csr::CsrBatch;

use crate::memory::{MemoryMeter, Point};
use crate::model::{StepStats, WideModel};
use crate::optim::DenseParam;
use crate::tensors::{floats, scalar};
use crate::{Compute, ModelError};

/// Shapes of the dense model.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DenseSpec {
    pub width: usize,
    pub n_classes: usize,
    pub dim: usize,
    pub hidden: Vec<usize>,
    pub batch_size: usize,
    pub max_buffer_bytes: u64,
}

/// Loss and dense gradients of one batch, in [`DenseModel::params`] order.
pub struct DenseGrads {
    pub loss: f32,
    pub grads: Vec<Tensor<2>>,
}

/// The dense-layout model.
pub struct DenseModel {
    pub spec: DenseSpec,
    /// `input.weight [width, dim]`, `input.bias [1, dim]`, then `(weight, bias)` of each hidden
    /// layer, then `output.weight [last, classes]`, `output.bias [1, classes]`.
    pub params: Vec<DenseParam>,
    pub optim: OptimConfig,
    pub step: u64,
    device: Device,
}

/// Dense targets `[B, n_classes]`, row-major.
/// (`model.output = "full"`: each row's bag normalised to a distribution, as the sparse layout.)
pub fn dense_targets(batch: &CsrBatch, n_classes: usize) -> Vec<f32> {
    let t = &batch.targets().normalised();
    let mut y = vec![0.0; batch.n_rows() * n_classes];
    for r in 0..batch.n_rows() {
        for k in t.row_ptr[r]..t.row_ptr[r + 1] {
            y[r * n_classes + t.classes[k] as usize] += t.weights[k];
        }
    }
    y
}

impl DenseModel {
    /// The dense layout of the configured model, initialised exactly as the sparse layout.
    pub fn new(config: &Config, compute: &Compute) -> Result<Self, ModelError> {
        let s = crate::model::ModelSpec::new(config, compute);
        for (what, bytes) in [
            ("[width, dim] input weight", 4 * (s.width * s.dim) as u64),
            (
                "[last hidden, classes] output weight",
                4 * (s.last_hidden() * s.n_classes) as u64,
            ),
        ] {
            if bytes > s.max_buffer_bytes {
                return Err(ModelError::Shape(format!(
                    "the dense layout's {what} needs one {bytes}-byte buffer, over the device's \
                     {}-byte limit: use the sparse layout or a smaller width",
                    s.max_buffer_bytes
                )));
            }
        }
        // Built through the sparse layout (whose table optimizer state is not needed here), so
        // both layouts start from the same numbers.
        let mut plain = config.clone();
        plain.optim.table = widebag_config::TableOptim::Sgd;
        let sparse = WideModel::new(&plain, compute);
        Self::from_wide(&sparse, &config.optim)
    }

    /// The same parameters as `model`, laid out densely (the table as one weight, the output
    /// chunks concatenated), with `optim.dense` state.
    pub fn from_wide(model: &WideModel, optim: &OptimConfig) -> Result<Self, ModelError> {
        let s = &model.spec;
        if model.bands.len() > 1 || model.adaptive() {
            return Err(ModelError::Shape(
                "the dense layout is the unsplit baseline: it has no head/tail bands or adaptive \
                 softmax"
                    .into(),
            ));
        }
        let device = model.device().clone();
        let spec = DenseSpec {
            width: s.width,
            n_classes: s.n_classes,
            dim: s.dim,
            hidden: s.hidden.clone(),
            batch_size: s.batch_size,
            max_buffer_bytes: s.max_buffer_bytes,
        };
        let kind = optim.dense;
        let table = floats(model.bands[0].table.to_vec()?, [s.width, s.dim], &device);
        let mut params = vec![
            DenseParam::new("input.weight", table, kind),
            DenseParam::new("input.bias", model.dense[0].value.clone(), kind),
        ];
        for (i, p) in model.dense[1..model.output_start()].iter().enumerate() {
            let what = if i % 2 == 0 { "weight" } else { "bias" };
            params.push(DenseParam::new(
                format!("hidden.{}.{what}", i / 2),
                p.value.clone(),
                kind,
            ));
        }
        let out = &model.dense[model.output_start()..];
        let cat = |skip: usize| -> Tensor<2> {
            let parts: Vec<Tensor<2>> = out
                .iter()
                .skip(skip)
                .step_by(2)
                .map(|p| p.value.clone())
                .collect();
            if parts.len() == 1 {
                parts.into_iter().next().expect("one chunk")
            } else {
                Tensor::cat(parts, 1)
            }
        };
        params.push(DenseParam::new("output.weight", cat(0), kind));
        params.push(DenseParam::new("output.bias", cat(1), kind));
        Ok(Self {
            spec,
            params,
            optim: optim.clone(),
            step: 0,
            device,
        })
    }

    fn check_batch(&self, batch: &CsrBatch) -> Result<(), ModelError> {
        let s = &self.spec;
        if batch.width() != s.width || batch.targets().n_classes > s.n_classes {
            return Err(ModelError::Shape(format!(
                "batch of width {} and {} classes for a model of width {} and {} classes",
                batch.width(),
                batch.targets().n_classes,
                s.width,
                s.n_classes
            )));
        }
        let widest = s.width.max(s.n_classes);
        let bytes = 4 * (batch.n_rows() * widest) as u64;
        if bytes > s.max_buffer_bytes {
            return Err(ModelError::Shape(format!(
                "the dense layout's [{}, {widest}] batch needs one {bytes}-byte buffer, over the \
                 device's {}-byte limit: use the sparse layout or a smaller batch",
                batch.n_rows(),
                s.max_buffer_bytes
            )));
        }
        Ok(())
    }

    /// Loss and gradients of one batch without changing the model.
    pub fn gradients(&self, batch: &CsrBatch) -> Result<DenseGrads, ModelError> {
        let mut unused = MemoryMeter::new(&self.device);
        self.forward_backward(batch, &mut unused)
    }

    fn forward_backward(
        &self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<DenseGrads, ModelError> {
        self.check_batch(batch)?;
        let s = &self.spec;
        let ad = self.device.clone().autodiff();
        let n_rows = batch.n_rows();
        // 1. data: the whole batch as dense matrices.
        let x = floats(batch.to_dense(), [n_rows, s.width], &ad);
        let y = floats(
            dense_targets(batch, s.n_classes),
            [n_rows, s.n_classes],
            &ad,
        );
        // 2. every parameter is a gradient leaf.
        let leaves: Vec<Tensor<2>> = self
            .params
            .iter()
            .map(|p| p.value.clone().autodiff().require_grad())
            .collect();
        // 3. forward.
        let mut h = relu(x.matmul(leaves[0].clone()) + leaves[1].clone());
        for layer in 0..s.hidden.len() {
            h = relu(h.matmul(leaves[2 + 2 * layer].clone()) + leaves[3 + 2 * layer].clone());
        }
        let n = leaves.len();
        let logits = h.matmul(leaves[n - 2].clone()) + leaves[n - 1].clone();
        let loss = (log_softmax(logits, 1) * y)
            .sum_dim(1)
            .mean()
            .neg()
            .reshape([1]);
        let loss_value = scalar(loss.clone().inner())?;
        meter.sample(Point::ForwardEnd);
        // 4. backward.
        let ad_grads = loss.backward();
        let grads = leaves
            .iter()
            .map(|l| {
                l.grad(&ad_grads)
                    .unwrap_or_else(|| l.clone().inner().zeros_like())
            })
            .collect();
        drop(ad_grads);
        meter.sample(Point::BackwardEnd);
        Ok(DenseGrads {
            loss: loss_value,
            grads,
        })
    }

    /// One training step: data → forward → backward → dense updates → measure.
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        meter.probe(Point::Setup);
        let DenseGrads { loss, grads } = self.forward_backward(batch, meter)?;
        self.step += 1;
        crate::optim::step_all(&mut self.params, grads, &self.optim, self.step);
        meter.sample(Point::StepEnd);
        Ok(StepStats::new(self.step, loss, batch))
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of all parameters.
    pub fn parameter_bytes(&self) -> u64 {
        self.params
            .iter()
            .map(|p| p.value.shape().num_elements() as u64 * 4)
            .sum()
    }
}
