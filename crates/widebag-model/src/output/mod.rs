//! The output layer as one type: [`OutputLayer`], from the trunk's last hidden representation
//! `h` to the loss and back to `dL/dh`, with its own parameters, updates, class scores and the
//! ledger's pricing of it, chosen once when the model is built ([`build::build`]). The step calls it
//! and never asks which kind it is. The kinds:
//!
//! - [`chunked::ChunkedSoftmax`]: the full softmax in class chunks on burn's tensors
//!   (`softmax`: running log-sum-exp, chunk targets);
//! - [`host::HostSoftmax`]: the same on flex's host kernels by cache-sized class block, for one
//!   process or split by classes across ranks;
//! - [`adaptive::AdaptiveSoftmax`]: the adaptive softmax (head and tail clusters) on autodiff;
//! - [`adaptive_cube::CubeAdaptiveSoftmax`]: the same off autodiff on widebag's CubeCL kernels
//!   (wgpu, one process), each cluster through the full softmax's passes and stepped inside
//!   the backward pass;
//! - [`adaptive_host::HostAdaptiveSoftmax`]: the same on flex's host kernels, for one process or
//!   many (`clusters`: the head and tail clusters both read, and which rank holds each);
//! - [`tied::TiedSoftmax`]: the host softmax whose weight is the input table
//!   (`model.tie_output`);
//! - [`sampled::SampledOutput`]: the sampled losses (sampled softmax with log-Q, negative
//!   sampling, cosine contrastive) over the batch's positives and drawn negatives
//!   (`negatives`), touching only their columns; the full softmax's parameters; on flex the
//!   sampled softmax runs the host softmax's kernel over the gathered columns (`sampled_host`).
//!
//! A multinomial bag (`model.output = "multinomial"`) is any of them with the bag's raw counts
//! as targets ([`Objective`]). Class scores for evaluation are visited chunk by chunk
//! (`scores`). The output layer uses the table's and the trunk's parameter types and the host
//! kernels below it; the model, the step and the loop use it.

pub mod adaptive;
pub mod adaptive_cube;
pub mod adaptive_host;
pub mod build;
pub mod chunked;
pub mod clusters;
pub mod full;
pub mod host;
pub mod negatives;
pub mod sampled;
pub mod sampled_host;
pub mod scores;
pub mod softmax;
pub mod tied;

use std::any::Any;

use burn::tensor::{Gradients, Tensor};
use widebag_collective::Collective;
use widebag_config::OptimConfig;
use widebag_csr::Targets;
use widebag_ledger::shapes::ClassChunk;
use widebag_ledger::step::{OutputLayerKind, OutputUpdate};

use crate::device::ComputePath;
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::scores::{BlockScorer, ChunksWanted, ScoreKind, Visit};
use crate::params::n_values;
use crate::params::update::update_all;
use crate::probe::StepProbe;
use crate::ranks::{RankBatch, Ranks};
use crate::table::bands::{BandIds, BandSegment, InputBand};

/// What the objective compares the scores with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// Each row's targets normalised to a distribution (`full`, `adaptive`).
    Distribution,
    /// The bag's raw counts (`multinomial`: `-Σ x log p`).
    Multinomial,
}

impl Objective {
    /// The targets the loss sees for a batch's `targets`.
    pub fn targets(self, targets: &Targets) -> Targets {
        match self {
            Objective::Multinomial => targets.clone(),
            Objective::Distribution => targets.normalised(),
        }
    }
}

