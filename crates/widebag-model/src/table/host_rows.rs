//! A host table's rows at the table's precision: f32, or f16/bf16 bits decoded to f32 when rows
//! are gathered and, after an update computed in f32, rounded back by stochastic rounding (or to
//! the nearest) with random bits that are a function of the table's seed, the update's key and
//! the element, so a run stays a pure function of its config and step.

use std::borrow::Cow;

use burn::tensor::{DType, Device, Tensor, TensorData};
use rayon::prelude::*;
use widebag_config::{Precision, Rounding};

use crate::cpu::rounding::{Half, random_bits};
use crate::table::host_store;
use crate::table::ids::SortedIds;
use crate::tensors::floats;

/// Row-major rows of a host table.
#[derive(Debug)]
pub enum HostRows {
    F32(Vec<f32>),
    Half { bits: Vec<u16>, half: Half },
}

/// How an update is rounded into half-precision rows: the mode, the table's seed and the
/// update's key (distinct for every update of a run).
#[derive(Clone, Copy, Debug)]
pub struct RoundKey {
    pub rounding: Rounding,
    pub seed: u64,
    pub key: u64,
}

impl HostRows {
    /// `n_rows × dim` rows, row `r` filled by `init(r, out)`, stored at `precision` (rounded to
    /// the nearest: the initial values are the f32 layout's, rounded once).
    pub fn new(
        n_rows: usize,
        dim: usize,
        precision: Precision,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        let dim1 = dim.max(1);
        match half_of(precision) {
            None => {
                let mut host = vec![0.0f32; n_rows * dim];
                host.par_chunks_mut(dim1)
                    .enumerate()
                    .for_each(|(r, out)| init(r, out));
                HostRows::F32(host)
            }
            Some(half) => {
                let mut bits = vec![0u16; n_rows * dim];
                bits.par_chunks_mut(dim1).enumerate().for_each(|(r, out)| {
                    let mut row = vec![0.0f32; out.len()];
                    init(r, &mut row);
                    for (b, x) in out.iter_mut().zip(row) {
                        *b = half.nearest(x);
                    }
                });
                HostRows::Half { bits, half }
            }
        }
    }

    /// Bytes of one stored element.
    pub fn element_bytes(&self) -> u64 {
        match self {
            HostRows::F32(_) => 4,
            HostRows::Half { .. } => 2,
        }
    }

    /// Rows `ids` (in range) as f32, `[ids.len(), dim]` row-major.
    pub fn gather(&self, dim: usize, ids: &[u32]) -> Vec<f32> {
        match self {
            HostRows::F32(host) => host_store::gather(host, dim, ids),
            HostRows::Half { bits, half } => {
                let mut out = vec![0.0f32; ids.len() * dim];
                out.par_chunks_mut(dim.max(1))
                    .zip(ids.par_iter())
                    .for_each(|(row, &id)| {
                        let at = id as usize * dim;
                        for (o, &b) in row.iter_mut().zip(&bits[at..at + dim]) {
                            *o = half.to_f32(b);
                        }
                    });
                out
            }
        }
    }

    /// `rows[uniq[i]] += delta[i]` (ids in range): in place in f32, or computed in f32 and
    /// rounded back under `round`.
    pub fn add(&mut self, dim: usize, uniq: SortedIds, delta: &[f32], round: RoundKey) {
        match self {
            HostRows::F32(host) => host_store::add(host, dim, uniq, delta),
            HostRows::Half { bits, half } => {
                let half = *half;
                let ids = uniq.as_slice();
                host_store::split(bits, dim, uniq)
                    .into_par_iter()
                    .zip(delta.par_chunks(dim.max(1)))
                    .zip(ids.par_iter())
                    .for_each(|((row, d), &id)| {
                        let first = id as u64 * dim as u64;
                        for (j, (b, x)) in row.iter_mut().zip(d).enumerate() {
                            let sum = half.to_f32(*b) + x;
                            *b = round.store(half, sum, first + j as u64);
                        }
                    });
            }
        }
    }

