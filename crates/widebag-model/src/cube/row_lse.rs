//! Each row's log-sum-exp over class chunks, one CubeCL launch a chunk: one cube per row
//! reads the chunk's logits once, each unit keeping a running `(max, Σ e^(z − max))` over its
//! columns, the cube merging its units' pairs, and the row's pair folded into the running pair
//! of the chunks before. `ln` of the sum is taken once, after the last chunk
//! ([`RowLse::finish`]). The merge runs on plane (subgroup) operations where the adapter has
//! them at one fixed plane size ([`Merge::of`]: each plane's pairs by `plane_max` and
//! `plane_sum`, then the planes' by a tree in shared memory), else as a tree in shared memory
//! over every unit's pair (lavapipe, a CPU adapter, advertises none: cubecl gives a CPU adapter
//! no plane operations).

use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::calculate_cube_count_elemwise;
use burn_cubecl::cubecl::features::Plane;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::{BurnTensor, block_units, bridge};

/// The max of `m1` and `m2`.
#[cube]
pub(super) fn larger<F: Float>(m1: F, m2: F) -> F {
    let mut m = m2;
    if m1 > m2 {
        m = m1;
    }
    m
}

/// Folds row `CUBE_POS` of `z` (`[rows, n]`) into `running` (`[rows, 2]`: max, sum); with
/// `first` the running pair is written, not read. With `pairs`, `z` holds `n / 2` pairs
/// `(max, sum)` of a row's tiles (`super::tiles::pairs`), not logits.
#[cube(launch)]
fn fold_rows<F: Float>(
    z: &Tensor<F>,
    running: &mut Tensor<F>,
    #[comptime] first: bool,
    #[comptime] units: usize,
    #[comptime] planes: bool,
    #[comptime] pairs: bool,
    #[define(F)] _dtype: ElemType,
) {
    let row = CUBE_POS;
    if row >= z.shape(0) {
        terminate!();
    }
    let unit = UNIT_POS as usize;
    let mut n = z.shape(1);
    if pairs {
        n /= 2;
    }
    let base = row * z.stride(0);
    let step = z.stride(1);
    // The most negative finite f32 (WGSL takes no infinite literal): e^(floor − z) is 0.
    let mut m = F::new(-3.0e38_f32);
    let mut s = F::new(0.0_f32);
    let mut j = unit;
    while j < n {
        // A logit counts `e^0 = 1` at its own max; a tile's pair its sum.
        let mut at = j;
        let mut t = F::new(1.0_f32);
        if pairs {
            at = 2 * j;
            t = z[base + (at + 1) * step];
        }
        let v = z[base + at * step];
        if v > m {
            s = s * (m - v).exp() + t;
            m = v;
        } else {
            s += t * (v - m).exp();
        }
        j += CUBE_DIM as usize;
    }
    let mut maxes = Shared::<[F]>::new_slice(units);
    let mut sums = Shared::<[F]>::new_slice(units);
    // Each plane's pairs merged by plane operations (with `planes`) into one slot a plane,
    // else each unit's pair in its own slot; then the slots by a tree in shared memory, the
    // result in slot 0.
    let mut slots = CUBE_DIM as usize;
    if planes {
        let pm = plane_max(m);
        let ps = plane_sum(s * (m - pm).exp());
        if UNIT_POS_PLANE == 0 {
            maxes[unit / PLANE_DIM as usize] = pm;
            sums[unit / PLANE_DIM as usize] = ps;
        }
        slots = (CUBE_DIM / PLANE_DIM) as usize;
    } else {
        maxes[unit] = m;
        sums[unit] = s;
    }
    sync_cube();
    // A runtime value (`units` is a compile-time one, which a loop cannot step).
    let mut half = slots / 2;
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

/// How a cube merges its units' `(max, sum)` pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// Plane (subgroup) operations within each plane (`plane_max`, `plane_sum`), then a tree
    /// in shared memory over the planes' pairs.
    Planes,
    /// A tree in shared memory over every unit's pair, a barrier a level: any adapter.
    Shared,
}

