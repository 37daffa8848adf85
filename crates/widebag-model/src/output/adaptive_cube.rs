//! The adaptive softmax off autodiff on widebag's CubeCL kernels (wgpu with `train.gpu_kernels
//! = "cubecl"`, one process): the head and each tail cluster are each a full softmax of one
//! class chunk, run through the full softmax's two passes ([`softmax::forward`],
//! [`softmax::backward_applying`]: each row's log-sum-exp and the logit gradient in the
//! kernels), a tail's on the batch's rows whose targets fall in it, projected (`u = h_k proj`).
//! In a training step each cluster's weight and bias take their optimizer step inside the
//! backward pass as its logit gradient is formed ([`crate::cube::output_step`]), and a tail's
//! projection from its `[hidden, dim]` gradient at once: no output gradient outlives its
//! cluster's backward. Loss and gradients are the autodiff layer's
//! ([`crate::output::adaptive`]); flex's counterpart is [`crate::output::adaptive_host`].

use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor};
use widebag_config::Logits;
use widebag_csr::Targets;
use widebag_ledger::shapes::{ClassChunk, tail_rows_bucket};
use widebag_ledger::step::{OutputLayerKind, OutputUpdate};

use crate::cube::output_step::ChunkStep;
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::adaptive::AdaptiveTargets;
use crate::output::chunked::step_chunk;
use crate::output::clusters::AdaptiveParams;
use crate::output::scores::{ScoreKind, Visit};
use crate::output::softmax::{self, ChunkTargets, Hidden, SoftmaxKernels};
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass, UpdateNow, Upstream};
use crate::probe::{Stage, StepProbe};
use crate::products::Operands;
use crate::ranks::{RankBatch, Ranks};
use crate::tensors::{ints, scalar};

/// The adaptive softmax on the CubeCL kernels.
pub struct CubeAdaptiveSoftmax {
    pub(crate) params: AdaptiveParams,
    objective: Objective,
    /// Each cluster's logits made again in the backward pass, or formed in the kernels' tiles
    /// in both passes ([`Logits::Tiled`]).
    logits: Logits,
    device: Device,
}

/// One cluster's softmax as its forward pass leaves it: its input (the head's `h`, a tail's
/// `u`), its targets and each row's log-sum-exp.
struct ClusterPass {
    input: Hidden,
    targets: ChunkTargets,
    lse: Tensor<2>,
    chunk: [ClassChunk; 1],
    /// What the forward pass left of the cluster's logits.
    kept: softmax::Pass1Logits,
}

/// A tail cluster's rows of the batch and their hidden states, with its softmax.
struct TailPass {
    rows: Tensor<1, Int>,
    hk: Tensor<2>,
    softmax: ClusterPass,
}

/// What the forward pass hands to the backward pass.
struct Saved {
    head: ClusterPass,
    /// Per tail cluster; `None` where no target of the batch falls in it.
    tails: Vec<Option<TailPass>>,
}

/// Where a cluster's gradients go: stepped as they are formed, or kept for the caller.
enum Sink<'a> {
    Step(&'a ChunkStep, UpdateNow<'a>),
    Keep(Vec<Tensor<2>>),
}

/// `(row, column, weight)` entries, in row order, as `n_rows` rows of targets over `n` classes,
/// the entries of one row and column summed (a row with two targets in one tail cluster has its
/// token twice in the head).
fn entries_as_targets(n_rows: usize, n: usize, entries: &[(u32, u32, f32)]) -> Targets {
    let mut row_ptr = vec![0; n_rows + 1];
    let (mut classes, mut weights): (Vec<u32>, Vec<f32>) = (Vec::new(), Vec::new());
    let mut k = 0;
    for r in 0..n_rows {
        let start = classes.len();
        while k < entries.len() && entries[k].0 as usize == r {
            let (_, c, w) = entries[k];
            match classes[start..].iter().position(|&x| x == c) {
                Some(i) => weights[start + i] += w,
                None => {
                    classes.push(c);
                    weights.push(w);
                }
            }
            k += 1;
        }
        row_ptr[r + 1] = classes.len();
    }
    Targets {
        n_classes: n,
        row_ptr,
        classes,
        weights,
        single_class: false,
    }
}

