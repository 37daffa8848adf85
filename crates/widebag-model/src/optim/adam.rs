//! Adam's scalars for one step (learning rate, betas, eps, the step's bias corrections) and its
//! update on tensors: the one rule the dense parameters, the table's rows and the host kernels
//! all apply (PyTorch's `torch.optim.Adam`).

use burn::tensor::Tensor;
use widebag_config::OptimConfig;

/// Adam's scalars for one step.
#[derive(Clone, Copy, Debug)]
pub struct AdamStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// 1-based step count.
    pub step: u64,
}

impl AdamStep {
    pub fn new(config: &OptimConfig, lr: f64, step: u64) -> Self {
        Self {
            lr,
            beta1: config.beta1,
            beta2: config.beta2,
            eps: config.eps,
            step,
        }
    }
    pub(crate) fn bias_corrections(&self) -> (f64, f64) {
        (
            1.0 - self.beta1.powi(self.step as i32),
            1.0 - self.beta2.powi(self.step as i32),
        )
    }
    /// PyTorch's update: `lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)`.
    pub(crate) fn delta(&self, m: Tensor<2>, v: Tensor<2>) -> Tensor<2> {
        let (bc1, bc2) = self.bias_corrections();
        let denom = v.sqrt().div_scalar(bc2.sqrt()).add_scalar(self.eps);
        (m / denom).mul_scalar(-self.lr / bc1)
    }
}
