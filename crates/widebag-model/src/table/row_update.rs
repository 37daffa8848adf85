//! Row SGD and lazy Adam on flex's resident tables (host kernels): each touched row of the
//! table and of its moments is updated in place in one parallel pass, with the arithmetic of
//! [`crate::table::optim`]'s tensor path (the same numbers), instead of gathering the rows into
//! tensors and adding deltas back. Half-precision rows are decoded into f32, updated, and
//! rounded back in the same pass.

use burn::tensor::Tensor;
use rayon::prelude::*;

use crate::error::ModelError;
use crate::optim::adam::AdamStep;
use crate::table::ShardedTable;
use crate::table::host_rows::RowMut;
use crate::table::ids::SortedIds;
use crate::tensors::to_vec;

/// `w_r ← w_r − lr g_r` for the rows `uniq`; `false` (nothing done) unless the table is resident.
pub fn sgd(
    table: &mut ShardedTable,
    uniq: SortedIds,
    grad: &Tensor<2>,
    lr: f64,
) -> Result<bool, ModelError> {
    let dim = table.dim().max(1);
    let Some(rows) = table.resident_rows_any(uniq)? else {
        return Ok(false);
    };
    let g = to_vec(grad.clone())?;
    let neg_lr = -lr as f32;
    rows.into_par_iter()
        .zip(g.par_chunks(dim))
        .for_each_init(Vec::new, |scratch, (mut w, g)| {
            w.with_f32(scratch, |w| {
                w.iter_mut().zip(g).for_each(|(w, g)| *w += g * neg_lr)
            })
        });
    Ok(true)
}

/// Lazy Adam (PyTorch's `SparseAdam`) for the rows `uniq`, moments `m` and `v` in the table's
/// row layout; `false` (nothing done) unless all three are resident.
pub fn adam(
    table: &mut ShardedTable,
    (m, v): (&mut ShardedTable, &mut ShardedTable),
    uniq: SortedIds,
    grad: &Tensor<2>,
    a: &AdamStep,
) -> Result<bool, ModelError> {
    let dim = table.dim().max(1);
    let (Some(w), Some(m), Some(v)) = (
        table.resident_rows_any(uniq)?,
        m.resident_rows_any(uniq)?,
        v.resident_rows_any(uniq)?,
    ) else {
        return Ok(false);
    };
    let g = to_vec(grad.clone())?;
    let k = AdamRows::new(a);
    let rows: Vec<((RowMut, RowMut), RowMut)> = w.into_iter().zip(m).zip(v).collect();
    rows.into_par_iter().zip(g.par_chunks(dim)).for_each_init(
        || [Vec::new(), Vec::new(), Vec::new()],
        |[ws, ms, vs], (((mut w, mut m), mut v), g)| {
            w.with_f32(ws, |w| {
                m.with_f32(ms, |m| v.with_f32(vs, |v| k.update(w, m, v, g)))
            })
        },
    );
    Ok(true)
}

/// Lazy Adam's per-element arithmetic for one step, in f32.
struct AdamRows {
    c1: f32,
    c2: f32,
    sqrt_bc2: f32,
    eps: f32,
    step_size: f32,
}

impl AdamRows {
    fn new(a: &AdamStep) -> Self {
        let (bc1, bc2) = a.bias_corrections();
        Self {
            c1: (1.0 - a.beta1) as f32,
            c2: (1.0 - a.beta2) as f32,
            sqrt_bc2: bc2.sqrt() as f32,
            eps: a.eps as f32,
            step_size: (-a.lr / bc1) as f32,
        }
    }

    /// One row of the table and its moments, in place, with its gradient `g`.
    fn update(&self, w: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]) {
        for (((w, m), v), &g) in w.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
            // As the tensor path: m + (1 − β₁)(g − m), v + (1 − β₂)(g² − v), then
            // w + (−lr / bc₁) · m / (√v / √bc₂ + ε).
            let m_new = *m + (g - *m) * self.c1;
            let v_new = *v + (g * g - *v) * self.c2;
            *w += m_new / (v_new.sqrt() / self.sqrt_bc2 + self.eps) * self.step_size;
            *m = m_new;
            *v = v_new;
        }
    }
}