impl ClusterPass {
    /// The forward pass of one cluster (`(weight, bias)` over its `n` classes) on `input`'s rows
    /// against `entries`, its loss the mean over the batch's `batch_rows`, its logits made
    /// again in the backward pass or tiled (`logits`).
    fn forward(
        input: Hidden,
        (weight, bias): (&DenseParam, &DenseParam),
        (entries, batch_rows): (&[(u32, u32, f32)], usize),
        logits: Logits,
        probe: &mut StepProbe,
    ) -> (Self, Tensor<1>) {
        let device = input.h.device();
        let (m, n) = (input.h.dims()[0], bias.value.dims()[1]);
        let chunk = [ClassChunk { offset: 0, n }];
        let targets = entries_as_targets(m, n, entries);
        let targets = ChunkTargets::new(&targets, &chunk, &device).over_rows(batch_rows);
        let layer = [(&weight.value, &bias.value)];
        let fwd = softmax::forward(
            &input,
            &layer,
            &chunk,
            &targets,
            SoftmaxKernels::Cube,
            logits,
            probe,
        );
        let pass = Self {
            input,
            targets,
            lse: fwd.lse,
            chunk,
            kept: fwd.kept,
        };
        (pass, fwd.loss)
    }

    /// The cluster's backward pass: `dL/d input`, its weight's and bias's gradients to `sink`.
    fn backward(
        self,
        (weight, bias): (&mut DenseParam, &mut DenseParam),
        sink: &mut Sink<'_>,
        probe: &mut StepProbe,
    ) -> Tensor<2> {
        let layer = vec![(weight.value.clone(), bias.value.clone())];
        let input = &self.input;
        let mut apply = |_: usize, g: &Tensor<2>| match sink {
            Sink::Step(rule, now) => {
                step_chunk(Some(*rule), input, g, (&mut *weight, &mut *bias), *now)
            }
            Sink::Keep(grads) => grads.extend([input.dw_product(g), g.clone().sum_dim(0)]),
        };
        softmax::backward_applying(
            input,
            layer,
            &self.chunk,
            &self.targets,
            &self.lse,
            (self.kept, SoftmaxKernels::Cube),
            &mut apply,
            probe,
        )
    }
}

impl CubeAdaptiveSoftmax {
    /// `logits`: [`Logits::Tiled`], or any other form: made again in the backward pass.
    pub fn new(
        params: AdaptiveParams,
        objective: Objective,
        logits: Logits,
        device: Device,
    ) -> Self {
        let logits = match logits {
            Logits::Tiled => Logits::Tiled,
            _ => Logits::Recompute,
        };
        Self {
            params,
            objective,
            logits,
            device,
        }
    }

    /// The backward pass of `saved`, the gradients to `sink` in [`AdaptiveParams::params`]
    /// order (zeros for a cluster no target reached): `dL/dh`.
    fn backward_to(
        &mut self,
        saved: Saved,
        sink: &mut Sink<'_>,
        probe: &mut StepProbe,
    ) -> Tensor<2> {
        let Saved { head, tails } = saved;
        let p = &mut self.params;
        let mut dh = head.backward((&mut p.head.weight, &mut p.head.bias), sink, probe);
        for (tail, cluster) in tails.into_iter().zip(&mut p.clusters) {
            let Some(tail) = tail else {
                // No target reached the cluster: a zero gradient, stepped as autodiff's and the
                // host kernels' layers step it (momentum and weight decay still move it).
                let zeros = |p: &DenseParam| Tensor::zeros(p.value.dims(), &self.device);
                match sink {
                    Sink::Keep(grads) => {
                        grads.extend([&cluster.proj, &cluster.weight, &cluster.bias].map(zeros))
                    }
                    Sink::Step(_, now) => {
                        for p in [&mut cluster.proj, &mut cluster.weight, &mut cluster.bias] {
                            p.update(zeros(p), now.optim, now.step);
                        }
                    }
                }
                continue;
            };
            // The projection's gradient goes before the cluster's own (their order in `params`).
            let at = match sink {
                Sink::Keep(grads) => grads.len(),
                Sink::Step(..) => 0,
            };
            let (weight, bias) = (&mut cluster.weight, &mut cluster.bias);
            let du = tail.softmax.backward((weight, bias), sink, probe);
            let dhk = du.clone().matmul(cluster.proj.value.clone().transpose());
            let dproj = tail.hk.transpose().matmul(du);
            match sink {
                Sink::Step(_, now) => cluster.proj.update(dproj, now.optim, now.step),
                Sink::Keep(grads) => grads.insert(at, dproj),
            }
            dh = dh.select_assign(0, tail.rows, dhk, IndexingUpdateOp::Add);
        }
        dh
    }
}

impl OutputLayer for CubeAdaptiveSoftmax {
    fn priced_as(&self) -> OutputLayerKind {
        OutputLayerKind::CubeAdaptiveSoftmax
    }

    fn objective(&self) -> Objective {
        self.objective
    }

    fn class_chunks(&self) -> &[ClassChunk] {
        &[]
    }

    fn params(&self) -> Vec<&DenseParam> {
        self.params.params()
    }

    fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.params.params_mut()
    }

    fn replicated(&self) -> usize {
        2
    }

    fn check_batch(&self, n_rows: usize, max_buffer_bytes: u64) -> Result<(), ModelError> {
        self.params.check_batch(n_rows, max_buffer_bytes)?;
        // A tail's logits are one buffer over the rows whose targets fall in it, at most all.
        for (k, c) in self.params.clusters.iter().enumerate() {
            let n = c.bias.value.dims()[1];
            let logits = 4 * (n_rows * n) as u64;
            if logits > max_buffer_bytes {
                return Err(ModelError::Shape(format!(
                    "the CubeCL kernels' adaptive softmax (train.gpu_kernels = \"cubecl\") may \
                     need tail cluster {}'s [batch, {n}] logits in one {logits}-byte buffer, over \
                     the device's {max_buffer_bytes}-byte limit: use train.gpu_kernels = \
                     \"tensor\", smaller tail clusters (model.output_bands.cutoffs) or \
                     train.batch_size",
                    k + 1
                )));
            }
        }
        Ok(())
    }

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        let h = h.clone().inner();
        let n_rows = h.dims()[0];
        let p = &self.params;
        let split = AdaptiveTargets::new(targets, &p.bands);
        let input = Hidden::new(h.clone(), Operands::F32);
        let head_layer = (&p.head.weight, &p.head.bias);
        let logits = self.logits;
        let head_targets = (split.head.as_slice(), n_rows);
        let (head, mut loss) = ClusterPass::forward(input, head_layer, head_targets, logits, probe);
        let mut tails = Vec::with_capacity(split.tails.len());
        for (t, cluster) in split.tails.iter().zip(&p.clusters) {
            if t.rows.is_empty() {
                tails.push(None);
                continue;
            }
            // Padded to a bucket by the first row again: no target, no weight, a zero gradient.
            let mut padded = t.rows.clone();
            padded.resize(tail_rows_bucket(t.rows.len(), n_rows), t.rows[0]);
            let rows = ints(&padded, &self.device);
            let hk = h.clone().select(0, rows.clone());
            let u = Hidden::new(hk.clone().matmul(cluster.proj.value.clone()), Operands::F32);
            let layer = (&cluster.weight, &cluster.bias);
            let entries = (t.entries.as_slice(), n_rows);
            let (softmax, tail_loss) = ClusterPass::forward(u, layer, entries, logits, probe);
            loss = loss + tail_loss;
            tails.push(Some(TailPass { rows, hk, softmax }));
        }
        let value = scalar(loss)?;
        Ok(OutputPass::new(value, Vec::new(), Saved { head, tails }))
    }

    fn backward(
        &mut self,
        pass: OutputPass,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        let mut sink = Sink::Keep(Vec::new());
        let dh = self.backward_to(pass.into_saved(), &mut sink, probe);
        probe.lap(Stage::OutputBackward);
        let Sink::Keep(params) = sink else {
            unreachable!("the sink keeps the gradients")
        };
        Ok(OutputGrads {
            upstream: Upstream::Dh(dh),
            params,
        })
    }

    fn backward_updating(
        &mut self,
        pass: OutputPass,
        batch: &RankBatch<'_>,
        now: UpdateNow<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        let state = &self.params.head.weight.state;
        let Some(rule) = ChunkStep::new(state, (now.optim, now.step), &self.device) else {
            return self.backward(pass, batch, probe);
        };
        let mut sink = Sink::Step(&rule, now);
        let dh = self.backward_to(pass.into_saved(), &mut sink, probe);
        probe.lap(Stage::OutputBackward);
        Ok(OutputGrads {
            upstream: Upstream::Dh(dh),
            params: Vec::new(),
        })
    }

    fn update_priced_as(&self) -> OutputUpdate {
        OutputUpdate::InBackward
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        self.params.scores(h, visit)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        self.params.log_probs(h)
    }

    fn splits_classes(&self) -> bool {
        false
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, ranks: Ranks) -> Result<(), ModelError> {
        self.params.gather_owned(&part.params(), ranks)
    }
}

#[cfg(test)]
mod tests {
    use super::entries_as_targets;

    #[test]
    fn entries_of_one_row_and_column_are_summed_and_rows_without_any_are_empty() {
        let t = entries_as_targets(
            4,
            5,
            &[(0, 3, 0.5), (0, 1, 0.25), (0, 3, 0.25), (2, 4, 1.0)],
        );
        assert_eq!(t.row_ptr, vec![0, 2, 2, 3, 3]);
        assert_eq!(t.classes, vec![3, 1, 4]);
        assert_eq!(t.weights, vec![0.75, 0.25, 1.0]);
        assert_eq!(t.row_weight(0), 1.0);
    }
}
