//! A table read and written shard by shard (checkpoints, export): one shard's rows at a time
//! come to the host, so a whole table is never assembled in one buffer.

use std::borrow::Cow;

use crate::error::ModelError;
use crate::table::host_rows::{HostRows, half_of, upload_shard};
use crate::table::{ShardedTable, Storage};
use crate::tensors::to_vec;

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
            Storage::Host(host) => Ok(host.read(first * dim..(first + n) * dim)),
            Storage::Device(shards) => Ok(Cow::Owned(to_vec(shards[s].clone())?)),
        }
    }

    /// Replaces shard `s`'s rows with `values` (`rows × dim`, row-major; rounded to the nearest
    /// value of a half-precision table: a checkpoint's values are that table's, so exact).
    pub fn write_shard(&mut self, s: usize, values: Vec<f32>) -> Result<(), ModelError> {
        let (first, n) = self.shard_ranges()[s];
        let dim = self.dim();
        if values.len() != n * dim {
            return Err(ModelError::Shape(format!(
                "shard {s} holds {n} × {dim} values, not {}",
                values.len()
            )));
        }
        let (device, precision) = (self.device(), self.format().precision);
        match &mut self.storage {
            Storage::Host(host) => host.write(first * dim..(first + n) * dim, &values),
            Storage::Device(shards) => {
                let rows = match half_of(precision) {
                    None => HostRows::F32(values),
                    Some(half) => HostRows::Half {
                        bits: values.iter().map(|&x| half.nearest(x)).collect(),
                        half,
                    },
                };
                shards[s] = upload_shard(rows, [n, dim], &device);
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
        for compute_path in [
            crate::device::ComputePath::Host,
            crate::device::ComputePath::Tensor,
        ] {
            let mut t = ShardedTable::placed(
                10,
                3,
                4 * 3 * 4,
                &device,
                widebag_config::BandPlacement::Device,
                compute_path,
                crate::table::RowFormat::F32,
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
