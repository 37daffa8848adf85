//! Optimizers: dense SGD, momentum SGD, Adam and AdamW for the layers, row-sparse SGD and lazy
//! Adam for the table.
//!
//! Hyper-parameter defaults follow PyTorch (`torch.optim.Adam`: betas (0.9, 0.999), eps 1e-8;
//! `torch.optim.SGD`: no dampening, no Nesterov, momentum buffer initialised to the first
//! gradient; `torch.optim.AdamW`: `p ← p (1 − lr·wd)` before the Adam step). Lazy Adam is PyTorch's `SparseAdam`: only the
//! rows a batch touches have their moments and values updated, with bias correction from the
//! global step count, so rows touched every step follow dense Adam exactly.

use burn::tensor::Tensor;
use widebag_config::{DenseOptim, OptimConfig, TableOptim};

use crate::memory::{MemoryMeter, Point};
use crate::table::ShardedTable;

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
    fn bias_corrections(&self) -> (f64, f64) {
        (
            1.0 - self.beta1.powi(self.step as i32),
            1.0 - self.beta2.powi(self.step as i32),
        )
    }
    /// PyTorch's update: `lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)`.
    fn delta(&self, m: Tensor<2>, v: Tensor<2>) -> Tensor<2> {
        let (bc1, bc2) = self.bias_corrections();
        let denom = v.sqrt().div_scalar(bc2.sqrt()).add_scalar(self.eps);
        (m / denom).mul_scalar(-self.lr / bc1)
    }
}

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
        let (value, state) = match state {
            DenseState::Sgd => (value - grad.mul_scalar(config.lr), DenseState::Sgd),
            DenseState::Momentum(buf) => {
                let buf = (*buf).mul_scalar(config.momentum) + grad;
                (
                    value - buf.clone().mul_scalar(config.lr),
                    DenseState::Momentum(Box::new(buf)),
                )
            }
            DenseState::Adam {
                moments,
                decoupled_decay,
            } => {
                let Moments { m, v } = *moments;
                let a = AdamStep::new(config, config.lr, step);
                let value = if decoupled_decay && config.weight_decay > 0.0 {
                    value.mul_scalar(1.0 - config.lr * config.weight_decay)
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
        };
        Self { name, value, state }
    }
}

/// One optimizer step of every parameter with its gradient (same order), each buffer updated in
/// place.
pub fn step_all(
    params: &mut Vec<DenseParam>,
    grads: Vec<Tensor<2>>,
    config: &OptimConfig,
    step: u64,
) {
    *params = std::mem::take(params)
        .into_iter()
        .zip(grads)
        .map(|(p, g)| p.step(g, config, step))
        .collect();
}

/// Optimizer state of the table, in the table's own row layout.
#[derive(Clone, Debug)]
pub enum TableState {
    Sgd,
    Adam { m: ShardedTable, v: ShardedTable },
}

impl TableState {
    pub fn new(optim: TableOptim, table: &ShardedTable, max_buffer_bytes: u64) -> Self {
        match optim {
            TableOptim::Sgd => TableState::Sgd,
            TableOptim::Adam => {
                let device = table.device();
                TableState::Adam {
                    m: ShardedTable::zeros(table.n_rows(), table.dim(), max_buffer_bytes, &device),
                    v: ShardedTable::zeros(table.n_rows(), table.dim(), max_buffer_bytes, &device),
                }
            }
        }
    }

    /// Updates the rows `uniq` (sorted, distinct) of `table` with their gradient `[U, dim]`.
    pub fn step(
        &mut self,
        table: &mut ShardedTable,
        uniq: &[u32],
        grad_rows: Tensor<2>,
        config: &OptimConfig,
        step: u64,
        meter: &mut MemoryMeter,
    ) {
        match self {
            TableState::Sgd => {
                let delta = grad_rows.mul_scalar(-config.table_lr());
                meter.probe(Point::TableUpdate);
                table.scatter_add(uniq, delta)
            }
            TableState::Adam { m, v } => {
                let a = AdamStep::new(config, config.table_lr(), step);
                let m_old = m.gather(uniq);
                let v_old = v.gather(uniq);
                // m_new - m_old = (1 - b1)(g - m_old), likewise for v: applied with Add so the
                // moments are updated in place by the same deduplicated scatter as the table.
                let dm = (grad_rows.clone() - m_old.clone()).mul_scalar(1.0 - a.beta1);
                let dv = (grad_rows.square() - v_old.clone()).mul_scalar(1.0 - a.beta2);
                let delta = a.delta(m_old + dm.clone(), v_old + dv.clone());
                meter.probe(Point::TableUpdate);
                m.scatter_add(uniq, dm);
                v.scatter_add(uniq, dv);
                table.scatter_add(uniq, delta);
            }
        }
    }

    /// Bytes of optimizer state.
    pub fn bytes(&self) -> u64 {
        match self {
            TableState::Sgd => 0,
            TableState::Adam { m, v } => m.bytes() + v.bytes(),
        }
    }
}
