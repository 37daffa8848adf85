//! The exchanges between the step's stages when it runs on one rank of many (TorchRec's
//! row-wise sharding, Megatron's class-split output): this rank's part of the global batch
//! ([`RankBatch`]); the batch's ids to the rows' owners and the rows back; the pooled exchange's
//! bytes, counted for comparison; every row's targets and every rank's hidden rows for the
//! class-split output layer, whose rows' log-sum-exp is combined from per-row scalars (an
//! all-reduced max and sum) and whose `dL/dh` is all-reduced; each row's gradient summed at its
//! owner, which alone holds its optimizer state; the replicated parameters' gradients summed in
//! one fused all-reduce. A single process is the one-rank case and calls none of them (the step
//! skips them where [`RankBatch::alone`]), so it allocates and copies nothing for them.
//!
//! The output layer's own exchanges (the class-split full softmax's, the adaptive softmax's
//! routing of tail rows to their owners) are the output layer's ([`crate::output`]).

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_collective::partition::{Fused, all_reduce_sent};
use widebag_collective::pooled::{BandCut, pooled_sent_bytes};
use widebag_collective::route::Route;
use widebag_csr::CsrBatch;
use widebag_ledger::step::collective_names as names;

use crate::device::ComputePath;
use crate::error::ModelError;
use crate::model::SparseModel;
use crate::model::bag::BagInputs;
use crate::probe::{Point, StepProbe};
use crate::ranks::RankBatch;
use crate::table::bands::{BandIds, BandSegment};
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

impl SparseModel {
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
        self.traffic.pooled_bytes += pooled_sent_bytes(comm, batch.row_ptr(), batch.ids(), &cuts)?;
        self.traffic.pooled_steps += 1;
        Ok(())
    }

    /// Adds what the output layer's collectives sent this step (`forward_sent`: what its
    /// forward pass counted).
    pub(crate) fn count_output_traffic(
        &mut self,
        part: &RankBatch<'_>,
        batch: &CsrBatch,
        forward_sent: &[(&'static str, u64)],
    ) {
        let n_targets = batch.targets().classes.len();
        for (what, bytes) in self.output.traffic(part, n_targets, forward_sent) {
            self.traffic.add(what, bytes);
        }
    }

    /// Step 5 across ranks: every rank's gradients of each row (`rows`, this rank's, one per
    /// band) summed at its owner, which updates the union of the rows asked of it (its table's
    /// own segments). The row gradients go with the row updates, as the ledger counts them.
    pub(crate) fn update_owned_rows(
        &mut self,
        routes: &[BandRoute],
        rows: Vec<(BandSegment, Tensor<2>)>,
        comm: &dyn Collective,
        probe: &mut StepProbe,
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
            self.traffic.add(
                names::ROW_GRADS,
                to_others(&route.asked, ranks.rank) * dim as u64 * 4,
            );
            let owned: Vec<u32> = union.iter().map(|id| id - first).collect();
            let owned = SortedIds::new(&owned)?;
            for seg in band.table.segments(owned) {
                let g = sum[seg.start * dim..seg.end * dim].to_vec();
                let g = floats(g, [seg.end - seg.start, dim], &band.table.device());
                let seg_ids = owned.range(seg.start..seg.end);
                band.state
                    .step(&mut band.table, seg_ids, g, &self.optim, step, probe)?;
            }
        }
        drop(rows);
        Ok(())
    }

    /// Step 6's gradients `grads` (the trunk's, then the output layer's), read at the ledger's
    /// dense-update point. Across ranks the first `replicated` (every rank's copy of the same
    /// parameter) are summed in one buffer; the rest are this rank's own (a class-split output
    /// layer's classes, the adaptive softmax's tail clusters, each updated by its owner alone).
    pub(crate) fn sum_dense(
        &mut self,
        grads: Vec<Tensor<2>>,
        replicated: usize,
        part: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<Vec<Tensor<2>>, ModelError> {
        if part.alone() {
            probe.detail(Point::DenseUpdate);
            return Ok(grads);
        }
        let (comm, ranks) = (part.comm, self.ranks);
        let shapes: Vec<[usize; 2]> = grads.iter().map(|g| g.shape().dims()).collect();
        let mut values = grads
            .into_iter()
            .map(to_vec)
            .collect::<Result<Vec<Vec<f32>>, _>>()?;
        let parts: Vec<&[f32]> = values[..replicated].iter().map(Vec::as_slice).collect();
        let (fused, mut buf) = Fused::pack(&parts);
        comm.all_reduce_sum(&mut buf)?;
        self.traffic.add(
            names::DENSE,
            all_reduce_sent(buf.len(), ranks.rank, ranks.size) * 4,
        );
        let summed: Vec<Vec<f32>> = fused
            .unpack(&buf)
            .expect("the buffer packed above")
            .into_iter()
            .map(<[f32]>::to_vec)
            .collect();
        // The ledger's dense-update point: every gradient, the fused buffer and its sums
        // unpacked (as much as the all-reduce holds inside: its blocks and the gathered sums).
        probe.detail(Point::DenseUpdate);
        values.splice(..replicated, summed);
        drop((fused, buf));
        let device = self.device().clone();
        Ok(values
            .into_iter()
            .zip(shapes)
            .map(|(g, shape)| floats(g, shape, &device))
            .collect())
    }

    /// An error unless the model runs flex's host kernels: the class-split output layer and
    /// the exchanges read the output layer on the host (`adapter` names the device otherwise).
    pub fn check_rank_kernels(&self, adapter: &str) -> Result<(), ModelError> {
        match self.spec.compute_path {
            ComputePath::Host => Ok(()),
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
        part: &RankBatch<'_>,
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
        part: &RankBatch<'_>,
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
            let sent = &mut self.traffic;
            sent.add(names::IDS, to_others(&route.asked, ranks.rank) * 4);
            sent.add(
                names::ROWS,
                to_others(&route.requested, ranks.rank) * dim as u64 * 4,
            );
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
}
