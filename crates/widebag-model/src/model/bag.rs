//! The embedding bag over the input bands: the batch's unique ids split by band and shard once
//! per step ([`BandIds`]), its entries uploaded grouped by segment in pieces within the buffer
//! limit ([`BagInputs`]), each segment's rows gathered off its table, and each row's weighted sum
//! of its ids' rows, the tail bands projected up to the full dim, by column or by element
//! ([`BagSum`]: on a GPU `gather` and `scatter` with broadcast `[entries, dim]` indices, a unit
//! per value, and so their backward passes too).

use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor};
use widebag_csr::CsrBatch;

use crate::device::BagSum;
use crate::error::ModelError;
use crate::model::SparseModel;
use crate::table::bands::{BandIds, BandSegment};
use crate::tensors::{floats, ints};

/// Entries of the batch that read one table segment, at most a buffer's worth.
struct BagPiece {
    /// Index of the segment (and of its rows leaf).
    segment: usize,
    /// Position of each entry's id within its segment's rows.
    local_pos: Tensor<1, Int>,
    /// Row of the batch each entry belongs to.
    entry_rows: Tensor<1, Int>,
    /// `[n, 1]` entry values.
    values: Tensor<2>,
}

/// The batch's index and value buffers on the autodiff device, grouped by band segment and cut
/// into pieces whose `[n, band dim]` weighted entries fit the buffer limit.
pub(crate) struct BagInputs {
    n_rows: usize,
    /// The band of each segment.
    bands: Vec<usize>,
    pieces: Vec<BagPiece>,
}

impl BagInputs {
    fn upload(
        batch: &CsrBatch,
        segments: &[BandSegment],
        max_entries: impl Fn(usize) -> usize,
        device: &Device,
    ) -> Self {
        let mut buckets: Vec<(Vec<u32>, Vec<u32>, Vec<f32>)> =
            vec![(Vec::new(), Vec::new(), Vec::new()); segments.len()];
        let row_ptr = batch.row_ptr();
        for r in 0..batch.n_rows() {
            for k in row_ptr[r]..row_ptr[r + 1] {
                let local = batch.local_pos()[k] as usize;
                let s = segments.partition_point(|seg| seg.global().end <= local);
                let b = &mut buckets[s];
                b.0.push((local - segments[s].global().start) as u32);
                b.1.push(r as u32);
                b.2.push(batch.values()[k]);
            }
        }
        let mut pieces = Vec::new();
        for (segment, (pos, rows, vals)) in buckets.into_iter().enumerate() {
            let max_entries = max_entries(segments[segment].band).max(1);
            for start in (0..pos.len()).step_by(max_entries) {
                let end = (start + max_entries).min(pos.len());
                pieces.push(BagPiece {
                    segment,
                    local_pos: ints(&pos[start..end], device),
                    entry_rows: ints(&rows[start..end], device),
                    values: floats(vals[start..end].to_vec(), [end - start, 1], device),
                });
            }
        }
        Self {
            n_rows: batch.n_rows(),
            bands: segments.iter().map(|s| s.band).collect(),
            pieces,
        }
    }
}

impl SparseModel {
    /// The batch's unique ids by band and segment (each band's cut by its table's shards).
    pub(crate) fn band_ids(&self, batch: &CsrBatch) -> Result<BandIds, ModelError> {
        BandIds::by_shard(batch.unique_ids(), &self.bands)
    }

    /// The batch's unique ids by band, each band's in one segment (a rank of a multi-process
    /// run gathers them from their owners, not from shards of its own).
    pub(crate) fn band_ids_whole(&self, batch: &CsrBatch) -> Result<BandIds, ModelError> {
        BandIds::whole(batch.unique_ids(), &self.bands)
    }

    /// The batch's bag inputs on the autodiff device, by the segments of `ids`.
    pub(crate) fn upload_inputs(&self, batch: &CsrBatch, ids: &BandIds) -> BagInputs {
        let ad = self.device().clone().autodiff();
        BagInputs::upload(batch, &ids.segments, |b| self.max_entries(b), &ad)
    }

    /// Largest bag piece of band `band` (entries whose `[n, dim]` weighted rows fit a buffer).
    fn max_entries(&self, band: usize) -> usize {
        widebag_ledger::shapes::max_bag_entries(
            self.bands[band].band.dim,
            self.spec.max_buffer_bytes,
        )
    }

