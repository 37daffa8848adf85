//! The sparse layout's training step, top to bottom: data → unique rows → forward → backward →
//! row updates → dense updates → measure, for one process or for each rank of many (one process
//! is the one-rank case: the exchanges between the stages, in [`exchange`], are skipped); and
//! the same forward and backward without an update (`gradients`, `loss`; the held-out loss's
//! forward pass is `crate::eval::loss`). The output layer is one call each way
//! ([`crate::output::OutputLayer`]): the step never asks which kind it is.

pub mod done;
pub(crate) mod exchange;
pub(crate) mod trunk;

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_csr::CsrBatch;

use crate::error::ModelError;
use crate::model::SparseModel;
use crate::model::bag::BagInputs;
use crate::optim::dense::DenseParam;
use crate::output::{OutputPass, UpdateNow, Upstream};
use crate::params::TrunkParams;
use crate::params::update::update_all;
use crate::probe::{Point, Stage, StepProbe};
use crate::ranks::RankBatch;
use crate::step::done::StepDone;
use crate::table::bands::{BandIds, BandSegment};
use crate::tensors::to_vec;

/// Gradients of one batch, off autodiff: the touched rows and every dense parameter.
pub struct Grads {
    pub loss: f32,
    /// The batch's unique ids by band and segment: the rows the gradients belong to, and the
    /// rows the update writes.
    pub ids: BandIds,
    /// Gradient of the batch's unique rows, one `[end - start, band dim]` tensor per band
    /// segment (runs of `unique_ids` within one shard of one band), in `ids.segments` order.
    pub rows: Vec<(BandSegment, Tensor<2>)>,
    /// One per trunk parameter.
    pub trunk: TrunkParams<Tensor<2>>,
    /// One per output-layer parameter, in its `params` order.
    pub output: Vec<Tensor<2>>,
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

    /// Every dense parameter's gradient, in [`SparseModel::dense_params`] order.
    pub fn dense(&self) -> Vec<&Tensor<2>> {
        self.trunk.iter().chain(&self.output).collect()
    }
}

/// What the forward pass hands to the backward pass. It holds the batch's buffers and the
/// gathered rows until the backward pass is measured, as the ledger counts them.
pub(crate) struct Forward {
    pub(crate) loss: f32,
    inputs: BagInputs,
    /// Each segment's unique rows, gradient leaves.
    rows: Vec<Tensor<2>>,
    /// The trunk's parameters: gradient leaves (off the graph when the trunk is recomputed).
    params: TrunkParams<Tensor<2>>,
    /// The last hidden representation, on autodiff.
    h: Tensor<2>,
    /// The output layer's forward pass.
    pub(crate) pass: OutputPass,
}

/// What a backward pass is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backward {
    /// A training step: the output layer may take its optimizer step as it goes.
    Training,
    /// Gradients alone, every weight left as it is.
    GradientsOnly,
}

