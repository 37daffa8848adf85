//! The full softmax's optimizer step fused into its backward pass, one CubeCL launch per class
//! chunk: each cube forms a `64 × 64` tile of the weight gradient `dW = hᵀ g` in its units'
//! registers (the batch's rows staged through shared memory 16 at a time) and applies the
//! parameter's own rule (SGD, momentum, Adam, AdamW: `optim::dense`'s, PyTorch's) to the
//! weight and its state in place; the bias's gradient, each column's sum of `g`, is summed on
//! the way by the cubes of the first hidden tile, which step the bias too. No
//! `[hidden, classes]` gradient buffer exists, and no pass over one. Accumulation is f32,
//! whatever the products' operand dtype.

use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use widebag_config::OptimConfig;

use super::{BurnTensor, bridge};
use crate::optim::adam::AdamScalars;
use crate::optim::dense::{DenseParam, DenseState};

/// Units along each side of a cube.
const SIDE: usize = 16;
/// Gradient values each unit holds along each side (`SIDE · PER` a tile's side).
const PER: usize = 4;
/// A tile's side: hidden units (rows of `W`) by classes (its columns).
const TILE: usize = SIDE * PER;
/// Batch rows staged in shared memory per pass.
const DEPTH: usize = 16;

/// The rules, as the kernel is compiled for one.
const SGD: u32 = 0;
const MOMENTUM: u32 = 1;
const ADAM: u32 = 2;

/// One step's scalars, as each element's update uses them (SGD: `decay · w + step_size · g`;
/// momentum: `b = b1 · b + c1 · g` then `w += step_size · b`; Adam(W): `crate::cpu`'s).
#[derive(CubeType, Clone, Copy)]
struct Rule<F: Float> {
    b1: F,
    c1: F,
    b2: F,
    c2: F,
    inv_sqrt_bc2: F,
    eps: F,
    step_size: F,
    decay: F,
}

/// Element `at` of `value` (with its state `first`, `second`) stepped with gradient `grad`.
#[cube]
fn step_element<F: Float>(
    value: &mut Tensor<F>,
    first: &mut Tensor<F>,
    second: &mut Tensor<F>,
    at: usize,
    grad: F,
    rule: &Rule<F>,
    #[comptime] kind: u32,
) {
    if kind == SGD {
        value[at] = value[at] * rule.decay + rule.step_size * grad;
    } else if kind == MOMENTUM {
        let b = rule.b1 * first[at] + rule.c1 * grad;
        first[at] = b;
        value[at] += rule.step_size * b;
    } else {
        let m = rule.b1 * first[at] + rule.c1 * grad;
        let v = rule.b2 * second[at] + rule.c2 * (grad * grad);
        first[at] = m;
        second[at] = v;
        let denom = v.sqrt() * rule.inv_sqrt_bc2 + rule.eps;
        value[at] = value[at] * rule.decay + rule.step_size * (m / denom);
    }
}

