//! The full softmax's logits formed tile by tile inside widebag's CubeCL kernels and used where
//! they are formed, never written to a `[rows, classes]` buffer (Cut Cross-Entropy's structure,
//! `model.logits = "tiled"`): each cube forms a `64 × 64` tile of `z = h W + b` in its units'
//! registers (`h`'s rows and `W`'s columns staged through shared memory 16 hidden units at a
//! time), then, in the forward pass, each row's running `(max, Σ e^(z − max))` over the tile's
//! classes ([`pairs`]: a `[rows, 2 · tiles]` buffer, 32 times smaller than the logits, folded
//! into the rows' log-sum-exp by [`super::row_lse::RowLse::add_pairs`]), or, in the backward
//! pass, the logit gradient `w_r / B · e^(z − lse_r)` written straight into its buffer
//! ([`gradient`]; the targets' weights subtracted after by [`super::logit_gradient`]'s kernel).
//! The products are f32 (the weights' own dtype), summed in f32.

use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::logit_gradient::{self, ScaledTargets};
use super::row_lse::larger;
use super::{BurnTensor, bridge};

/// Units along each side of a cube.
const SIDE: usize = 16;
/// Logits each unit holds along each side (`SIDE · PER` a tile's side).
const PER: usize = 4;
/// A tile's side: batch rows by classes (the ledger's, which prices a row's pairs per tile).
const TILE: usize = SIDE * PER;
const _: () = assert!(TILE == widebag_ledger::shapes::LOGIT_TILE);
/// Hidden units staged in shared memory per pass.
const DEPTH: usize = 16;

/// `[p · PER + q]`: `Σ_k h[r0 + ty + p · SIDE, k] · w[k, j0 + tx + q · SIDE]` (zeros past
/// `h`'s rows and `w`'s columns), for unit `(tx, ty)` of the cube: `h` `[rows, last]`, `w`
/// `[last, n]`.
#[cube]
fn tile_product<F: Float>(h: &Tensor<F>, w: &Tensor<F>, r0: usize, j0: usize) -> Array<F> {
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let rows = h.shape(0);
    let last = h.shape(1);
    let n = w.shape(1);
    // `hs[d · TILE + row]`, `ws[d · TILE + class]`.
    let mut hs = Shared::<[F]>::new_slice(DEPTH * TILE);
    let mut ws = Shared::<[F]>::new_slice(DEPTH * TILE);
    let mut wq = Array::<F>::new(PER);
    let mut acc = Array::<F>::new(PER * PER);
    #[unroll]
    for k in 0..PER * PER {
        acc[k] = F::new(0.0_f32);
    }
    let lin = ty * SIDE + tx;
    let mut k0 = 0usize;
    while k0 < last {
        // `DEPTH · TILE` values of each operand, `PER` per unit; consecutive units read
        // consecutive hidden units of one row of `h`, and consecutive classes of one row of `w`.
        #[unroll]
        for q in 0..DEPTH * TILE / (SIDE * SIDE) {
            let e = lin + q * SIDE * SIDE;
            let hr = e / DEPTH;
            let hd = e % DEPTH;
            let mut hv = F::new(0.0_f32);
            if r0 + hr < rows && k0 + hd < last {
                hv = h[(r0 + hr) * h.stride(0) + (k0 + hd) * h.stride(1)];
            }
            hs[hd * TILE + hr] = hv;
            let wd = e / TILE;
            let wc = e % TILE;
            let mut wv = F::new(0.0_f32);
            if k0 + wd < last && j0 + wc < n {
                wv = w[(k0 + wd) * w.stride(0) + (j0 + wc) * w.stride(1)];
            }
            ws[wd * TILE + wc] = wv;
        }
        sync_cube();
        #[unroll]
        for d in 0..DEPTH {
            #[unroll]
            for q in 0..PER {
                wq[q] = ws[d * TILE + tx + q * SIDE];
            }
            #[unroll]
            for p in 0..PER {
                let a = hs[d * TILE + ty + p * SIDE];
                #[unroll]
                for q in 0..PER {
                    acc[p * PER + q] += a * wq[q];
                }
            }
        }
        sync_cube();
        k0 += DEPTH;
    }
    acc
}

