//! The sparse layout's training step, top to bottom: data → unique rows → forward → backward →
//! row updates → dense updates → measure; and the same forward and backward without an update
//! (`gradients`, `loss`, `eval_loss`).

pub mod memory;
pub mod profile;
pub(crate) mod ranks;

use burn::tensor::{Gradients, Tensor};
use widebag_csr::CsrBatch;

use widebag_config::Checkpointing;

use crate::ModelError;
use crate::cpu::Kernels;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, ChunkGrad, HostTargets, Logits};
use crate::model::bag::{BagInputs, BandIds, BandSegment};
use crate::model::dense_optim::DenseParam;
use crate::model::params::{Cluster, DenseParams, Linear, OutputParams};
use crate::model::{StepStats, WideModel};
use crate::output::adaptive_host::AdaptiveForward;
use crate::output::softmax::{self, ChunkTargets};
use crate::step::memory::{MemoryMeter, Point, Stage};
use crate::tensors::{activate, floats, scalar, to_vec};

/// Gradients of one batch, off autodiff: the touched rows and every dense parameter.
pub struct Grads {
    pub loss: f32,
    /// The batch's unique ids by band and segment: the rows the gradients belong to, and the
    /// rows the update writes.
    pub ids: BandIds,
    /// Gradient of the batch's unique rows, one `[end - start, band dim]` tensor per band
    /// segment (runs of `unique_ids` within one shard of one band), in `ids.segments` order.
    pub rows: Vec<(BandSegment, Tensor<2>)>,
    /// One per dense parameter.
    pub dense: DenseParams<Tensor<2>>,
}

impl Grads {
    /// The unique rows' gradient as one host vector, `[U, dim]` row-major.
    pub fn rows_to_vec(&self) -> Result<Vec<f32>, ModelError> {
        let mut out = Vec::new();
        for (_, g) in &self.rows {
            out.extend(to_vec(g.clone())?);
        }
        Ok(out)
    }
}

/// What the forward pass hands to the backward pass. It holds the batch's buffers and the
/// gathered rows until the backward pass is measured, as the ledger counts them.
pub(crate) struct Forward {
    pub(crate) loss: f32,
    inputs: BagInputs,
    /// Each segment's unique rows, gradient leaves.
    rows: Vec<Tensor<2>>,
    /// The dense parameters: gradient leaves, but the full softmax's output layer, which stays
    /// off autodiff.
    params: DenseParams<Tensor<2>>,
    /// The last hidden representation, on autodiff.
    h: Tensor<2>,
    output: ForwardOutput,
}

enum ForwardOutput {
    /// The adaptive softmax's loss, on autodiff.
    Adaptive(Tensor<1>),
    /// The chunked full softmax's targets and log-sum-exp, off autodiff.
    Full {
        targets: Box<ChunkTargets>,
        lse: Tensor<2>,
    },
    /// The adaptive softmax on flex's host kernel.
    HostAdaptive(Box<AdaptiveForward>),
    /// The same on flex's host kernel ([`cpu::softmax_ce`]), with `h` as a host matrix.
    Host {
        targets: Box<HostTargets>,
        fwd: CeForward,
        h: HostMatrix,
    },
}

