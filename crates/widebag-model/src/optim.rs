//! Optimizers: dense SGD, momentum SGD, Adam and AdamW for the layers; row-sparse SGD, momentum,
//! row-wise Adagrad, lazy Adam and lazy AdamW (with catch-up) for the table.
//!
//! Hyper-parameter defaults follow PyTorch (`torch.optim.Adam`: betas (0.9, 0.999), eps 1e-8;
//! `torch.optim.SGD`: no dampening, no Nesterov, momentum buffer initialised to the first
//! gradient; `torch.optim.AdamW`: `p ← p (1 − lr·wd)` before the Adam step). Lazy Adam is PyTorch's `SparseAdam`: only the
//! rows a batch touches have their moments and values updated, with bias correction from the
//! global step count, so rows touched every step follow dense Adam exactly.

use burn::tensor::Tensor;
use widebag_config::{DenseOptim, OptimConfig, TableOptim};

use crate::ModelError;
use crate::memory::{MemoryMeter, Point};
use crate::table::ShardedTable;
use crate::tensors::{floats, to_vec};

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
    /// Lazy AdamW: moments in the table's row layout and, on the host, the step each row was
    /// last updated at, for the catch-up.
    AdamW {
        m: ShardedTable,
        v: ShardedTable,
        last_step: Vec<u64>,
    },
    /// One accumulator per row, as an `[n_rows, 1]` table.
    RowwiseAdagrad {
        acc: ShardedTable,
    },
}

/// Below this, a replayed moment's share of an update is under f32 resolution: the catch-up
/// stops replaying moment updates and applies the remaining decay in closed form.
const CATCH_UP_NEGLIGIBLE: f64 = 1e-12;

/// Replays the `from..to` (exclusive) steps a row missed, as dense AdamW runs them with a zero
/// gradient: `w ← w(1 − lr·wd)`, `m ← β1 m`, `v ← β2 v`, `w ← w − lr/bc1 · m / (√v/√bc2 + eps)`
/// with the bias corrections of each step. Once `β1^s` is negligible the moment term is below
/// f32 resolution and the rest is decay only: `w(1 − lr·wd)^left`, `m β1^left`, `v β2^left`.
fn catch_up(
    w: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    from: u64,
    to: u64,
    a: &AdamStep,
    wd: f64,
) {
    let decay = 1.0 - a.lr * wd;
    let mut s = from;
    let mut b1_pow = 1.0f64;
    while s < to && b1_pow >= CATCH_UP_NEGLIGIBLE {
        let bc1 = 1.0 - a.beta1.powi(s as i32);
        let bc2 = (1.0 - a.beta2.powi(s as i32)).sqrt();
        for i in 0..w.len() {
            let mi = m[i] as f64 * a.beta1;
            let vi = v[i] as f64 * a.beta2;
            let wi = w[i] as f64 * decay - a.lr / bc1 * mi / (vi.sqrt() / bc2 + a.eps);
            (w[i], m[i], v[i]) = (wi as f32, mi as f32, vi as f32);
        }
        b1_pow *= a.beta1;
        s += 1;
    }
    if s < to {
        let left = (to - s) as i32;
        let (fw, fm, fv) = (decay.powi(left), a.beta1.powi(left), a.beta2.powi(left));
        for i in 0..w.len() {
            w[i] = (w[i] as f64 * fw) as f32;
            m[i] = (m[i] as f64 * fm) as f32;
            v[i] = (v[i] as f64 * fv) as f32;
        }
    }
}

