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
    Momentum {
        buf: ShardedTable,
    },
    Adam {
        m: ShardedTable,
        v: ShardedTable,
    },
    /// One accumulator per row, as an `[n_rows, 1]` table.
    RowwiseAdagrad {
        acc: ShardedTable,
    },
}

impl TableState {
    pub fn new(optim: TableOptim, table: &ShardedTable, max_buffer_bytes: u64) -> Self {
        match optim {
            TableOptim::Sgd => TableState::Sgd,
            TableOptim::Momentum => TableState::Momentum {
                buf: ShardedTable::zeros(
                    table.n_rows(),
                    table.dim(),
                    max_buffer_bytes,
                    &table.device(),
                ),
            },
            TableOptim::RowwiseAdagrad => TableState::RowwiseAdagrad {
                acc: ShardedTable::zeros(table.n_rows(), 1, max_buffer_bytes, &table.device()),
            },
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
            TableState::Momentum { buf } => {
                // buf_r ← μ buf_r + g_r for the touched rows only; w_r ← w_r − lr buf_r.
                let old = buf.gather(uniq);
                let dbuf = old.clone().mul_scalar(config.momentum - 1.0) + grad_rows;
                let delta = (old + dbuf.clone()).mul_scalar(-config.table_lr());
                meter.probe(Point::TableUpdate);
                buf.scatter_add(uniq, dbuf);
                table.scatter_add(uniq, delta);
            }
            TableState::RowwiseAdagrad { acc } => {
                let n = grad_rows.shape()[1].max(1) as f64;
                let g2 = grad_rows.clone().square().sum_dim(1).div_scalar(n);
                let acc_new = acc.gather(uniq) + g2.clone();
                let delta = (grad_rows / acc_new.sqrt().add_scalar(config.eps))
                    .mul_scalar(-config.table_lr());
                meter.probe(Point::TableUpdate);
                acc.scatter_add(uniq, g2);
                table.scatter_add(uniq, delta);
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
            TableState::Momentum { buf } => buf.bytes(),
            TableState::Adam { m, v } => m.bytes() + v.bytes(),
            TableState::RowwiseAdagrad { acc } => acc.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;
    use widebag_config::TableOptim;

    use super::*;
    use crate::tensors::floats;

    /// Two steps on rows 0 and 2 of a 3 × 2 table, the same gradient each time.
    fn two_steps(optim: TableOptim) -> Vec<f32> {
        let device = Device::flex();
        let mut table = ShardedTable::zeros(3, 2, u64::MAX, &device);
        let mut state = TableState::new(optim, &table, u64::MAX);
        let config = OptimConfig {
            table_lr: Some(0.1),
            momentum: 0.9,
            eps: 1e-8,
            ..OptimConfig::default()
        };
        let mut meter = MemoryMeter::new(&device);
        for step in 1..=2 {
            let g = floats(vec![1.0, 2.0, 3.0, 4.0], [2, 2], &device);
            state.step(&mut table, &[0, 2], g, &config, step, &mut meter);
        }
        table.to_vec().unwrap()
    }

    fn close(got: &[f32], want: &[f32]) {
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn rowwise_adagrad_matches_its_formula() {
        // G_0 = mean(1, 4) = 2.5, then 5; G_2 = mean(9, 16) = 12.5, then 25.
        let w0 = |g: f32| -0.1 * g * (1.0 / 2.5f32.sqrt() + 1.0 / 5f32.sqrt());
        let w2 = |g: f32| -0.1 * g * (1.0 / 12.5f32.sqrt() + 1.0 / 25f32.sqrt());
        close(
            &two_steps(TableOptim::RowwiseAdagrad),
            &[w0(1.0), w0(2.0), 0.0, 0.0, w2(3.0), w2(4.0)],
        );
    }

    #[test]
    fn row_momentum_matches_its_formula() {
        // buf = g, then 0.9 g + g: w = -0.1 (1 + 1.9) g.
        let w = |g: f32| -0.1 * 2.9 * g;
        close(
            &two_steps(TableOptim::Momentum),
            &[w(1.0), w(2.0), 0.0, 0.0, w(3.0), w(4.0)],
        );
    }
}
