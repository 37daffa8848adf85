//! Row-sparse optimizers for the wide tables, their state in the table's own row layout: row
//! SGD, row momentum, row-wise Adagrad, lazy Adam (PyTorch's `SparseAdam`: only the rows a batch
//! touches have their moments and values updated, with bias correction from the global step
//! count, so rows touched every step follow dense Adam exactly) and lazy AdamW, whose host-side
//! catch-up replays the steps a row missed so that it follows dense AdamW exactly.

use burn::tensor::Tensor;
use widebag_config::{OptimConfig, Precision, TableOptim};

use crate::error::ModelError;
use crate::optim::adam::AdamStep;
use crate::probe::{Point, StepProbe};
use crate::table::ShardedTable;
use crate::table::catch_up::replay;
use crate::table::ids::{SortedIdBuf, SortedIds};
use crate::table::row_update;

/// Optimizer state of the table, in the table's own row layout. Not `Clone`, like the tables it
/// holds: their updates are in place only while each has one handle.
#[derive(Debug)]
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
    /// last brought up to, for the catch-up.
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

/// Marks the rounding key of a flush (the high bit over the step).
const FLUSH_KEY: u64 = 1 << 43;

/// Rows a lazy-AdamW catch-up moves through the host at once (bounds its temporaries).
const CATCH_UP_ROWS: usize = 1 << 14;

