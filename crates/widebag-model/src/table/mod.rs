//! A wide `n_rows × dim` table kept outside autodiff (rows in f32, f16 or bf16, always
//! gathered as f32), split into row shards that each fit
//! the device's largest buffer. Rows are gathered by sorted unique ids ([`SortedIds`]) and
//! updated in place by `scatter_nd` with the same (deduplicated) ids. A host-placed table keeps
//! its rows in host memory: a gather uploads only the requested rows (assembled with rayon) and
//! an update downloads only the delta of those rows and adds it on the host (in parallel, rows
//! distinct). On flex every table takes that path (flex's `scatter_nd` writes a whole new table
//! per update), with no traffic: the device is the host. A half-precision table adds in f32 and
//! rounds the sums back ([`RowFormat::rounding`]), on the host or on the device (`device_round`).

pub mod bands;
pub(crate) mod catch_up;
pub(crate) mod device_round;
pub mod host_rows;
pub(crate) mod host_store;
pub mod ids;
pub(crate) mod io;
pub mod optim;
pub(crate) mod row_update;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use burn::tensor::{Device, FloatDType, IndexingUpdateOp, Tensor};
use widebag_config::{BandPlacement, Precision, Rounding};

use crate::cpu::rounding::Half;
use crate::device::ComputePath;
use crate::error::ModelError;
use crate::table::device_round::{dtype_of, uniforms};
use crate::table::host_rows::{HostRows, RoundKey, RowMut, half_of, upload_shard};
pub use crate::table::host_store::Traffic;
use crate::table::ids::SortedIds;
use crate::tensors::{floats, ints, row_indices, to_vec};

/// Where the rows live.
#[derive(Debug)]
pub(crate) enum Storage {
    /// Device row shards, each within the buffer limit.
    Device(Vec<Tensor<2>>),
    /// Row-major host rows: a host-placed band's, or on flex (whose device is the host) every
    /// table's, so rows are gathered and updated in place there too.
    Host(HostRows),
}

/// How a table stores its rows and rounds updates into them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowFormat {
    pub precision: Precision,
    pub rounding: Rounding,
    /// Seed of the stochastic rounding's random bits (distinct per table of a run).
    pub seed: u64,
}

impl RowFormat {
    /// f32 rows (no rounding).
    pub const F32: RowFormat = RowFormat {
        precision: Precision::F32,
        rounding: Rounding::Stochastic,
        seed: 0,
    };

    /// The same format with another precision and seed (a table's optimizer state).
    pub fn with(self, precision: Precision, seed: u64) -> Self {
        RowFormat {
            precision,
            seed,
            ..self
        }
    }
}

/// Row-sharded table. Not `Clone`: an update is in place only while its shards have one handle.
#[derive(Debug)]
pub struct ShardedTable {
    pub(crate) storage: Storage,
    device: Device,
    pub(crate) rows_per_shard: usize,
    n_rows: usize,
    dim: usize,
    /// Host rows that are the device's own (flex): no traffic, and placed on the device.
    resident: bool,
    traffic: Arc<Traffic>,
    format: RowFormat,
    /// The step the next update belongs to ([`Self::set_update_step`]) and how many updates
    /// of it came before: the stochastic rounding's key.
    update_step: u64,
    update_pass: u64,
}

/// A run of sorted unique ids that falls in one shard: `uniq[start..end]` live in `shard`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub shard: usize,
    pub start: usize,
    pub end: usize,
}

impl ShardedTable {
    /// Rows per shard so that one shard stays within `max_buffer_bytes`.
    pub fn rows_per_shard(n_rows: usize, dim: usize, max_buffer_bytes: u64) -> usize {
        widebag_ledger::shapes::rows_per_shard(n_rows, dim, max_buffer_bytes)
    }

    /// Builds the table on the device shard by shard; `init(row, out)` fills row `row`
    /// (`out.len() == dim`). Shards go to the allocator's persistent pool (exact sizes).
    pub fn from_fn(
        n_rows: usize,
        dim: usize,
        max_buffer_bytes: u64,
        device: &Device,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        Self::placed(
            n_rows,
            dim,
            max_buffer_bytes,
            device,
            BandPlacement::Device,
            ComputePath::Tensor,
            RowFormat::F32,
            init,
        )
    }

