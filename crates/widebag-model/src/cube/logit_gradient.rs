//! The full softmax's logit gradient `g = (w_r e^(z − lse_r) − y) / B`, formed in the buffer of
//! the logits `z` themselves by two CubeCL launches: one unit per logit writes
//! `row_scale_r · e^(z − lse_r)` (`row_scale = w_r / B`), then one unit per target entry
//! subtracts its weight (`y / B`) at its `row · n + class` (each entry once: the targets are
//! merged by position first, so no two units write one logit).

use burn::tensor::Int;
use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::calculate_cube_count_elemwise;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;

use super::{BurnTensor, block_units, bridge};

/// `z ← scale_r · e^(z − lse_r)` over `z` (`[rows, n]`), `lse` and `scale` `[rows, 1]`: cube
/// `(x, r)` takes row `r`'s columns `x · units ..` (no division per logit).
#[cube(launch)]
fn softmax_in_place<F: Float>(
    z: &mut Tensor<F>,
    lse: &Tensor<F>,
    scale: &Tensor<F>,
    #[define(F)] _dtype: ElemType,
) {
    let col = CUBE_POS_X as usize * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    if col >= z.shape(1) || row >= z.shape(0) {
        terminate!();
    }
    let index = row * z.stride(0) + col * z.stride(1);
    let lse_r = lse[row * lse.stride(0)];
    z[index] = scale[row * scale.stride(0)] * (z[index] - lse_r).exp();
}

/// `g[flat_k] −= weight_k` for each target entry `k` (`flat = row · n + class`).
#[cube(launch)]
fn subtract_targets<F: Float, I: Numeric>(
    g: &mut Tensor<F>,
    flat: &Tensor<I>,
    weight: &Tensor<F>,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let k = ABSOLUTE_POS;
    if k >= flat.shape(0) {
        terminate!();
    }
    let n = g.shape(1);
    let f = u32::cast_from(flat[k]) as usize;
    let index = (f / n) * g.stride(0) + (f % n) * g.stride(1);
    g[index] -= weight[k];
}

/// The targets of one chunk as the kernel takes them: `[M]` flat positions (each once) and
/// `[M]` weights already divided by the batch's rows.
pub struct ScaledTargets<'a> {
    pub flat: &'a BurnTensor<1, Int>,
    pub weight: &'a BurnTensor<1>,
}

/// The logit gradient of one chunk in the buffer of its logits `z` (`[rows, n]`, f32, taken
/// whole: written in place when nothing else holds it): `lse` and `row_scale` (`w_r / B`) are
/// `[rows, 1]`. `None` when the operands are not on a cubecl device or the grid would pass its
/// limit: the caller forms the gradient another way.
pub fn in_place(
    z: BurnTensor<2>,
    lse: &BurnTensor<2>,
    row_scale: &BurnTensor<2>,
    targets: Option<ScaledTargets<'_>>,
) -> Option<BurnTensor<2>> {
    // A cube per row and 256 columns: the grid's limit (65,535 each way on every adapter).
    let [rows, n] = z.dims();
    if rows > 65_535 || n.div_ceil(256) > 65_535 {
        return None;
    }
    let (Some(lse), Some(scale)) = (
        bridge::float_in(lse.clone()),
        bridge::float_in(row_scale.clone()),
    ) else {
        return None;
    };
    // Every operand out of burn's queue before the logits are written: the targets live on
    // the logits' device.
    let targets = match targets {
        None => None,
        Some(t) => Some(targets_in(t)?),
    };
    let mut g = bridge::float_in(z)?;
    if !g.can_mut() {
        g = g.copy();
    }
    let client = g.client.clone();
    let dtype = g.dtype;
    // One cube size whatever the counts (a kernel is compiled per cube size: a size chosen from
    // a step's target count would compile new kernels after the first step).
    let units = block_units(&g);
    let dim = CubeDim::new_1d(units as u32);
    softmax_in_place::launch(
        &client,
        CubeCount::Static(n.div_ceil(units) as u32, rows as u32, 1),
        dim,
        g.clone().into_tensor_arg(),
        lse.into_tensor_arg(),
        scale.into_tensor_arg(),
        dtype_to_storage_type(dtype),
    );
    if let Some(targets) = targets {
        subtract(&g, targets);
    }
    Some(bridge::float_out(g))
}

/// One chunk's targets out of burn's queue: `[M]` flat positions and `[M]` scaled weights.
pub(super) fn targets_in(t: ScaledTargets<'_>) -> Option<(CubeTensor, CubeTensor)> {
    Some((
        bridge::int_in(t.flat.clone())?,
        bridge::float_in(t.weight.clone())?,
    ))
}

/// `g[flat_k] −= weight_k` for each of the targets (`g` `[rows, n]`, written in place).
pub(super) fn subtract(g: &CubeTensor, (flat, weight): (CubeTensor, CubeTensor)) {
    let client = g.client.clone();
    let dim = CubeDim::new_1d(block_units(g) as u32);
    let m = flat.meta.num_elements();
    let (dtype, int_dtype) = (g.dtype, flat.dtype);
    subtract_targets::launch(
        &client,
        calculate_cube_count_elemwise(&client, m, dim),
        dim,
        g.clone().into_tensor_arg(),
        flat.into_tensor_arg(),
        weight.into_tensor_arg(),
        [
            dtype_to_storage_type(dtype),
            dtype_to_storage_type(int_dtype),
        ],
    );
}