impl TableState {
    /// The zero state of `optim` for `table`: moments stored at `state_dtype` (with the
    /// table's rounding and seeds of their own), row-wise Adagrad's accumulator in f32.
    pub fn new(
        optim: TableOptim,
        table: &ShardedTable,
        max_buffer_bytes: u64,
        state_dtype: Precision,
    ) -> Self {
        let seed = table.format().seed;
        let state = |dim: usize, precision: Precision, k: u64| {
            let seed = seed ^ (k + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
            table.zeros_like(dim, max_buffer_bytes, table.format().with(precision, seed))
        };
        let dim = table.dim();
        match optim {
            TableOptim::Sgd => TableState::Sgd,
            TableOptim::Momentum => TableState::Momentum {
                buf: state(dim, state_dtype, 0),
            },
            TableOptim::RowwiseAdagrad => TableState::RowwiseAdagrad {
                acc: state(1, Precision::F32, 0),
            },
            TableOptim::Adam => TableState::Adam {
                m: state(dim, state_dtype, 0),
                v: state(dim, state_dtype, 1),
            },
            TableOptim::AdamW => TableState::AdamW {
                m: state(dim, state_dtype, 0),
                v: state(dim, state_dtype, 1),
                last_step: vec![0; table.n_rows()],
            },
        }
    }

    /// Updates of `table` and of this state from now on belong to `step` (the stochastic
    /// rounding's key; see [`ShardedTable::set_update_step`]).
    fn set_update_step(&mut self, table: &mut ShardedTable, step: u64) {
        table.set_update_step(step);
        match self {
            TableState::Sgd => {}
            TableState::Momentum { buf } => buf.set_update_step(step),
            TableState::Adam { m, v } | TableState::AdamW { m, v, .. } => {
                m.set_update_step(step);
                v.set_update_step(step);
            }
            TableState::RowwiseAdagrad { acc } => acc.set_update_step(step),
        }
    }

    /// Brings rows `uniq` up to the step before `step` (lazy AdamW replays on the host the steps
    /// each row missed, as dense AdamW ran them; other optimizers owe nothing). Call it before
    /// the rows are read at `step`, so that their gradient is taken at dense AdamW's weights.
    pub fn catch_up(
        &mut self,
        table: &mut ShardedTable,
        uniq: SortedIds,
        config: &OptimConfig,
        step: u64,
    ) -> Result<(), ModelError> {
        self.catch_up_keyed(table, uniq, config, step, step)
    }

    /// [`Self::catch_up`] whose rounding belongs to `round_step`.
    fn catch_up_keyed(
        &mut self,
        table: &mut ShardedTable,
        uniq: SortedIds,
        config: &OptimConfig,
        step: u64,
        round_step: u64,
    ) -> Result<(), ModelError> {
        if !matches!(self, TableState::AdamW { .. }) {
            return Ok(());
        }
        self.set_update_step(table, round_step);
        let TableState::AdamW { m, v, last_step } = self else {
            return Ok(());
        };
        let stale: Vec<u32> = uniq
            .as_slice()
            .iter()
            .copied()
            .filter(|&id| last_step[id as usize] + 1 < step)
            .collect();
        let (stale, a) = (
            SortedIdBuf::new(stale)?,
            AdamStep::new(config, config.table_lr_at(step), step),
        );
        for seg in table.segments(stale.ids()) {
            for first in (seg.start..seg.end).step_by(CATCH_UP_ROWS) {
                let ids = stale
                    .ids()
                    .range(first..(first + CATCH_UP_ROWS).min(seg.end));
                replay(table, m, v, last_step, ids, &a, config)?;
            }
        }
        Ok(())
    }

    /// Applies every row's owed catch-up up to and including `step` (the last step taken), so the
    /// table holds dense AdamW's weights: call it before the weights are read.
    pub fn flush(
        &mut self,
        table: &mut ShardedTable,
        config: &OptimConfig,
        step: u64,
    ) -> Result<(), ModelError> {
        let TableState::AdamW { last_step, .. } = self else {
            return Ok(());
        };
        let owing: Vec<u32> = (0..last_step.len() as u32)
            .filter(|&id| last_step[id as usize] < step)
            .collect();
        // The flush rounds under a key of its own: a run resumed from the checkpoint it
        // preceded never ran it, and its next step must round as the uninterrupted run's did.
        let owing = SortedIdBuf::new(owing)?;
        self.catch_up_keyed(table, owing.ids(), config, step + 1, FLUSH_KEY | step)
    }

    /// Updates the rows `uniq` of `table` with their gradient `[U, dim]`.
    pub fn step(
        &mut self,
        table: &mut ShardedTable,
        uniq: SortedIds,
        grad_rows: Tensor<2>,
        config: &OptimConfig,
        step: u64,
        probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        // A no-op when the training step caught these rows up before reading them.
        self.catch_up(table, uniq, config, step)?;
        self.set_update_step(table, step);
        match self {
            TableState::Sgd => {
                if row_update::sgd(table, uniq, &grad_rows, config.table_lr_at(step))? {
                    return Ok(());
                }
                let delta = grad_rows.mul_scalar(-config.table_lr_at(step));
                probe.detail(Point::TableUpdate);
                table.scatter_add(uniq, delta)?;
            }
            TableState::Momentum { buf } => {
                // buf_r ← μ buf_r + g_r for the touched rows only; w_r ← w_r − lr buf_r.
                let old = buf.gather(uniq)?;
                let dbuf = old.clone().mul_scalar(config.momentum - 1.0) + grad_rows;
                let delta = (old + dbuf.clone()).mul_scalar(-config.table_lr_at(step));
                probe.detail(Point::TableUpdate);
                buf.scatter_add(uniq, dbuf)?;
                table.scatter_add(uniq, delta)?;
            }
            TableState::RowwiseAdagrad { acc } => {
                let n = grad_rows.shape()[1].max(1) as f64;
                let g2 = grad_rows.clone().square().sum_dim(1).div_scalar(n);
                let acc_new = acc.gather(uniq)? + g2.clone();
                let delta = (grad_rows / acc_new.sqrt().add_scalar(config.eps))
                    .mul_scalar(-config.table_lr_at(step));
                probe.detail(Point::TableUpdate);
                acc.scatter_add(uniq, g2)?;
                table.scatter_add(uniq, delta)?;
            }
            TableState::Adam { m, v } => {
                let a = AdamStep::new(config, config.table_lr_at(step), step);
                // Resident tables (host kernels): in place, one pass.
                if row_update::adam(table, (m, v), uniq, &grad_rows, &a)? {
                    return Ok(());
                }
                let m_old = m.gather(uniq)?;
                let v_old = v.gather(uniq)?;
                // m_new - m_old = (1 - b1)(g - m_old), likewise for v: applied with Add so the
                // moments are updated in place by the same deduplicated scatter as the table.
                let dm = (grad_rows.clone() - m_old.clone()).mul_scalar(1.0 - a.beta1);
                let dv = (grad_rows.square() - v_old.clone()).mul_scalar(1.0 - a.beta2);
                let delta = a.delta(m_old + dm.clone(), v_old + dv.clone());
                probe.detail(Point::TableUpdate);
                m.scatter_add(uniq, dm)?;
                v.scatter_add(uniq, dv)?;
                table.scatter_add(uniq, delta)?;
            }
            TableState::AdamW { m, v, last_step } => {
                // This step, as dense AdamW: decoupled decay, then the Adam update.
                let a = AdamStep::new(config, config.table_lr_at(step), step);
                let w_old = table.gather(uniq)?;
                let m_old = m.gather(uniq)?;
                let v_old = v.gather(uniq)?;
                let dm = (grad_rows.clone() - m_old.clone()).mul_scalar(1.0 - a.beta1);
                let dv = (grad_rows.square() - v_old.clone()).mul_scalar(1.0 - a.beta2);
                let delta = a.delta(m_old + dm.clone(), v_old + dv.clone())
                    - w_old.mul_scalar(config.table_lr_at(step) * config.weight_decay);
                probe.detail(Point::TableUpdate);
                m.scatter_add(uniq, dm)?;
                v.scatter_add(uniq, dv)?;
                table.scatter_add(uniq, delta)?;
                for &id in uniq.as_slice() {
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
    use widebag_config::{DenseOptim, TableOptim};

    use super::*;
    use crate::optim::dense::{DenseParam, DenseState};
    use crate::tensors::{floats, to_vec};

    fn ids(ids: &[u32]) -> SortedIds<'_> {
        SortedIds::new(ids).unwrap()
    }

    /// Two steps on rows 0 and 2 of a 3 × 2 table, the same gradient each time.
    fn two_steps(optim: TableOptim) -> Vec<f32> {
        let device = Device::flex();
        let mut table = ShardedTable::zeros(3, 2, u64::MAX, &device);
        let mut state = TableState::new(optim, &table, u64::MAX, Precision::F32);
        let config = OptimConfig {
            table_lr: Some(0.1),
            momentum: 0.9,
            eps: 1e-8,
            ..OptimConfig::default()
        };
        let mut probe = StepProbe::new(&device);
        for step in 1..=2 {
            let g = floats(vec![1.0, 2.0, 3.0, 4.0], [2, 2], &device);
            state
                .step(&mut table, ids(&[0, 2]), g, &config, step, &mut probe)
                .unwrap();
        }
        table.to_vec().unwrap()
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
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

    /// A 7 × 3 table trained `steps` steps by lazy AdamW and by dense AdamW; each step touches
    /// a seeded random subset of rows (some rows wait many steps, row 6 is touched only at the
    /// last step, row 5 never after step 2). Dense AdamW sees the same gradients with zero rows
    /// for the untouched ones.
    fn lazy_and_dense_adamw(steps: u64) -> (ShardedTable, TableState, DenseParam, OptimConfig) {
        let device = Device::flex();
        let (rows, dim) = (7usize, 3usize);
        let init: Vec<f32> = (0..rows * dim)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.1)
            .collect();
        let mut table = ShardedTable::from_fn(rows, dim, u64::MAX, &device, |r, out| {
            out.copy_from_slice(&init[r * dim..(r + 1) * dim])
        });
        let mut state = TableState::new(TableOptim::AdamW, &table, u64::MAX, Precision::F32);
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
        let mut probe = StepProbe::new(&device);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for step in 1..=steps {
            let mut uniq: Vec<u32> = Vec::new();
            for r in 0..rows as u32 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let touched = match r {
                    6 => step == steps,
                    5 => step <= 2,
                    _ => rng.is_multiple_of(3),
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
                    .step(&mut table, ids(&uniq), grad, &config, step, &mut probe)
                    .unwrap();
            }
            dense = dense.step(floats(full, [rows, dim], &device), &config, step);
        }
        (table, state, dense, config)
    }

    /// Weights and moments of the lazy table equal dense AdamW's.
    fn assert_matches_dense(table: &ShardedTable, state: &TableState, dense: &DenseParam) {
        let got = table.to_vec().unwrap();
        let want = to_vec(dense.value.clone()).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-5, "weight {i}: lazy {a}, dense {b}");
        }
        let TableState::AdamW { m, v, .. } = state else {
            unreachable!()
        };
        let DenseState::Adam { moments, .. } = &dense.state else {
            unreachable!()
        };
        for (lazy, full) in [(m, &moments.m), (v, &moments.v)] {
            let (a, b) = (lazy.to_vec().unwrap(), to_vec(full.clone()).unwrap());
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-5, "moment: lazy {x}, dense {y}");
            }
        }
    }

