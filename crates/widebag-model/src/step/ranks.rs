//! The training step of one rank of a multi-process run, top to bottom as the single-process
//! step (`step.rs`) with the exchanges between its stages: data (this rank's rows of the global
//! batch) → unique rows (ids to their owners, the owners' rows back: TorchRec's row-wise
//! sharding) → forward → backward → row updates (each row's gradient summed at its owner, which
//! alone holds its optimizer state) → dense updates (one fused all-reduce) → measure.
//!
//! The full softmax's output layer is split by classes (Megatron's class-split output): the
//! ranks' hidden states and their rows' targets are all-gathered, each rank scores every row
//! against its classes, the rows' log-sum-exp is combined across ranks from per-row scalars (an
//! all-reduced max and sum), each rank's weight gradient stays its own, and `dL/dh` is
//! all-reduced. The adaptive softmax's head is replicated and its tail clusters owned
//! (`adaptive_ranks`).

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_collective::partition::{Fused, all_reduce_sent, local_rows};
use widebag_collective::pooled::{BandCut, pooled_sent_bytes};
use widebag_collective::route::Route;
use widebag_csr::{CsrBatch, Targets};
use widebag_ledger::step::collective_names as names;

use crate::ModelError;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, HostTargets, Logits};
use crate::model::bag::{BagInputs, BandIds};
use crate::model::dense_optim::DenseParam;
use crate::model::params::{OutputParams, update_param};
use crate::model::{StepStats, WideModel};
use crate::step::memory::{MemoryMeter, Point, Stage};
use crate::step::{Grads, chunk_tensors};
use crate::table::ids::SortedIds;
use crate::tensors::{floats, to_vec};

/// Values of `lists` (one per rank) that go to a rank other than `me`.
fn to_others(lists: &[Vec<u32>], me: usize) -> u64 {
    lists
        .iter()
        .enumerate()
        .filter(|&(r, _)| r != me)
        .map(|(_, l)| l.len() as u64)
        .sum()
}

/// Steps on which the pooled exchange's bytes are counted (`widebag_collective::pooled`): a
/// sample, so a long run does not pay its extra collective on every step.
pub const POOLED_SAMPLED_STEPS: u64 = 20;

/// A band's route for the step, with the first row of this rank's block of the band.
type BandRoute = (Route, u32);