/// What an output layer's forward pass hands to its backward pass: the loss (the global batch's
/// mean), the bytes it sent other ranks by the ledger's names, and the layer's own saved state.
pub struct OutputPass {
    pub loss: f32,
    pub sent: Vec<(&'static str, u64)>,
    saved: Box<dyn Any>,
}

impl OutputPass {
    pub(crate) fn new(loss: f32, sent: Vec<(&'static str, u64)>, saved: impl Any) -> Self {
        Self {
            loss,
            sent,
            saved: Box::new(saved),
        }
    }

    /// The layer's saved state, which its forward pass stored.
    pub(crate) fn into_saved<T: Any>(self) -> T {
        *self
            .saved
            .downcast::<T>()
            .expect("a layer's backward receives its own forward pass")
    }
}

/// Where the trunk's backward pass starts.
pub enum Upstream {
    /// `dL/dh` of this rank's rows, off autodiff: the trunk is differentiated from it.
    Dh(Tensor<2>),
    /// Autodiff ran from the loss through the output layer (and through the trunk, unless the
    /// trunk is recomputed): the gradients are these.
    Graph(Gradients),
}

/// The output layer's backward pass: where the trunk's begins, and a gradient per parameter in
/// [`OutputLayer::params`] order (a sampled layer's: its gathered columns' weight and bias,
/// which its own update places).
pub struct OutputGrads {
    pub upstream: Upstream,
    pub params: Vec<Tensor<2>>,
}

impl OutputGrads {
    /// Autodiff from `loss` through the output layer, the MLP and the bag in one pass (its time
    /// is the output's backward): the trunk's gradients, and the gradients of `leaves` (the
    /// layer's gradient leaves, zeros where the loss did not reach one) in their order.
    pub(crate) fn by_autodiff(
        loss: Tensor<1>,
        leaves: &[&Tensor<2>],
        probe: &mut StepProbe,
    ) -> Self {
        let grads = loss.backward();
        probe.lap(crate::probe::Stage::OutputBackward);
        probe.detail(crate::probe::Point::BackwardLogits);
        let params = leaves
            .iter()
            .map(|l| crate::tensors::leaf_grad(l, &grads))
            .collect();
        Self {
            upstream: Upstream::Graph(grads),
            params,
        }
    }
}

/// The optimizer step of a training step, which an output layer's backward pass may apply as
/// it forms its parameters' gradients ([`OutputLayer::backward_updating`]).
#[derive(Clone, Copy)]
pub struct UpdateNow<'a> {
    pub optim: &'a OptimConfig,
    /// The training step's 1-based count.
    pub step: u64,
}

/// An output layer: forward to the loss, backward to `dL/dh` and its parameters' gradients, its
/// updates, and its class scores.
pub trait OutputLayer: Send {
    /// How the ledger prices this layer.
    fn priced_as(&self) -> OutputLayerKind;

    /// What the loss compares the scores with.
    fn objective(&self) -> Objective;

    /// The full softmax's class chunks this rank holds (their global offsets); empty for the
    /// adaptive softmax.
    fn class_chunks(&self) -> &[ClassChunk];

    /// Every parameter, in the order checkpoints and gradients list them.
    fn params(&self) -> Vec<&DenseParam>;

    /// [`Self::params`] by mutable reference.
    fn params_mut(&mut self) -> Vec<&mut DenseParam>;

    /// How many of the first [`Self::params`] every rank holds whole (their gradients summed
    /// across ranks before the update); the rest are this rank's own.
    fn replicated(&self) -> usize;

    /// Values this layer adds to the model (a tied weight is the table's, counted there).
    fn n_values(&self) -> u64 {
        n_values(self.params())
    }

    /// An error unless a batch of `n_rows` rows fits the layer's buffers.
    fn check_batch(&self, _n_rows: usize, _max_buffer_bytes: u64) -> Result<(), ModelError> {
        Ok(())
    }

    /// The forward pass from `h` (this rank's rows, on autodiff) to the global batch's mean
    /// loss against `targets` (the objective's).
    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError>;

