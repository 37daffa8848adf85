//! A wide `n_rows × dim` f32 table kept outside autodiff, split into row shards that each fit
//! the device's largest buffer. Rows are gathered by sorted unique ids ([`SortedIds`]) and
//! updated in place by `scatter_nd` with the same (deduplicated) ids. A host-placed table keeps
//! its rows in host memory: a gather uploads only the requested rows (assembled with rayon) and
//! an update downloads only the delta of those rows and adds it on the host (in parallel, rows
//! distinct). On flex every table takes that path (flex's `scatter_nd` writes a whole new table
//! per update), with no traffic: the device is the host.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use burn::tensor::{Device, IndexingUpdateOp, Tensor};
use rayon::prelude::*;
use widebag_config::BandPlacement;

use crate::ModelError;
use crate::cpu::Kernels;
use crate::host_rows;
pub use crate::host_rows::Traffic;
use crate::ids::SortedIds;
use crate::tensors::{floats, ints, row_indices, to_vec};

/// Where the rows live.
#[derive(Debug)]
pub(crate) enum Storage {
    /// Device row shards, each within the buffer limit.
    Device(Vec<Tensor<2>>),
    /// Row-major host rows: a host-placed band's, or on flex (whose device is the host) every
    /// table's, so rows are gathered and updated in place there too.
    Host(Vec<f32>),
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
            Kernels::Tensor,
            init,
        )
    }

    /// Builds the table where `placement` says. A host table is cut into the same logical shards
    /// (so a batch's segments, and the numbers, are those of the device table). With host
    /// kernels (flex) a device-placed table keeps its rows on the host path too, resident.
    pub fn placed(
        n_rows: usize,
        dim: usize,
        max_buffer_bytes: u64,
        device: &Device,
        placement: BandPlacement,
        kernels: Kernels,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        let rows_per_shard = Self::rows_per_shard(n_rows, dim, max_buffer_bytes);
        let resident = kernels == Kernels::Host;
        if placement == BandPlacement::Host || resident {
            let mut host = vec![0.0f32; n_rows * dim];
            host.par_chunks_mut(dim.max(1))
                .enumerate()
                .for_each(|(r, out)| init(r, out));
            return Self {
                storage: Storage::Host(host),
                device: device.clone(),
                rows_per_shard,
                n_rows,
                dim,
                resident: resident && placement == BandPlacement::Device,
                traffic: Arc::default(),
            };
        }
        let mut shards = Vec::new();
        let mut first = 0;
        while first < n_rows {
            let n = rows_per_shard.min(n_rows - first);
            let mut host = vec![0.0f32; n * dim];
            host.par_chunks_mut(dim.max(1))
                .enumerate()
                .for_each(|(r, out)| init(first + r, out));
            let dev = device.clone();
            let shard =
                device.memory_persistent_allocations(host, move |h| floats(h, [n, dim], &dev));
            shards.push(shard);
            first += n;
        }
        Self {
            storage: Storage::Device(shards),
            device: device.clone(),
            rows_per_shard,
            n_rows,
            dim,
            resident: false,
            traffic: Arc::default(),
        }
    }

    pub fn zeros(n_rows: usize, dim: usize, max_buffer_bytes: u64, device: &Device) -> Self {
        Self::from_fn(n_rows, dim, max_buffer_bytes, device, |_, out| {
            out.fill(0.0)
        })
    }

    /// A zero table of the same rows and placement, `dim` wide (optimizer state).
    pub fn zeros_like(&self, dim: usize, max_buffer_bytes: u64) -> Self {
        Self::placed(
            self.n_rows,
            dim,
            max_buffer_bytes,
            &self.device,
            self.placement(),
            match self.resident {
                true => Kernels::Host,
                false => Kernels::Tensor,
            },
            |_, out| out.fill(0.0),
        )
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
        self.n_rows as u64 * self.dim as u64 * 4
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
                shards[seg.shard].clone().select(0, idx)
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
    fn host_gather(&self, host: &[f32], ids: &[u32]) -> Tensor<2> {
        let dim = self.dim;
        let out = host_rows::gather(host, dim, ids);
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
        if let Storage::Host(host) = &mut self.storage {
            let traffic = (!self.resident).then_some(&*self.traffic);
            return Self::host_scatter_add(host, self.dim, traffic, uniq, delta);
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

    /// Rows `uniq` of a resident table (host kernels), one disjoint mutable slice each, in
    /// `uniq`'s order; `None` for a device or host-tier table (whose updates go through the
    /// device). Ids past the last row are an error.
    pub fn resident_rows_mut(
        &mut self,
        uniq: SortedIds,
    ) -> Result<Option<Vec<&mut [f32]>>, ModelError> {
        self.check_range(uniq)?;
        match &mut self.storage {
            Storage::Host(host) if self.resident => {
                Ok(Some(host_rows::split(host, self.dim, uniq)))
            }
            _ => Ok(None),
        }
    }

    /// `host[uniq[i]] += delta[i]` for a host table: only the touched rows' delta comes back;
    /// rows are distinct, so each gets one disjoint mutable slice and the adds run in parallel.
    fn host_scatter_add(
        host: &mut [f32],
        dim: usize,
        traffic: Option<&Traffic>,
        uniq: SortedIds,
        delta: Tensor<2>,
    ) -> Result<(), ModelError> {
        let delta = to_vec(delta)?;
        if let Some(traffic) = traffic {
            traffic
                .to_host_bytes
                .fetch_add(4 * delta.len() as u64, Ordering::Relaxed);
        }
        host_rows::add(host, dim, uniq, &delta);
        Ok(())
    }

    /// The whole table on the host, row-major (tests and small tables only).
    pub fn to_vec(&self) -> Result<Vec<f32>, ModelError> {
        match &self.storage {
            Storage::Host(host) => Ok(host.clone()),
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
mod tests {
    use super::*;

    fn ids(ids: &[u32]) -> SortedIds<'_> {
        SortedIds::new(ids).unwrap()
    }

    #[test]
    fn shards_follow_the_buffer_limit_and_round_trip() {
        let device = Device::flex();
        // 10 rows of 4 floats (16 bytes) with a 48-byte limit: 3 rows per shard, 4 shards.
        let t = ShardedTable::from_fn(10, 4, 48, &device, |r, out| {
            for (j, o) in out.iter_mut().enumerate() {
                *o = (r * 10 + j) as f32;
            }
        });
        assert_eq!(t.n_shards(), 4);
        let rows = to_vec(t.gather(ids(&[0, 2, 3, 7, 9])).unwrap()).unwrap();
        let expect: Vec<f32> = [0, 2, 3, 7, 9]
            .iter()
            .flat_map(|&r| (0..4).map(move |j| (r * 10 + j) as f32))
            .collect();
        assert_eq!(rows, expect);

        let mut t = t;
        let delta = floats(vec![1.0; 12], [3, 4], &device);
        t.scatter_add(ids(&[2, 3, 9]), delta).unwrap();
        let all = t.to_vec().unwrap();
        assert_eq!(all[2 * 4], 21.0);
        assert_eq!(all[3 * 4 + 3], 34.0);
        assert_eq!(all[9 * 4 + 1], 92.0);
        assert_eq!(all[4 * 4], 40.0);
    }

    #[test]
    fn a_host_table_moves_only_the_touched_rows() {
        let device = Device::flex();
        let init = |r: usize, out: &mut [f32]| {
            for (j, o) in out.iter_mut().enumerate() {
                *o = (r * 10 + j) as f32;
            }
        };
        let mut host = ShardedTable::placed(
            10,
            4,
            48,
            &device,
            BandPlacement::Host,
            Kernels::Tensor,
            init,
        );
        let mut dev = ShardedTable::placed(
            10,
            4,
            48,
            &device,
            BandPlacement::Device,
            Kernels::Tensor,
            init,
        );
        assert_eq!(host.n_shards(), dev.n_shards());
        let rows = ids(&[0, 2, 3, 7, 9]);
        assert_eq!(host.segments(rows), dev.segments(rows));
        assert_eq!(
            to_vec(host.gather(rows).unwrap()).unwrap(),
            to_vec(dev.gather(rows).unwrap()).unwrap()
        );
        assert_eq!(host.traffic(), (5 * 4 * 4, 0));
        let delta = || floats((0..12).map(|x| x as f32 * 0.5).collect(), [3, 4], &device);
        host.scatter_add(ids(&[2, 3, 9]), delta()).unwrap();
        dev.scatter_add(ids(&[2, 3, 9]), delta()).unwrap();
        assert_eq!(host.to_vec().unwrap(), dev.to_vec().unwrap());
        assert_eq!(host.traffic(), (5 * 4 * 4, 3 * 4 * 4));
        assert_eq!(dev.traffic(), (0, 0));
    }

    #[test]
    fn a_resident_table_is_the_device_table_updated_in_place_without_traffic() {
        // Host kernels: rows on the host path, placed on the device (the host), state too.
        let device = Device::flex();
        let init = |r: usize, out: &mut [f32]| out.iter_mut().for_each(|o| *o = r as f32);
        let placed = |kernels| {
            ShardedTable::placed(10, 4, 48, &device, BandPlacement::Device, kernels, init)
        };
        let (mut res, mut dev) = (placed(Kernels::Host), placed(Kernels::Tensor));
        assert_eq!(res.placement(), BandPlacement::Device);
        let rows = ids(&[1, 4, 8]);
        assert_eq!(
            to_vec(res.gather(rows).unwrap()).unwrap(),
            to_vec(dev.gather(rows).unwrap()).unwrap()
        );
        let delta = || floats((0..12).map(|x| x as f32).collect(), [3, 4], &device);
        res.scatter_add(rows, delta()).unwrap();
        dev.scatter_add(rows, delta()).unwrap();
        assert_eq!(res.to_vec().unwrap(), dev.to_vec().unwrap());
        assert_eq!(res.traffic(), (0, 0));
        let state = res.zeros_like(2, 48);
        assert!(state.resident && state.placement() == BandPlacement::Device);
    }

    #[test]
    fn unsorted_or_out_of_range_ids_are_refused_not_a_panic() {
        // Unsorted ids once underflowed the host update's offset arithmetic.
        let device = Device::flex();
        for placement in [BandPlacement::Host, BandPlacement::Device] {
            let kernels = Kernels::Tensor;
            let mut t =
                ShardedTable::placed(10, 4, 48, &device, placement, kernels, |_, o| o.fill(1.0));
            assert!(SortedIds::new(&[9, 2]).is_err());
            assert!(SortedIds::new(&[2, 2]).is_err());
            let delta = || floats(vec![1.0; 8], [2, 4], &device);
            let err = t.scatter_add(ids(&[2, 10]), delta()).unwrap_err();
            assert!(matches!(err, ModelError::Ids(_)), "{err}");
            assert!(t.gather(ids(&[10])).is_err());
            assert_eq!(t.to_vec().unwrap(), vec![1.0; 40], "nothing written");
        }
    }

    /// Whether `T` implements `Clone`, by method resolution (autoref specialisation).
    struct Probe<T>(std::marker::PhantomData<T>);
    trait IsClone {
        fn is_clone(&self) -> bool {
            true
        }
    }
    impl<T: Clone> IsClone for Probe<T> {}
    trait NotClone {
        fn is_clone(&self) -> bool {
            false
        }
    }
    impl<T> NotClone for &Probe<T> {}

    #[test]
    #[allow(clippy::needless_borrow)] // the borrow selects which `is_clone` answers
    fn tables_and_their_optimizer_state_cannot_be_cloned() {
        // A clone would keep a second handle to the shards and silently turn every in-place
        // update into a whole-table copy.
        use crate::table_optim::TableState;
        assert!(!(&Probe::<ShardedTable>(std::marker::PhantomData)).is_clone());
        assert!(!(&Probe::<TableState>(std::marker::PhantomData)).is_clone());
        assert!(
            (&Probe::<Segment>(std::marker::PhantomData)).is_clone(),
            "the probe works"
        );
    }
}
