//! One optimizer step of a dense parameter, in place: flex's host kernel
//! ([`crate::cpu::dense_update`]) on the host path, the tensor rule ([`DenseParam::update`])
//! elsewhere.

use burn::tensor::Tensor;
use widebag_config::OptimConfig;

use crate::device::ComputePath;
use crate::error::ModelError;
use crate::optim::dense::DenseParam;

/// One optimizer step of `p` with `grad`, in place: with host kernels one host pass over the
/// buffers ([`crate::cpu::dense_update`]), elsewhere on tensors ([`DenseParam::update`]).
pub fn update_param(
    p: &mut DenseParam,
    grad: Tensor<2>,
    config: &OptimConfig,
    step: u64,
    path: ComputePath,
) -> Result<(), ModelError> {
    if path == ComputePath::Host {
        return crate::cpu::dense_update::update(p, grad, config, step);
    }
    p.update(grad, config, step);
    Ok(())
}

/// One optimizer step of each of `params` with its gradient in `grads`, in order.
pub fn update_all<'p>(
    params: impl IntoIterator<Item = &'p mut DenseParam>,
    grads: Vec<Tensor<2>>,
    config: &OptimConfig,
    step: u64,
    path: ComputePath,
) -> Result<(), ModelError> {
    for (p, g) in params.into_iter().zip(grads) {
        update_param(p, g, config, step, path)?;
    }
    Ok(())
}
