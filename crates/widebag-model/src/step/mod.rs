//! The sparse layout's training step, top to bottom: data → unique rows → forward → backward →
//! row updates → dense updates → measure, for one process or for each rank of many (one process
//! is the one-rank case: the exchanges between the stages, in [`exchange`], are skipped); and
//! the same forward and backward without an update (`gradients`, `loss`; the held-out loss's
//! forward pass is `crate::eval::loss`).

pub(crate) mod exchange;
pub mod memory;
pub mod profile;
pub(crate) mod tied;
pub(crate) mod trunk;

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_csr::CsrBatch;

use crate::ModelError;
use crate::cpu::Kernels;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, HostTargets};
use crate::model::bag::{BagInputs, BandIds, BandSegment};
use crate::model::dense_optim::DenseParam;
use crate::model::params::{DenseParams, Linear, OutputParams, update_param};
use crate::model::{StepStats, WideModel};
use crate::output::adaptive_host::AdaptiveForward;
use crate::output::softmax::{self, ChunkTargets};
use crate::step::exchange::Part;
use crate::step::memory::{MemoryMeter, Point, Stage};
use crate::step::trunk::{chunk_tensors, leaf_grad};
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

impl Forward {
    /// What the forward pass sent, or will send back, to other ranks by the ledger's names.
    pub(crate) fn sent_bytes(&self) -> Vec<(&'static str, u64)> {
        match &self.output {
            ForwardOutput::HostAdaptive(f) => f.sent_bytes.to_vec(),
            _ => Vec::new(),
        }
    }
}

