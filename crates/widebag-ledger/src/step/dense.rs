//! The dense layout's ledger: the dense `[batch, width]` input, each layer's saved tensors, the
//! output layer off autodiff as the sparse layout's one-chunk softmax (`[batch, classes]`
//! logits in the forward, their gradient in the backward; flex's host kernels keep them), then
//! a gradient for every weight.

use super::builder::Builder;
use super::host;
use super::spec::{OutputUpdate, StepSpec};
use crate::shapes::I32_BYTES;
use crate::{Category, Ledger, Lifetime, Point, Pool};

/// The ledger of one training step of `spec` in the dense layout (without the step count that
/// [`super::ledger`] adds for both layouts).
pub(super) fn ledger(spec: &StepSpec) -> Ledger {
    use Point::*;
    // On the tensor path the softmax reads its logits' moment (`ForwardLogits`) and its
    // gradients' (`BackwardLogits`); inside autodiff's backward nothing can be read, so the
    // first layer's moment is predicted from its order (first layer last), and on flex's host
    // kernels the logits' gradients' too.
    let host = spec.host_kernels();
    let points = [
        Setup,
        ForwardLogits,
        ForwardEnd,
        BackwardLogits,
        BackwardInput,
        BackwardEnd,
        StepEnd,
    ]
    .into_iter()
    .filter(|&p| !(host && p == ForwardLogits))
    .collect();
    let predicted = match host {
        true => vec![BackwardLogits, BackwardInput],
        false => vec![BackwardInput],
    };
    let mut b = Builder::new(spec, points, predicted);
    setup(&mut b, spec);
    data(&mut b, spec);
    forward(&mut b, spec);
    backward(&mut b, spec);
    b.ledger
}

/// Setup: every weight with its optimizer state and gradient; autodiff forms the output layer's
/// gradients first and the first layer's last.
fn setup(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let dim = spec.dim;
    let early = Lifetime::span(BackwardInput, DenseUpdate);
    b.dense_param(
        "input.weight",
        "input",
        &[spec.width, dim],
        spec.dense_optim,
        early,
    );
    b.dense_param("input.bias", "input", &[1, dim], spec.dense_optim, early);
    b.hidden_params(spec, early);
    let last = spec.last_hidden();
    let out = Lifetime::span(BackwardLogits, DenseUpdate);
    // Stepped inside the backward pass, the output layer's gradient is never whole.
    let in_backward = spec.output_update() == OutputUpdate::InBackward;
    for (name, shape) in [
        ("output.weight", [last, spec.n_classes]),
        ("output.bias", [1, spec.n_classes]),
    ] {
        match in_backward {
            true => b.param_with_state(name, "output", &shape, spec.dense_optim),
            false => b.dense_param(name, "output", &shape, spec.dense_optim, out),
        }
    }
}

/// Data: the dense input (saved by the first matmul until the first layer's gradient is
/// formed) and, on the tensor path, the targets as the softmax takes them (pairs, flat
/// indices, weights, each row's total weight).
fn data(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let rows = spec.batch.n_rows;
    b.f32(
        "dense input batch",
        "batch",
        &[rows, spec.width],
        Category::BatchBuffers,
        Lifetime::span(ForwardLogits, BackwardInput),
    );
    if spec.host_kernels() {
        return;
    }
    b.add(
        "target pairs and flat indices (i32)",
        "output",
        &[spec.batch.n_targets, 3],
        I32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        Lifetime::span(ForwardLogits, BackwardEnd),
    );
    let targets = Lifetime::span(ForwardLogits, BackwardEnd);
    b.f32(
        "target weights",
        "output",
        &[spec.batch.n_targets],
        Category::BatchBuffers,
        targets,
    );
    b.f32(
        "target weight per row",
        "output",
        &[rows, 1],
        Category::BatchBuffers,
        targets,
    );
}