impl WideModel {
    /// One training step: data → unique rows → forward → backward → row updates → dense updates
    /// → measure.
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        meter.probe(Point::Setup);
        self.check_batch(batch)?;
        self.step += 1;
        // 1. data: the batch's sorted unique ids, split by band and shard once for the step.
        let ids = self.band_ids(batch)?;
        meter.lap(Stage::Ids);
        // 2. unique rows: rows lazy AdamW left behind are brought up to the previous step (so
        //    the gradient is taken at dense AdamW's weights); then the batch's index and value
        //    buffers go up grouped by segment, with each segment's rows (host bands upload just
        //    these).
        for (k, band) in self.bands.iter_mut().enumerate() {
            let local = ids.local[k].ids();
            band.state
                .catch_up(&mut band.table, local, &self.optim, self.step)?;
        }
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        meter.lap(Stage::Gather);
        // On flex the full softmax's layer leaves its tensors for the host kernel (no copy) until
        // its gradients are out.
        let host = match self.host_softmax() {
            true => Some(HostLayer::take(&mut self.dense.output)?),
            false => None,
        };
        // 3. forward: bag → projections → MLP on autodiff; the full softmax's output layer in
        //    class chunks off autodiff, or the adaptive softmax on autodiff.
        // 4. backward: the output layer's gradients, then autodiff through the MLP and the bag.
        let grads = self
            .forward(batch, inputs, rows, host.as_ref(), meter)
            .and_then(|forward| self.backward(forward, ids, host.as_ref(), meter));
        if let Some(host) = host {
            let device = self.device().clone();
            host.restore(&mut self.dense.output, &device);
        }
        let Grads {
            loss,
            ids,
            rows,
            dense,
        } = grads?;
        // 5. row updates: only the batch's unique rows of each band, in place, with
        //    deduplicated ids (a host band takes back only these rows' updates).
        for (s, rows_grad) in rows {
            let band = &mut self.bands[s.band];
            let (table, step) = (&mut band.table, self.step);
            band.state
                .step(table, ids.of(&s), rows_grad, &self.optim, step, meter)?;
        }
        meter.lap(Stage::RowUpdate);
        meter.probe(Point::DenseUpdate);
        // 6. dense updates, in place.
        self.dense
            .update(dense, &self.optim, self.step, self.spec.kernels)?;
        meter.lap(Stage::DenseUpdate);
        // 7. measure.
        meter.sample(Point::StepEnd);
        Ok(StepStats::new(self.step, loss, batch))
    }

    /// Loss and gradients of one batch without changing the model (steps 1–4 of the training
    /// step, at the weights as stored: rows lazy AdamW still owes a catch-up are read as they
    /// are; [`Self::flush_deferred`] first where that matters).
    pub fn gradients(&self, batch: &CsrBatch) -> Result<Grads, ModelError> {
        let mut unused = MemoryMeter::new(self.device());
        self.check_batch(batch)?;
        let ids = self.band_ids(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        let host = match self.host_softmax() {
            true => Some(HostLayer::copy_of(&self.dense.output)?),
            false => None,
        };
        let forward = self.forward(batch, inputs, rows, host.as_ref(), &mut unused)?;
        self.backward(forward, ids, host.as_ref(), &mut unused)
    }

    /// Whether the output layer's softmax runs on the host kernel (flex).
    pub(crate) fn host_softmax(&self) -> bool {
        self.spec.kernels == Kernels::Host
    }

    /// Mean loss of a batch (at the weights as stored, as [`Self::gradients`]).
    pub fn loss(&self, batch: &CsrBatch) -> Result<f32, ModelError> {
        Ok(self.gradients(batch)?.loss)
    }

    /// Mean loss over held-out batches, weighted by their rows, after the deferred row updates
    /// are applied.
    pub fn eval_loss(&mut self, batches: &[CsrBatch]) -> Result<Option<f64>, ModelError> {
        self.flush_deferred()?;
        let (mut sum, mut rows) = (0.0f64, 0usize);
        for b in batches {
            sum += self.loss(b)? as f64 * b.n_rows() as f64;
            rows += b.n_rows();
        }
        Ok((rows > 0).then(|| sum / rows as f64))
    }

    /// Forward through the bag and the hidden layers, on the autodiff device, with `params`'
    /// bag bias, projections and hidden layers.
    pub(crate) fn forward_hidden(
        &self,
        rows: &[Tensor<2>],
        params: &DenseParams<Tensor<2>>,
        inputs: &BagInputs,
    ) -> Tensor<2> {
        let x = self.bag_sum(rows, &params.projections, inputs);
        let act = self.spec.activation;
        let mut h = activate(x + params.bag_bias.clone(), act);
        for Linear { weight, bias } in &params.hidden {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        h
    }

    /// Step 3: the forward pass and the loss, from the gathered `rows` (made gradient leaves).
    pub(crate) fn forward(
        &self,
        batch: &CsrBatch,
        inputs: BagInputs,
        rows: Vec<Tensor<2>>,
        host: Option<&HostLayer>,
        meter: &mut MemoryMeter,
    ) -> Result<Forward, ModelError> {
        // With checkpointing the trunk runs off the graph (nothing saved) and `h` is a leaf:
        // the output layer's backward stops there and `recompute_trunk` goes on.
        let recompute = self.recomputes_trunk();
        let rows: Vec<Tensor<2>> = match recompute {
            true => rows,
            false => rows.into_iter().map(|r| r.require_grad()).collect(),
        };
        let targets = self.objective_targets(batch);
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let off_graph = |p: &DenseParam| p.value.clone().autodiff();
        let params = match (self.adaptive(), recompute) {
            (true, false) => self.dense.map(leaf),
            (false, false) => self.dense.map_split(leaf, |p| p.value.clone()),
            (true, true) => self.dense.map_split(off_graph, leaf),
            (false, true) => self.dense.map_split(off_graph, |p| p.value.clone()),
        };
        let mut h = self.forward_hidden(&rows, &params, &inputs);
        if recompute {
            h = h.detach().require_grad();
        }
        meter.lap(Stage::Forward);
        let (loss, output) = match (&params.output, host) {
            (OutputParams::Full { .. }, Some(layer)) => {
                let targets = HostTargets::new(&targets, &layer.chunk_classes());
                let h = HostMatrix::take(h.clone().inner())?;
                let fwd = softmax_ce::forward(
                    h.as_slice(),
                    h.cols,
                    &layer.refs(),
                    &targets,
                    Logits::Recompute,
                );
                let targets = Box::new(targets);
                (fwd.loss, ForwardOutput::Host { targets, fwd, h })
            }
            (OutputParams::Adaptive { clusters, .. }, Some(layer)) => {
                let (loss, fwd) = self.adaptive_host_forward(&h, clusters, &targets, layer)?;
                (loss, ForwardOutput::HostAdaptive(Box::new(fwd)))
            }
            (OutputParams::Adaptive { head, clusters }, None) => {
                let loss = self.adaptive_loss(&h, head, clusters, &targets, meter);
                (scalar(loss.clone().inner())?, ForwardOutput::Adaptive(loss))
            }
            (OutputParams::Full { .. }, None) => {
                let targets = ChunkTargets::new(&targets, &self.chunks, self.device());
                let layer = params.full_chunks();
                let h = h.clone().inner();
                let cols = self.spec.reduce_cols;
                let fwd = softmax::forward(&h, &layer, &self.chunks, &targets, cols, meter);
                let lse = fwd.lse;
                let targets = Box::new(targets);
                (scalar(fwd.loss)?, ForwardOutput::Full { targets, lse })
            }
        };
        meter.lap(Stage::OutputForward);
        meter.sample(Point::ForwardEnd);
        Ok(Forward {
            loss,
            inputs,
            rows,
            params,
            h,
            output,
        })
    }

    /// Step 4: the backward pass, to the gradients of the rows `ids` and of every dense
    /// parameter.
    pub(crate) fn backward(
        &self,
        forward: Forward,
        ids: BandIds,
        host: Option<&HostLayer>,
        meter: &mut MemoryMeter,
    ) -> Result<Grads, ModelError> {
        let Forward {
            loss,
            inputs,
            rows,
            params,
            h,
            output,
        } = forward;
        let h_leaf = self.recomputes_trunk().then(|| h.clone());
        let (ad_grads, output_grads, h) = match output {
            ForwardOutput::Adaptive(loss) => {
                // Autodiff through the adaptive softmax, the MLP and the bag (one pass: its
                // time is the output's backward).
                let grads = loss.backward();
                meter.lap(Stage::OutputBackward);
                meter.probe(Point::BackwardLogits);
                (grads, None, Some(h))
            }
            ForwardOutput::Full { targets, lse } => {
                // The output gradients by chunk, then autodiff from dL/dh through the MLP and
                // the bag.
                let layer = params.full_chunks();
                let h_plain = h.clone().inner();
                let out = softmax::backward(&h_plain, &layer, &self.chunks, &targets, &lse, meter);
                meter.lap(Stage::OutputBackward);
                let surrogate = (h * Tensor::from_inner(out.dh)).sum();
                let chunks = out
                    .chunks
                    .into_iter()
                    .map(|(weight, bias)| Linear { weight, bias })
                    .collect();
                let grads = surrogate.backward();
                (grads, Some(OutputParams::Full { chunks }), None)
            }
            ForwardOutput::Host {
                targets,
                mut fwd,
                h: h_host,
            } => {
                let layer = host.expect("a host forward has its layer");
                let (rows, hidden) = (h_host.rows, h_host.cols);
                let refs = layer.refs();
                let (dh, out) =
                    softmax_ce::backward(h_host.as_slice(), hidden, &refs, &targets, &mut fwd);
                meter.lap(Stage::OutputBackward);
                let device = self.device();
                let dh = floats(dh, [rows, hidden], device);
                let grads = (h * Tensor::from_inner(dh)).sum().backward();
                let chunks = chunk_tensors(out, hidden, device);
                (grads, Some(OutputParams::Full { chunks }), None)
            }
            ForwardOutput::HostAdaptive(fwd) => {
                let layer = host.expect("a host forward has its layer");
                let g = self.adaptive_host_backward(h, *fwd, layer, meter);
                let device = self.device();
                let matrix = |g: Option<ChunkGrad>, [rows, cols]: [usize; 2]| match g {
                    Some(g) => Linear {
                        weight: floats(g.dw, [rows, cols], device),
                        bias: floats(g.db, [1, cols], device),
                    },
                    None => Linear {
                        weight: Tensor::zeros([rows, cols], device),
                        bias: Tensor::zeros([1, cols], device),
                    },
                };
                let OutputParams::Adaptive { clusters, .. } = &params.output else {
                    unreachable!("an adaptive forward has adaptive parameters");
                };
                let head = matrix(Some(g.head), layer.weight_shape(0));
                let clusters = clusters
                    .iter()
                    .zip(g.clusters)
                    .enumerate()
                    .map(|(k, (c, grad))| {
                        let Linear { weight, bias } = matrix(grad, layer.weight_shape(k + 1));
                        Cluster {
                            proj: leaf_grad(&c.proj, &g.autodiff),
                            weight,
                            bias,
                        }
                    })
                    .collect();
                let output = OutputParams::Adaptive { head, clusters };
                (g.autodiff, Some(output), None)
            }
        };
        // 4b. checkpointing: the trunk again, on autodiff, from the output's dL/dh.
        let recomputed = h_leaf.map(|h| self.recompute_trunk(&h, &ad_grads, &rows, &inputs, meter));
        let (trunk_grads, trunk_rows, trunk_params) = match &recomputed {
            Some((g, r, p)) => (g, r, p),
            None => (&ad_grads, &rows, &params),
        };
        let output = match output_grads {
            Some(full) => full,
            None => params.output.map(|leaf| leaf_grad(leaf, &ad_grads)),
        };
        let (rows_grad, dense) =
            self.trunk_grads(&ids, trunk_rows, trunk_params, trunk_grads, output);
        drop((ad_grads, recomputed));
        meter.sample(Point::BackwardEnd);
        // The batch's buffers, the gathered rows and the leaves go only now, as the ledger
        // counts them at the end of backward.
        drop((inputs, rows, params, h));
        meter.lap(Stage::TrunkBackward);
        Ok(Grads {
            loss,
            ids,
            rows: rows_grad,
            dense,
        })
    }
}

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
    fn recomputes_trunk(&self) -> bool {
        self.spec.checkpointing == Checkpointing::Mlp
    }

    /// Step 4b with checkpointing: the bag, the projections and the MLP again from the
    /// gathered `rows`, now gradient leaves, on autodiff (its saved activations alive at
    /// `Point::BackwardInput`), differentiated from `h`'s gradient in `grads`. Returns the
    /// gradients with the leaves they belong to: the rows and the trunk's parameters (the
    /// output layer left empty).
    fn recompute_trunk(
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
