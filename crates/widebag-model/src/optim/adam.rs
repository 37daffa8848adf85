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

/// Adam(W)'s scalars for one step, as one element's update uses them.
#[derive(Clone, Copy)]
pub(crate) struct AdamScalars {
    pub(crate) b1: f32,
    pub(crate) c1: f32,
    pub(crate) b2: f32,
    pub(crate) c2: f32,
    pub(crate) inv_sqrt_bc2: f32,
    pub(crate) eps: f32,
    /// `−lr / bc1`.
    pub(crate) step_size: f32,
    /// AdamW's `1 − lr · wd` (1 for Adam).
    pub(crate) decay: f32,
}

impl AdamScalars {
    /// Step `step`'s scalars (`decoupled_decay`: AdamW's decay of the value).
    pub(crate) fn new(config: &OptimConfig, step: u64, decoupled_decay: bool) -> Self {
        let lr = config.lr_at(step);
        let a = AdamStep::new(config, lr, step);
        let (bc1, bc2) = a.bias_corrections();
        let (b1, b2) = (a.beta1 as f32, a.beta2 as f32);
        Self {
            b1,
            c1: 1.0 - b1,
            b2,
            c2: 1.0 - b2,
            inv_sqrt_bc2: (1.0 / bc2.sqrt()) as f32,
            eps: a.eps as f32,
            step_size: (-a.lr / bc1) as f32,
            decay: if decoupled_decay && config.weight_decay > 0.0 {
                (1.0 - lr * config.weight_decay) as f32
            } else {
                1.0
            },
        }
    }

    /// One element: both moments, then the value.
    #[inline]
    pub(crate) fn apply(&self, v: &mut f32, m: &mut f32, s: &mut f32, g: f32) {
        *m = self.b1 * *m + self.c1 * g;
        *s = self.b2 * *s + self.c2 * (g * g);
        let denom = s.sqrt() * self.inv_sqrt_bc2 + self.eps;
        *v = *v * self.decay + self.step_size * (*m / denom);
    }
}