    /// Rows `uniq` as disjoint mutable rows of either storage, for updates computed in f32 in
    /// place ([`RowMut::load`], [`RowMut::store`]); `round` rounds half-precision stores.
    pub fn split_rows(&mut self, dim: usize, uniq: SortedIds, round: RoundKey) -> Vec<RowMut<'_>> {
        match self {
            HostRows::F32(host) => host_store::split(host, dim, uniq)
                .into_iter()
                .map(RowMut::F32)
                .collect(),
            HostRows::Half { bits, half } => {
                let half = *half;
                host_store::split(bits, dim, uniq)
                    .into_iter()
                    .zip(uniq.as_slice())
                    .map(|(bits, &id)| RowMut::Half {
                        bits,
                        half,
                        round,
                        first: id as u64 * dim as u64,
                    })
                    .collect()
            }
        }
    }

    /// Values `range` as f32 (borrowed when stored in f32).
    pub fn read(&self, range: std::ops::Range<usize>) -> Cow<'_, [f32]> {
        match self {
            HostRows::F32(host) => Cow::Borrowed(&host[range]),
            HostRows::Half { bits, half } => {
                Cow::Owned(bits[range].iter().map(|&b| half.to_f32(b)).collect())
            }
        }
    }

    /// Replaces values `range` (rounded to the nearest: a checkpoint's values are exact).
    pub fn write(&mut self, range: std::ops::Range<usize>, values: &[f32]) {
        match self {
            HostRows::F32(host) => host[range].copy_from_slice(values),
            HostRows::Half { bits, half } => {
                for (b, &x) in bits[range].iter_mut().zip(values) {
                    *b = half.nearest(x);
                }
            }
        }
    }

    /// Every value as f32.
    pub fn to_vec(&self) -> Vec<f32> {
        match self {
            HostRows::F32(host) => host.clone(),
            HostRows::Half { bits, .. } => self.read(0..bits.len()).into_owned(),
        }
    }
}

/// One row of a host table, lent for an update computed in f32.
pub enum RowMut<'a> {
    F32(&'a mut [f32]),
    /// Half bits, their format, the update's rounding and the row's first element index.
    Half {
        bits: &'a mut [u16],
        half: Half,
        round: RoundKey,
        first: u64,
    },
}

impl RowMut<'_> {
    /// The row's values into `out` (`out.len()` = the row's).
    pub fn load(&self, out: &mut [f32]) {
        match self {
            RowMut::F32(row) => out.copy_from_slice(row),
            RowMut::Half { bits, half, .. } => {
                for (o, &b) in out.iter_mut().zip(bits.iter()) {
                    *o = half.to_f32(b);
                }
            }
        }
    }

    /// Runs `update` on the row as f32: in place for f32 rows, on `scratch` decoded from and
    /// stored back (rounded) to half-precision rows.
    pub fn with_f32(&mut self, scratch: &mut Vec<f32>, update: impl FnOnce(&mut [f32])) {
        if let RowMut::F32(row) = self {
            return update(row);
        }
        let n = match self {
            RowMut::Half { bits, .. } => bits.len(),
            RowMut::F32(row) => row.len(),
        };
        scratch.resize(n, 0.0);
        self.load(scratch);
        update(scratch);
        self.store(scratch);
    }

    /// Stores `values` as the row (rounded as the table rounds).
    pub fn store(&mut self, values: &[f32]) {
        match self {
            RowMut::F32(row) => row.copy_from_slice(values),
            RowMut::Half {
                bits,
                half,
                round,
                first,
            } => {
                for (j, (b, &x)) in bits.iter_mut().zip(values).enumerate() {
                    *b = round.store(*half, x, *first + j as u64);
                }
            }
        }
    }
}

impl RoundKey {
    /// `x` stored as `half`: element `index` of the table.
    pub fn store(&self, half: Half, x: f32, index: u64) -> u16 {
        match self.rounding {
            Rounding::Nearest => half.nearest(x),
            Rounding::Stochastic => half.stochastic(x, random_bits(self.seed, self.key, index)),
        }
    }
}

