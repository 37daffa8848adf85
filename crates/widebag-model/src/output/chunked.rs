//! The full softmax in class chunks on burn's tensors (wgpu, or flex's tensor path), off
//! autodiff: the forward pass keeps each row's log-sum-exp ([`softmax::forward`]), the backward
//! pass recomputes each chunk's logits (or, with `model.logits = "keep"` in one process, takes
//! them kept from the forward pass) and forms `dL/dh` and the chunks' gradients
//! ([`softmax::backward`]); recomputing, no `[batch, classes]` buffer is ever whole. With
//! widebag's CubeCL kernels on wgpu a training step's backward pass also takes each chunk's
//! optimizer step as its logit gradient is formed ([`crate::cube::output_step`]): no chunk's
//! weight gradient is ever whole either.

use burn::tensor::{Device, Tensor};
use widebag_config::Logits;
use widebag_csr::Targets;
use widebag_ledger::shapes::ClassChunk;
use widebag_ledger::step::{OutputLayerKind, OutputUpdate};

use crate::cube;
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::full::FullParams;
use crate::output::scores::{ScoreKind, Visit};
use crate::output::softmax::{self, ChunkTargets, Hidden, SoftmaxKernels};
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass, UpdateNow, Upstream};
use crate::params::Linear;
use crate::probe::StepProbe;
use crate::products::Operands;
use crate::ranks::{RankBatch, Ranks};
use crate::tensors::scalar;

/// The chunked full softmax on tensors.
pub struct ChunkedSoftmax {
    pub(crate) full: FullParams,
    objective: Objective,
    /// Which kernels form the row log-sum-exp and the logit gradient.
    kernels: SoftmaxKernels,
    /// Whether the forward pass keeps the logits for the backward pass.
    logits: Logits,
    /// The products' operand dtype (`model.output_precision`).
    operands: Operands,
    device: Device,
}

/// What the forward pass keeps for the backward pass.
struct Saved {
    h: Hidden,
    layer: Vec<(Tensor<2>, Tensor<2>)>,
    targets: ChunkTargets,
    lse: Tensor<2>,
    kept: softmax::Pass1Logits,
}

impl ChunkedSoftmax {
    /// `logits`: [`Logits::Keep`] in one process only (the ledger prices kept logits there).
    pub fn new(
        full: FullParams,
        objective: Objective,
        kernels: SoftmaxKernels,
        (logits, operands): (Logits, Operands),
        device: Device,
    ) -> Self {
        Self {
            full,
            objective,
            kernels,
            logits,
            operands,
            device,
        }
    }
}

impl ChunkedSoftmax {
    /// Whether a training step's backward pass takes the chunks' optimizer step (widebag's
    /// CubeCL kernels, on a cubecl device).
    fn steps_in_backward(&self) -> bool {
        self.kernels == SoftmaxKernels::Cube && cube::bridge::on_cubecl(&self.device)
    }
}

/// One class chunk's optimizer step `now` from its logit gradient `g` as the backward pass forms
/// it: in place by `rule`'s kernel; without one (or past its grid's limit), from the gradient's
/// tensors.
pub(crate) fn step_chunk(
    rule: Option<&cube::output_step::ChunkStep>,
    h: &Hidden,
    g: &Tensor<2>,
    (weight, bias): (&mut DenseParam, &mut DenseParam),
    now: UpdateNow<'_>,
) {
    let stepped = rule.is_some_and(|rule| rule.apply(&h.h, g, (&mut *weight, &mut *bias)));
    if !stepped {
        weight.update(h.dw_product(g), now.optim, now.step);
        bias.update(g.clone().sum_dim(0), now.optim, now.step);
    }
}

/// `(weight, bias)` references of each chunk.
fn refs(layer: &[(Tensor<2>, Tensor<2>)]) -> Vec<(&Tensor<2>, &Tensor<2>)> {
    layer.iter().map(|(w, b)| (w, b)).collect()
}

impl OutputLayer for ChunkedSoftmax {
    fn priced_as(&self) -> OutputLayerKind {
        OutputLayerKind::ChunkedSoftmax
    }

    fn objective(&self) -> Objective {
        self.objective
    }

    fn class_chunks(&self) -> &[ClassChunk] {
        &self.full.chunks
    }

    fn params(&self) -> Vec<&DenseParam> {
        self.full.params()
    }

    fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.full.params_mut()
    }

    fn replicated(&self) -> usize {
        0
    }

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        let targets = ChunkTargets::new(targets, &self.full.chunks, &self.device);
        let layer = self.full.tensors();
        let h = Hidden::new(h.clone().inner(), self.operands);
        let fwd = softmax::forward(
            &h,
            &refs(&layer),
            &self.full.chunks,
            &targets,
            self.kernels,
            self.logits,
            probe,
        );
        let loss = scalar(fwd.loss)?;
        let saved = Saved {
            h,
            layer,
            targets,
            lse: fwd.lse,
            kept: fwd.kept,
        };
        Ok(OutputPass::new(loss, Vec::new(), saved))
    }

    fn backward(
        &mut self,
        pass: OutputPass,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        let Saved {
            h,
            layer,
            targets,
            lse,
            kept,
        } = pass.into_saved();
        let chunks = &self.full.chunks;
        let out = softmax::backward(
            &h,
            &refs(&layer),
            chunks,
            &targets,
            &lse,
            (kept, self.kernels),
            probe,
        );
        probe.lap(crate::probe::Stage::OutputBackward);
        let params = out.chunks.into_iter().flat_map(|(w, b)| [w, b]).collect();
        Ok(OutputGrads {
            upstream: Upstream::Dh(out.dh),
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
        let first_state = &self.full.layer[0].weight.state;
        let rule = match self.steps_in_backward() {
            true => {
                cube::output_step::ChunkStep::new(first_state, (now.optim, now.step), &self.device)
            }
            false => None,
        };
        let Some(rule) = rule else {
            return self.backward(pass, batch, probe);
        };
        let Saved {
            h,
            layer,
            targets,
            lse,
            kept,
        } = pass.into_saved();
        let FullParams {
            chunks,
            layer: params,
        } = &mut self.full;
        let mut apply = |c: usize, g: &Tensor<2>| {
            let Linear { weight, bias } = &mut params[c];
            step_chunk(Some(&rule), &h, g, (weight, bias), now)
        };
        let dh = softmax::backward_applying(
            &h,
            layer,
            chunks,
            &targets,
            &lse,
            (kept, self.kernels),
            &mut apply,
            probe,
        );
        probe.lap(crate::probe::Stage::OutputBackward);
        Ok(OutputGrads {
            upstream: Upstream::Dh(dh),
            params: Vec::new(),
        })
    }

    fn update_priced_as(&self) -> OutputUpdate {
        match self.steps_in_backward() {
            true => OutputUpdate::InBackward,
            false => OutputUpdate::AfterBackward,
        }
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        for (chunk, (w, b)) in self.full.chunks.iter().zip(self.full.tensors()) {
            visit(chunk.offset, softmax::logits(h, &w, &b))?;
        }
        Ok(ScoreKind::Logits)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        softmax::log_probs(h, &refs(&self.full.tensors()), self.kernels.reduce_cols())
    }

    fn splits_classes(&self) -> bool {
        true
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, _ranks: Ranks) -> Result<(), ModelError> {
        self.full.gather_owned(part.class_chunks(), &part.params())
    }
}
