//! The dense layout: the naive baseline written the way a PyTorch user writes it. A dense
//! `[batch, width]` input, a dense `[width, dim]` first-layer weight on autodiff, full
//! `[batch, classes]` logits and dense `[batch, classes]` targets; every weight gets a dense
//! gradient and the dense optimizer. Same parameters, initial numbers and loss as the sparse
//! layout, so the two give the same numbers on the same batch. The log-softmax is reduced one
//! class chunk at a time (burn 0.22's `log_softmax` over 240,000 columns was wrong on lavapipe).
//! With widebag's CubeCL kernels on wgpu the output layer takes its optimizer step inside the
//! backward pass, as the sparse layout's does ([`crate::cube::output_step`]), and its gradient
//! is never whole.

use burn::tensor::{Device, Tensor};
use widebag_config::bands::ModelBands;
use widebag_config::{Config, OptimConfig};
use widebag_csr::CsrBatch;

use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, HostTargets, Logits};
use crate::cube::output_step::ChunkStep;
use crate::device::{Compute, ComputePath};
use crate::entries::{CheckpointEntry, dense_entries};
use crate::error::ModelError;
use crate::optim::dense::{DenseParam, DenseState};
use crate::optim::scheduled;
use crate::output::UpdateNow;
use crate::output::chunked::step_chunk;
use crate::output::scores::{ScoreKind, Visit};
use crate::output::softmax::{self, ChunkTargets};
use crate::params::init::{self, Init};
use crate::params::update::{update_all, update_param};
use crate::params::{Linear, TrunkParams, n_values};
use crate::probe::{Point, Stage, StepProbe};
use crate::products::{self, Operands};
use crate::spec::ModelSpec;
use crate::step::done::StepDone;
use crate::tensors::{activate, floats, ints, leaf_grad, scalar, scattered, to_vec};

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
    /// Which kernels form the row log-sum-exp and the logit gradient (on the tensor path, the
    /// columns one row reduction spans at most).
    pub softmax_kernels: softmax::SoftmaxKernels,
    /// Host kernels (flex) or burn's tensor operations for the softmax and the updates.
    pub compute_path: ComputePath,
    /// Each layer's activation: the input layer's, then each hidden layer's.
    pub activations: Vec<widebag_config::Activation>,
    /// The output layer's product operands (`model.output_precision`).
    pub output_precision: widebag_config::Precision,
}

/// Loss and dense gradients of one batch.
pub struct DenseGrads {
    pub loss: f32,
    /// Gradient of the `[width, dim]` input weight.
    pub input_weight: Tensor<2>,
    /// Gradients of the input bias and the hidden layers.
    pub trunk: TrunkParams<Tensor<2>>,
    /// Gradients of the output layer's weight and bias; `None` where a training step took
    /// their step inside the backward pass ([`DenseOutput::Stepped`]).
    pub output: Option<Linear<Tensor<2>>>,
}