/// Cube `(x, y)`: the logits of rows `y · TILE ..` and classes `x · TILE ..` of `h w + b`
/// (`b` `[1, n]`), and each row's `(max, Σ e^(z − max))` over the tile's classes written at
/// `pairs[row, 2x]`, `pairs[row, 2x + 1]`.
#[cube(launch)]
fn tile_pairs<F: Float>(
    h: &Tensor<F>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    pairs: &mut Tensor<F>,
    #[define(F)] _dtype: ElemType,
) {
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let r0 = CUBE_POS_Y as usize * TILE;
    let j0 = CUBE_POS_X as usize * TILE;
    let rows = h.shape(0);
    let n = w.shape(1);
    let acc = tile_product::<F>(h, w, r0, j0);
    // Each unit's pair per row over its `PER` classes, in slot `row · SIDE + tx`; then the
    // `SIDE` slots of each row merged by a tree (the most negative finite f32 as the empty
    // max: WGSL takes no infinite literal).
    let mut maxes = Shared::<[F]>::new_slice(TILE * SIDE);
    let mut sums = Shared::<[F]>::new_slice(TILE * SIDE);
    #[unroll]
    for p in 0..PER {
        let mut m = F::new(-3.0e38_f32);
        let mut s = F::new(0.0_f32);
        #[unroll]
        for q in 0..PER {
            let j = j0 + tx + q * SIDE;
            if j < n {
                let v = acc[p * PER + q] + b[j * b.stride(1)];
                if v > m {
                    s = s * (m - v).exp() + F::new(1.0_f32);
                    m = v;
                } else {
                    s += (v - m).exp();
                }
            }
        }
        let slot = (ty + p * SIDE) * SIDE + tx;
        maxes[slot] = m;
        sums[slot] = s;
    }
    sync_cube();
    // A runtime value (`SIDE` is a compile-time one, which a loop cannot step): `SIDE / 2`.
    let mut half = (CUBE_DIM_X / 2) as usize;
    while half > 0 {
        if tx < half {
            #[unroll]
            for p in 0..PER {
                let slot = (ty + p * SIDE) * SIDE + tx;
                let m1 = maxes[slot];
                let s1 = sums[slot];
                let m2 = maxes[slot + half];
                let s2 = sums[slot + half];
                let mm = larger::<F>(m1, m2);
                sums[slot] = s1 * (m1 - mm).exp() + s2 * (m2 - mm).exp();
                maxes[slot] = mm;
            }
        }
        sync_cube();
        half /= 2;
    }
    if tx == 0 {
        #[unroll]
        for p in 0..PER {
            let r = r0 + ty + p * SIDE;
            if r < rows {
                let slot = (ty + p * SIDE) * SIDE;
                let col = pairs.stride(1);
                let at = r * pairs.stride(0) + 2 * CUBE_POS_X as usize * col;
                pairs[at] = maxes[slot];
                pairs[at + col] = sums[slot];
            }
        }
    }
}

/// Cube `(x, y)`: `g[r, j] = scale_r · e^(z_rj − lse_r)` over its tile of `z = h w + b`
/// (`lse`, `scale` `[rows, 1]`, `g` `[rows, n]`).
#[cube(launch)]
fn tile_gradient<F: Float>(
    h: &Tensor<F>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    lse: &Tensor<F>,
    scale: &Tensor<F>,
    g: &mut Tensor<F>,
    #[define(F)] _dtype: ElemType,
) {
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let r0 = CUBE_POS_Y as usize * TILE;
    let j0 = CUBE_POS_X as usize * TILE;
    let rows = h.shape(0);
    let n = w.shape(1);
    let acc = tile_product::<F>(h, w, r0, j0);
    #[unroll]
    for p in 0..PER {
        let r = r0 + ty + p * SIDE;
        if r < rows {
            let lse_r = lse[r * lse.stride(0)];
            let scale_r = scale[r * scale.stride(0)];
            #[unroll]
            for q in 0..PER {
                let j = j0 + tx + q * SIDE;
                if j < n {
                    let z = acc[p * PER + q] + b[j * b.stride(1)];
                    let at = r * g.stride(0) + j * g.stride(1);
                    g[at] = scale_r * (z - lse_r).exp();
                }
            }
        }
    }
}