/// Cube `(x, y)`: classes `x · TILE ..` by hidden units `y · TILE ..` of `dW = hᵀ g`
/// (`h` `[rows, last]`, `g` `[rows, n]`), and with `y = 0` the columns' sums of `g` too; then
/// the step of `w` (`[last, n]`) and (`y = 0`) `b` (`[1, n]`) with their states (`w1`, `w2`, `b1`, `b2`: unused
/// one-value buffers where the rule keeps less).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn step_chunk<F: Float>(
    h: &Tensor<F>,
    g: &Tensor<F>,
    w: &mut Tensor<F>,
    w1: &mut Tensor<F>,
    w2: &mut Tensor<F>,
    b: &mut Tensor<F>,
    b1: &mut Tensor<F>,
    b2: &mut Tensor<F>,
    scalars: &Tensor<F>,
    #[comptime] kind: u32,
    #[define(F)] _dtype: ElemType,
) {
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let j0 = CUBE_POS_X as usize * TILE;
    let i0 = CUBE_POS_Y as usize * TILE;
    let rows = h.shape(0);
    let last = h.shape(1);
    let n = g.shape(1);
    let mut hs = Shared::<[F]>::new_slice(DEPTH * TILE);
    let mut gs = Shared::<[F]>::new_slice(DEPTH * TILE);
    let mut acc = Array::<F>::new(PER * PER);
    #[unroll]
    for k in 0..PER * PER {
        acc[k] = F::new(0.0_f32);
    }
    let mut gq = Array::<F>::new(PER);
    let mut bacc = Array::<F>::new(PER);
    #[unroll]
    for q in 0..PER {
        bacc[q] = F::new(0.0_f32);
    }
    let lin = ty * SIDE + tx;
    let mut r0 = 0usize;
    while r0 < rows {
        // Stage rows `r0 ..` of h's and g's tile columns (zeros past the edges), `DEPTH · TILE`
        // values each, `PER` per unit.
        #[unroll]
        for q in 0..DEPTH * TILE / (SIDE * SIDE) {
            let e = lin + q * SIDE * SIDE;
            let r = r0 + e / TILE;
            let i = i0 + e % TILE;
            let j = j0 + e % TILE;
            let mut hv = F::new(0.0_f32);
            let mut gv = F::new(0.0_f32);
            if r < rows {
                if i < last {
                    hv = h[r * h.stride(0) + i * h.stride(1)];
                }
                if j < n {
                    gv = g[r * g.stride(0) + j * g.stride(1)];
                }
            }
            hs[e] = hv;
            gs[e] = gv;
        }
        sync_cube();
        #[unroll]
        for d in 0..DEPTH {
            #[unroll]
            for q in 0..PER {
                gq[q] = gs[d * TILE + tx + q * SIDE];
                bacc[q] += gq[q];
            }
            #[unroll]
            for p in 0..PER {
                let a = hs[d * TILE + ty + p * SIDE];
                #[unroll]
                for q in 0..PER {
                    acc[p * PER + q] += a * gq[q];
                }
            }
        }
        sync_cube();
        r0 += DEPTH;
    }
    let rule = Rule::<F> {
        b1: scalars[0],
        c1: scalars[1],
        b2: scalars[2],
        c2: scalars[3],
        inv_sqrt_bc2: scalars[4],
        eps: scalars[5],
        step_size: scalars[6],
        decay: scalars[7],
    };
    #[unroll]
    for p in 0..PER {
        let i = i0 + ty + p * SIDE;
        #[unroll]
        for q in 0..PER {
            let j = j0 + tx + q * SIDE;
            let grad = acc[p * PER + q];
            if j < n && i < last {
                let at = i * w.stride(0) + j * w.stride(1);
                step_element::<F>(w, w1, w2, at, grad, &rule, kind);
            }
        }
    }
    if CUBE_POS_Y == 0 && ty == 0 {
        #[unroll]
        for q in 0..PER {
            let j = j0 + tx + q * SIDE;
            if j < n {
                let at = j * b.stride(1);
                step_element::<F>(b, b1, b2, at, bacc[q], &rule, kind);
            }
        }
    }
}

/// The rule of `state` at step `step` of `config`: its kind and scalars in [`Rule`]'s order.
fn rule_of(state: &DenseState, config: &OptimConfig, step: u64) -> (u32, [f32; 8]) {
    let lr = config.lr_at(step) as f32;
    match state {
        DenseState::Sgd => (SGD, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -lr, 1.0]),
        DenseState::Momentum(_) => {
            let mu = config.momentum as f32;
            (MOMENTUM, [mu, 1.0, 0.0, 0.0, 0.0, 0.0, -lr, 1.0])
        }
        DenseState::Adam {
            decoupled_decay, ..
        } => {
            let a = AdamScalars::new(config, step, *decoupled_decay);
            let k = [
                a.b1,
                a.c1,
                a.b2,
                a.c2,
                a.inv_sqrt_bc2,
                a.eps,
                a.step_size,
                a.decay,
            ];
            (ADAM, k)
        }
    }
}

/// A parameter's value and state buffers, taken out of it to be written in place (a copy
/// where another handle holds one), and put back by [`Taken::put_back`].
struct Taken {
    value: CubeTensor,
    first: Option<CubeTensor>,
    second: Option<CubeTensor>,
}

/// `t`'s buffer, out of `t` (`stand_in` in its place until it is put back), writable.
fn take_buffer(t: &mut BurnTensor<2>, stand_in: &BurnTensor<2>) -> Option<CubeTensor> {
    let owned = std::mem::replace(t, stand_in.clone());
    let mut buffer = bridge::float_in(owned)?;
    if !buffer.can_mut() {
        buffer = buffer.copy();
    }
    Some(buffer)
}

