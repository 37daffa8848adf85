//! The adaptive softmax's loss and log-probabilities on autodiff: the head (frequent classes and
//! one token per tail cluster) and the tail clusters, each tail evaluated only on the rows whose
//! targets fall in it, in row pieces within the buffer limit.

use burn::tensor::{Device, Tensor};
use widebag_config::bands::Band;
use widebag_csr::Targets;

use crate::model::WideModel;
use crate::model::params::{Cluster, Linear};
use crate::output::softmax::RunningLse;
use crate::step::memory::{MemoryMeter, Point};
use crate::tensors::{floats, ints};

/// Rows of the batch whose targets fall in one output cluster, and those targets.
pub(crate) struct ClusterTargets {
    /// Rows of the batch (sorted, distinct) with a target in the cluster.
    pub rows: Vec<u32>,
    /// Per target entry: `(position in rows, class within the cluster, weight)`.
    pub entries: Vec<(u32, u32, f32)>,
}

/// A batch's targets split over the adaptive softmax's head and tail clusters.
pub(crate) struct AdaptiveTargets {
    /// `(row, head column, weight)`: head classes, and each tail target's cluster token.
    pub head: Vec<(u32, u32, f32)>,
    pub tails: Vec<ClusterTargets>,
}

impl AdaptiveTargets {
    pub(crate) fn new(targets: &Targets, clusters: &[Band]) -> Self {
        let head_n = clusters[0].n_rows();
        let mut head = Vec::new();
        let mut tails: Vec<ClusterTargets> = clusters[1..]
            .iter()
            .map(|_| ClusterTargets {
                rows: Vec::new(),
                entries: Vec::new(),
            })
            .collect();
        for r in 0..targets.row_ptr.len() - 1 {
            for k in targets.row_ptr[r]..targets.row_ptr[r + 1] {
                let (class, w) = (targets.classes[k] as usize, targets.weights[k]);
                let c = clusters.partition_point(|b| b.end <= class);
                if c == 0 {
                    head.push((r as u32, class as u32, w));
                    continue;
                }
                head.push((r as u32, (head_n + c - 1) as u32, w));
                let t = &mut tails[c - 1];
                if t.rows.last() != Some(&(r as u32)) {
                    t.rows.push(r as u32);
                }
                let pos = (t.rows.len() - 1) as u32;
                t.entries.push((pos, (class - clusters[c].start) as u32, w));
            }
        }
        Self { head, tails }
    }
}

/// Row-wise `z - logsumexp(z)`, the log-sum-exp from [`RunningLse`] over at most `max_cols`
/// columns at a time (on lavapipe, one `max_dim`/`sum_dim` pass over a 140,000-column tail
/// cluster returned a row of `+inf`).
pub(crate) fn log_softmax_rows(z: Tensor<2>, max_cols: usize) -> Tensor<2> {
    let mut lse = RunningLse::new(max_cols);
    lse.add(z.clone());
    z - lse.finish()
}

/// `sum_i w_i · logp[row_i, col_i]` for `(row, col, w)` entries of a `[rows, cols]` matrix.
fn weighted_pick(logp: Tensor<2>, entries: &[(u32, u32, f32)], device: &Device) -> Tensor<1> {
    let cols = logp.shape()[1];
    let rows = logp.shape()[0];
    let flat: Vec<u32> = entries
        .iter()
        .map(|&(r, c, _)| r * cols as u32 + c)
        .collect();
    let w: Vec<f32> = entries.iter().map(|e| e.2).collect();
    let picked = logp.reshape([rows * cols]).select(0, ints(&flat, device));
    (picked * floats(w, [entries.len()], device)).sum()
}

/// A cluster's logits `(h proj) weight + bias`.
pub(crate) fn cluster_logits(h: Tensor<2>, c: &Cluster<Tensor<2>>) -> Tensor<2> {
    h.matmul(c.proj.clone()).matmul(c.weight.clone()) + c.bias.clone()
}

impl WideModel {
    /// The adaptive softmax's loss on autodiff: `-(1/B) sum w log p(target)`, where
    /// `log p(c) = log p_head(c)` for head classes and `log p_head(token_k) + log p_k(c)` for
    /// classes of tail cluster `k`. Only clusters holding a target are evaluated, on the rows
    /// whose targets fall in them, in row pieces within the buffer limit.
    pub(crate) fn adaptive_loss(
        &self,
        h: &Tensor<2>,
        head: &Linear<Tensor<2>>,
        clusters: &[Cluster<Tensor<2>>],
        targets: &Targets,
        meter: &mut MemoryMeter,
    ) -> Tensor<1> {
        let ad = h.device();
        let n_rows = h.shape()[0];
        let split = AdaptiveTargets::new(targets, &self.spec.bands.output);
        let head_logits = h.clone().matmul(head.weight.clone()) + head.bias.clone();
        let mut total = weighted_pick(
            log_softmax_rows(head_logits, self.spec.reduce_cols),
            &split.head,
            &ad,
        );
        for (t, cluster) in split.tails.iter().zip(clusters) {
            if t.rows.is_empty() {
                continue;
            }
            let per = widebag_ledger::shapes::rows_per_piece(
                cluster.weight.shape()[1],
                self.spec.max_buffer_bytes,
            );
            let mut first = 0;
            while first < t.rows.len() {
                let end = (first + per).min(t.rows.len());
                let hk = h.clone().select(0, ints(&t.rows[first..end], &ad));
                let z = cluster_logits(hk, cluster);
                let entries: Vec<(u32, u32, f32)> = t
                    .entries
                    .iter()
                    .filter(|e| (first..end).contains(&(e.0 as usize)))
                    .map(|&(r, c, w)| (r - first as u32, c, w))
                    .collect();
                total = total
                    + weighted_pick(log_softmax_rows(z, self.spec.reduce_cols), &entries, &ad);
                first = end;
            }
        }
        meter.probe(Point::ForwardLogits);
        total.mul_scalar(-1.0 / n_rows.max(1) as f64)
    }

    /// Log-probabilities `[rows, n_classes]` of every class under the adaptive softmax (every
    /// cluster evaluated; evaluation only).
    pub(crate) fn adaptive_log_probs(
        &self,
        h: &Tensor<2>,
        head: &Linear<Tensor<2>>,
        clusters: &[Cluster<Tensor<2>>],
    ) -> Tensor<2> {
        let head_n = self.spec.bands.output[0].n_rows();
        let head = log_softmax_rows(
            h.clone().matmul(head.weight.clone()) + head.bias.clone(),
            self.spec.reduce_cols,
        );
        let mut parts = vec![head.clone().narrow(1, 0, head_n)];
        for (k, cluster) in clusters.iter().enumerate() {
            let z = cluster_logits(h.clone(), cluster);
            parts.push(
                log_softmax_rows(z, self.spec.reduce_cols) + head.clone().narrow(1, head_n + k, 1),
            );
        }
        Tensor::cat(parts, 1)
    }
}