    /// The backward pass of `pass`: where the trunk's begins, and the parameters' gradients.
    fn backward(
        &mut self,
        pass: OutputPass,
        batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError>;

    /// [`Self::backward`] in a training step whose optimizer step is `now`. A layer whose
    /// parameters take their step inside the backward pass ([`Self::update_priced_as`]) applies
    /// it as each gradient is formed and returns no gradient for them; the others return
    /// [`Self::backward`]'s, which [`Self::update`] applies after the row updates.
    fn backward_updating(
        &mut self,
        pass: OutputPass,
        batch: &RankBatch<'_>,
        _now: UpdateNow<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        self.backward(pass, batch, probe)
    }

    /// Where this layer's parameters take a training step's optimizer step, as the ledger
    /// prices it: after the backward pass (the default), or inside it.
    fn update_priced_as(&self) -> OutputUpdate {
        OutputUpdate::AfterBackward
    }

    /// Ends a forward pass without its backward (a loss alone): what it lent is put back
    /// (nothing, for a layer that lends nothing).
    fn end_pass(&mut self, _pass: OutputPass) {}

    /// The training step the next forward passes belong to (a sampled layer draws that
    /// step's negatives). Others: nothing.
    fn at_step(&mut self, _step: u64) {}

    /// While `on`, forward passes compute the held-out loss (a sampled layer's is the full
    /// softmax's). Others: nothing, their loss is the same.
    fn held_out(&mut self, _on: bool) {}

    /// A tied layer's rows: the batch's row gradients `rows` (by segment of `ids`) added into
    /// the layer's own gradients `grads`, none left for the row updates. Others: nothing.
    fn absorb_rows(
        &self,
        _ids: &BandIds,
        _rows: &mut Vec<(BandSegment, Tensor<2>)>,
        _grads: &mut [Tensor<2>],
    ) -> Result<(), ModelError> {
        Ok(())
    }

    /// One optimizer step of every parameter this rank trains, with its gradient (`probe` reads
    /// the allocator where the update holds temporaries of its own).
    fn update(
        &mut self,
        grads: Vec<Tensor<2>>,
        optim: &OptimConfig,
        step: u64,
        path: ComputePath,
        _probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        update_all(self.params_mut(), grads, optim, step, path)
    }

    /// After the update: a tied layer writes the table's rows again from its weight.
    fn after_update(&mut self, _bands: &mut [InputBand]) -> Result<(), ModelError> {
        Ok(())
    }

    /// What this step's output collectives sent other ranks, by the ledger's names: `batch`'s
    /// rows, its `n_targets` target entries, and what the forward pass counted (`pass_sent`).
    /// Nothing for a layer that trains in one process or sends nothing of its own.
    fn traffic(
        &self,
        _batch: &RankBatch<'_>,
        _n_targets: usize,
        _pass_sent: &[(&'static str, u64)],
    ) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Visits the scores of every class this rank holds for the rows of `h` (off autodiff),
    /// chunk by chunk.
    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError>;

    /// Whether [`Self::score_blocks`] scores (flex's host kernels, the full softmax).
    fn scores_by_block(&self) -> bool {
        false
    }

    /// Hands `h` (`[rows, hidden]`, off autodiff) and the layer's class chunks, lent without a
    /// copy, to `f` to score them block by block; `false`, with nothing visited, where the
    /// scores are tensors ([`Self::scores`]). With [`ChunksWanted::AlreadyPacked`] a layer may
    /// lend no chunks.
    fn score_blocks(
        &mut self,
        _h: Tensor<2>,
        _wanted: ChunksWanted,
        _f: &mut BlockScorer<'_>,
    ) -> Result<bool, ModelError> {
        Ok(false)
    }

    /// Log-probabilities `[rows, classes]` of every class for the rows of `h` (evaluation).
    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2>;

    /// Across ranks, whether held-out rows are scored split by classes (every rank's rows
    /// against this rank's classes, merged at rank 0) rather than each rank's own rows whole.
    fn splits_classes(&self) -> bool;

    /// Readies the layer for scoring held-out rows across ranks (the adaptive softmax fetches
    /// every tail cluster from its owner).
    fn begin_scoring(&mut self, _comm: &dyn Collective) -> Result<(), ModelError> {
        Ok(())
    }

    /// Drops what [`Self::begin_scoring`] fetched.
    fn end_scoring(&mut self) {}

    /// Takes from `part`, rank `ranks.rank`'s part of the same layer read from its checkpoint,
    /// the values that rank alone holds (its classes, its tail clusters) into this whole layer.
    fn gather_owned(&mut self, part: &dyn OutputLayer, ranks: Ranks) -> Result<(), ModelError>;
}
