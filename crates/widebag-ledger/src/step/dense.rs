//! The dense layout's ledger: the dense `[batch, width]` input, `[batch, classes]` targets and
//! one saved `[batch, classes]` buffer of `log_softmax`, each layer's saved tensors, then a
//! gradient for every weight.

use super::builder::Builder;
use super::host;
use super::spec::StepSpec;
use crate::{Category, Ledger, Lifetime, Point};

/// The ledger of one training step of `spec` in the dense layout (without the step count that
/// [`super::ledger`] adds for both layouts).
pub(super) fn ledger(spec: &StepSpec) -> Ledger {
    use Point::*;
    let mut b = Builder::new(
        spec,
        vec![
            Setup,
            ForwardEnd,
            BackwardLogits,
            BackwardInput,
            BackwardEnd,
            StepEnd,
        ],
        // Inside `loss.backward()` nothing can be read; these two moments are predicted from
        // the order of autodiff's backward (output layer first, first layer last).
        vec![BackwardLogits, BackwardInput],
    );
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
    b.dense_param(
        "output.weight",
        "output",
        &[last, spec.n_classes],
        spec.dense_optim,
        out,
    );
    b.dense_param(
        "output.bias",
        "output",
        &[1, spec.n_classes],
        spec.dense_optim,
        out,
    );
}

/// Data: the dense input (saved by the first matmul until the first layer's gradient is
/// formed) and the dense targets.
fn data(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let rows = spec.batch.n_rows;
    b.f32(
        "dense input batch",
        "batch",
        &[rows, spec.width],
        Category::BatchBuffers,
        Lifetime::span(ForwardEnd, BackwardInput),
    );
    if spec.host_kernels() {
        return;
    }
    b.f32(
        "dense targets",
        "batch",
        &[rows, spec.n_classes],
        Category::BatchBuffers,
        Lifetime::at(ForwardEnd),
    );
}

/// Forward: what autodiff saves of each layer, and the logits `log_softmax` saves.
fn forward(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    b.saved_layers(spec, ForwardEnd, BackwardLogits, BackwardLogits);
    if spec.host_kernels() {
        host::kept_logits(b, spec);
        return;
    }
    b.f32(
        "logits (saved by log_softmax)",
        "output",
        &[spec.batch.n_rows, spec.n_classes],
        Category::Logits,
        Lifetime::at(ForwardEnd),
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
    }
    b.f32(
        "gradient at the first layer's output",
        "input",
        &[rows, spec.dim],
        Category::Temporaries,
        Lifetime::at(BackwardInput),
    );
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
        // gradient is formed.
        let peak = l.peak(Placement::Device);
        assert_eq!(peak.point, Point::BackwardInput);
        assert_eq!(
            peak.bytes - sampled.bytes,
            128 * 240_000 * 4 + 128 * 1024 * 4
        );
        let c = l.categories_at(Placement::Device, Point::BackwardEnd);
        assert_eq!(c[&Category::Parameters], params);
        assert_eq!(c[&Category::DenseGradients], params);
        assert_eq!(c[&Category::OptimizerState], 2 * params);
        let gib = peak.bytes as f64 / GIB;
        assert!((5.55..5.7).contains(&gib), "{gib} GiB");
        // Forward: the [128, 240,000] input, targets and saved logits (117.2 MiB each).
        let f = l.categories_at(Placement::Device, Point::ForwardEnd);
        let wide = 128 * 240_000 * 4;
        assert_eq!(f[&Category::Logits], wide);
        assert_eq!(f[&Category::BatchBuffers], 2 * wide);
        // The naive estimate, weights alone, is about a quarter of it.
        assert!((params as f64) < 0.26 * peak.bytes as f64);
    }
}