    /// Builds the table where `placement` says. A host table is cut into the same logical shards
    /// (so a batch's segments, and the numbers, are those of the device table). With host
    /// kernels (flex) a device-placed table keeps its rows on the host path too, resident.
    /// Rows per shard follow the f32 rule whatever `format.precision`, so a gathered segment
    /// (f32) stays within the buffer limit; a half-precision shard takes half the bytes.
    #[allow(clippy::too_many_arguments)] // each is a different fact; `placed_like` reuses them
    pub fn placed(
        n_rows: usize,
        dim: usize,
        max_buffer_bytes: u64,
        device: &Device,
        placement: BandPlacement,
        compute_path: ComputePath,
        format: RowFormat,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        let rows_per_shard = Self::rows_per_shard(n_rows, dim, max_buffer_bytes);
        let resident = compute_path == ComputePath::Host;
        let storage = if placement == BandPlacement::Host || resident {
            Storage::Host(HostRows::new(n_rows, dim, format.precision, init))
        } else {
            let mut shards = Vec::new();
            let mut first = 0;
            while first < n_rows {
                let n = rows_per_shard.min(n_rows - first);
                let rows = HostRows::new(n, dim, format.precision, |r, out| init(first + r, out));
                shards.push(upload_shard(rows, [n, dim], device));
                first += n;
            }
            Storage::Device(shards)
        };
        Self {
            storage,
            device: device.clone(),
            rows_per_shard,
            n_rows,
            dim,
            resident: resident && placement == BandPlacement::Device,
            traffic: Arc::default(),
            format,
            update_step: 0,
            update_pass: 0,
        }
    }

    pub fn zeros(n_rows: usize, dim: usize, max_buffer_bytes: u64, device: &Device) -> Self {
        Self::from_fn(n_rows, dim, max_buffer_bytes, device, |_, out| {
            out.fill(0.0)
        })
    }

    /// A zero table of the same rows and placement, `dim` wide, stored as `format` says
    /// (optimizer state).
    pub fn zeros_like(&self, dim: usize, max_buffer_bytes: u64, format: RowFormat) -> Self {
        Self::placed(
            self.n_rows,
            dim,
            max_buffer_bytes,
            &self.device,
            self.placement(),
            match self.resident {
                true => ComputePath::Host,
                false => ComputePath::Tensor,
            },
            format,
            |_, out| out.fill(0.0),
        )
    }

    /// How the rows are stored.
    pub fn format(&self) -> RowFormat {
        self.format
    }

    /// Updates from now on belong to `step`: the stochastic rounding's random bits are a function
    /// of the table's seed, the step, the update's place among the step's updates and the
    /// element, so a resumed run rounds as the uninterrupted one did.
    pub fn set_update_step(&mut self, step: u64) {
        if step != self.update_step {
            (self.update_step, self.update_pass) = (step, 0);
        }
    }

    /// The rounding of the next update (and counts it).
    fn next_round(&mut self) -> RoundKey {
        let key = self
            .update_step
            .wrapping_shl(20)
            .wrapping_add(self.update_pass);
        self.update_pass += 1;
        RoundKey {
            rounding: self.format.rounding,
            seed: self.format.seed,
            key,
        }
    }

    pub fn placement(&self) -> BandPlacement {
        match self.storage {
            Storage::Host(_) if !self.resident => BandPlacement::Host,
            _ => BandPlacement::Device,
        }
    }