/// The grid of `[rows, n]` logits' tiles, or `None` past its limit (65,535 cubes each way on
/// every adapter).
fn grid(rows: usize, n: usize) -> Option<CubeCount> {
    let (x, y) = (n.div_ceil(TILE), rows.div_ceil(TILE).max(1));
    (x <= 65_535 && y <= 65_535).then_some(CubeCount::Static(x as u32, y as u32, 1))
}

/// The operands on the device: `h` `[rows, last]`, `w` `[last, n]`, `b` `[1, n]`, all f32.
fn operands(
    h: &BurnTensor<2>,
    w: &BurnTensor<2>,
    b: &BurnTensor<2>,
) -> Option<(CubeTensor, CubeTensor, CubeTensor)> {
    Some((
        bridge::float_in(h.clone())?,
        bridge::float_in(w.clone())?,
        bridge::float_in(b.clone())?,
    ))
}

/// Each row's `(max, Σ e^(z − max))` over each 64-class tile of `z = h w + b`, as a
/// `[rows, 2 · tiles]` buffer (the logits themselves never written); `None` off a cubecl device
/// or past the grid's limit.
pub fn pairs(h: &BurnTensor<2>, w: &BurnTensor<2>, b: &BurnTensor<2>) -> Option<CubeTensor> {
    let ([rows, _], n) = (h.dims(), w.dims()[1]);
    let count = grid(rows, n)?;
    let (h, w, b) = operands(h, w, b)?;
    let client = h.client.clone();
    let dtype = h.dtype;
    let out = empty_device_contiguous_dtype(
        client.clone(),
        h.device.clone(),
        [rows, 2 * n.div_ceil(TILE)].into(),
        dtype,
    );
    tile_pairs::launch(
        &client,
        count,
        CubeDim::new_2d(SIDE as u32, SIDE as u32),
        h.into_tensor_arg(),
        w.into_tensor_arg(),
        b.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        dtype_to_storage_type(dtype),
    );
    Some(out)
}

/// One chunk's logit gradient `(w_r e^(z − lse_r) − y) / B` formed from `h`, `w`, `b` tile by
/// tile (no logits buffer): `lse` and `row_scale` (`w_r / B`) `[rows, 1]`, the targets' scaled
/// weights subtracted at their entries. `None` off a cubecl device or past the grid's limit.
pub fn gradient(
    (h, w, b): (&BurnTensor<2>, &BurnTensor<2>, &BurnTensor<2>),
    lse: &BurnTensor<2>,
    row_scale: &BurnTensor<2>,
    targets: Option<ScaledTargets<'_>>,
) -> Option<BurnTensor<2>> {
    let ([rows, _], n) = (h.dims(), w.dims()[1]);
    let count = grid(rows, n)?;
    let (h, w, b) = operands(h, w, b)?;
    let (lse, scale) = (
        bridge::float_in(lse.clone())?,
        bridge::float_in(row_scale.clone())?,
    );
    let targets = match targets {
        None => None,
        Some(t) => Some(logit_gradient::targets_in(t)?),
    };
    let client = h.client.clone();
    let dtype = h.dtype;
    let g =
        empty_device_contiguous_dtype(client.clone(), h.device.clone(), [rows, n].into(), dtype);
    tile_gradient::launch(
        &client,
        count,
        CubeDim::new_2d(SIDE as u32, SIDE as u32),
        h.into_tensor_arg(),
        w.into_tensor_arg(),
        b.into_tensor_arg(),
        lse.into_tensor_arg(),
        scale.into_tensor_arg(),
        g.clone().into_tensor_arg(),
        dtype_to_storage_type(dtype),
    );
    if let Some(targets) = targets {
        logit_gradient::subtract(&g, targets);
    }
    Some(bridge::float_out(g))
}
