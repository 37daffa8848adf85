//! Each row's log-sum-exp over class chunks, one CubeCL launch a chunk: one cube per row
//! reads the chunk's logits once, each unit keeping a running `(max, Σ e^(z − max))` over its
//! columns, the cube merging its units' pairs in shared memory (a tree, no plane operations),
//! and the row's pair folded into the running pair of the chunks before. `ln` of the sum is
//! taken once, after the last chunk ([`RowLse::finish`]).

use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::calculate_cube_count_elemwise;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::{BurnTensor, block_units, bridge};

/// The max of `m1` and `m2`.
#[cube]
fn larger<F: Float>(m1: F, m2: F) -> F {
    let mut m = m2;
    if m1 > m2 {
        m = m1;
    }
    m
}

/// Folds row `CUBE_POS` of `z` (`[rows, n]`) into `running` (`[rows, 2]`: max, sum); with
/// `first` the running pair is written, not read.
#[cube(launch)]
fn fold_rows<F: Float>(
    z: &Tensor<F>,
    running: &mut Tensor<F>,
    #[comptime] first: bool,
    #[comptime] units: usize,
    #[define(F)] _dtype: ElemType,
) {
    let row = CUBE_POS;
    if row >= z.shape(0) {
        terminate!();
    }
    let unit = UNIT_POS as usize;
    let n = z.shape(1);
    let base = row * z.stride(0);
    let step = z.stride(1);
    // The most negative finite f32 (WGSL takes no infinite literal): e^(floor − z) is 0.
    let mut m = F::new(-3.0e38_f32);
    let mut s = F::new(0.0_f32);
    let mut j = unit;
    while j < n {
        let v = z[base + j * step];
        if v > m {
            s = s * (m - v).exp() + F::new(1.0_f32);
            m = v;
        } else {
            s += (v - m).exp();
        }
        j += CUBE_DIM as usize;
    }
    let mut maxes = Shared::<[F]>::new_slice(units);
    let mut sums = Shared::<[F]>::new_slice(units);
    maxes[unit] = m;
    sums[unit] = s;
    sync_cube();
    // A runtime value (`units` is a compile-time one, which a loop cannot step).
    let mut half = CUBE_DIM as usize / 2;
    while half > 0 {
        if unit < half {
            let m1 = maxes[unit];
            let s1 = sums[unit];
            let m2 = maxes[unit + half];
            let s2 = sums[unit + half];
            let mm = larger::<F>(m1, m2);
            sums[unit] = s1 * (m1 - mm).exp() + s2 * (m2 - mm).exp();
            maxes[unit] = mm;
        }
        sync_cube();
        half /= 2;
    }
    if unit == 0 {
        let at = row * running.stride(0);
        let next = at + running.stride(1);
        let m2 = maxes[0];
        let s2 = sums[0];
        if first {
            running[at] = m2;
            running[next] = s2;
        } else {
            let m1 = running[at];
            let s1 = running[next];
            let mm = larger::<F>(m1, m2);
            running[next] = s1 * (m1 - mm).exp() + s2 * (m2 - mm).exp();
            running[at] = mm;
        }
    }
}

/// The running `(max, sum)` of each row over the chunks added so far.
#[derive(Default)]
pub struct RowLse {
    running: Option<CubeTensor>,
}

impl RowLse {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds in one chunk's `[rows, n]` logits; `false`, with nothing done, when `z` is not
    /// on a cubecl device.
    pub fn add(&mut self, z: BurnTensor<2>) -> bool {
        let Some(z) = bridge::float_in(z) else {
            return false;
        };
        let rows = z.meta.shape()[0];
        let first = self.running.is_none();
        let running = self.running.take().unwrap_or_else(|| {
            empty_device_contiguous_dtype(
                z.client.clone(),
                z.device.clone(),
                [rows, 2].into(),
                z.dtype,
            )
        });
        let units = block_units(&z);
        let client = z.client.clone();
        let dtype = z.dtype;
        // One cube a row: `rows · units` units in cubes of `units`.
        let dim = CubeDim::new_1d(units as u32);
        fold_rows::launch(
            &client,
            calculate_cube_count_elemwise(&client, rows * units, dim),
            dim,
            z.into_tensor_arg(),
            running.clone().into_tensor_arg(),
            first,
            units,
            dtype_to_storage_type(dtype),
        );
        self.running = Some(running);
        true
    }

    /// `[rows, 1]` log-sum-exp of every chunk added (`None` before the first).
    pub fn finish(self) -> Option<BurnTensor<2>> {
        let running: BurnTensor<2> = bridge::float_out(self.running?);
        let m = running.clone().narrow(1, 0, 1);
        Some(m + running.narrow(1, 1, 1).log())
    }
}
