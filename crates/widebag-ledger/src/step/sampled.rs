//! A sampled output loss's step (`model.output = "sampled_softmax" | "negative_sampling" |
//! "cosine_contrastive"`): the full softmax's parameters and state without a whole gradient,
//! then per stage what the step holds for its `C` candidates (the batch's targets and the drawn
//! classes, [`StepSpec::sampled_candidates`]): the gathered columns, the `[rows, C]` scores and
//! what autodiff saves of the loss, their gradients, and the column update's temporaries (none
//! on flex's host kernels); on flex the sampled softmax keeps its `[rows, C]` logits for the
//! host kernel in place of the scores and their graph.

use widebag_config::DenseOptim;

use super::builder::Builder;
use super::host;
use super::spec::{SampledLossKind, StepSpec};
use crate::shapes::{ClassChunk, F32_BYTES, I32_BYTES};
use crate::{Category, Lifetime, Point, Pool};

/// Each chunk's weight `[last, n]` and bias `[1, n]` with their optimizer state, and the
/// gradients of the gathered columns (`[last, C]`, `[1, C]`) from the backward pass to the
/// dense update.
pub(super) fn params(
    b: &mut Builder,
    spec: &StepSpec,
    chunks: &[ClassChunk],
    chunk_classes: usize,
) {
    let last = spec.last_hidden();
    for c in chunks {
        let layer = format!("output.{}", c.offset / chunk_classes.max(1));
        let n = c.n as u64;
        b.param_with_state(
            &format!("{layer}.weight"),
            &layer,
            &[last, n],
            spec.dense_optim,
        );
        b.param_with_state(&format!("{layer}.bias"), &layer, &[1, n], spec.dense_optim);
    }
    let cand = spec.sampled_candidates();
    let life = Lifetime::span(Point::BackwardLogits, Point::DenseUpdate);
    let what = "sampled columns' gradients (weight, bias)";
    b.f32(
        what,
        "output",
        &[last + 1, cand],
        Category::DenseGradients,
        life,
    );
}

/// The forward pass: the candidates' indices and the target entries' flat indices and
/// weights, the gathered columns (gradient leaves, alive to the end of the layer's backward),
/// the `[rows, C]` scores, and what the loss's graph saves beyond them (measured on flex and
/// lavapipe: the sampled softmax its log-softmax alone, negative sampling six more, the
/// contrastive loss one more), with cosine's unit rows and columns.
pub(super) fn forward(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let Some(s) = spec.sampled else { return };
    let (rows, cand, last) = (
        spec.batch.n_rows,
        spec.sampled_candidates(),
        spec.last_hidden(),
    );
    let batch = Lifetime::span(ForwardLogits, BackwardEnd);
    let ints = "candidate columns and target flat indices (i32)";
    let n_ints = cand + spec.sampled_targets();
    b.add(
        ints,
        "output",
        &[n_ints],
        I32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        batch,
    );
    let weights = "target entry weights";
    b.f32(
        weights,
        "output",
        &[spec.sampled_targets()],
        Category::BatchBuffers,
        batch,
    );
    let leaves = Lifetime::span(ForwardLogits, BackwardLogits);
    let gathered = "gathered columns (weight, bias; gradient leaves)";
    b.f32(
        gathered,
        "output",
        &[last + 1, cand],
        Category::Activations,
        leaves,
    );
    if spec.sampled_on_host() {
        return host_softmax(b, spec);
    }
    let saved = Lifetime::span(ForwardLogits, ForwardEnd);
    if s.cosine {
        let what = "unit rows and columns (cosine)";
        b.f32(
            what,
            "output",
            &[rows + cand, last],
            Category::Activations,
            saved,
        );
    }
    b.f32("scores", "output", &[rows, cand], Category::Logits, saved);
    let more = match s.loss {
        SampledLossKind::SampledSoftmax => 0,
        SampledLossKind::NegativeSampling => 6,
        SampledLossKind::CosineContrastive => 1,
    };
    let what = "what the loss's graph saves of the scores ([rows, candidates] each)";
    let at = Lifetime::at(ForwardEnd);
    b.add(
        what,
        "output",
        &[rows, cand],
        F32_BYTES,
        more,
        Category::Activations,
        Pool::Dynamic,
        at,
    );
}

/// On flex's host kernels (`output::sampled_host`): the full softmax's kernel over the gathered
/// columns, with `h` on the host, the targets by candidate `(row, column, weight)`, the
/// `[rows, C]` logits kept from the forward pass and turned into their gradient in place, and
/// the `dL/dh` partials (no graph).
fn host_softmax(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let (rows, cand) = (spec.batch.n_rows, spec.sampled_candidates());
    b.add(
        "targets by candidate (row, column, weight)",
        "output",
        &[spec.batch.n_targets],
        12,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        Lifetime::span(ForwardLogits, BackwardLogits),
    );
    host::host_input(b, spec);
    b.f32(
        "candidates' logits (kept, then their gradient in place)",
        "output",
        &[rows, cand],
        Category::Logits,
        Lifetime::span(ForwardLogits, BackwardLogits),
    );
    host::dh_partials(b, spec, rows);
}

/// The backward pass: `dL/dh` beside the gathered columns' gradients (autodiff's `[rows, C]`
/// score gradients are gone when the layer's backward returns; the host kernel's partials are
/// its forward's entry).
pub(super) fn backward(b: &mut Builder, spec: &StepSpec) {
    if spec.sampled_on_host() {
        return;
    }
    let (rows, last) = (spec.batch.n_rows, spec.last_hidden());
    let at = Lifetime::at(Point::BackwardLogits);
    b.f32("dL/dh", "output", &[rows, last], Category::Temporaries, at);
}

/// The column update, one chunk's weight columns at a time: on the tensor path their values and
/// state before the step and after it (`[last, C]` each); flex's host kernel
/// (`cpu::column_update`) updates them in place and holds nothing more.
pub(super) fn update(b: &mut Builder, spec: &StepSpec) {
    if spec.host_kernels() {
        return;
    }
    let (cand, last) = (spec.sampled_candidates(), spec.last_hidden());
    let per = match spec.dense_optim {
        DenseOptim::Sgd => 1,
        DenseOptim::Momentum => 2,
        DenseOptim::Adam | DenseOptim::AdamW => 3,
    };
    let what = "gathered columns and state, before and after the step";
    let at = Lifetime::at(Point::DenseUpdate);
    b.add(
        what,
        "output",
        &[last, cand],
        F32_BYTES,
        2 * per,
        Category::Temporaries,
        Pool::Dynamic,
        at,
    );
}
