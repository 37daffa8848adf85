//! The dense layout: the naive baseline written the way a PyTorch user writes it. A dense
//! `[batch, width]` input, a dense `[width, dim]` first-layer weight on autodiff, full
//! `[batch, classes]` logits and dense `[batch, classes]` targets; every weight gets a dense
//! gradient and the dense optimizer. Same parameters, initial numbers and loss as the sparse
//! layout, so the two give the same numbers on the same batch. The log-softmax is reduced one
//! class chunk at a time (burn 0.22's `log_softmax` over 240,000 columns was wrong on lavapipe).

use burn::tensor::{Device, Tensor};
use widebag_config::bands::ModelBands;
use widebag_config::{Config, OptimConfig};
use widebag_csr::CsrBatch;

use crate::cpu::Kernels;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, HostTargets, Logits};
use crate::model::dense_optim::DenseParam;
use crate::model::init;
use crate::model::params::{DenseParams, Linear, OutputParams, n_values, update_param};
use crate::model::{ModelSpec, StepStats};
use crate::output::softmax::{self, ClassChunk, RunningLse};
use crate::step::memory::{MemoryMeter, Point, Stage};
use crate::tensors::{activate, floats, scalar};
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
    /// Classes per chunk of the log-softmax's reductions (as the sparse layout's chunks).
    pub class_chunk: usize,
    /// Columns one row reduction spans at most ([`softmax::reduce_cols`]).
    pub reduce_cols: usize,
    /// Host kernels (flex) or burn's tensor operations for the softmax and the updates.
    pub kernels: Kernels,
    /// Each layer's activation: the input layer's, then each hidden layer's.
    pub activations: Vec<widebag_config::Activation>,
}

/// Loss and dense gradients of one batch.
pub struct DenseGrads {
    pub loss: f32,
    /// Gradient of the `[width, dim]` input weight.
    pub input_weight: Tensor<2>,
    /// Gradients of the other parameters (the output as one chunk).
    pub dense: DenseParams<Tensor<2>>,
}

/// The dense-layout model.
pub struct DenseModel {
    pub spec: DenseSpec,
    /// `input.weight [width, dim]`: the sparse layout's table as one matrix.
    pub input_weight: DenseParam,
    /// `input.bias [1, dim]` (the sparse layout's bag bias), the hidden layers, and the output
    /// layer as one `[last, classes]` chunk; no projections.
    pub params: DenseParams,
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

/// `-(1/B) Σ_r Σ_j y_rj log p_rj` of `[B, classes]` logits on autodiff, every reduction over
/// one class chunk at most: the log-sum-exp from a running max and sum, the target term chunk
/// by chunk.
fn cross_entropy(z: Tensor<2>, y: Tensor<2>, chunks: &[ClassChunk], max_cols: usize) -> Tensor<1> {
    let parts: Vec<Tensor<2>> = chunks
        .iter()
        .map(|c| z.clone().narrow(1, c.offset, c.n))
        .collect();
    let mut lse = RunningLse::new(max_cols);
    for zc in &parts {
        lse.add(zc.clone());
    }
    let lse = lse.finish();
    let picked = chunks
        .iter()
        .zip(parts)
        .map(|(c, zc)| {
            softmax::sum_cols(
                (zc - lse.clone()) * y.clone().narrow(1, c.offset, c.n),
                max_cols,
            )
        })
        .reduce(|a, b| a + b)
        .expect("at least one class chunk");
    picked.mean().neg().reshape([1])
}

impl DenseModel {
    /// The dense layout of the configured model, from the same initial numbers as the sparse
    /// layout ([`init`]), built directly: the table is never held twice.
    pub fn new(config: &Config, bands: &ModelBands, compute: &Compute) -> Result<Self, ModelError> {
        let s = ModelSpec::new(config, bands, compute)?;
        if bands.input_split() || bands.output_split() {
            return Err(ModelError::Shape(
                "the dense layout is the unsplit baseline: it has no head/tail bands or adaptive \
                 softmax"
                    .into(),
            ));
        }
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
        let device = compute.device.clone();
        let kind = config.optim.dense;
        let input_weight = DenseParam::new("input.weight", init::input_weight(&s, &device), kind);
        // The output as one chunk of every class: the same numbers as any cut of it.
        let whole = softmax::class_chunks(s.n_classes, s.n_classes);
        let mut params = init::dense_params(&s, &whole, kind, &device);
        params.bag_bias.name = "input.bias".into();
        if let OutputParams::Full { chunks } = &mut params.output {
            chunks[0].weight.name = "output.weight".into();
            chunks[0].bias.name = "output.bias".into();
        }
        Ok(Self::from_parts(
            &s,
            input_weight,
            params,
            &crate::model::scheduled(config),
            device,
        ))
    }