impl SparseModel {
    /// One training step of one process: the one-rank case of [`Self::train_step_on_rank`]
    /// (every exchange skipped).
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        probe: &mut StepProbe,
    ) -> Result<StepDone, ModelError> {
        self.train_step_on_rank(batch, batch.n_rows(), &Local, probe)
    }

    /// One training step: data → unique rows → forward → backward → row updates → dense updates
    /// → measure. `batch` is this process's rows of a global batch of `global_rows` rows; every
    /// rank of `comm` calls it with its part of the same global batch, and it returns the global
    /// batch's loss. The exchanges between the stages ([`exchange`]) are skipped at one rank.
    pub fn train_step_on_rank(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        probe: &mut StepProbe,
    ) -> Result<StepDone, ModelError> {
        probe.detail(Point::Setup);
        let part = RankBatch::new(self.ranks, comm, global_rows, batch.n_rows())?;
        if !part.alone() {
            self.check_rank_kernels("this device")?;
        }
        self.check_batch(batch)?;
        self.step += 1;
        self.output.at_step(self.step);
        // 1. data: the batch's sorted unique ids, split by band (and by shard for one process)
        //    once for the step.
        if !part.alone() {
            self.count_pooled(batch, comm)?;
        }
        let ids = self.part_ids(batch, &part)?;
        probe.lap(Stage::Ids);
        // 2. unique rows: rows lazy AdamW left behind are brought up to the previous step (so
        //    the gradient is taken at dense AdamW's weights; across ranks their owners do it as
        //    they send them); then the batch's index and value buffers go up grouped by segment,
        //    with each segment's rows (host bands upload just these). Across ranks the ids go to
        //    the rows' owners, which send the rows back.
        if part.alone() {
            self.catch_up_rows(&ids)?;
        }
        let (routes, inputs, rows) = self.part_rows(batch, &ids, &part)?;
        probe.lap(Stage::Gather);
        // 3. forward: bag → projections → MLP on autodiff, then the output layer (across ranks
        //    split by classes, or each tail cluster at its owner).
        let forward = self.forward(batch, &part, inputs, rows, probe)?;
        let sent = forward.pass.sent.clone();
        // 4. backward: the output layer's gradients and dL/dh, then autodiff through the MLP
        //    and the bag. Both are of the global batch's mean. A tied table's row gradients
        //    join the output weight's, which the dense update applies. An output layer that
        //    steps its parameters as it forms their gradients (the CubeCL kernels) does so here.
        let mut grads = self.backward(forward, ids, &part, Backward::Training, probe)?;
        self.tie_gradients(&mut grads)?;
        if !part.alone() {
            self.count_output_traffic(&part, batch, &sent);
        }
        // 5. row updates: only the batch's unique rows of each band, in place, with
        //    deduplicated ids (a host band takes back only these rows' updates). Across ranks,
        //    every rank's gradients of a row are summed at its owner, which updates the union
        //    of the rows asked of it.
        let Grads {
            loss,
            ids,
            rows,
            trunk,
            output,
        } = grads;
        match part.alone() {
            true => self.update_rows(&ids, rows, probe)?,
            false => self.update_owned_rows(&routes, rows, comm, probe)?,
        }
        probe.lap(Stage::RowUpdate);
        // 6. dense updates, in place (across ranks, the replicated parameters' gradients summed
        //    first in one fused all-reduce); a tied table is written again from the weight.
        self.update_dense(trunk, output, &part, probe)?;
        probe.lap(Stage::DenseUpdate);
        // 7. measure.
        probe.sample(Point::StepEnd);
        Ok(StepDone::new(self.step, loss, batch))
    }

    /// Loss and gradients of one batch without changing the weights (steps 1–4 of the training
    /// step, at the weights as stored: rows lazy AdamW still owes a catch-up are read as they
    /// are; [`Self::flush_deferred`] first where that matters).
    pub fn gradients(&mut self, batch: &CsrBatch) -> Result<Grads, ModelError> {
        let mut unused = StepProbe::new(self.device());
        self.check_batch(batch)?;
        self.output.at_step(self.step + 1);
        let ids = self.band_ids(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        let part = RankBatch::new(self.ranks, &Local, batch.n_rows(), batch.n_rows())?;
        let forward = self.forward(batch, &part, inputs, rows, &mut unused)?;
        self.backward(forward, ids, &part, Backward::GradientsOnly, &mut unused)
    }

    /// What the step does to [`Self::gradients`]' output before the updates: a tied layer's
    /// row gradients moved into its weight's gradient (nothing for other layers).
    pub fn tie_gradients(&self, grads: &mut Grads) -> Result<(), ModelError> {
        self.output
            .absorb_rows(&grads.ids, &mut grads.rows, &mut grads.output)
    }

    /// Mean loss of a batch (at the weights as stored, as [`Self::gradients`]).
    pub fn loss(&mut self, batch: &CsrBatch) -> Result<f32, ModelError> {
        Ok(self.gradients(batch)?.loss)
    }

    /// Step 2's catch-up for one process: the rows of `ids` lazy AdamW left behind, brought up
    /// to the previous step.
    fn catch_up_rows(&mut self, ids: &BandIds) -> Result<(), ModelError> {
        for (k, band) in self.bands.iter_mut().enumerate() {
            let local = ids.local[k].ids();
            band.state
                .catch_up(&mut band.table, local, &self.optim, self.step)?;
        }
        Ok(())
    }

    /// Step 3: the forward pass and the loss, from the gathered `rows` (made gradient leaves).
    pub(crate) fn forward(
        &mut self,
        batch: &CsrBatch,
        part: &RankBatch<'_>,
        inputs: BagInputs,
        rows: Vec<Tensor<2>>,
        probe: &mut StepProbe,
    ) -> Result<Forward, ModelError> {
        // With checkpointing the trunk runs off the graph (nothing saved) and `h` is a leaf:
        // the output layer's backward stops there and `recompute_trunk` goes on.
        let recompute = self.recomputes_trunk();
        let rows: Vec<Tensor<2>> = match recompute {
            true => rows,
            false => rows.into_iter().map(|r| r.require_grad()).collect(),
        };
        let targets = self.output.objective().targets(batch.targets());
        let params = match recompute {
            false => self
                .trunk
                .map(|p: &DenseParam| p.value.clone().autodiff().require_grad()),
            true => self.trunk.map(|p: &DenseParam| p.value.clone().autodiff()),
        };
        let mut h = self.forward_hidden(&rows, &params, &inputs);
        if recompute {
            h = h.detach().require_grad();
        }
        probe.lap(Stage::Forward);
        let pass = self.output.forward(&h, &targets, part, probe)?;
        probe.lap(Stage::OutputForward);
        probe.sample(Point::ForwardEnd);
        Ok(Forward {
            loss: pass.loss,
            inputs,
            rows,
            params,
            h,
            pass,
        })
    }

    /// Step 4: the backward pass, to the gradients of the rows `ids` and of every dense
    /// parameter (in a training step, but those the output layer steps itself).
    pub(crate) fn backward(
        &mut self,
        forward: Forward,
        ids: BandIds,
        part: &RankBatch<'_>,
        mode: Backward,
        probe: &mut StepProbe,
    ) -> Result<Grads, ModelError> {
        let Forward {
            loss,
            inputs,
            rows,
            params,
            h,
            pass,
        } = forward;
        let h_leaf = self.recomputes_trunk().then(|| h.clone());
        let out = match mode {
            Backward::Training => {
                let now = UpdateNow {
                    optim: &self.optim,
                    step: self.step,
                };
                self.output.backward_updating(pass, part, now, probe)?
            }
            Backward::GradientsOnly => self.output.backward(pass, part, probe)?,
        };
        // The trunk's gradients: from dL/dh, or those autodiff already has (the output layer on
        // the trunk's graph keeps `h` until the end, as the ledger counts it).
        let (ad_grads, h) = match out.upstream {
            Upstream::Dh(dh) => ((h * Tensor::from_inner(dh)).sum().backward(), None),
            Upstream::Graph(grads) => (grads, Some(h)),
        };
        // 4b. checkpointing: the trunk again, on autodiff, from the output's dL/dh.
        let recomputed = h_leaf.map(|h| self.recompute_trunk(&h, &ad_grads, &rows, &inputs, probe));
        let (trunk_grads, trunk_rows, trunk_params) = match &recomputed {
            Some((g, r, p)) => (g, r, p),
            None => (&ad_grads, &rows, &params),
        };
        let (rows_grad, trunk) = self.trunk_grads(&ids, trunk_rows, trunk_params, trunk_grads);
        drop((ad_grads, recomputed));
        probe.sample(Point::BackwardEnd);
        // The batch's buffers, the gathered rows and the leaves go only now, as the ledger
        // counts them at the end of backward.
        drop((inputs, rows, params, h));
        probe.lap(Stage::TrunkBackward);
        Ok(Grads {
            loss,
            ids,
            rows: rows_grad,
            trunk,
            output: out.params,
        })
    }

    /// Step 5 for one process: each segment's rows updated in place by the table's optimizer.
    fn update_rows(
        &mut self,
        ids: &BandIds,
        rows: Vec<(BandSegment, Tensor<2>)>,
        probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        for (s, rows_grad) in rows {
            let band = &mut self.bands[s.band];
            let (table, step) = (&mut band.table, self.step);
            band.state
                .step(table, ids.of(&s), rows_grad, &self.optim, step, probe)?;
        }
        Ok(())
    }

    /// Step 6: the trunk's and the output layer's parameters updated in place with their
    /// gradients (across ranks, the replicated ones summed first); then the output layer's
    /// after-update (a tied table written again from the weight).
    fn update_dense(
        &mut self,
        trunk: TrunkParams<Tensor<2>>,
        output: Vec<Tensor<2>>,
        part: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        let n_trunk = self.trunk.iter().count();
        let mut grads = trunk.into_vec();
        grads.extend(output);
        let replicated = n_trunk + self.output.replicated();
        let mut grads = self.sum_dense(grads, replicated, part, probe)?;
        let output = grads.split_off(n_trunk);
        let (optim, step, path) = (&self.optim, self.step, self.spec.compute_path);
        update_all(self.trunk.iter_mut(), grads, optim, step, path)?;
        self.output.update(output, optim, step, path, probe)?;
        self.output.after_update(&mut self.bands)
    }
}