impl TableState {
    pub fn new(optim: TableOptim, table: &ShardedTable, max_buffer_bytes: u64) -> Self {
        match optim {
            TableOptim::Sgd => TableState::Sgd,
            TableOptim::Momentum => TableState::Momentum {
                buf: table.zeros_like(table.dim(), max_buffer_bytes),
            },
            TableOptim::RowwiseAdagrad => TableState::RowwiseAdagrad {
                acc: table.zeros_like(1, max_buffer_bytes),
            },
            TableOptim::Adam => TableState::Adam {
                m: table.zeros_like(table.dim(), max_buffer_bytes),
                v: table.zeros_like(table.dim(), max_buffer_bytes),
            },
            TableOptim::AdamW => TableState::AdamW {
                m: table.zeros_like(table.dim(), max_buffer_bytes),
                v: table.zeros_like(table.dim(), max_buffer_bytes),
                last_step: vec![0; table.n_rows()],
            },
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
    ) -> Result<(), ModelError> {
        match self {
            TableState::Sgd => {
                let delta = grad_rows.mul_scalar(-config.table_lr());
                meter.probe(Point::TableUpdate);
                table.scatter_add(uniq, delta)?;
            }
            TableState::Momentum { buf } => {
                // buf_r ← μ buf_r + g_r for the touched rows only; w_r ← w_r − lr buf_r.
                let old = buf.gather(uniq);
                let dbuf = old.clone().mul_scalar(config.momentum - 1.0) + grad_rows;
                let delta = (old + dbuf.clone()).mul_scalar(-config.table_lr());
                meter.probe(Point::TableUpdate);
                buf.scatter_add(uniq, dbuf)?;
                table.scatter_add(uniq, delta)?;
            }
            TableState::RowwiseAdagrad { acc } => {
                let n = grad_rows.shape()[1].max(1) as f64;
                let g2 = grad_rows.clone().square().sum_dim(1).div_scalar(n);
                let acc_new = acc.gather(uniq) + g2.clone();
                let delta = (grad_rows / acc_new.sqrt().add_scalar(config.eps))
                    .mul_scalar(-config.table_lr());
                meter.probe(Point::TableUpdate);
                acc.scatter_add(uniq, g2)?;
                table.scatter_add(uniq, delta)?;
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
                m.scatter_add(uniq, dm)?;
                v.scatter_add(uniq, dv)?;
                table.scatter_add(uniq, delta)?;
            }
            TableState::AdamW { m, v, last_step } => {
                let a = AdamStep::new(config, config.table_lr(), step);
                // Catch-up on the host for rows not updated at the previous step: the steps
                // they missed, replayed as dense AdamW runs them (zero gradient).
                let stale: Vec<usize> = (0..uniq.len())
                    .filter(|&i| last_step[uniq[i] as usize] + 1 < step)
                    .collect();
                if !stale.is_empty() {
                    let ids: Vec<u32> = stale.iter().map(|&i| uniq[i]).collect();
                    let dim = table.dim();
                    let mut w = to_vec(table.gather(&ids))?;
                    let mut mm = to_vec(m.gather(&ids))?;
                    let mut vv = to_vec(v.gather(&ids))?;
                    let (w0, m0, v0) = (w.clone(), mm.clone(), vv.clone());
                    for (k, &id) in ids.iter().enumerate() {
                        let r = k * dim..(k + 1) * dim;
                        catch_up(
                            &mut w[r.clone()],
                            &mut mm[r.clone()],
                            &mut vv[r],
                            last_step[id as usize] + 1,
                            step,
                            &a,
                            config.weight_decay,
                        );
                    }
                    let device = table.device();
                    let diff = |new: Vec<f32>, old: Vec<f32>| {
                        let d: Vec<f32> = new.iter().zip(&old).map(|(n, o)| n - o).collect();
                        floats(d, [ids.len(), dim], &device)
                    };
                    table.scatter_add(&ids, diff(w, w0))?;
                    m.scatter_add(&ids, diff(mm, m0))?;
                    v.scatter_add(&ids, diff(vv, v0))?;
                }
                // This step, as dense AdamW: decoupled decay, then the Adam update.
                let w_old = table.gather(uniq);
                let m_old = m.gather(uniq);
                let v_old = v.gather(uniq);
                let dm = (grad_rows.clone() - m_old.clone()).mul_scalar(1.0 - a.beta1);
                let dv = (grad_rows.square() - v_old.clone()).mul_scalar(1.0 - a.beta2);
                let delta = a.delta(m_old + dm.clone(), v_old + dv.clone())
                    - w_old.mul_scalar(config.table_lr() * config.weight_decay);
                meter.probe(Point::TableUpdate);
                m.scatter_add(uniq, dm)?;
                v.scatter_add(uniq, dv)?;
                table.scatter_add(uniq, delta)?;
                for &id in uniq {
                    last_step[id as usize] = step;
                }
            }
        }
        Ok(())
    }

    /// The state's tables (for placement and traffic figures).
    pub fn tables(&self) -> Vec<&ShardedTable> {
        match self {
            TableState::Sgd => vec![],
            TableState::Momentum { buf } => vec![buf],
            TableState::Adam { m, v } | TableState::AdamW { m, v, .. } => vec![m, v],
            TableState::RowwiseAdagrad { acc } => vec![acc],
        }
    }

    /// Bytes of optimizer state.
    pub fn bytes(&self) -> u64 {
        match self {
            TableState::Sgd => 0,
            TableState::Momentum { buf } => buf.bytes(),
            TableState::Adam { m, v } | TableState::AdamW { m, v, .. } => m.bytes() + v.bytes(),
            TableState::RowwiseAdagrad { acc } => acc.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;
    use widebag_config::TableOptim;

    use super::*;

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
            state
                .step(&mut table, &[0, 2], g, &config, step, &mut meter)
                .unwrap();
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

    #[test]
    fn lazy_adamw_with_catch_up_equals_dense_adamw() {
        // A 7 × 3 table; each step touches a seeded random subset of rows (some rows wait many
        // steps, row 6 is touched only at the end). Dense AdamW sees the same gradients with
        // zero rows for the untouched ones.
        let device = Device::flex();
        let (rows, dim, steps) = (7usize, 3usize, 40u64);
        let init: Vec<f32> = (0..rows * dim)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.1)
            .collect();
        let mut table = ShardedTable::from_fn(rows, dim, u64::MAX, &device, |r, out| {
            out.copy_from_slice(&init[r * dim..(r + 1) * dim])
        });
        let mut state = TableState::new(TableOptim::AdamW, &table, u64::MAX);
        let config = OptimConfig {
            lr: 0.01,
            table_lr: Some(0.01),
            weight_decay: 0.1,
            ..OptimConfig::default()
        };
        let mut dense = DenseParam::new(
            "w",
            floats(init.clone(), [rows, dim], &device),
            DenseOptim::AdamW,
        );
        let mut meter = MemoryMeter::new(&device);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for step in 1..=steps {
            let mut uniq: Vec<u32> = Vec::new();
            for r in 0..rows as u32 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let touched = if r == 6 {
                    step == steps
                } else {
                    rng.is_multiple_of(3)
                };
                if touched {
                    uniq.push(r);
                }
            }
            let g =
                |r: u32, c: usize| ((r as f32 + 1.0) * 0.3 - c as f32 * 0.2) * (step as f32).sin();
            let mut full = vec![0.0f32; rows * dim];
            let mut sparse = Vec::new();
            for &r in &uniq {
                for c in 0..dim {
                    full[r as usize * dim + c] = g(r, c);
                    sparse.push(g(r, c));
                }
            }
            if !uniq.is_empty() {
                let grad = floats(sparse, [uniq.len(), dim], &device);
                state
                    .step(&mut table, &uniq, grad, &config, step, &mut meter)
                    .unwrap();
            }
            dense = dense.step(floats(full, [rows, dim], &device), &config, step);
        }
        // Rows not touched at the last step still owe their catch-up: touch every row with a
        // zero gradient at one more step on both sides, then compare everything.
        let all: Vec<u32> = (0..rows as u32).collect();
        let zero = || floats(vec![0.0; rows * dim], [rows, dim], &device);
        state
            .step(&mut table, &all, zero(), &config, steps + 1, &mut meter)
            .unwrap();
        dense = dense.step(zero(), &config, steps + 1);
        let got = table.to_vec().unwrap();
        let want = to_vec(dense.value.clone()).unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-5, "weight {i}: lazy {a}, dense {b}");
        }
        let TableState::AdamW { m, v, .. } = &state else {
            unreachable!()
        };
        let DenseState::Adam { moments, .. } = &dense.state else {
            unreachable!()
        };
        for (lazy, full) in [(m, &moments.m), (v, &moments.v)] {
            let (a, b) = (lazy.to_vec().unwrap(), to_vec(full.clone()).unwrap());
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-5, "moment: lazy {x}, dense {y}");
            }
        }
    }

    #[test]
    fn catch_up_switches_to_closed_form_decay_exactly() {
        // Past the negligible point the replay is decay only; doing it step by step agrees.
        let a = AdamStep {
            lr: 0.1,
            beta1: 0.5,
            beta2: 0.9,
            eps: 1e-8,
            step: 1,
        };
        let (mut w1, mut m1, mut v1) = (vec![1.0f32], vec![0.0f32], vec![0.0f32]);
        catch_up(&mut w1, &mut m1, &mut v1, 1, 200, &a, 0.01);
        let want = (1.0f64 - 0.1 * 0.01).powi(199) as f32;
        assert!((w1[0] - want).abs() < 1e-6, "{} vs {want}", w1[0]);
    }
}