    /// A dense model of `spec`'s shapes holding these parameters.
    pub(crate) fn from_parts(
        s: &ModelSpec,
        input_weight: DenseParam,
        params: DenseParams,
        optim: &OptimConfig,
        device: Device,
    ) -> Self {
        let spec = DenseSpec {
            width: s.width,
            n_classes: s.n_classes,
            dim: s.dim,
            hidden: s.hidden.clone(),
            batch_size: s.batch_size,
            max_buffer_bytes: s.max_buffer_bytes,
            class_chunk: s.class_chunk,
            reduce_cols: s.reduce_cols,
            kernels: s.kernels,
            activations: s.activations.clone(),
        };
        Self {
            spec,
            input_weight,
            params,
            optim: optim.clone(),
            step: 0,
            device,
        }
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
        let host = match self.spec.kernels {
            Kernels::Host => Some(HostLayer::copy_of(&self.params.output)?),
            Kernels::Tensor => None,
        };
        self.forward_backward(batch, host.as_ref(), &mut unused)
    }

    /// Mean loss over held-out batches (weighted by rows); `None` without any.
    pub fn eval_loss(&self, batches: &[CsrBatch]) -> Result<Option<f64>, ModelError> {
        let (mut sum, mut rows) = (0.0f64, 0usize);
        for b in batches {
            sum += self.gradients(b)?.loss as f64 * b.n_rows() as f64;
            rows += b.n_rows();
        }
        Ok((rows > 0).then(|| sum / rows as f64))
    }

