//! Dense optimizers for the layers' parameters: SGD, momentum SGD, Adam and AdamW, with
//! PyTorch's defaults (`torch.optim.Adam`: betas (0.9, 0.999), eps 1e-8; `torch.optim.SGD`: no
//! dampening, no Nesterov, momentum buffer initialised to the first gradient;
//! `torch.optim.AdamW`: `p ← p (1 − lr·wd)` before the Adam step).

use burn::tensor::Tensor;

use widebag_config::{DenseOptim, OptimConfig};

use crate::optim::adam::AdamStep;

/// Adam's first and second moments of one dense parameter.
#[derive(Clone, Debug)]
pub struct Moments {
    pub m: Tensor<2>,
    pub v: Tensor<2>,
}

/// Optimizer state of one dense parameter.
#[derive(Clone, Debug)]
pub enum DenseState {
    Sgd,
    /// The momentum buffer, zeros before the first step (so the first step sets it to the
    /// gradient, as PyTorch does).
    Momentum(Box<Tensor<2>>),
    /// Adam's moments; `decoupled_decay` selects AdamW.
    Adam {
        moments: Box<Moments>,
        decoupled_decay: bool,
    },
}

/// A dense parameter with its optimizer state.
#[derive(Clone, Debug)]
pub struct DenseParam {
    pub name: String,
    pub value: Tensor<2>,
    pub state: DenseState,
}

impl DenseParam {
    pub fn new(name: impl Into<String>, value: Tensor<2>, optim: DenseOptim) -> Self {
        let adam = |decoupled_decay| DenseState::Adam {
            moments: Box::new(Moments {
                m: value.zeros_like(),
                v: value.zeros_like(),
            }),
            decoupled_decay,
        };
        let state = match optim {
            DenseOptim::Sgd => DenseState::Sgd,
            DenseOptim::Momentum => DenseState::Momentum(Box::new(value.zeros_like())),
            DenseOptim::Adam => adam(false),
            DenseOptim::AdamW => adam(true),
        };
        Self {
            name: name.into(),
            value,
            state,
        }
    }

    /// One optimizer step; consumes the parameter so its buffers are updated in place.
    pub fn step(self, grad: Tensor<2>, config: &OptimConfig, step: u64) -> Self {
        let Self { name, value, state } = self;
        let (value, state) = advance(value, state, grad, config, step);
        Self { name, value, state }
    }

    /// [`Self::step`] behind a reference, on tensors (the host kernels' pass is
    /// [`crate::cpu::dense_update`], chosen by [`crate::params::update::update_param`]). A second
    /// handle to the gradient stands in for the value while it is moved out, so the value and
    /// state buffers keep one handle each and are updated in place (no device work, unlike an
    /// empty placeholder tensor).
    pub fn update(&mut self, grad: Tensor<2>, config: &OptimConfig, step: u64) {
        let value = std::mem::replace(&mut self.value, grad.clone());
        let state = std::mem::replace(&mut self.state, DenseState::Sgd);
        (self.value, self.state) = advance(value, state, grad, config, step);
    }
}

/// One optimizer step of a value and its state.
fn advance(
    value: Tensor<2>,
    state: DenseState,
    grad: Tensor<2>,
    config: &OptimConfig,
    step: u64,
) -> (Tensor<2>, DenseState) {
    match state {
        DenseState::Sgd => (value - grad.mul_scalar(config.lr_at(step)), DenseState::Sgd),
        DenseState::Momentum(buf) => {
            let buf = (*buf).mul_scalar(config.momentum) + grad;
            (
                value - buf.clone().mul_scalar(config.lr_at(step)),
                DenseState::Momentum(Box::new(buf)),
            )
        }
        DenseState::Adam {
            moments,
            decoupled_decay,
        } => {
            let Moments { m, v } = *moments;
            let a = AdamStep::new(config, config.lr_at(step), step);
            let value = if decoupled_decay && config.weight_decay > 0.0 {
                value.mul_scalar(1.0 - config.lr_at(step) * config.weight_decay)
            } else {
                value
            };
            let m = m.mul_scalar(a.beta1) + grad.clone().mul_scalar(1.0 - a.beta1);
            let v = v.mul_scalar(a.beta2) + grad.square().mul_scalar(1.0 - a.beta2);
            let value = value + a.delta(m.clone(), v.clone());
            (
                value,
                DenseState::Adam {
                    moments: Box::new(Moments { m, v }),
                    decoupled_decay,
                },
            )
        }
    }
}
