//! The exchanges between the step's stages when it runs on one rank of many (TorchRec's
//! row-wise sharding, Megatron's class-split output): this rank's part of the global batch
//! ([`Part`]); the batch's ids to the rows' owners and the rows back; the pooled exchange's
//! bytes, counted for comparison; every row's targets and every rank's hidden rows for the
//! class-split output layer, whose rows' log-sum-exp is combined from per-row scalars (an
//! all-reduced max and sum) and whose `dL/dh` is all-reduced; each row's gradient summed at its
//! owner, which alone holds its optimizer state; the replicated parameters' gradients summed in
//! one fused all-reduce. A single process is the one-rank case and calls none of them (the step
//! skips them where [`Part::alone`]), so it allocates and copies nothing for them.
//!
//! The adaptive softmax's routing (head replicated, tail clusters owned) is part of its host
//! path, [`crate::output::adaptive_host`].

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_collective::partition::{Fused, all_reduce_sent, local_rows};
use widebag_collective::pooled::{BandCut, pooled_sent_bytes};
use widebag_collective::route::Route;
use widebag_csr::{CsrBatch, Targets};
use widebag_ledger::step::collective_names as names;

use crate::ModelError;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, HostTargets, Logits};
use crate::model::bag::{BagInputs, BandIds};
use crate::model::params::{DenseParams, OutputParams};
use crate::model::{Ranks, WideModel};
use crate::step::memory::{MemoryMeter, Point};
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

/// This process's part of a step's global batch, and the group it trains with.
pub(crate) struct Part<'a> {
    pub comm: &'a dyn Collective,
    /// This process's rows of the global batch (`local_rows`).
    pub mine: std::ops::Range<usize>,
    pub global_rows: usize,
    /// The rows of this process's batch.
    pub rows: usize,
}

impl<'a> Part<'a> {
    /// Rank `ranks.rank`'s `rows` rows of a global batch of `global_rows`; an error unless they
    /// are its share (`local_rows`) and `comm` is the model's group.
    pub(crate) fn new(
        ranks: Ranks,
        comm: &'a dyn Collective,
        global_rows: usize,
        rows: usize,
    ) -> Result<Self, ModelError> {
        if (comm.rank(), comm.size()) != (ranks.rank, ranks.size) {
            return Err(ModelError::Shape(format!(
                "a model built as rank {} of {} stepped as rank {} of {}",
                ranks.rank,
                ranks.size,
                comm.rank(),
                comm.size()
            )));
        }
        let mine = local_rows(global_rows, ranks.rank, ranks.size);
        if mine.len() != rows {
            return Err(ModelError::Shape(format!(
                "rank {} of {} holds rows {mine:?} of a batch of {global_rows}, not {rows} rows",
                ranks.rank, ranks.size,
            )));
        }
        Ok(Self {
            comm,
            mine,
            global_rows,
            rows,
        })
    }

    /// Whether this is the one-rank case (a single process): every exchange is skipped.
    pub(crate) fn alone(&self) -> bool {
        self.comm.size() == 1
    }

    /// The class-split output's `dL/dh` over every row of the global batch, summed over the
    /// ranks, cut to this rank's rows; at one rank, `dh` itself (no copy).
    pub(crate) fn own_dh(&self, mut dh: Vec<f32>, hidden: usize) -> Result<Vec<f32>, ModelError> {
        if self.alone() {
            return Ok(dh);
        }
        self.comm.all_reduce_sum(&mut dh)?;
        Ok(dh[self.mine.start * hidden..self.mine.end * hidden].to_vec())
    }
}

impl WideModel {
    /// Counts what the pooled exchange would send for this batch, on the first
    /// [`POOLED_SAMPLED_STEPS`] steps (one more collective).
    pub(crate) fn count_pooled(
        &mut self,
        batch: &CsrBatch,
        comm: &dyn Collective,
    ) -> Result<(), ModelError> {
        if self.step > POOLED_SAMPLED_STEPS {
            return Ok(());
        }
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
        Ok(())
    }