    /// Bytes sent to and received from the device so far (host tables; zero on the device).
    pub fn traffic(&self) -> (u64, u64) {
        self.traffic.totals()
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn device(&self) -> Device {
        self.device.clone()
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn n_shards(&self) -> usize {
        self.n_rows.div_ceil(self.rows_per_shard.max(1)).max(1)
    }
    pub fn bytes(&self) -> u64 {
        self.n_rows as u64 * self.dim as u64 * self.format.precision.bytes()
    }

    /// Splits sorted unique ids into runs that each fall in one shard.
    pub fn segments(&self, uniq: SortedIds) -> Vec<Segment> {
        let uniq = uniq.as_slice();
        let mut out = Vec::new();
        let mut start = 0;
        while start < uniq.len() {
            let shard = uniq[start] as usize / self.rows_per_shard;
            let limit = ((shard + 1) * self.rows_per_shard) as u32;
            let end = start + uniq[start..].partition_point(|&id| id < limit);
            out.push(Segment { shard, start, end });
            start = end;
        }
        out
    }

    fn local_ids(&self, seg: Segment, uniq: SortedIds) -> Vec<u32> {
        let base = (seg.shard * self.rows_per_shard) as u32;
        uniq.as_slice()[seg.start..seg.end]
            .iter()
            .map(|&id| id - base)
            .collect()
    }

    /// Rows `uniq[seg.start..seg.end]` (all in shard `seg.shard`) as one tensor, off autodiff.
    /// It is never larger than a shard, so it stays within the buffer limit.
    pub fn gather_segment(&self, uniq: SortedIds, seg: Segment) -> Tensor<2> {
        match &self.storage {
            Storage::Device(shards) => {
                let idx = ints(&self.local_ids(seg, uniq), &self.device);
                let rows = shards[seg.shard].clone().select(0, idx);
                match self.format.precision {
                    Precision::F32 => rows,
                    _ => rows.cast(FloatDType::F32),
                }
            }
            Storage::Host(host) => self.host_gather(host, &uniq.as_slice()[seg.start..seg.end]),
        }
    }

    /// An error unless every id of `uniq` is a row of the table.
    fn check_range(&self, uniq: SortedIds) -> Result<(), ModelError> {
        match uniq.last() {
            Some(id) if id as usize >= self.n_rows => Err(ModelError::Ids(format!(
                "id {id} of a table of {} rows",
                self.n_rows
            ))),
            _ => Ok(()),
        }
    }

    /// Rows `ids` of a host table, assembled in parallel and uploaded as one tensor.
    fn host_gather(&self, host: &HostRows, ids: &[u32]) -> Tensor<2> {
        let dim = self.dim;
        let out = host.gather(dim, ids);
        if !self.resident {
            self.traffic
                .to_device_bytes
                .fetch_add(4 * out.len() as u64, Ordering::Relaxed);
        }
        floats(out, [ids.len(), dim], &self.device)
    }

    /// Rows `uniq` (in range) as a `[uniq.len(), dim]` tensor, off autodiff.
    pub fn gather(&self, uniq: SortedIds) -> Result<Tensor<2>, ModelError> {
        self.check_range(uniq)?;
        if uniq.is_empty() {
            return Ok(Tensor::zeros([0, self.dim], &self.device));
        }
        let parts: Vec<Tensor<2>> = self
            .segments(uniq)
            .into_iter()
            .map(|seg| self.gather_segment(uniq, seg))
            .collect();
        Ok(if parts.len() == 1 {
            parts.into_iter().next().expect("one part")
        } else {
            Tensor::cat(parts, 0)
        })
    }

    /// `table[uniq[i]] += delta[i]` in place (sorted, distinct ids: `scatter_nd` with duplicate
    /// indices races on GPUs, and a host table walks them in order); ids past the last row are
    /// an error.
    pub fn scatter_add(&mut self, uniq: SortedIds, delta: Tensor<2>) -> Result<(), ModelError> {
        self.check_range(uniq)?;
        if uniq.is_empty() {
            return Ok(());
        }
        let round = self.next_round();
        if let Storage::Host(host) = &mut self.storage {
            let traffic = (!self.resident).then_some(&*self.traffic);
            return Self::host_scatter_add(host, self.dim, traffic, uniq, delta, round);
        }
        if let Some(half) = half_of(self.format.precision) {
            return self.device_half_add(uniq, delta, half, round);
        }
        let device = delta.device();
        let segments = self.segments(uniq);
        let local: Vec<Vec<u32>> = segments.iter().map(|&s| self.local_ids(s, uniq)).collect();
        let Storage::Device(shards) = &mut self.storage else {
            return Ok(());
        };
        let single = segments.len() == 1;
        let mut updates: Vec<Option<(Tensor<2, burn::tensor::Int>, Tensor<2>)>> =
            vec![None; shards.len()];
        for (seg, ids) in segments.into_iter().zip(&local) {
            let idx = row_indices(ids, &device);
            let part = if single {
                delta.clone()
            } else {
                delta.clone().narrow(0, seg.start, seg.end - seg.start)
            };
            updates[seg.shard] = Some((idx, part));
        }
        drop(delta);
        // Each shard is moved into scatter_nd, so its handle is unique and the update is in place.
        *shards = std::mem::take(shards)
            .into_iter()
            .zip(updates)
            .map(|(shard, update)| match update {
                Some((idx, part)) => shard.scatter_nd(idx, part, IndexingUpdateOp::Add),
                None => shard,
            })
            .collect();
        Ok(())
    }

    /// Rows `uniq` of a resident table (host kernels), one disjoint mutable row each in `uniq`'s
    /// order, of any precision, lent for an in-place update computed in f32 (and counted as one
    /// update for the rounding); `None` for a device or host-tier table (whose updates go through
    /// the device). Ids past the last row are an error.
    pub fn resident_rows_any(
        &mut self,
        uniq: SortedIds,
    ) -> Result<Option<Vec<RowMut<'_>>>, ModelError> {
        self.check_range(uniq)?;
        if !self.resident {
            return Ok(None);
        }
        let round = self.next_round();
        match &mut self.storage {
            Storage::Host(host) => Ok(Some(host.split_rows(self.dim, uniq, round))),
            Storage::Device(_) => Ok(None),
        }
    }

    /// `host[uniq[i]] += delta[i]` for a host table: only the touched rows' delta comes back;
    /// rows are distinct, so each gets one disjoint mutable slice and the adds run in parallel.
    fn host_scatter_add(
        host: &mut HostRows,
        dim: usize,
        traffic: Option<&Traffic>,
        uniq: SortedIds,
        delta: Tensor<2>,
        round: RoundKey,
    ) -> Result<(), ModelError> {
        let delta = to_vec(delta)?;
        if let Some(traffic) = traffic {
            traffic
                .to_host_bytes
                .fetch_add(4 * delta.len() as u64, Ordering::Relaxed);
        }
        host.add(dim, uniq, &delta, round);
        Ok(())
    }

    /// `table[uniq[i]] ← round(table[uniq[i]] + delta[i])` for half-precision device shards:
    /// the touched rows are read as f32, added to and rounded on the device, with the
    /// stochastic rounding's uniform numbers made on the host from the same random bits as the
    /// host path, and written back with `scatter_nd(Assign)` (ids distinct).
    fn device_half_add(
        &mut self,
        uniq: SortedIds,
        delta: Tensor<2>,
        half: Half,
        round: RoundKey,
    ) -> Result<(), ModelError> {
        let device = delta.device();
        let segments = self.segments(uniq);
        let single = segments.len() == 1;
        let dim = self.dim;
        for seg in segments {
            let local = self.local_ids(seg, uniq);
            let n = seg.end - seg.start;
            let part = if single {
                delta.clone()
            } else {
                delta.clone().narrow(0, seg.start, n)
            };
            let sum = self.gather_segment(uniq, seg) + part;
            let ids = &uniq.as_slice()[seg.start..seg.end];
            let rounded = match round.rounding {
                Rounding::Nearest => sum,
                Rounding::Stochastic => {
                    let u = uniforms(ids, dim, round);
                    device_round::stochastic(sum, floats(u, [n, dim], &device), half)
                }
            };
            let idx = row_indices(&local, &device);
            let Storage::Device(shards) = &mut self.storage else {
                unreachable!("device_half_add runs on device storage only")
            };
            let shard = std::mem::replace(&mut shards[seg.shard], Tensor::empty([0, dim], &device));
            shards[seg.shard] =
                shard.scatter_nd(idx, rounded.cast(dtype_of(half)), IndexingUpdateOp::Assign);
        }
        Ok(())
    }

    /// The whole table on the host, row-major (tests and small tables only).
    pub fn to_vec(&self) -> Result<Vec<f32>, ModelError> {
        match &self.storage {
            Storage::Host(host) => Ok(host.to_vec()),
            Storage::Device(shards) => {
                let mut out = Vec::with_capacity(self.n_rows * self.dim);
                for s in shards {
                    out.extend(to_vec(s.clone())?);
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests;