impl Merge {
    /// Plane operations where the adapter of `client` has them at one fixed plane size that
    /// divides `units`; else the shared-memory tree alone.
    /// `WIDEBAG_CUBE_MERGE=shared` asks for the tree everywhere.
    fn of(client: &Client, units: usize) -> Self {
        let has = client.properties().features.plane.contains(Plane::Ops);
        let asked_shared = std::env::var("WIDEBAG_CUBE_MERGE").is_ok_and(|v| v == "shared");
        match has && plane_fits(client, units) && !asked_shared {
            true => Merge::Planes,
            false => Merge::Shared,
        }
    }

    /// The merge the row log-sum-exp runs on `device`'s adapter (`None` off a cubecl device).
    pub fn on(device: &burn::tensor::Device) -> Option<Self> {
        let probe = BurnTensor::<2>::zeros([1, 1], device);
        let z = bridge::float_in(probe)?;
        let units = block_units(&z);
        Some(Self::of(&z.client, units))
    }
}

/// Whether the adapter of `client` has one fixed plane size, a power of two that divides
/// `units`.
fn plane_fits(client: &Client, units: usize) -> bool {
    let hardware = &client.properties().hardware;
    let (min, max) = (hardware.plane_size_min, hardware.plane_size_max);
    let plane = min as usize;
    min == max && plane > 1 && plane.is_power_of_two() && units.is_multiple_of(plane)
}

/// The running `(max, sum)` of each row over the chunks added so far.
#[derive(Default)]
pub struct RowLse {
    running: Option<CubeTensor>,
    /// The merge asked for; `None`: the adapter's ([`Merge::of`]).
    merge: Option<Merge>,
    /// The merge the last chunk ran.
    ran: Option<Merge>,
}

impl RowLse {
    pub fn new() -> Self {
        Self::default()
    }

    /// A running log-sum-exp merging by `merge` where the adapter's plane size allows it
    /// (whatever cubecl says of the adapter's plane operations: tests), else in shared memory.
    pub fn with_merge(merge: Merge) -> Self {
        Self {
            running: None,
            merge: Some(merge),
            ran: None,
        }
    }

    /// Folds in one chunk's `[rows, n]` logits; `false`, with nothing done, when `z` is not
    /// on a cubecl device.
    pub fn add(&mut self, z: BurnTensor<2>) -> bool {
        let Some(z) = bridge::float_in(z) else {
            return false;
        };
        self.fold(z, false);
        true
    }

    /// Folds in one chunk's logits as the tiles' `[rows, 2 · tiles]` pairs
    /// (`super::tiles::pairs`: the logits never written).
    pub fn add_pairs(&mut self, pairs: CubeTensor) {
        self.fold(pairs, true);
    }

    /// Folds `z` (`[rows, n]` logits, or with `pairs` `[rows, 2 · tiles]` tiles' pairs) into
    /// the running pairs.
    fn fold(&mut self, z: CubeTensor, pairs: bool) {
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
        let planes = match self.merge {
            None => Merge::of(&client, units) == Merge::Planes,
            Some(merge) => merge == Merge::Planes && plane_fits(&client, units),
        };
        self.ran = Some(if planes { Merge::Planes } else { Merge::Shared });
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
            planes,
            pairs,
            dtype_to_storage_type(dtype),
        );
        self.running = Some(running);
    }

    /// The merge the last chunk added ran (`None` before the first).
    pub fn merged_by(&self) -> Option<Merge> {
        self.ran
    }

    /// `[rows, 1]` log-sum-exp of every chunk added (`None` before the first).
    pub fn finish(self) -> Option<BurnTensor<2>> {
        let running: BurnTensor<2> = bridge::float_out(self.running?);
        let m = running.clone().narrow(1, 0, 1);
        Some(m + running.narrow(1, 1, 1).log())
    }
}