    /// The batch's bag inputs on the autodiff device and, per band segment, its unique rows
    /// gathered off the table (autodiff tensors, not yet gradient leaves; host bands upload just
    /// these rows).
    pub(crate) fn upload_and_gather(
        &self,
        batch: &CsrBatch,
        ids: &BandIds,
    ) -> Result<(BagInputs, Vec<Tensor<2>>), ModelError> {
        let inputs = self.upload_inputs(batch, ids);
        let rows = ids
            .segments
            .iter()
            .map(|s| {
                let band = &self.bands[s.band];
                band.table
                    .gather_segment(ids.local[s.band].ids(), s.seg)
                    .autodiff()
            })
            .collect();
        Ok((inputs, rows))
    }

    /// The embedding bag on the autodiff device: each row's weighted sum of its ids' rows, band
    /// by band, the tails projected up to `dim` by `projections`, `[rows, dim]`, before the
    /// bias.
    pub(crate) fn bag_sum(
        &self,
        rows: &[Tensor<2>],
        projections: &[Tensor<2>],
        inputs: &BagInputs,
    ) -> Tensor<2> {
        let ad = self.device().clone().autodiff();
        let mut bags: Vec<Tensor<2>> = self
            .bands
            .iter()
            .map(|b| Tensor::<2>::zeros([inputs.n_rows, b.band.dim], &ad))
            .collect();
        let by_element = self.spec.bag_sum == BagSum::ByElement;
        for piece in &inputs.pieces {
            let band = inputs.bands[piece.segment];
            let rows = rows[piece.segment].clone();
            bags[band] = match by_element {
                false => {
                    let entries = rows.select(0, piece.local_pos.clone()) * piece.values.clone();
                    let at = piece.entry_rows.clone();
                    bags[band]
                        .clone()
                        .select_assign(0, at, entries, IndexingUpdateOp::Add)
                }
                true => {
                    let [n, dim] = [piece.values.dims()[0], rows.dims()[1]];
                    let wide = |t: &Tensor<1, Int>| t.clone().reshape([n, 1]).expand([n, dim]);
                    let entries = rows.gather(0, wide(&piece.local_pos)) * piece.values.clone();
                    let at = wide(&piece.entry_rows);
                    bags[band]
                        .clone()
                        .scatter(0, at, entries, IndexingUpdateOp::Add)
                }
            };
        }
        let mut bags = bags.into_iter();
        let mut x = bags.next().expect("a head band");
        for (tail, projection) in bags.zip(projections) {
            x = x + tail.matmul(projection.clone());
        }
        x
    }

    /// The projections as gradient leaves (the bag alone, for benchmarks and checks).
    fn projection_leaves(&self) -> Vec<Tensor<2>> {
        self.trunk
            .projections
            .iter()
            .map(|p| p.value.clone().autodiff().require_grad())
            .collect()
    }

    /// The embedding bag of `batch` alone (upload, gather of the unique rows, weighted sums,
    /// tail projections), `[rows, dim]`: the first layer's forward, for benchmarks and checks.
    pub fn bag_forward(&self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        self.check_batch(batch)?;
        let ids = self.band_ids(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        let projections = self.projection_leaves();
        Ok(self.bag_sum(&rows, &projections, &inputs).inner())
    }

    /// The embedding bag's forward and backward for the loss `sum(bag ⊙ upstream)`: the
    /// gradient of each band segment's unique rows (what the table optimizers consume), in
    /// segment order.
    pub fn bag_row_gradients(
        &self,
        batch: &CsrBatch,
        upstream: Tensor<2>,
    ) -> Result<Vec<Tensor<2>>, ModelError> {
        self.check_batch(batch)?;
        let ids = self.band_ids(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch, &ids)?;
        let rows: Vec<Tensor<2>> = rows.into_iter().map(|r| r.require_grad()).collect();
        let projections = self.projection_leaves();
        let x = self.bag_sum(&rows, &projections, &inputs);
        let grads = (x * Tensor::from_inner(upstream)).sum().backward();
        Ok(ids
            .segments
            .iter()
            .zip(&rows)
            .map(|(s, leaf)| self.row_grad(s, leaf, &grads))
            .collect())
    }

    /// The gradient of segment `s`'s rows leaf, zeros when no entry reached it.
    pub(crate) fn row_grad(
        &self,
        s: &BandSegment,
        leaf: &Tensor<2>,
        grads: &burn::tensor::Gradients,
    ) -> Tensor<2> {
        leaf.grad(grads).unwrap_or_else(|| {
            Tensor::zeros(
                [s.seg.end - s.seg.start, self.bands[s.band].band.dim],
                self.device(),
            )
        })
    }
}