impl Taken {
    fn take(p: &mut DenseParam, stand_in: &BurnTensor<2>) -> Option<Self> {
        let value = take_buffer(&mut p.value, stand_in)?;
        let (first, second) = match &mut p.state {
            DenseState::Sgd => (None, None),
            DenseState::Momentum(b) => (take_buffer(b, stand_in), None),
            DenseState::Adam { moments, .. } => (
                take_buffer(&mut moments.m, stand_in),
                take_buffer(&mut moments.v, stand_in),
            ),
        };
        Some(Self {
            value,
            first,
            second,
        })
    }

    /// The state buffers as kernel arguments, a one-value stand-in for each the rule lacks.
    fn state_args(&self) -> (CubeTensor, CubeTensor) {
        let unused = || {
            let v = &self.value;
            empty_device_contiguous_dtype(v.client.clone(), v.device.clone(), [1].into(), v.dtype)
        };
        (
            self.first.clone().unwrap_or_else(unused),
            self.second.clone().unwrap_or_else(unused),
        )
    }

    fn put_back(self, p: &mut DenseParam) {
        p.value = bridge::float_out(self.value);
        match &mut p.state {
            DenseState::Sgd => {}
            DenseState::Momentum(b) => **b = bridge::float_out(self.first.expect("momentum")),
            DenseState::Adam { moments, .. } => {
                moments.m = bridge::float_out(self.first.expect("adam.m"));
                moments.v = bridge::float_out(self.second.expect("adam.v"));
            }
        }
    }
}

/// One training step's rule for the class chunks' weights and biases, its scalars on the
/// device once for the step.
pub struct ChunkStep {
    kind: u32,
    scalars: CubeTensor,
}

impl ChunkStep {
    /// The step `step` of `config` for parameters in `state`'s rule, on `device`; `None` off a
    /// cubecl device.
    pub fn new(
        state: &DenseState,
        (config, step): (&OptimConfig, u64),
        device: &burn::tensor::Device,
    ) -> Option<Self> {
        let (kind, scalars) = rule_of(state, config, step);
        let scalars = BurnTensor::<1>::from_data(
            burn::tensor::TensorData::new(scalars.to_vec(), [scalars.len()]),
            device,
        );
        Some(Self {
            kind,
            scalars: bridge::float_in(scalars)?,
        })
    }

    /// One step of a class chunk's `weight` (`[last, n]`) and `bias` (`[1, n]`), in the rule
    /// this was made for, from the batch's `h` (`[rows, last]`) and the chunk's logit gradient
    /// `g` (`[rows, n]`), both f32; every buffer written in place where nothing else holds it.
    /// `false`, with nothing done, past the grid's limit: the caller steps the chunk from its
    /// gradient's tensors.
    pub fn apply(
        &self,
        h: &BurnTensor<2>,
        g: &BurnTensor<2>,
        (weight, bias): (&mut DenseParam, &mut DenseParam),
    ) -> bool {
        let [_, last] = h.dims();
        let n = g.dims()[1];
        // The grid's limit (65,535 cubes each way on every adapter).
        if n.div_ceil(TILE) > 65_535 || last.div_ceil(TILE) > 65_535 {
            return false;
        }
        let (Some(h_in), Some(g_in)) = (bridge::float_in(h.clone()), bridge::float_in(g.clone()))
        else {
            return false;
        };
        let (Some(w), Some(b)) = (Taken::take(weight, g), Taken::take(bias, g)) else {
            unreachable!("h and g resolved on this cubecl device, and so do its parameters");
        };
        let client = g_in.client.clone();
        let dtype = dtype_to_storage_type(g_in.dtype);
        let (w1, w2) = w.state_args();
        let (b1, b2) = b.state_args();
        step_chunk::launch(
            &client,
            CubeCount::Static(
                n.div_ceil(TILE) as u32,
                last.div_ceil(TILE).max(1) as u32,
                1,
            ),
            CubeDim::new_2d(SIDE as u32, SIDE as u32),
            h_in.into_tensor_arg(),
            g_in.into_tensor_arg(),
            w.value.clone().into_tensor_arg(),
            w1.into_tensor_arg(),
            w2.into_tensor_arg(),
            b.value.clone().into_tensor_arg(),
            b1.into_tensor_arg(),
            b2.into_tensor_arg(),
            self.scalars.clone().into_tensor_arg(),
            self.kind,
            dtype,
        );
        w.put_back(weight);
        b.put_back(bias);
        true
    }
}
