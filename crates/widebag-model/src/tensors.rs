//! Host ↔ device helpers: upload vectors as float or int tensors, read tensors back as vectors
//! (each read counted: on a GPU it blocks the host until the device is done).

use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::ModelError;

pub fn floats<const D: usize>(values: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

pub fn ints(values: &[u32], device: &Device) -> Tensor<1, Int> {
    let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), device)
}

/// `[n, 1]` index tensor for `scatter_nd` over rows.
pub fn row_indices(values: &[u32], device: &Device) -> Tensor<2, Int> {
    let n = values.len();
    ints(values, device).reshape([n, 1])
}

/// A `[n_rows, width]` matrix built on the device from its nonzeros: `coords` holds each one's
/// `(row, column)` pair flat, `values` its value (repeated pairs add up). Only the nonzeros
/// cross to the device; the zeros are written there (a dense batch of the seed model is
/// 123 MB, its nonzeros a few kilobytes).
pub fn scattered(
    [n_rows, width]: [usize; 2],
    coords: Vec<i32>,
    values: Vec<f32>,
    device: &Device,
) -> Tensor<2> {
    let zeros = Tensor::<2>::zeros([n_rows, width], device);
    let n = values.len();
    if n == 0 {
        return zeros;
    }
    let idx = Tensor::<2, Int>::from_data(TensorData::new(coords, [n, 2]), device);
    zeros.scatter_nd(
        idx,
        floats(values, [n], device),
        burn::tensor::IndexingUpdateOp::Add,
    )
}

/// Tensors read back to the host so far, by this process.
static READS: AtomicU64 = AtomicU64::new(0);

/// How many tensors have been read back to the host so far.
pub fn reads() -> u64 {
    READS.load(Ordering::Relaxed)
}

pub fn to_vec<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>, ModelError> {
    READS.fetch_add(1, Ordering::Relaxed);
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| ModelError::Read(format!("{e:?}")))
}

pub fn scalar(t: Tensor<1>) -> Result<f32, ModelError> {
    Ok(to_vec(t)?.first().copied().unwrap_or(f32::NAN))
}

/// The hidden layers' activation.
pub(crate) fn activate(x: Tensor<2>, activation: widebag_config::Activation) -> Tensor<2> {
    match activation {
        widebag_config::Activation::Relu => burn::tensor::activation::relu(x),
        widebag_config::Activation::Tanh => burn::tensor::activation::tanh(x),
        widebag_config::Activation::Linear => x,
    }
}

/// A gradient leaf's gradient in `grads`, zeros when the loss did not reach it.
pub fn leaf_grad(leaf: &Tensor<2>, grads: &burn::tensor::Gradients) -> Tensor<2> {
    leaf.grad(grads)
        .unwrap_or_else(|| leaf.clone().inner().zeros_like())
}
