//! The adaptive softmax's entries in the sparse layout: the head and each tail cluster's
//! parameters, and what its forward pass keeps for backward.

use super::builder::Builder;
use super::spec::{OutputLayerKind, StepSpec};
use crate::shapes::{self, F32_BYTES, I32_BYTES};
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
/// and per tail cluster its projection, weight and bias; their gradients out of autodiff (alive
/// over `grad`), or none on the CubeCL kernels, whose backward pass steps each as it is formed.
pub(super) fn params(b: &mut Builder, spec: &StepSpec, grad: Lifetime) {
    let param = |b: &mut Builder, name: &str, layer: &str, shape: &[u64]| match spec.output_layer()
        == OutputLayerKind::CubeAdaptiveSoftmax
    {
        true => b.param_with_state(name, layer, shape, spec.dense_optim),
        false => b.dense_param(name, layer, shape, spec.dense_optim, grad),
    };
    let last = spec.last_hidden();
    let head_n = head_classes(spec);
    param(b, "output.head.weight", "output.head", &[last, head_n]);
    param(b, "output.head.bias", "output.head", &[1, head_n]);
    for (k, c) in spec.output_bands.iter().enumerate().skip(1) {
        let layer = format!("output.tail.{k}");
        let (d, n) = (c.dim as u64, c.n_rows() as u64);
        for (what, shape) in [
            ("projection", [last, d]),
            ("weight", [d, n]),
            ("bias", [1, n]),
        ] {
            param(b, &format!("{layer}.{what}"), &layer, &shape);
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

/// Rows tail cluster `k` is computed on by the CubeCL kernels: [`cluster_rows`] padded to
/// [`shapes::tail_rows_bucket`] (0 where none).
fn padded_rows(spec: &StepSpec, k: usize) -> u64 {
    match cluster_rows(spec, k) {
        0 => 0,
        r => shapes::tail_rows_bucket(r as usize, spec.batch.n_rows as usize) as u64,
    }
}

/// The adaptive softmax on the CubeCL kernels, one cluster at a time (the allocator's point is
/// the largest of the clusters' moments): per cluster the forward pass's logits and the
/// backward pass's logit gradient, the widest priced; what each cluster keeps from its forward
/// pass to the backward pass's end (its targets, each row's log-sum-exp; a tail's rows, padded
/// to a power of two, their hidden states and projection); `dL/dh` over the batch, and a tail's `dL/du` beside its
/// gradient. A tail's `[hidden, dim]` projection gradient is formed and applied between the
/// points.
pub(super) fn cube_activations(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let (rows, last) = (spec.batch.n_rows, spec.last_hidden());
    let kept = Lifetime::span(ForwardLogits, BackwardEnd);
    let tails: Vec<(u64, u64, u64)> = (1..spec.output_bands.len())
        .map(|k| {
            let c = &spec.output_bands[k];
            (padded_rows(spec, k), c.n_rows() as u64, c.dim as u64)
        })
        .filter(|&(r, _, _)| r > 0)
        .collect();
    let widest = tails
        .iter()
        .map(|&(r, n, _)| r * n)
        .fold(rows * head_classes(spec), u64::max);
    if spec.tiles_logits() {
        // Tiled (`model.logits = "tiled"`): each row's `(max, sum)` per 64-class tile.
        let pairs = |r: u64, n: u64| r * 2 * n.div_ceil(shapes::LOGIT_TILE as u64);
        let widest_pairs = tails
            .iter()
            .map(|&(r, n, _)| pairs(r, n))
            .fold(pairs(rows, head_classes(spec)), u64::max);
        b.f32(
            "each row's (max, sum) per 64-class tile of the widest cluster",
            "output",
            &[widest_pairs],
            Category::Logits,
            Lifetime::at(ForwardLogits),
        );
    } else {
        b.f32(
            "logits of the widest cluster (one cluster at a time)",
            "output",
            &[widest],
            Category::Logits,
            Lifetime::at(ForwardLogits),
        );
    }
    b.f32(
        "logit gradient of the widest cluster (one cluster at a time)",
        "output",
        &[widest],
        Category::Logits,
        Lifetime::at(BackwardLogits),
    );
    let targets = spec.batch.n_targets;
    b.add(
        "head target flat indices (i32, for the loss)",
        "output.head",
        &[targets],
        I32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        kept,
    );
    b.f32(
        "log-sum-exp per row",
        "output.head",
        &[rows, 1],
        Category::Activations,
        Lifetime::span(ForwardEnd, BackwardEnd),
    );
    b.f32(
        "dL/dh",
        "output",
        &[rows, last],
        Category::Temporaries,
        Lifetime::at(BackwardLogits),
    );
    let widest_du = tails.iter().map(|&(r, _, d)| r * d).max().unwrap_or(0);
    if widest_du > 0 {
        b.f32(
            "dL/du of the widest tail (one at a time)",
            "output",
            &[widest_du],
            Category::Temporaries,
            Lifetime::at(BackwardLogits),
        );
    }
    for (k, c) in spec.output_bands.iter().enumerate().skip(1) {
        let r = padded_rows(spec, k);
        if r == 0 {
            continue;
        }
        let layer = format!("output.tail.{k}");
        b.f32(
            "selected hidden rows, their projection, each row's log-sum-exp and target weight",
            &layer,
            &[r, last + c.dim as u64 + 2],
            Category::Activations,
            kept,
        );
        // Each target at most once in its tail: (row, class) and flat index (i32), weight.
        b.add(
            "tail rows and targets (i32 (row, class) pairs, flat indices; weights)",
            &layer,
            &[r + 4 * targets],
            I32_BYTES,
            1,
            Category::BatchBuffers,
            Pool::Dynamic,
            kept,
        );
    }
}
