//! The sampled softmax on flex's host kernels: the step's candidate columns gathered from the
//! layer's chunks into one `[hidden, C]` block (for cosine scores, unit columns over the
//! temperature and unit rows of `h`), the full softmax's fused kernel ([`softmax_ce`]) run over
//! that block with each candidate's bias less its log-inclusion probability (its `[rows, C]`
//! logits kept for the backward pass), and the gradients
//! carried back through the normalisation. The loss and gradients of the tensor path in
//! [`super::sampled`] (tested against it), without its `[rows, C]` scores and their graph.

use rayon::prelude::*;

use crate::cpu::access::{HostMatrix, update_in_place};
use crate::cpu::softmax_ce::{self, CeForward, ChunkRef, HostTargets, Logits};
use crate::error::ModelError;
use crate::output::full::FullParams;

/// The floor under a norm, as the tensor path's `sqrt(Σ x² + 1e-12)`.
const NORM_EPS: f32 = 1e-12;

/// The candidates' columns of every chunk, gathered: `[hidden, C]` weights and `[C]` biases, in
/// the order of `cut` (`(chunk, first gathered column, local columns)`).
pub(crate) fn gather(
    full: &mut FullParams,
    cut: &[(usize, usize, Vec<u32>)],
    hidden: usize,
    n_cand: usize,
) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
    let mut w = vec![0.0f32; hidden * n_cand];
    let mut b = vec![0.0f32; n_cand];
    for (k, first, local) in cut {
        let lin = &mut full.layer[*k];
        let n = full.chunks[*k].n;
        update_in_place(&mut lin.weight.value, |src| {
            w.par_chunks_mut(n_cand)
                .zip(src.par_chunks(n))
                .for_each(|(out, row)| {
                    for (o, &c) in out[*first..*first + local.len()].iter_mut().zip(local) {
                        *o = row[c as usize];
                    }
                });
        })?;
        update_in_place(&mut lin.bias.value, |src| {
            for (o, &c) in b[*first..*first + local.len()].iter_mut().zip(local) {
                *o = src[c as usize];
            }
        })?;
    }
    Ok((w, b))
}

/// What the host forward pass keeps for its backward pass.
pub(crate) struct HostPass {
    /// `[rows, hidden]`: the kernel's input (unit rows for cosine).
    h: HostMatrix,
    /// `[hidden, C]`: the kernel's weight (cosine: unit columns over the temperature).
    w: Vec<f32>,
    b: Vec<f32>,
    /// Cosine: each row's and each column's norm, and the temperature.
    cosine: Option<Cosine>,
    targets: HostTargets,
    fwd: CeForward,
    pub loss: f32,
}

impl HostPass {
    pub fn rows(&self) -> usize {
        self.h.rows
    }

    pub fn hidden(&self) -> usize {
        self.h.cols
    }

    /// The step's candidates (`C`).
    pub fn candidates(&self) -> usize {
        self.b.len()
    }
}

struct Cosine {
    row_norms: Vec<f32>,
    col_norms: Vec<f32>,
    temperature: f32,
}

/// Each row of `x` (`[n, width]`) scaled to unit norm in place; the norms.
pub(crate) fn unit_rows(x: &mut [f32], width: usize) -> Vec<f32> {
    x.par_chunks_mut(width.max(1))
        .map(|row| {
            let norm = (row.iter().map(|v| v * v).sum::<f32>() + NORM_EPS).sqrt();
            row.iter_mut().for_each(|v| *v /= norm);
            norm
        })
        .collect()
}

/// Each column of `w` (`[hidden, n]`) scaled to unit norm and divided by `temperature`, in
/// place; the norms.
fn unit_columns(w: &mut [f32], n: usize, temperature: f32) -> Vec<f32> {
    let mut sums = vec![0.0f32; n];
    for row in w.chunks(n.max(1)) {
        sums.iter_mut().zip(row).for_each(|(s, v)| *s += v * v);
    }
    let norms: Vec<f32> = sums.iter().map(|s| (s + NORM_EPS).sqrt()).collect();
    let scale: Vec<f32> = norms.iter().map(|n| 1.0 / (n * temperature)).collect();
    w.par_chunks_mut(n.max(1)).for_each(|row| {
        row.iter_mut().zip(&scale).for_each(|(v, s)| *v *= s);
    });
    norms
}

/// One class chunk's weight (`[hidden, n]`) and bias (`[n]`) on the host.
pub(crate) type HostChunk = (Vec<f32>, Vec<f32>);