    /// The full `[rows, classes]` logits of `batch`, off autodiff (evaluation).
    pub fn logits(&self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        self.check_batch(batch)?;
        let s = &self.spec;
        let x = floats(batch.to_dense(), [batch.n_rows(), s.width], &self.device);
        let acts = &s.activations;
        let p = &self.params;
        let mut h = activate(
            x.matmul(self.input_weight.value.clone()) + p.bag_bias.value.clone(),
            acts[0],
        );
        for (Linear { weight, bias }, &act) in p.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.value.clone()) + bias.value.clone(), act);
        }
        let OutputParams::Full { chunks } = &p.output else {
            unreachable!("the dense layout's output is the full softmax");
        };
        Ok(h.matmul(chunks[0].weight.value.clone()) + chunks[0].bias.value.clone())
    }

    /// Loss and gradients; with `host` (flex), the output layer runs on the host kernel,
    /// keeping the full logits as the tensor path does.
    fn forward_backward(
        &self,
        batch: &CsrBatch,
        host: Option<&HostLayer>,
        meter: &mut MemoryMeter,
    ) -> Result<DenseGrads, ModelError> {
        self.check_batch(batch)?;
        if let Some(layer) = host {
            return self.forward_backward_host(batch, layer, meter);
        }
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
        meter.lap(Stage::Gather);
        // 2. every parameter is a gradient leaf.
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let input_weight = leaf(&self.input_weight);
        let leaves = self.params.map(leaf);
        // 3. forward.
        let acts = &s.activations;
        let mut h = activate(
            x.matmul(input_weight.clone()) + leaves.bag_bias.clone(),
            acts[0],
        );
        for (Linear { weight, bias }, &act) in leaves.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        let OutputParams::Full { chunks } = &leaves.output else {
            unreachable!("the dense layout's output is the full softmax");
        };
        meter.lap(Stage::Forward);
        let logits = h.matmul(chunks[0].weight.clone()) + chunks[0].bias.clone();
        let class_chunks = softmax::class_chunks(s.n_classes, s.class_chunk);
        let loss = cross_entropy(logits, y, &class_chunks, s.reduce_cols);
        let loss_value = scalar(loss.clone().inner())?;
        meter.lap(Stage::OutputForward);
        meter.sample(Point::ForwardEnd);
        // 4. backward: autodiff through everything in one pass (its time is the output's
        //    backward).
        let ad_grads = loss.backward();
        meter.lap(Stage::OutputBackward);
        let grad = |l: &Tensor<2>| {
            l.grad(&ad_grads)
                .unwrap_or_else(|| l.clone().inner().zeros_like())
        };
        let grads = DenseGrads {
            loss: loss_value,
            input_weight: grad(&input_weight),
            dense: leaves.map(grad),
        };
        drop(ad_grads);
        meter.sample(Point::BackwardEnd);
        Ok(grads)
    }

    /// [`Self::forward_backward`] with the output layer on flex's host kernel
    /// ([`cpu::softmax_ce`] with [`Logits::Keep`]): the dense input, the input weight's dense
    /// gradient and the full `[B, classes]` logits stay; the targets stay sparse.
    fn forward_backward_host(
        &self,
        batch: &CsrBatch,
        layer: &HostLayer,
        meter: &mut MemoryMeter,
    ) -> Result<DenseGrads, ModelError> {
        let s = &self.spec;
        let ad = self.device.clone().autodiff();
        let n_rows = batch.n_rows();
        let x = floats(batch.to_dense(), [n_rows, s.width], &ad);
        let targets = HostTargets::new(&batch.targets().normalised(), &layer.chunk_classes());
        meter.lap(Stage::Gather);
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let input_weight = leaf(&self.input_weight);
        let leaves = self.params.map_split(leaf, |p| p.value.clone());
        let acts = &s.activations;
        let mut h = activate(
            x.matmul(input_weight.clone()) + leaves.bag_bias.clone(),
            acts[0],
        );
        for (Linear { weight, bias }, &act) in leaves.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        meter.lap(Stage::Forward);
        let h_host = HostMatrix::take(h.clone().inner())?;
        let refs = layer.refs();
        let hidden = h_host.cols;
        let mut fwd = softmax_ce::forward(h_host.as_slice(), hidden, &refs, &targets, Logits::Keep);
        let loss = fwd.loss;
        meter.lap(Stage::OutputForward);
        meter.sample(Point::ForwardEnd);
        let (dh, out) = softmax_ce::backward(h_host.as_slice(), hidden, &refs, &targets, &mut fwd);
        drop(fwd);
        meter.lap(Stage::OutputBackward);
        let dh = floats(dh, [n_rows, hidden], &self.device);
        let ad_grads = (h * Tensor::from_inner(dh)).sum().backward();
        meter.lap(Stage::TrunkBackward);
        let grad = |l: &Tensor<2>| {
            l.grad(&ad_grads)
                .unwrap_or_else(|| l.clone().inner().zeros_like())
        };
        let mut dense = leaves.map_split(grad, |_| Tensor::empty([0, 0], &self.device));
        dense.output = OutputParams::Full {
            chunks: out
                .into_iter()
                .map(|g| {
                    let n = g.db.len();
                    Linear {
                        weight: floats(g.dw, [hidden, n], &self.device),
                        bias: floats(g.db, [1, n], &self.device),
                    }
                })
                .collect(),
        };
        let grads = DenseGrads {
            loss,
            input_weight: grad(&input_weight),
            dense,
        };
        drop(ad_grads);
        meter.sample(Point::BackwardEnd);
        Ok(grads)
    }

    /// One training step: data → forward → backward → dense updates → measure.
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        meter.probe(Point::Setup);
        // On flex the output layer leaves its tensors for the host kernel (no copy) until its
        // gradients are out.
        let host = match self.spec.kernels {
            Kernels::Host => Some(HostLayer::take(&mut self.params.output)?),
            Kernels::Tensor => None,
        };
        let grads = self.forward_backward(batch, host.as_ref(), meter);
        if let Some(host) = host {
            host.restore(&mut self.params.output, &self.device);
        }
        let grads = grads?;
        self.step += 1;
        update_param(
            &mut self.input_weight,
            grads.input_weight,
            &self.optim,
            self.step,
            self.spec.kernels,
        )?;
        self.params
            .update(grads.dense, &self.optim, self.step, self.spec.kernels)?;
        meter.lap(Stage::DenseUpdate);
        meter.sample(Point::StepEnd);
        Ok(StepStats::new(self.step, grads.loss, batch))
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of all parameters.
    pub fn parameter_bytes(&self) -> u64 {
        4 * (n_values([&self.input_weight]) + n_values(self.params.iter()))
    }
}