    #[test]
    fn lazy_adamw_with_catch_up_equals_dense_adamw() {
        let steps = 40;
        let (mut table, mut state, mut dense, config) = lazy_and_dense_adamw(steps);
        // Rows not touched at the last step still owe their catch-up: touch every row with a
        // zero gradient at one more step on both sides, then compare everything.
        let (rows, dim) = (table.n_rows(), table.dim());
        let device = table.device();
        let all: Vec<u32> = (0..rows as u32).collect();
        let zero = || floats(vec![0.0; rows * dim], [rows, dim], &device);
        let mut probe = StepProbe::new(&device);
        state
            .step(
                &mut table,
                ids(&all),
                zero(),
                &config,
                steps + 1,
                &mut probe,
            )
            .unwrap();
        dense = dense.step(zero(), &config, steps + 1);
        assert_matches_dense(&table, &state, &dense);
    }

    #[test]
    fn flush_applies_every_owed_catch_up() {
        let steps = 40;
        let (mut table, mut state, dense, config) = lazy_and_dense_adamw(steps);
        // Row 5 was last touched at step 2: it still holds its step-2 weights.
        let stale = table.to_vec().unwrap();
        let want = to_vec(dense.value.clone()).unwrap();
        assert!(
            (stale[15] - want[15]).abs() > 1e-4,
            "row 5 owes its catch-up"
        );
        state.flush(&mut table, &config, steps).unwrap();
        assert_matches_dense(&table, &state, &dense);
        // Flushing again, or stepping on, owes nothing twice.
        state.flush(&mut table, &config, steps).unwrap();
        assert_matches_dense(&table, &state, &dense);
    }
}