/// The output layer as the dense layout's forward and backward passes use it.
enum DenseOutput<'a> {
    /// Read on flex's host kernel (lent without a copy).
    Host(&'a HostLayer),
    /// Read as tensors; its gradients are returned.
    Tensors(&'a Linear<DenseParam>),
    /// Read as tensors and stepped inside the backward pass by widebag's CubeCL kernels (taken
    /// out of the model for the step, so it is written in place): no gradient is returned.
    Stepped(&'a mut Linear<DenseParam>, UpdateNow<'a>),
}

/// The dense-layout model.
pub struct DenseModel {
    pub spec: DenseSpec,
    /// `input.weight [width, dim]`: the sparse layout's table as one matrix.
    pub input_weight: DenseParam,
    /// `input.bias [1, dim]` (the sparse layout's bag bias) and the hidden layers; no
    /// projections.
    pub params: TrunkParams,
    /// The output layer as one `[last, classes]` weight and its `[1, classes]` bias.
    pub output: Linear<DenseParam>,
    pub optim: OptimConfig,
    pub step: u64,
    device: Device,
}

/// The batch's inputs as a `[rows, width]` matrix, built on `device` from the nonzeros.
fn device_inputs(batch: &CsrBatch, device: &Device) -> Tensor<2> {
    let coords = (batch.entry_rows().into_iter().zip(batch.ids()))
        .flat_map(|(r, &id)| [r as i32, id as i32])
        .collect();
    let shape = [batch.n_rows(), batch.width()];
    scattered(shape, coords, batch.values().to_vec(), device)
}

impl DenseModel {
    /// The dense layout of the configured model, from the same initial numbers as the sparse
    /// layout ([`init`]), built directly: the table is never held twice.
    pub fn new(
        config: &Config,
        bands: &ModelBands,
        compute: &Compute,
        init: Init,
    ) -> Result<Self, ModelError> {
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
        let weight = init::input_weight(&s, init, &device);
        let input_weight = DenseParam::new("input.weight", weight, kind);
        let mut params = init::trunk_params(&s, kind, init, &device);
        params.bag_bias.name = "input.bias".into();
        // The output as one chunk of every class: the same numbers as any cut of it.
        let whole = softmax::class_chunks(s.n_classes, s.n_classes);
        let mut output = init::full_output(&s, &whole, kind, init, &device).remove(0);
        output.weight.name = "output.weight".into();
        output.bias.name = "output.bias".into();
        Ok(Self::from_parts(
            &s,
            input_weight,
            (params, output),
            &scheduled(config),
            device,
        ))
    }

    /// A dense model of `spec`'s shapes holding these parameters.
    pub(crate) fn from_parts(
        s: &ModelSpec,
        input_weight: DenseParam,
        (params, output): (TrunkParams, Linear<DenseParam>),
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
            softmax_kernels: s.softmax_kernels,
            compute_path: s.compute_path,
            activations: s.activations.clone(),
            output_precision: s.output_precision,
        };
        Self {
            spec,
            input_weight,
            params,
            output,
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
        let mut unused = StepProbe::new(&self.device);
        let host = match self.spec.compute_path {
            // A copy of the output layer's values, the model left as it is.
            ComputePath::Host => {
                let mut copy = self.output.clone();
                Some(HostLayer::take(vec![(&mut copy.weight, &mut copy.bias)])?)
            }
            ComputePath::Tensor => None,
        };
        let output = match &host {
            Some(layer) => DenseOutput::Host(layer),
            None => DenseOutput::Tensors(&self.output),
        };
        self.forward_backward(batch, output, &mut unused)
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
        let x = device_inputs(batch, &self.device);
        let acts = &s.activations;
        let p = &self.params;
        let mut h = activate(
            products::matmul(x, self.input_weight.value.clone()) + p.bag_bias.value.clone(),
            acts[0],
        );
        for (Linear { weight, bias }, &act) in p.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.value.clone()) + bias.value.clone(), act);
        }
        let out = &self.output;
        Ok(h.matmul(out.weight.value.clone()) + out.bias.value.clone())
    }

    /// Loss and gradients; on flex ([`DenseOutput::Host`]) the output layer runs on the host
    /// kernel, keeping the full logits as the tensor path does.
    fn forward_backward(
        &self,
        batch: &CsrBatch,
        output: DenseOutput<'_>,
        probe: &mut StepProbe,
    ) -> Result<DenseGrads, ModelError> {
        self.check_batch(batch)?;
        let out = match output {
            DenseOutput::Host(layer) => return self.forward_backward_host(batch, layer, probe),
            DenseOutput::Tensors(out) => (out.weight.value.clone(), out.bias.value.clone()),
            DenseOutput::Stepped(ref out, ..) => (out.weight.value.clone(), out.bias.value.clone()),
        };
        let s = &self.spec;
        let ad = self.device.clone().autodiff();
        // 1. data: the dense input built on the device from the nonzeros; the targets stay
        //    sparse (the softmax's pairs and flat indices).
        let x = device_inputs(batch, &ad);
        let whole = softmax::class_chunks(s.n_classes, s.n_classes);
        let targets = ChunkTargets::new(&batch.targets().normalised(), &whole, &self.device);
        probe.lap(Stage::Gather);
        // 2. the input and hidden layers' parameters are gradient leaves.
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let input_weight = leaf(&self.input_weight);
        let leaves = self.params.map(leaf);
        // 3. forward to the last hidden layer on autodiff.
        let acts = &s.activations;
        let mut h = activate(
            products::matmul(x, input_weight.clone()) + leaves.bag_bias.clone(),
            acts[0],
        );
        for (Linear { weight, bias }, &act) in leaves.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        probe.lap(Stage::Forward);
        // 4. the output layer off autodiff, as the sparse layout's: the loss and each row's
        //    log-sum-exp, the logits kept (as on the host kernel: the dense layout's peak comes
        //    later, at its first layer's gradient), then dL/dh (its reduction over the classes
        //    in blocks on a GPU, `products::matmul_nt`) and the output's gradients.
        let layer = [(&out.0, &out.1)];
        let operands = Operands(s.output_precision);
        let h_value = softmax::Hidden::new(h.clone().inner(), operands);
        let (kernels, keep) = (s.softmax_kernels, Logits::Keep);
        let fwd = softmax::forward(&h_value, &layer, &whole, &targets, kernels, keep, probe);
        let loss = scalar(fwd.loss)?;
        probe.lap(Stage::OutputForward);
        probe.sample(Point::ForwardEnd);
        let (lse, kept) = (fwd.lse, fwd.kept);
        let (dh, output) = match output {
            DenseOutput::Stepped(params, now) => {
                // The layer stepped as its gradient is formed; past the grid's limit, from the
                // gradient's tensors.
                let rule =
                    ChunkStep::new(&params.weight.state, (now.optim, now.step), &self.device);
                let mut apply = |_: usize, g: &Tensor<2>| {
                    let (w, b) = (&mut params.weight, &mut params.bias);
                    step_chunk(rule.as_ref(), &h_value, g, (w, b), now)
                };
                let dh = softmax::backward_applying(
                    &h_value,
                    vec![out],
                    &whole,
                    &targets,
                    &lse,
                    (kept, kernels),
                    &mut apply,
                    probe,
                );
                (dh, None)
            }
            _ => {
                let back = softmax::backward(
                    &h_value,
                    &layer,
                    &whole,
                    &targets,
                    &lse,
                    (kept, kernels),
                    probe,
                );
                let (weight, bias) = back.chunks.into_iter().next().expect("one output chunk");
                (back.dh, Some(Linear { weight, bias }))
            }
        };
        drop((lse, h_value));
        probe.lap(Stage::OutputBackward);
        // 5. the trunk and input layer's gradients from dL/dh.
        let ad_grads = (h * Tensor::from_inner(dh)).sum().backward();
        probe.lap(Stage::TrunkBackward);
        let grad = |l: &Tensor<2>| leaf_grad(l, &ad_grads);
        let grads = DenseGrads {
            loss,
            input_weight: grad(&input_weight),
            trunk: leaves.map(grad),
            output,
        };
        drop(ad_grads);
        probe.sample(Point::BackwardEnd);
        Ok(grads)
    }

    /// [`Self::forward_backward`] with the output layer on flex's host kernel
    /// ([`cpu::softmax_ce`] with [`Logits::Keep`]): the dense input, the input weight's dense
    /// gradient and the full `[B, classes]` logits stay; the targets stay sparse.
    fn forward_backward_host(
        &self,
        batch: &CsrBatch,
        layer: &HostLayer,
        probe: &mut StepProbe,
    ) -> Result<DenseGrads, ModelError> {
        let s = &self.spec;
        let ad = self.device.clone().autodiff();
        let n_rows = batch.n_rows();
        let x = floats(batch.to_dense(), [n_rows, s.width], &ad);
        let targets = HostTargets::new(&batch.targets().normalised(), &layer.chunk_classes());
        probe.lap(Stage::Gather);
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let input_weight = leaf(&self.input_weight);
        let leaves = self.params.map(leaf);
        let acts = &s.activations;
        let mut h = activate(
            products::matmul(x, input_weight.clone()) + leaves.bag_bias.clone(),
            acts[0],
        );
        for (Linear { weight, bias }, &act) in leaves.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        probe.lap(Stage::Forward);
        let h_host = HostMatrix::take(h.clone().inner())?;
        let refs = layer.refs();
        let hidden = h_host.cols;
        let mut fwd = softmax_ce::forward(h_host.as_slice(), hidden, &refs, &targets, Logits::Keep);
        let loss = fwd.loss;
        probe.lap(Stage::OutputForward);
        probe.sample(Point::ForwardEnd);
        let (dh, out) = softmax_ce::backward(h_host.as_slice(), hidden, &refs, &targets, &mut fwd);
        drop(fwd);
        probe.lap(Stage::OutputBackward);
        let dh = floats(dh, [n_rows, hidden], &self.device);
        let ad_grads = (h * Tensor::from_inner(dh)).sum().backward();
        probe.lap(Stage::TrunkBackward);
        let grad = |l: &Tensor<2>| leaf_grad(l, &ad_grads);
        let trunk = leaves.map(grad);
        let g = out.into_iter().next().expect("one output chunk");
        let n = g.db.len();
        let output = Some(Linear {
            weight: floats(g.dw, [hidden, n], &self.device),
            bias: floats(g.db, [1, n], &self.device),
        });
        let grads = DenseGrads {
            loss,
            input_weight: grad(&input_weight),
            trunk,
            output,
        };
        drop(ad_grads);
        probe.sample(Point::BackwardEnd);
        Ok(grads)
    }

    /// One training step: data → forward → backward → dense updates → measure. With widebag's
    /// CubeCL kernels on wgpu the output layer takes its step inside the backward pass.
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        probe: &mut StepProbe,
    ) -> Result<StepDone, ModelError> {
        probe.detail(Point::Setup);
        let step = self.step + 1;
        // On flex the output layer leaves its tensors for the host kernel (no copy) until its
        // gradients are out.
        let out = &mut self.output;
        let host = match self.spec.compute_path {
            ComputePath::Host => Some(HostLayer::take(vec![(&mut out.weight, &mut out.bias)])?),
            ComputePath::Tensor => None,
        };
        // Stepped inside backward, the output layer leaves the model for the pass.
        let grads = match self.steps_output_in_backward() {
            true => {
                let stand_in = self.stand_in();
                let mut taken = std::mem::replace(&mut self.output, stand_in);
                let now = UpdateNow {
                    optim: &self.optim,
                    step,
                };
                let output = DenseOutput::Stepped(&mut taken, now);
                let grads = self.forward_backward(batch, output, probe);
                self.output = taken;
                grads
            }
            false => {
                let output = match &host {
                    Some(layer) => DenseOutput::Host(layer),
                    None => DenseOutput::Tensors(&self.output),
                };
                self.forward_backward(batch, output, probe)
            }
        };
        if let Some(host) = host {
            let out = &mut self.output;
            host.restore(vec![(&mut out.weight, &mut out.bias)], &self.device);
        }
        let grads = grads?;
        self.step = step;
        update_param(
            &mut self.input_weight,
            grads.input_weight,
            &self.optim,
            self.step,
            self.spec.compute_path,
        )?;
        let path = self.spec.compute_path;
        let mut rest = grads.trunk.into_vec();
        let stepped = grads.output.is_none();
        rest.extend(grads.output.into_iter().flat_map(|o| [o.weight, o.bias]));
        let output = [&mut self.output.weight, &mut self.output.bias];
        let params = self
            .params
            .iter_mut()
            .chain(output.into_iter().filter(|_| !stepped));
        update_all(params, rest, &self.optim, self.step, path)?;
        probe.lap(Stage::DenseUpdate);
        probe.sample(Point::StepEnd);
        Ok(StepDone::new(self.step, grads.loss, batch))
    }

    /// Whether a training step's backward pass takes the output layer's step (widebag's CubeCL
    /// kernels, on a cubecl device).
    fn steps_output_in_backward(&self) -> bool {
        self.spec.compute_path == ComputePath::Tensor
            && self.spec.softmax_kernels == softmax::SoftmaxKernels::Cube
            && crate::cube::bridge::on_cubecl(&self.device)
    }

    /// An output layer standing in while the model's own is stepped: handles of the input
    /// weight, no optimizer state (no new buffer).
    fn stand_in(&self) -> Linear<DenseParam> {
        let one = || DenseParam {
            name: String::new(),
            value: self.input_weight.value.clone(),
            state: DenseState::Sgd,
        };
        Linear {
            weight: one(),
            bias: one(),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of all parameters.
    pub fn parameter_bytes(&self) -> u64 {
        4 * (n_values([&self.input_weight]) + n_values(self.dense_params()))
    }

    /// Every dense parameter but the input weight, in one fixed order: the input bias, the
    /// hidden layers, the output layer's weight and bias.
    pub fn dense_params(&self) -> Vec<&DenseParam> {
        self.params
            .iter()
            .chain([&self.output.weight, &self.output.bias])
            .collect()
    }

    /// Every weight and optimizer state by name, in a fixed order: the input weight, then
    /// [`Self::dense_params`].
    pub fn entries(&mut self) -> Vec<CheckpointEntry<'_>> {
        let mut out = Vec::new();
        dense_entries(&mut self.input_weight, &mut out);
        let params = self.params.iter_mut();
        for p in params.chain([&mut self.output.weight, &mut self.output.bias]) {
            dense_entries(p, &mut out);
        }
        out
    }

    /// Rows `ids` of the input weight, `[n, dim]` row-major.
    pub fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        let device = self.device().clone();
        to_vec(
            self.input_weight
                .value
                .clone()
                .select(0, ints(ids, &device)),
        )
    }

    /// Visits the chunks of the dense layout's full logits (which it holds whole, as in
    /// training).
    pub fn score_chunks(
        &mut self,
        batch: &CsrBatch,
        visit: &mut Visit<'_>,
    ) -> Result<ScoreKind, ModelError> {
        let logits = self.logits(batch)?;
        for chunk in softmax::class_chunks(self.spec.n_classes, self.spec.class_chunk) {
            visit(
                chunk.offset,
                logits.clone().narrow(1, chunk.offset, chunk.n),
            )?;
        }
        Ok(ScoreKind::Logits)
    }
}