impl WideModel {
    /// One training step of one process: the one-rank case of [`Self::train_step_part`] (every
    /// exchange skipped).
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        self.train_step_part(batch, batch.n_rows(), &Local, meter)
    }

    /// One training step: data → unique rows → forward → backward → row updates → dense updates
    /// → measure. `batch` is this process's rows of a global batch of `global_rows` rows; every
    /// rank of `comm` calls it with its part of the same global batch, and it returns the global
    /// batch's loss. The exchanges between the stages ([`exchange`]) are skipped at one rank.
    pub fn train_step_part(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        meter.probe(Point::Setup);
        let part = Part::new(self.ranks, comm, global_rows, batch.n_rows())?;
        if !part.alone() {
            self.check_rank_kernels("this device")?;
        }
        self.check_batch(batch)?;
        self.step += 1;
        // 1. data: the batch's sorted unique ids, split by band (and by shard for one process)
        //    once for the step.
        if !part.alone() {
            self.count_pooled(batch, comm)?;
        }
        let ids = self.part_ids(batch, &part)?;
        meter.lap(Stage::Ids);
        // 2. unique rows: rows lazy AdamW left behind are brought up to the previous step (so
        //    the gradient is taken at dense AdamW's weights; across ranks their owners do it as
        //    they send them); then the batch's index and value buffers go up grouped by segment,
        //    with each segment's rows (host bands upload just these). Across ranks the ids go to
        //    the rows' owners, which send the rows back.
        if part.alone() {
            for (k, band) in self.bands.iter_mut().enumerate() {
                let local = ids.local[k].ids();
                band.state
                    .catch_up(&mut band.table, local, &self.optim, self.step)?;
            }
        }
        let (routes, inputs, rows) = self.part_rows(batch, &ids, &part)?;
        meter.lap(Stage::Gather);
        // On flex the output layer leaves its tensors for the host kernel (no copy) until its
        // gradients are out.
        let host = match self.host_softmax() {
            true => Some(HostLayer::take(&mut self.dense.output)?),
            false => None,
        };
        // 3. forward: bag → projections → MLP on autodiff; the full softmax's output layer in
        //    class chunks off autodiff (across ranks, split by classes), or the adaptive softmax
        //    (across ranks, each tail cluster at its owner).
        // 4. backward: the output layer's gradients, then autodiff through the MLP and the bag.
        //    Both outputs' gradients are of the global batch's mean.
        let grads = self
            .forward(batch, &part, inputs, rows, host.as_ref(), meter)
            .and_then(|forward| {
                let sent = forward.sent_bytes();
                let grads = self.backward(forward, ids, host.as_ref(), &part, meter)?;
                Ok((grads, sent))
            });
        if let Some(host) = host {
            let device = self.device().clone();
            host.restore(&mut self.dense.output, &device);
        }
        let (mut grads, sent) = grads?;
        // A tied table's rows are the output weight's columns: their gradients join the
        // weight's, which the dense update applies (no row is left to update).
        if self.spec.tied {
            self.tie_gradients(&mut grads)?;
        }
        let Grads {
            loss,
            ids,
            rows,
            dense,
        } = grads;
        if !part.alone() {
            self.count_output_traffic(&part, batch, &sent);
        }
        // 5. row updates: only the batch's unique rows of each band, in place, with
        //    deduplicated ids (a host band takes back only these rows' updates). Across ranks,
        //    every rank's gradients of a row are summed at its owner, which updates the union
        //    of the rows asked of it.
        match part.alone() {
            true => {
                for (s, rows_grad) in rows {
                    let band = &mut self.bands[s.band];
                    let (table, step) = (&mut band.table, self.step);
                    band.state
                        .step(table, ids.of(&s), rows_grad, &self.optim, step, meter)?;
                }
            }
            false => self.update_owned_rows(&routes, rows, comm, meter)?,
        }
        meter.lap(Stage::RowUpdate);
        // 6. dense updates, in place (across ranks, the replicated parameters' gradients summed
        //    first in one fused all-reduce).
        let dense = self.sum_dense(dense, &part, meter)?;
        let (optim, step, kernels) = (&self.optim, self.step, self.spec.kernels);
        let trained: Vec<bool> = match part.alone() {
            true => Vec::new(),
            false => self
                .dense
                .iter()
                .map(|p| self.trains_param(&p.name))
                .collect(),
        };
        for (i, (p, g)) in self.dense.iter_mut().zip(dense).enumerate() {
            if trained.get(i).copied().unwrap_or(true) {
                update_param(p, g, optim, step, kernels)?;
            }
        }
        if self.spec.tied {
            self.refresh_tied_table()?;
        }
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
        let part = Part::new(self.ranks, &Local, batch.n_rows(), batch.n_rows())?;
        let forward = self.forward(batch, &part, inputs, rows, host.as_ref(), &mut unused)?;
        self.backward(forward, ids, host.as_ref(), &part, &mut unused)
    }

    /// Whether the output layer's softmax runs on the host kernel (flex; always across ranks).
    pub(crate) fn host_softmax(&self) -> bool {
        self.spec.kernels == Kernels::Host
    }

    /// Mean loss of a batch (at the weights as stored, as [`Self::gradients`]).
    pub fn loss(&self, batch: &CsrBatch) -> Result<f32, ModelError> {
        Ok(self.gradients(batch)?.loss)
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
        let acts = &self.spec.activations;
        let mut h = activate(x + params.bag_bias.clone(), acts[0]);
        for (Linear { weight, bias }, &act) in params.hidden.iter().zip(&acts[1..]) {
            h = activate(h.matmul(weight.clone()) + bias.clone(), act);
        }
        h
    }

    /// Step 3: the forward pass and the loss, from the gathered `rows` (made gradient leaves).
    pub(crate) fn forward(
        &self,
        batch: &CsrBatch,
        part: &Part<'_>,
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
        // The output layer is on the graph only for the adaptive softmax on the tensor path.
        let output_on_graph = self.adaptive() && host.is_none();
        let params = match (output_on_graph, recompute) {
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
            (OutputParams::Full { .. }, Some(layer)) if part.alone() => {
                let targets = HostTargets::new(&targets, &layer.chunk_classes());
                let h = HostMatrix::take(h.clone().inner())?;
                let fwd = softmax_ce::forward(
                    h.as_slice(),
                    h.cols,
                    &layer.refs(),
                    &targets,
                    self.spec.logits,
                );
                let targets = Box::new(targets);
                (fwd.loss, ForwardOutput::Host { targets, fwd, h })
            }
            (OutputParams::Full { .. }, Some(layer)) => {
                // Split by classes: every rank's rows against this rank's classes.
                let global = self.gather_targets(&targets, part.comm)?;
                let mine = to_vec(h.clone().inner())?;
                let (h, targets, fwd, loss) = self.split_forward(&global, &mine, layer, part)?;
                let targets = Box::new(targets);
                (loss, ForwardOutput::Host { targets, fwd, h })
            }
            (OutputParams::Adaptive { clusters, .. }, Some(layer)) => {
                let (loss, fwd) =
                    self.adaptive_host_forward(&h, clusters, &targets, layer, part)?;
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
        part: &Part<'_>,
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
                let hidden = h_host.cols;
                let refs = layer.refs();
                let (dh, out) =
                    softmax_ce::backward(h_host.as_slice(), hidden, &refs, &targets, &mut fwd);
                // The kept logits (now their gradient, read by the gemms) go before autodiff
                // allocates the trunk's gradients, as the ledger has it: the step's peak is
                // the output backward's, not the two together.
                drop((fwd, targets));
                // Across ranks: every rank's part of dL/dh summed, this rank's rows kept.
                let dh = part.own_dh(dh, hidden)?;
                meter.lap(Stage::OutputBackward);
                let device = self.device();
                let dh = floats(dh, [part.mine.len(), hidden], device);
                let grads = (h * Tensor::from_inner(dh)).sum().backward();
                let chunks = chunk_tensors(out, hidden, device);
                (grads, Some(OutputParams::Full { chunks }), None)
            }
            ForwardOutput::HostAdaptive(fwd) => {
                let layer = host.expect("a host forward has its layer");
                let OutputParams::Adaptive { clusters, .. } = &params.output else {
                    unreachable!("an adaptive forward has adaptive parameters");
                };
                let out = self.adaptive_host_backward(*fwd, clusters, layer, part)?;
                meter.lap(Stage::OutputBackward);
                let (rows, device) = (h.shape()[0], self.device());
                let dh = floats(out.dh, [rows, self.spec.last_hidden()], device);
                let grads = (h * Tensor::from_inner(dh)).sum().backward();
                (grads, Some(out.output), None)
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