    /// Adds what the output layer's collectives sent this step (a reduction: a reduce-scatter,
    /// then an all-gather).
    pub(crate) fn count_output_traffic(
        &mut self,
        part: &Part<'_>,
        batch: &CsrBatch,
        forward_sent: &[(&'static str, u64)],
    ) {
        let ranks = self.ranks;
        let others = (ranks.size - 1) as u64;
        let (n, last) = (part.global_rows, self.spec.last_hidden());
        let reduced = |len: usize| all_reduce_sent(len, ranks.rank, ranks.size) * 4;
        let output_traffic: [(&'static str, u64); 3] = match self.adaptive() {
            false => [
                (names::HIDDEN, (part.rows * last) as u64 * 4 * others),
                (names::LSE, 2 * reduced(n) + reduced(1)),
                (names::DH, reduced(n * last)),
            ],
            true => [(names::LOSS, reduced(1)), ("", 0), ("", 0)],
        };
        let output_traffic = output_traffic.iter().chain(forward_sent);
        for &(what, bytes) in output_traffic.filter(|(w, _)| !w.is_empty()) {
            *self.sent_bytes.entry(what).or_default() += bytes;
        }
        // The targets went to every rank: a count, each row's length, each entry's class and
        // weight ([`Self::gather_targets`]).
        if !self.adaptive() {
            let sent = 1 + part.rows + 2 * batch.targets().classes.len();
            *self.sent_bytes.entry(names::TARGETS).or_default() += sent as u64 * 4 * others;
        }
    }

    /// Step 5 across ranks: every rank's gradients of each row (`rows`, this rank's, one per
    /// band) summed at its owner, which updates the union of the rows asked of it (its table's
    /// own segments). The row gradients go with the row updates, as the ledger counts them.
    pub(crate) fn update_owned_rows(
        &mut self,
        routes: &[BandRoute],
        rows: Vec<(crate::model::bag::BandSegment, Tensor<2>)>,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<(), ModelError> {
        let (ranks, step) = (self.ranks, self.step);
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
        drop(rows);
        Ok(())
    }

    /// Step 6's gradients, one per dense parameter in [`DenseParams::iter`] order, read at the
    /// ledger's dense-update point. Across ranks the replicated parameters' gradients are
    /// summed in one buffer; not reduced: a class-split output layer (each rank's own classes),
    /// or the adaptive softmax's tail clusters (each updated by its owner alone).
    pub(crate) fn sum_dense(
        &mut self,
        dense: DenseParams<Tensor<2>>,
        part: &Part<'_>,
        meter: &mut MemoryMeter,
    ) -> Result<Vec<Tensor<2>>, ModelError> {
        if part.alone() {
            meter.probe(Point::DenseUpdate);
            return Ok(dense.into_vec());
        }
        let (comm, ranks) = (part.comm, self.ranks);
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
        let device = self.device().clone();
        Ok(values
            .into_iter()
            .zip(shapes)
            .map(|(g, shape)| floats(g, shape, &device))
            .collect())
    }

    /// Every rank's `local` targets (its rows'), concatenated in rank order: the global batch's.
    pub(crate) fn gather_targets(
        &self,
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

    /// Step 1 for this part: the batch's unique ids by band, split by shard for one process (its
    /// own table's shards), whole across ranks (the rows' owners split them).
    pub(crate) fn part_ids(
        &self,
        batch: &CsrBatch,
        part: &Part<'_>,
    ) -> Result<BandIds, ModelError> {
        match part.alone() {
            true => self.band_ids(batch),
            false => self.band_ids_whole(batch),
        }
    }

    /// Step 2 for this part: the batch's index and value buffers and its unique rows, one tensor
    /// per segment; gathered from this process's table, or across ranks from the rows' owners
    /// ([`Self::fetch_rows`], whose routes it returns for the row updates).
    pub(crate) fn part_rows(
        &mut self,
        batch: &CsrBatch,
        ids: &BandIds,
        part: &Part<'_>,
    ) -> Result<(Vec<BandRoute>, BagInputs, Vec<Tensor<2>>), ModelError> {
        match part.alone() {
            true => {
                let (inputs, rows) = self.upload_and_gather(batch, ids)?;
                Ok((Vec::new(), inputs, rows))
            }
            false => {
                let (routes, rows) = self.fetch_rows(ids, part.comm)?;
                Ok((routes, self.upload_inputs(batch, ids), rows))
            }
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

    /// The class-split output layer's forward pass: every rank's `h` gathered (the global
    /// batch's rows, in rank order), this rank's classes scored, each row's log-sum-exp over
    /// every rank's classes from the per-row max and sum, and the global batch's mean loss.
    pub(crate) fn split_forward(
        &self,
        targets: &Targets,
        h: &[f32],
        host: &HostLayer,
        part: &Part<'_>,
    ) -> Result<(HostMatrix, HostTargets, CeForward, f32), ModelError> {
        // Every rank's rows, in rank order: the global batch's.
        let comm = part.comm;
        let last = self.spec.last_hidden();
        let h_all: Vec<f32> = comm.all_gather_f32(h)?.concat();
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
        Ok((HostMatrix::from_vec(h_all, n, last), targets, fwd, loss))
    }
}