/// Forward: what autodiff saves of each layer, and the logits (one chunk of every class), kept
/// for the backward pass.
fn forward(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    b.saved_layers(spec, ForwardLogits, BackwardLogits, BackwardLogits);
    if spec.host_kernels() {
        host::kept_logits(b, spec);
        return;
    }
    let rows = spec.batch.n_rows;
    b.half_hidden(spec);
    b.f32(
        "logits (kept for the backward pass)",
        "output",
        &[rows, spec.n_classes],
        Category::Logits,
        Lifetime::span(ForwardLogits, ForwardEnd),
    );
    b.f32(
        "log-sum-exp per row",
        "output",
        &[rows, 1],
        Category::Activations,
        Lifetime::span(ForwardEnd, BackwardLogits),
    );
}

/// Backward: the logit gradient, then, last, the gradient at the first layer's output.
fn backward(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let rows = spec.batch.n_rows;
    if !spec.host_kernels() {
        b.f32(
            "logit gradient",
            "output",
            &[rows, spec.n_classes],
            Category::Logits,
            Lifetime::at(BackwardLogits),
        );
        let last = spec.last_hidden();
        b.f32(
            "dL/dh",
            "output",
            &[rows, last],
            Category::Temporaries,
            Lifetime::span(BackwardLogits, BackwardInput),
        );
        // dL/dh = g · Wᵀ sums the classes in blocks on a device with its own memory; the
        // partial products are freed before the weight gradient is formed (as the sparse
        // layout's).
    }
    b.f32(
        "gradient at the first layer's output",
        "input",
        &[rows, spec.dim],
        Category::Temporaries,
        Lifetime::at(BackwardInput),
    );
    // On a device with its own memory the input product's reduction over the width runs in
    // blocks (`products::matmul`); its gradient reaches each block's weight slice through a
    // broadcast view, not a `[blocks, rows, dim]` buffer (not measurable inside autodiff).
}

#[cfg(test)]
mod tests {
    use widebag_config::{DenseOptim, Layout};

    use super::super::ledger;
    use super::super::spec::seed_spec;
    use crate::{Category, Placement, Point};

    const GIB: f64 = (1u64 << 30) as f64;

    #[test]
    fn seed_case_dense_breaks_down_the_six_gigabytes() {
        let l = ledger(&seed_spec(Layout::Dense, DenseOptim::Adam));
        // 240,000·1024 + 1024 + 1024·512 + 512 + 512·240,000 + 240,000 parameters.
        let params = 369_405_824u64 * 4;
        assert!((params as f64 / GIB - 1.376).abs() < 0.001);
        let sampled = l.sampled_peak(Placement::Device);
        assert_eq!(sampled.point, Point::BackwardEnd);
        // Inside backward, the [128, 240,000] input is still saved as the first layer's
        // gradient is formed, beside the output's dL/dh.
        let peak = l.peak(Placement::Device);
        assert_eq!(peak.point, Point::BackwardInput);
        assert_eq!(
            peak.bytes - sampled.bytes,
            128 * 240_000 * 4 + 128 * 1024 * 4 + 128 * 512 * 4
        );
        let c = l.categories_at(Placement::Device, Point::BackwardEnd);
        assert_eq!(c[&Category::Parameters], params);
        assert_eq!(c[&Category::DenseGradients], params);
        assert_eq!(c[&Category::OptimizerState], 2 * params);
        let gib = peak.bytes as f64 / GIB;
        assert!((5.55..5.7).contains(&gib), "{gib} GiB");
        // Forward: the [128, 240,000] input and logits (117.2 MiB each); the targets stay
        // sparse (under a MiB).
        let f = l.categories_at(Placement::Device, Point::ForwardLogits);
        let wide = 128 * 240_000 * 4;
        assert_eq!(f[&Category::Logits], wide);
        assert!((wide..wide + (1 << 20)).contains(&f[&Category::BatchBuffers]));
        // The naive estimate, weights alone, is about a quarter of it.
        assert!((params as f64) < 0.26 * peak.bytes as f64);
    }
}
