//! The adaptive softmax's entries in the sparse layout: the head and each tail cluster's
//! parameters, and what its forward pass keeps for backward.

use super::builder::Builder;
use super::spec::StepSpec;
use crate::shapes::{self, F32_BYTES};
use crate::{Category, Lifetime, Point, Pool};

/// Classes of the head: its own classes plus one token per tail cluster.
pub(super) fn head_classes(spec: &StepSpec) -> u64 {
    let clusters = &spec.output_bands;
    (clusters[0].n_rows() + clusters.len() - 1) as u64
}

/// Rows of a batch whose targets fall in tail cluster `k` (≥ 1): the sampled count, else at
/// most the batch or its target count.
pub(super) fn cluster_rows(spec: &StepSpec, k: usize) -> u64 {
    spec.cluster_rows
        .get(k - 1)
        .copied()
        .unwrap_or(spec.batch.n_rows.min(spec.batch.n_targets))
}

/// The adaptive softmax's parameters: the head over its classes plus one token per tail cluster,
/// and per tail cluster its projection, weight and bias (gradients out of autodiff).
pub(super) fn params(b: &mut Builder, spec: &StepSpec, grad: Lifetime) {
    let last = spec.last_hidden();
    let head_n = head_classes(spec);
    b.dense_param(
        "output.head.weight",
        "output.head",
        &[last, head_n],
        spec.dense_optim,
        grad,
    );
    b.dense_param(
        "output.head.bias",
        "output.head",
        &[1, head_n],
        spec.dense_optim,
        grad,
    );
    for (k, c) in spec.output_bands.iter().enumerate().skip(1) {
        let layer = format!("output.tail.{k}");
        let (d, n) = (c.dim as u64, c.n_rows() as u64);
        for (what, shape) in [
            ("projection", [last, d]),
            ("weight", [d, n]),
            ("bias", [1, n]),
        ] {
            b.dense_param(
                &format!("{layer}.{what}"),
                &layer,
                &shape,
                spec.dense_optim,
                grad,
            );
        }
    }
}

/// What the adaptive softmax holds on autodiff: the head's logits and log-probabilities over
/// `[batch, head]`, and per tail cluster, on the rows whose targets fall in it (at most the
/// batch or its target count, in row pieces within the buffer limit), the selected hidden rows,
/// their projection and the cluster's logits and log-probabilities. Freed by backward.
pub(super) fn activations(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let (rows, last) = (spec.batch.n_rows, spec.last_hidden());
    let fwd = Lifetime::span(ForwardLogits, ForwardEnd);
    // The log-softmax chain is fused: one `[rows, n]` buffer per head and cluster piece.
    b.f32(
        "head log-probabilities",
        "output.head",
        &[rows, head_classes(spec)],
        Category::Logits,
        fwd,
    );
    for (k, c) in spec.output_bands.iter().enumerate().skip(1) {
        let cluster_rows = cluster_rows(spec, k);
        if cluster_rows == 0 {
            continue;
        }
        let layer = format!("output.tail.{k}");
        let n = c.n_rows() as u64;
        let per = shapes::rows_per_piece(n as usize, spec.device.max_buffer_bytes) as u64;
        let r = cluster_rows.min(per);
        let pieces = cluster_rows.div_ceil(r).max(1);
        b.add(
            "cluster log-probabilities (rows with a target here)",
            &layer,
            &[r, n],
            F32_BYTES,
            pieces,
            Category::Logits,
            Pool::Dynamic,
            fwd,
        );
        b.add(
            "selected hidden rows and their projection",
            &layer,
            &[r, last + c.dim as u64],
            F32_BYTES,
            pieces,
            Category::Activations,
            Pool::Dynamic,
            fwd,
        );
    }
}