impl WideModel {
    /// One training step of this rank on `batch`, its rows (`local_rows`) of a global batch of
    /// `global_rows` rows; every rank of `comm` calls it with its part of the same global batch.
    /// Returns the global batch's loss.
    pub fn train_step_ranks(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        meter.probe(Point::Setup);
        self.check_rank_kernels("this device")?;
        self.check_batch(batch)?;
        self.step += 1;
        let (ranks, step) = (self.ranks, self.step);
        // 1. data: this rank's rows and their unique ids, one segment per band.
        let mine = local_rows(global_rows, ranks.rank, ranks.size);
        if mine.len() != batch.n_rows() {
            return Err(ModelError::Shape(format!(
                "rank {} of {} holds rows {mine:?} of a batch of {global_rows}, not {} rows",
                ranks.rank,
                ranks.size,
                batch.n_rows()
            )));
        }
        let ids = self.band_ids_whole(batch)?;
        // The other exchange's bytes, counted on the first steps only (one more collective).
        if step <= POOLED_SAMPLED_STEPS {
            let cuts: Vec<BandCut> = self
                .bands
                .iter()
                .map(|b| BandCut {
                    start: b.band.start as u32,
                    end: b.band.end as u32,
                    dim: b.band.dim,
                })
                .collect();
            self.pooled_bytes += pooled_sent_bytes(comm, batch.row_ptr(), batch.ids(), &cuts)?;
            self.pooled_steps += 1;
        }
        // Every row's targets, for the class-split output layer (the rows are the ranks').
        let targets = match self.adaptive() {
            true => None,
            false => Some(self.gather_targets(&self.objective_targets(batch), comm)?),
        };
        meter.lap(Stage::Ids);
        // 2. unique rows from their owners.
        let (routes, rows) = self.fetch_rows(&ids, comm)?;
        let inputs = self.upload_inputs(batch, &ids);
        meter.lap(Stage::Gather);
        // 3.–4. forward and backward.
        let host = HostLayer::take(&mut self.dense.output)?;
        let grads = match &targets {
            None => {
                self.adaptive_split(batch, global_rows, (ids, inputs, rows), &host, comm, meter)
            }
            Some(targets) => {
                self.class_split(targets, &mine, (ids, inputs, rows), &host, comm, meter)
            }
        };
        let device = self.device().clone();
        host.restore(&mut self.dense.output, &device);
        // Both outputs' gradients are already the global batch's mean.
        let grads = grads?;
        let Grads {
            loss, rows, dense, ..
        } = grads;
        let global_loss = [loss];
        // What the output layer's collectives sent (a reduction: a reduce-scatter, then an
        // all-gather).
        let others = (ranks.size - 1) as u64;
        let (n, last) = (global_rows, self.spec.last_hidden());
        let reduced = |len: usize| all_reduce_sent(len, ranks.rank, ranks.size) * 4;
        let output_traffic: [(&'static str, u64); 3] = match targets.is_some() {
            true => [
                (names::HIDDEN, (batch.n_rows() * last) as u64 * 4 * others),
                (names::LSE, 2 * reduced(n) + reduced(1)),
                (names::DH, reduced(n * last)),
            ],
            false => [(names::LOSS, reduced(1)), ("", 0), ("", 0)],
        };
        for (what, bytes) in output_traffic.into_iter().filter(|(w, _)| !w.is_empty()) {
            *self.sent_bytes.entry(what).or_default() += bytes;
        }
        // 5. row updates: every rank's gradients of each row summed at its owner, which updates
        //    the union of the rows asked of it (its table's own segments).
        for (k, (route, first)) in routes.iter().enumerate() {
            let band = &mut self.bands[k];
            let dim = band.band.dim;
            let mine: Vec<f32> = match rows.iter().find(|(s, _)| s.band == k) {
                Some((_, g)) => to_vec(g.clone())?,
                None => Vec::new(),
            };
            let (union, sum) = route.return_grads(comm, dim, &mine)?;
            *self.sent_bytes.entry(names::ROW_GRADS).or_default() +=
                to_others(&route.asked, ranks.rank) * dim as u64 * 4;
            let owned: Vec<u32> = union.iter().map(|id| id - first).collect();
            let owned = SortedIds::new(&owned)?;
            for seg in band.table.segments(owned) {
                let g = sum[seg.start * dim..seg.end * dim].to_vec();
                let g = floats(g, [seg.end - seg.start, dim], &band.table.device());
                let seg_ids = owned.range(seg.start..seg.end);
                band.state
                    .step(&mut band.table, seg_ids, g, &self.optim, step, meter)?;
            }
        }
        // The row gradients go with the row updates, as the ledger counts them.
        drop(rows);
        meter.lap(Stage::RowUpdate);
        // 6. dense updates: the replicated parameters' gradients in one buffer, summed over the
        //    ranks; a class-split output layer's are this rank's own.
        // Not reduced: a class-split output layer (each rank's own classes), or the adaptive
        // softmax's tail clusters (each updated by its owner alone); the head is replicated.
        let own = match &dense.output {
            OutputParams::Full { .. } => dense.output.iter().count(),
            OutputParams::Adaptive { clusters, .. } => 3 * clusters.len(),
        };
        let grads = dense.into_vec();
        let replicated = grads.len() - own;
        let shapes: Vec<[usize; 2]> = grads.iter().map(|g| g.shape().dims()).collect();
        let mut values = grads
            .into_iter()
            .map(to_vec)
            .collect::<Result<Vec<Vec<f32>>, _>>()?;
        let parts: Vec<&[f32]> = values[..replicated].iter().map(Vec::as_slice).collect();
        let (fused, mut buf) = Fused::pack(&parts);
        comm.all_reduce_sum(&mut buf)?;
        *self.sent_bytes.entry(names::DENSE).or_default() +=
            all_reduce_sent(buf.len(), ranks.rank, ranks.size) * 4;
        let summed: Vec<Vec<f32>> = fused
            .unpack(&buf)
            .expect("the buffer packed above")
            .into_iter()
            .map(<[f32]>::to_vec)
            .collect();
        // The ledger's dense-update point: every gradient, the fused buffer and its sums
        // unpacked (as much as the all-reduce holds inside: its blocks and the gathered sums).
        meter.probe(Point::DenseUpdate);
        values.splice(..replicated, summed);
        drop((fused, buf));
        let kernels = self.spec.kernels;
        // Every parameter but the tail clusters other ranks own (placeholders here).
        let trained: Vec<bool> = self
            .dense
            .iter()
            .map(|p| self.trains_param(&p.name))
            .collect();
        let params = self.dense.iter_mut().zip(values).zip(shapes).zip(trained);
        for (((p, g), shape), trains) in params {
            if trains {
                update_param(p, floats(g, shape, &device), &self.optim, step, kernels)?;
            }
        }
        meter.lap(Stage::DenseUpdate);
        // 7. measure.
        meter.sample(Point::StepEnd);
        Ok(StepStats::new(step, global_loss[0], batch))
    }

    /// Every rank's `local` targets (its rows'), concatenated in rank order: the global batch's.
    fn gather_targets(
        &mut self,
        local: &Targets,
        comm: &dyn Collective,
    ) -> Result<Targets, ModelError> {
        let n = local.row_ptr.len() - 1;
        let mut mine = Vec::with_capacity(1 + n + 2 * local.classes.len());
        mine.push(n as u32);
        mine.extend(local.row_ptr.windows(2).map(|w| (w[1] - w[0]) as u32));
        mine.extend_from_slice(&local.classes);
        mine.extend(local.weights.iter().map(|w| w.to_bits()));
        let size = self.ranks.size;
        *self.sent_bytes.entry(names::TARGETS).or_default() +=
            mine.len() as u64 * 4 * (size as u64 - 1);
        let all = comm.all_to_all_u32(vec![mine; size])?;
        let bad = || ModelError::Execution("a rank sent malformed targets".into());
        let mut out = Targets {
            n_classes: local.n_classes,
            row_ptr: vec![0],
            classes: Vec::new(),
            weights: Vec::new(),
            single_class: true,
        };
        for part in &all {
            let rows = *part.first().ok_or_else(bad)? as usize;
            let lens = part.get(1..1 + rows).ok_or_else(bad)?;
            let m: usize = lens.iter().map(|&l| l as usize).sum();
            let classes = part.get(1 + rows..1 + rows + m).ok_or_else(bad)?;
            let weights = part.get(1 + rows + m..1 + rows + 2 * m).ok_or_else(bad)?;
            for &l in lens {
                let last = *out.row_ptr.last().expect("starts at 0");
                out.row_ptr.push(last + l as usize);
            }
            out.classes.extend_from_slice(classes);
            out.weights
                .extend(weights.iter().map(|&b| f32::from_bits(b)));
        }
        out.single_class = (0..out.row_ptr.len() - 1)
            .all(|r| out.row_ptr[r + 1] - out.row_ptr[r] == 1)
            && out.weights.iter().all(|&w| w == 1.0);
        Ok(out)
    }

    /// An error unless the model runs flex's host kernels: the class-split output layer and
    /// the exchanges read the output layer on the host (`adapter` names the device otherwise).
    pub fn check_rank_kernels(&self, adapter: &str) -> Result<(), ModelError> {
        match self.spec.kernels {
            crate::cpu::Kernels::Host => Ok(()),
            _ => Err(ModelError::Unsupported {
                key: "train.device",
                message: format!(
                    "training across ranks runs on the CPU backend for now, not on {adapter} \
                     (--device cpu)"
                ),
            }),
        }
    }

    /// Step 2 across ranks: each band's unique ids to their owners; each owner brings the rows
    /// asked of it up to date (lazy AdamW's catch-up) and sends them back. Returns each band's
    /// route (with the first row of this rank's block) and the rows, one tensor per segment.
    pub(crate) fn fetch_rows(
        &mut self,
        ids: &BandIds,
        comm: &dyn Collective,
    ) -> Result<(Vec<BandRoute>, Vec<Tensor<2>>), ModelError> {
        let (ranks, step) = (self.ranks, self.step);
        let mut routes = Vec::with_capacity(self.bands.len());
        let mut rows = Vec::with_capacity(ids.segments.len());
        for (k, band) in self.bands.iter_mut().enumerate() {
            let sharding = ranks.sharding(band.band.n_rows());
            let first = sharding.rows_of(ranks.rank).start as u32;
            let route = Route::exchange_ids(comm, sharding, ids.local[k].ids().as_slice())?;
            let owned: Vec<u32> = route.owned_union().iter().map(|id| id - first).collect();
            band.state
                .catch_up(&mut band.table, SortedIds::new(&owned)?, &self.optim, step)?;
            let (dim, table) = (band.band.dim, &band.table);
            let sent = &mut self.sent_bytes;
            *sent.entry(names::IDS).or_default() += to_others(&route.asked, ranks.rank) * 4;
            *sent.entry(names::ROWS).or_default() +=
                to_others(&route.requested, ranks.rank) * dim as u64 * 4;
            let fetched = route.fetch_rows(comm, dim, |ask| {
                let local: Vec<u32> = ask.iter().map(|id| id - first).collect();
                to_vec(table.gather(SortedIds::new(&local)?)?)
            })?;
            let n = ids.local[k].ids().len();
            if n > 0 {
                rows.push(floats(fetched, [n, dim], &table.device()).autodiff());
            }
            routes.push((route, first));
        }
        Ok((routes, rows))
    }

    /// Steps 3–4 with the full softmax split by classes: the trunk on this rank's rows, the
    /// output layer on every row of the `global` batch against this rank's classes (`host`, the
    /// flex kernel), `dL/dh` all-reduced, then autodiff through this rank's trunk.
    fn class_split(
        &self,
        targets: &Targets,
        mine: &std::ops::Range<usize>,
        (ids, inputs, rows): (BandIds, BagInputs, Vec<Tensor<2>>),
        host: &HostLayer,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<Grads, ModelError> {
        let rows: Vec<Tensor<2>> = rows.into_iter().map(|r| r.require_grad()).collect();
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let params = self.dense.map_split(leaf, |p| p.value.clone());
        let h = self.forward_hidden(&rows, &params, &inputs);
        meter.lap(Stage::Forward);
        let (h_all, targets, mut fwd, loss) = self.split_forward(targets, &h, host, comm)?;
        let last = self.spec.last_hidden();
        let refs = host.refs();
        meter.lap(Stage::OutputForward);
        meter.sample(Point::ForwardEnd);
        let (mut dh, out) = softmax_ce::backward(&h_all, last, &refs, &targets, &mut fwd);
        comm.all_reduce_sum(&mut dh)?;
        meter.lap(Stage::OutputBackward);
        let device = self.device();
        let mine_dh = floats(
            dh[mine.start * last..mine.end * last].to_vec(),
            [mine.len(), last],
            device,
        );
        drop(dh);
        let grads = (h * Tensor::from_inner(mine_dh)).sum().backward();
        let output = OutputParams::Full {
            chunks: chunk_tensors(out, last, device),
        };
        let (rows_grad, dense) = self.trunk_grads(&ids, &rows, &params, &grads, output);
        drop(grads);
        meter.sample(Point::BackwardEnd);
        meter.lap(Stage::TrunkBackward);
        Ok(Grads {
            loss,
            ids,
            rows: rows_grad,
            dense,
        })
    }

    /// The class-split output layer's forward pass: every rank's `h` gathered (the global
    /// batch's rows, in rank order), this rank's classes scored, each row's log-sum-exp over
    /// every rank's classes from the per-row max and sum, and the global batch's mean loss.
    fn split_forward(
        &self,
        targets: &Targets,
        h: &Tensor<2>,
        host: &HostLayer,
        comm: &dyn Collective,
    ) -> Result<(Vec<f32>, HostTargets, CeForward, f32), ModelError> {
        // Every rank's rows, in rank order: the global batch's.
        let last = self.spec.last_hidden();
        let h_all: Vec<f32> = comm.all_gather_f32(&to_vec(h.clone().inner())?)?.concat();
        let n = targets.row_ptr.len() - 1;
        let classes = self.ranks.class_block(self.spec.n_classes);
        let entries = (0..n).flat_map(|r| {
            let t = targets;
            (t.row_ptr[r]..t.row_ptr[r + 1])
                .filter(|&k| classes.contains(&(t.classes[k] as usize)))
                .map(move |k| (r as u32, t.classes[k] - classes.start as u32, t.weights[k]))
        });
        let weights: Vec<f32> = (0..n).map(|r| targets.row_weight(r)).collect();
        let targets = HostTargets::from_entries(n, entries, &host.chunk_classes(), 1.0 / n as f32)
            .with_row_weights(weights.clone());
        let mut fwd = softmax_ce::forward(&h_all, last, &host.refs(), &targets, Logits::Recompute);
        // Each row's log-sum-exp over every rank's classes, from the per-row scalars.
        let local_lse = fwd.lse.clone();
        let mut max = local_lse.clone();
        comm.all_reduce_max(&mut max)?;
        let mut sum: Vec<f32> = local_lse
            .iter()
            .zip(&max)
            .map(|(l, m)| (l - m).exp())
            .collect();
        comm.all_reduce_sum(&mut sum)?;
        fwd.lse = max.iter().zip(&sum).map(|(m, s)| m + s.ln()).collect();
        // The loss: Σ weight · lse over rows, less every rank's picked logits (this rank's part
        // is its own loss less its own log-sum-exp term).
        let lse_term = |lse: &[f32]| -> f64 {
            (0..n)
                .map(|r| weights[r] as f64 * lse[r] as f64)
                .sum::<f64>()
                / n as f64
        };
        let mut picked = [(lse_term(&local_lse) - fwd.loss as f64) as f32];
        comm.all_reduce_sum(&mut picked)?;
        let loss = (lse_term(&fwd.lse) - picked[0] as f64) as f32;
        Ok((h_all, targets, fwd, loss))
    }
    /// Mean loss over held-out `batches` (global batches every rank holds), weighted by their
    /// rows, after this rank's deferred row updates are applied; every rank calls it.
    pub fn eval_loss_ranks(
        &mut self,
        batches: &[CsrBatch],
        comm: &dyn Collective,
    ) -> Result<Option<f64>, ModelError> {
        self.check_rank_kernels("this device")?;
        self.flush_deferred()?;
        self.sync_clusters(comm)?;
        let mut meter = MemoryMeter::new(self.device());
        let (mut sum, mut n_rows) = (0.0f64, 0usize);
        for global in batches {
            let mine = local_rows(global.n_rows(), self.ranks.rank, self.ranks.size);
            let batch = global.row_range(mine);
            let ids = self.band_ids_whole(&batch)?;
            let (_, rows) = self.fetch_rows(&ids, comm)?;
            let inputs = self.upload_inputs(&batch, &ids);
            let host = HostLayer::take(&mut self.dense.output)?;
            let loss = match self.adaptive() {
                // Data-parallel: this rank's rows' mean, weighed by their share and summed.
                true => self
                    .forward(&batch, inputs, rows, Some(&host), &mut meter)
                    .map(|f| f.loss * batch.n_rows() as f32 / global.n_rows().max(1) as f32)
                    .and_then(|l| {
                        let mut l = [l];
                        comm.all_reduce_sum(&mut l)?;
                        Ok(l[0])
                    }),
                false => {
                    let off_graph = |p: &DenseParam| p.value.clone().autodiff();
                    let params = self.dense.map_split(off_graph, |p| p.value.clone());
                    let h = self.forward_hidden(&rows, &params, &inputs);
                    let targets = self.objective_targets(global);
                    self.split_forward(&targets, &h, &host, comm).map(|f| f.3)
                }
            };
            let device = self.device().clone();
            host.restore(&mut self.dense.output, &device);
            sum += loss? as f64 * global.n_rows() as f64;
            n_rows += global.n_rows();
        }
        self.release_clusters();
        Ok((n_rows > 0).then(|| sum / n_rows as f64))
    }
}