/// Every class's cosine score as the host block scorer reads it: each chunk's weight copied
/// with unit columns over `temperature`, and zero biases (`[hidden, n]` and `[n]` per chunk).
pub(crate) fn cosine_chunks(
    full: &mut FullParams,
    temperature: f32,
) -> Result<Vec<HostChunk>, ModelError> {
    let mut out = Vec::with_capacity(full.layer.len());
    for (lin, chunk) in full.layer.iter_mut().zip(&full.chunks) {
        let mut w = update_in_place(&mut lin.weight.value, |src| src.to_vec())?;
        unit_columns(&mut w, chunk.n, temperature);
        out.push((w, vec![0.0f32; chunk.n]));
    }
    Ok(out)
}

/// The sampled softmax's forward pass: `h` (`[rows, hidden]`) against the gathered columns `w`,
/// `b`, each candidate's score less `log_q` (0 for the batch's targets), the targets as
/// `(row, candidate, weight)` entries; `temperature` for cosine scores (the bias unused).
pub(crate) fn forward(
    mut h: HostMatrix,
    (mut w, b): (Vec<f32>, Vec<f32>),
    log_q: &[f32],
    entries: impl IntoIterator<Item = (u32, u32, f32)>,
    temperature: Option<f32>,
) -> HostPass {
    let (rows, hidden, n) = (h.rows, h.cols, log_q.len());
    let cosine = temperature.map(|t| Cosine {
        row_norms: unit_rows(h.as_mut_slice(), hidden),
        col_norms: unit_columns(&mut w, n, t),
        temperature: t,
    });
    let b: Vec<f32> = match cosine {
        Some(_) => log_q.iter().map(|q| -q).collect(),
        None => b.iter().zip(log_q).map(|(b, q)| b - q).collect(),
    };
    let targets = HostTargets::from_entries(rows, entries, &[n], 1.0 / rows.max(1) as f32);
    let layer = [ChunkRef { w: &w, b: &b }];
    // The `[rows, C]` logits are kept for the backward pass (turned into their gradient in
    // place), as the tensor path keeps its scores: a third fewer products than making them again.
    let fwd = softmax_ce::forward(h.as_slice(), hidden, &layer, &targets, Logits::Keep);
    HostPass {
        loss: fwd.loss,
        h,
        w,
        b,
        cosine,
        targets,
        fwd,
    }
}

/// The backward pass: `dL/dh` (`[rows, hidden]`) and the gathered columns' gradients
/// (`[hidden, C]` and `[C]`; cosine's bias gradient is zero, as the score does not read it).
/// `peak` is called where the pass and its gradients are alive together (the layer's most).
pub(crate) fn backward(pass: HostPass, peak: &mut dyn FnMut()) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let HostPass {
        h,
        w,
        b,
        cosine,
        targets,
        mut fwd,
        ..
    } = pass;
    let (hidden, n) = (h.cols, b.len());
    let layer = [ChunkRef { w: &w, b: &b }];
    let (mut dh, mut grads) =
        softmax_ce::backward(h.as_slice(), hidden, &layer, &targets, &mut fwd);
    peak();
    let g = grads.pop().expect("one chunk's gradient");
    let (mut dw, mut db) = (g.dw, g.db);
    if let Some(c) = cosine {
        // Through y = x / |x|: dx = (dy − y (y · dy)) / |x|, by row of h.
        dh.par_chunks_mut(hidden.max(1))
            .zip(h.as_slice().par_chunks(hidden.max(1)))
            .zip(&c.row_norms)
            .for_each(|((d, y), norm)| {
                let dot: f32 = d.iter().zip(y).map(|(d, y)| d * y).sum();
                d.iter_mut()
                    .zip(y)
                    .for_each(|(d, y)| *d = (*d - y * dot) / norm);
            });
        // The kernel's weight is u / t with u a unit column: du = dw / t, and through
        // u = x / |x| by column, with u = t · w.
        let t = c.temperature;
        let mut dots = vec![0.0f32; n];
        for (drow, wrow) in dw.chunks(n.max(1)).zip(w.chunks(n.max(1))) {
            for ((s, d), u) in dots.iter_mut().zip(drow).zip(wrow) {
                *s += (d / t) * (u * t);
            }
        }
        dw.par_chunks_mut(n.max(1))
            .zip(w.par_chunks(n.max(1)))
            .for_each(|(drow, wrow)| {
                for (j, (d, u)) in drow.iter_mut().zip(wrow).enumerate() {
                    *d = (*d / t - u * t * dots[j]) / c.col_norms[j];
                }
            });
        db.iter_mut().for_each(|v| *v = 0.0);
    }
    (dh, dw, db)
}
