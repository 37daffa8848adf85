//! A wide `n_rows × dim` f32 table kept outside autodiff, split into row shards that each fit
//! the device's largest buffer. Rows are gathered by sorted unique ids and updated in place by
//! `scatter_nd` with the same (deduplicated) ids.

use burn::tensor::{Device, IndexingUpdateOp, Tensor};
use rayon::prelude::*;

use crate::ModelError;
use crate::tensors::{floats, ints, row_indices, to_vec};

/// Row-sharded table.
#[derive(Clone, Debug)]
pub struct ShardedTable {
    shards: Vec<Tensor<2>>,
    rows_per_shard: usize,
    n_rows: usize,
    dim: usize,
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

    /// Builds the table shard by shard; `init(row, out)` fills row `row` (`out.len() == dim`).
    /// Shards go to the allocator's persistent pool (exact sizes, no rounding to pages).
    pub fn from_fn(
        n_rows: usize,
        dim: usize,
        max_buffer_bytes: u64,
        device: &Device,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        let rows_per_shard = Self::rows_per_shard(n_rows, dim, max_buffer_bytes);
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
            shards,
            rows_per_shard,
            n_rows,
            dim,
        }
    }

    pub fn zeros(n_rows: usize, dim: usize, max_buffer_bytes: u64, device: &Device) -> Self {
        Self::from_fn(n_rows, dim, max_buffer_bytes, device, |_, out| {
            out.fill(0.0)
        })
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn device(&self) -> Device {
        self.shards[0].device()
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn n_shards(&self) -> usize {
        self.shards.len()
    }
    pub fn bytes(&self) -> u64 {
        self.n_rows as u64 * self.dim as u64 * 4
    }

    /// Splits sorted unique ids into runs that each fall in one shard.
    pub fn segments(&self, uniq: &[u32]) -> Vec<Segment> {
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

    fn local_ids(&self, seg: Segment, uniq: &[u32]) -> Vec<u32> {
        let base = (seg.shard * self.rows_per_shard) as u32;
        uniq[seg.start..seg.end]
            .iter()
            .map(|&id| id - base)
            .collect()
    }

    /// Rows `uniq[seg.start..seg.end]` (all in shard `seg.shard`) as one tensor, off autodiff.
    /// It is never larger than a shard, so it stays within the buffer limit.
    pub fn gather_segment(&self, uniq: &[u32], seg: Segment) -> Tensor<2> {
        let device = self.device();
        let idx = ints(&self.local_ids(seg, uniq), &device);
        self.shards[seg.shard].clone().select(0, idx)
    }

    /// Rows `uniq` (sorted, distinct, in range) as a `[uniq.len(), dim]` tensor, off autodiff.
    pub fn gather(&self, uniq: &[u32]) -> Tensor<2> {
        let device = self.shards[0].device();
        if uniq.is_empty() {
            return Tensor::zeros([0, self.dim], &device);
        }
        let parts: Vec<Tensor<2>> = self
            .segments(uniq)
            .into_iter()
            .map(|seg| self.gather_segment(uniq, seg))
            .collect();
        if parts.len() == 1 {
            parts.into_iter().next().expect("one part")
        } else {
            Tensor::cat(parts, 0)
        }
    }

    /// `table[uniq[i]] += delta[i]` in place. `uniq` must be sorted and distinct: `scatter_nd`
    /// with duplicate indices races on GPUs.
    pub fn scatter_add(&mut self, uniq: &[u32], delta: Tensor<2>) {
        if uniq.is_empty() {
            return;
        }
        let device = delta.device();
        let segments = self.segments(uniq);
        let single = segments.len() == 1;
        let mut updates: Vec<Option<(Tensor<2, burn::tensor::Int>, Tensor<2>)>> =
            vec![None; self.shards.len()];
        for seg in segments {
            let idx = row_indices(&self.local_ids(seg, uniq), &device);
            let part = if single {
                delta.clone()
            } else {
                delta.clone().narrow(0, seg.start, seg.end - seg.start)
            };
            updates[seg.shard] = Some((idx, part));
        }
        drop(delta);
        // Each shard is moved into scatter_nd, so its handle is unique and the update is in place.
        self.shards = std::mem::take(&mut self.shards)
            .into_iter()
            .zip(updates)
            .map(|(shard, update)| match update {
                Some((idx, part)) => shard.scatter_nd(idx, part, IndexingUpdateOp::Add),
                None => shard,
            })
            .collect();
    }

    /// The whole table on the host, row-major (tests and small tables only).
    pub fn to_vec(&self) -> Result<Vec<f32>, ModelError> {
        let mut out = Vec::with_capacity(self.n_rows * self.dim);
        for s in &self.shards {
            out.extend(to_vec(s.clone())?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let rows = to_vec(t.gather(&[0, 2, 3, 7, 9])).unwrap();
        let expect: Vec<f32> = [0, 2, 3, 7, 9]
            .iter()
            .flat_map(|&r| (0..4).map(move |j| (r * 10 + j) as f32))
            .collect();
        assert_eq!(rows, expect);

        let mut t = t;
        let delta = floats(vec![1.0; 12], [3, 4], &device);
        t.scatter_add(&[2, 3, 9], delta);
        let all = t.to_vec().unwrap();
        assert_eq!(all[2 * 4], 21.0);
        assert_eq!(all[3 * 4 + 3], 34.0);
        assert_eq!(all[9 * 4 + 1], 92.0);
        assert_eq!(all[4 * 4], 40.0);
    }
}