/// The half format of `precision` (`None` for f32).
pub fn half_of(precision: Precision) -> Option<Half> {
    match precision {
        Precision::F32 => None,
        Precision::F16 => Some(Half::F16),
        Precision::Bf16 => Some(Half::Bf16),
    }
}

/// One shard's rows on the device at their precision, in the persistent pool (exact sizes).
pub(crate) fn upload_shard(rows: HostRows, shape: [usize; 2], device: &Device) -> Tensor<2> {
    let dev = device.clone();
    device.memory_persistent_allocations(rows, move |rows| match rows {
        HostRows::F32(v) => floats(v, shape, &dev),
        HostRows::Half { bits, half } => {
            let (data, dtype) = match half {
                Half::F16 => (
                    TensorData::new(
                        bits.into_iter().map(burn::tensor::f16::from_bits).collect(),
                        shape,
                    ),
                    DType::F16,
                ),
                Half::Bf16 => (
                    TensorData::new(
                        bits.into_iter()
                            .map(burn::tensor::bf16::from_bits)
                            .collect(),
                        shape,
                    ),
                    DType::BF16,
                ),
            };
            Tensor::from_data(data, (&dev, dtype))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(rounding: Rounding, key: u64) -> RoundKey {
        RoundKey {
            rounding,
            seed: 7,
            key,
        }
    }

    #[test]
    fn half_rows_gather_add_and_read_as_f32() {
        let init = |r: usize, out: &mut [f32]| out.fill(r as f32 + 0.5);
        for precision in [Precision::F16, Precision::Bf16] {
            let mut rows = HostRows::new(4, 2, precision, init);
            assert_eq!(rows.element_bytes(), 2);
            let ids = SortedIds::new(&[1, 3]).unwrap();
            assert_eq!(rows.gather(2, ids.as_slice()), [1.5, 1.5, 3.5, 3.5]);
            // Exactly representable sums are exact whatever the rounding.
            rows.add(
                2,
                ids,
                &[0.25, -0.5, 1.0, 2.0],
                key(Rounding::Stochastic, 1),
            );
            assert_eq!(rows.to_vec(), [0.5, 0.5, 1.75, 1.0, 2.5, 2.5, 4.5, 5.5]);
            let round = key(Rounding::Nearest, 2);
            let lent = rows.split_rows(2, ids, round);
            assert!(lent.iter().all(|r| matches!(r, RowMut::Half { .. })));
            rows.write(2..4, &[-1.0, 8.0]);
            assert_eq!(rows.read(2..4).as_ref(), [-1.0, 8.0]);
        }
        let mut f = HostRows::new(2, 2, Precision::F32, init);
        assert_eq!(f.element_bytes(), 4);
        assert!(matches!(f.read(0..2), Cow::Borrowed(_)));
        let one = SortedIds::new(&[1]).unwrap();
        let mut lent = f.split_rows(2, one, key(Rounding::Nearest, 0));
        // f32 rows are lent as they are, updated without a copy.
        lent[0].with_f32(&mut Vec::new(), |row| row[0] = 9.0);
        assert!(matches!(lent[0], RowMut::F32(_)));
        drop(lent);
        assert_eq!(f.read(2..4).as_ref(), [9.0, 1.5]);
    }

    #[test]
    fn stochastic_adds_keep_tiny_updates_that_nearest_loses() {
        // 1,000 adds of 1e-4 to 1.0 in f16 (ulp 2⁻¹⁰ ≈ 9.8e-4): nearest stays at 1.0, stochastic
        // rounding ends near 1.1, and both are deterministic in their keys.
        let ids = SortedIds::new(&[0]).unwrap();
        let run = |rounding| {
            let mut rows = HostRows::new(1, 1, Precision::F16, |_, o| o.fill(1.0));
            for step in 0..1000 {
                rows.add(1, ids, &[1e-4], key(rounding, step));
            }
            rows.to_vec()[0]
        };
        assert_eq!(run(Rounding::Nearest), 1.0);
        let sr = run(Rounding::Stochastic);
        assert!((sr - 1.1).abs() < 0.02, "{sr}");
        assert_eq!(sr, run(Rounding::Stochastic));
    }
}
