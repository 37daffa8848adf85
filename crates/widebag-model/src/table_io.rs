//! A table read and written shard by shard (checkpoints, export): one shard's rows at a time
//! come to the host, so a whole table is never assembled in one buffer.

use std::borrow::Cow;

use crate::ModelError;
use crate::table::{ShardedTable, Storage};
use crate::tensors::{floats, to_vec};

impl ShardedTable {
    /// `(first row, rows)` of each shard.
    pub fn shard_ranges(&self) -> Vec<(usize, usize)> {
        let per = self.rows_per_shard.max(1);
        (0..self.n_shards())
            .map(|s| {
                (
                    s * per,
                    per.min(self.n_rows() - (s * per).min(self.n_rows())),
                )
            })
            .collect()
    }

    /// Shard `s`'s rows, row-major (borrowed on the host, read back from the device).
    pub fn read_shard(&self, s: usize) -> Result<Cow<'_, [f32]>, ModelError> {
        let (first, n) = self.shard_ranges()[s];
        let dim = self.dim();
        match &self.storage {
            Storage::Host(host) => Ok(Cow::Borrowed(&host[first * dim..(first + n) * dim])),
            Storage::Device(shards) => Ok(Cow::Owned(to_vec(shards[s].clone())?)),
        }
    }

    /// Replaces shard `s`'s rows with `values` (`rows × dim`, row-major).
    pub fn write_shard(&mut self, s: usize, values: Vec<f32>) -> Result<(), ModelError> {
        let (first, n) = self.shard_ranges()[s];
        let dim = self.dim();
        if values.len() != n * dim {
            return Err(ModelError::Shape(format!(
                "shard {s} holds {n} × {dim} values, not {}",
                values.len()
            )));
        }
        let device = self.device();
        match &mut self.storage {
            Storage::Host(host) => host[first * dim..(first + n) * dim].copy_from_slice(&values),
            Storage::Device(shards) => {
                let dev = device.clone();
                shards[s] = device
                    .memory_persistent_allocations(values, move |h| floats(h, [n, dim], &dev));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_round_trip_on_both_storages() {
        let device = crate::device::Compute::flex().device;
        for kernels in [crate::cpu::Kernels::Host, crate::cpu::Kernels::Tensor] {
            let mut t = ShardedTable::placed(
                10,
                3,
                4 * 3 * 4,
                &device,
                widebag_config::BandPlacement::Device,
                kernels,
                |r, out| out.fill(r as f32),
            );
            assert_eq!(t.shard_ranges(), vec![(0, 4), (4, 4), (8, 2)]);
            assert_eq!(
                t.read_shard(2).unwrap().as_ref(),
                &[8.0, 8.0, 8.0, 9.0, 9.0, 9.0]
            );
            t.write_shard(1, vec![-1.0; 12]).unwrap();
            let all = t.to_vec().unwrap();
            assert_eq!(all[12..24], [-1.0; 12]);
            assert_eq!(all[27], 9.0);
            assert!(t.write_shard(0, vec![0.0; 5]).is_err());
        }
    }
}
