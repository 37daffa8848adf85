//! Lazy AdamW's catch-up: the steps a row missed, replayed on the host as dense AdamW ran them
//! with a zero gradient, so that a row-sparse AdamW follows dense AdamW exactly.

use rayon::prelude::*;
use widebag_config::OptimConfig;

use crate::error::ModelError;
use crate::optim::adam::AdamStep;
use crate::table::ShardedTable;
use crate::table::ids::SortedIds;
use crate::tensors::{floats, to_vec};

/// Below this, a replayed moment's share of an update is under f32 resolution: the catch-up
/// stops replaying moment updates and applies the remaining decay in closed form.
const CATCH_UP_NEGLIGIBLE: f64 = 1e-12;

/// Replays the `from..to` (exclusive) steps a row missed, as dense AdamW runs them with a zero
/// gradient: `w ← w(1 − lr_s·wd)`, `m ← β1 m`, `v ← β2 v`, `w ← w − lr_s/bc1 · m / (√v/√bc2 +
/// eps)` with each step's bias corrections and scheduled rate `lr_s` (`config.table_lr_at(s)`).
/// Once `β1^s` is negligible the moment term is below f32 resolution and the rest is decay
/// only: `w ∏(1 − lr_s·wd)`, `m β1^left`, `v β2^left`.
fn catch_up(
    w: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    from: u64,
    to: u64,
    a: &AdamStep,
    config: &OptimConfig,
) {
    let wd = config.weight_decay;
    let mut s = from;
    // A zero first moment stays zero: nothing but decay to replay.
    let mut b1_pow = if m.iter().all(|&x| x == 0.0) {
        0.0
    } else {
        1.0f64
    };
    while s < to && b1_pow >= CATCH_UP_NEGLIGIBLE {
        let lr = config.table_lr_at(s);
        let decay = 1.0 - lr * wd;
        let bc1 = 1.0 - a.beta1.powi(s as i32);
        let bc2 = (1.0 - a.beta2.powi(s as i32)).sqrt();
        for i in 0..w.len() {
            let mi = m[i] as f64 * a.beta1;
            let vi = v[i] as f64 * a.beta2;
            let wi = w[i] as f64 * decay - lr / bc1 * mi / (vi.sqrt() / bc2 + a.eps);
            (w[i], m[i], v[i]) = (wi as f32, mi as f32, vi as f32);
        }
        b1_pow *= a.beta1;
        s += 1;
    }
    if s < to {
        let left = (to - s) as i32;
        let fw = decay_product(config, s, to);
        let (fm, fv) = (a.beta1.powi(left), a.beta2.powi(left));
        for i in 0..w.len() {
            w[i] = (w[i] as f64 * fw) as f32;
            m[i] = (m[i] as f64 * fm) as f32;
            v[i] = (v[i] as f64 * fv) as f32;
        }
    }
}

/// `∏_{s ∈ from..to} (1 − lr_s·wd)`: a power under a constant rate, else step by step.
fn decay_product(config: &OptimConfig, from: u64, to: u64) -> f64 {
    let wd = config.weight_decay;
    let constant =
        config.schedule == widebag_config::Schedule::Constant && from > config.warmup_steps as u64;
    if constant {
        (1.0 - config.table_lr_at(from) * wd).powi((to - from) as i32)
    } else {
        (from..to)
            .map(|s| 1.0 - config.table_lr_at(s) * wd)
            .product()
    }
}

/// Lazy AdamW's catch-up of rows `ids` (within one shard) to the step before `a.step`: weights
/// and moments come to the host, the missed steps are replayed row by row in parallel, and the
/// differences go back with the same deduplicated scatter as an update.
pub(crate) fn replay(
    table: &mut ShardedTable,
    m: &mut ShardedTable,
    v: &mut ShardedTable,
    last_step: &mut [u64],
    ids: SortedIds,
    a: &AdamStep,
    config: &OptimConfig,
) -> Result<(), ModelError> {
    let step = a.step;
    if ids.is_empty() {
        return Ok(());
    }
    let dim = table.dim();
    let mut w = to_vec(table.gather(ids)?)?;
    let mut mm = to_vec(m.gather(ids)?)?;
    let mut vv = to_vec(v.gather(ids)?)?;
    let (w0, m0, v0) = (w.clone(), mm.clone(), vv.clone());
    let rows = dim.max(1);
    w.par_chunks_mut(rows)
        .zip(mm.par_chunks_mut(rows))
        .zip(vv.par_chunks_mut(rows))
        .zip(ids.as_slice().par_iter())
        .for_each(|(((w, m), v), &id)| {
            catch_up(w, m, v, last_step[id as usize] + 1, step, a, config);
        });
    for &id in ids.as_slice() {
        last_step[id as usize] = step - 1;
    }
    let device = table.device();
    let diff = |new: Vec<f32>, old: Vec<f32>| {
        let d: Vec<f32> = new.iter().zip(&old).map(|(n, o)| n - o).collect();
        floats(d, [ids.len(), dim], &device)
    };
    table.scatter_add(ids, diff(w, w0))?;
    m.scatter_add(ids, diff(mm, m0))?;
    v.scatter_add(ids, diff(vv, v0))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let config = OptimConfig {
            lr: 0.1,
            weight_decay: 0.01,
            ..OptimConfig::default()
        };
        let (mut w1, mut m1, mut v1) = (vec![1.0f32], vec![0.0f32], vec![0.0f32]);
        catch_up(&mut w1, &mut m1, &mut v1, 1, 200, &a, &config);
        let want = (1.0f64 - 0.1 * 0.01).powi(199) as f32;
        assert!((w1[0] - want).abs() < 1e-6, "{} vs {want}", w1[0]);
        // With moments, the switch to closed form agrees with replaying every step.
        let (mut w2, mut m2, mut v2) = (vec![1.0f32], vec![0.3f32], vec![0.02f32]);
        catch_up(&mut w2, &mut m2, &mut v2, 1, 200, &a, &config);
        let (mut w, mut m, mut v) = (1.0f64, 0.3f32 as f64, 0.02f32 as f64);
        for s in 1..200 {
            let bc1 = 1.0 - a.beta1.powi(s);
            let bc2 = (1.0 - a.beta2.powi(s)).sqrt();
            (m, v) = (m * a.beta1, v * a.beta2);
            w = w * (1.0 - a.lr * 0.01) - a.lr / bc1 * m / (v.sqrt() / bc2 + a.eps);
        }
        assert!((w2[0] as f64 - w).abs() < 1e-6, "{} vs {w}", w2[0]);
    }
}
