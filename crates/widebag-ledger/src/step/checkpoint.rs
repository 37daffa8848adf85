//! What `model.checkpointing = "mlp"` changes for a step, from the step's ledger with `"none"`
//! and with `"mlp"` (`explain` shows it however small).

use serde::Serialize;
use widebag_config::{Checkpointing, Layout};

use super::by_layout::ledger;
use super::spec::StepSpec;
use crate::shapes::F32_BYTES;
use crate::{Ledger, Placement, Point};

/// What `model.checkpointing = "mlp"` changes for a step (`explain` shows it however small).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CheckpointEffect {
    /// Activations the trunk saves per example without checkpointing: each layer's
    /// pre-activation and output, and each tail band's bag.
    pub saved_bytes_per_example: u64,
    /// One example's row of logits, for scale.
    pub logit_row_bytes: u64,
    /// The step's predicted device peak with `"none"` and with `"mlp"`.
    pub peak_none_bytes: u64,
    pub peak_mlp_bytes: u64,
    /// What `"mlp"` frees inside the output layer's backward (`Point::BackwardLogits`).
    pub output_backward_saving_bytes: u64,
}

/// The effect of checkpointing the trunk of `spec` (whatever it is set to); `None` in the dense
/// layout, which saves everything.
pub fn checkpoint_effect(spec: &StepSpec) -> Option<CheckpointEffect> {
    if spec.layout != Layout::Sparse {
        return None;
    }
    let ledger = |mode| {
        let mut s = spec.clone();
        s.checkpointing = mode;
        ledger(&s)
    };
    let (none, mlp) = (ledger(Checkpointing::None), ledger(Checkpointing::Mlp));
    let at = |l: &Ledger| l.live_bytes(Placement::Device, Point::BackwardLogits);
    let saved_per_layer = |l: usize| if spec.linear_layer(l) { 1 } else { 2 };
    let sizes = spec.layer_sizes();
    let layers: u64 = (0..sizes.len())
        .map(|l| saved_per_layer(l) * sizes[l])
        .sum();
    let bands: u64 = spec.bands().iter().skip(1).map(|(b, _)| b.dim as u64).sum();
    Some(CheckpointEffect {
        saved_bytes_per_example: (layers + bands) * F32_BYTES,
        logit_row_bytes: spec.n_classes * F32_BYTES,
        peak_none_bytes: none.peak(Placement::Device).bytes,
        peak_mlp_bytes: mlp.peak(Placement::Device).bytes,
        output_backward_saving_bytes: at(&none).saturating_sub(at(&mlp)),
    })
}

#[cfg(test)]
mod tests {
    use widebag_config::{DenseOptim, Layout};

    use super::*;
    use crate::step::spec::seed_spec;

    #[test]
    fn checkpointing_the_seed_trunk_saves_its_activations_where_the_logits_peak() {
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        let e = checkpoint_effect(&spec).unwrap();
        // (1024 + 1024 + 512 + 512) · 4 B per example: 1.28 % of a 240,000-class logit row.
        assert_eq!(e.saved_bytes_per_example, 12 << 10);
        let ratio = e.saved_bytes_per_example as f64 / e.logit_row_bytes as f64;
        assert!((ratio - 0.0128).abs() < 1e-4, "{ratio}");
        let none = ledger(&spec);
        spec.checkpointing = Checkpointing::Mlp;
        let mlp = ledger(&spec);
        let rows = spec.batch.n_rows;
        // Inside the output layer the trunk holds only h: the pre-activations and the
        // bag's output are gone (the last output is h itself).
        for p in [Point::ForwardLogits, Point::BackwardLogits] {
            let saved = (1024 + 1024 + 512) * rows * F32_BYTES;
            let (a, b) = (
                none.live_bytes(Placement::Device, p),
                mlp.live_bytes(Placement::Device, p),
            );
            assert!(a - b >= saved && a - b < saved + 4096, "{p:?}: {a} - {b}");
        }
        // They come back, recomputed, beside the output's gradients and dL/dh.
        assert!(mlp.points.contains(&Point::BackwardInput));
        assert!(!none.points.contains(&Point::BackwardInput));
        let at = |l: &Ledger| l.live_bytes(Placement::Device, Point::BackwardInput);
        assert!(at(&mlp) - at(&none) >= (1024 + 1024 + 512 + 512) * rows * F32_BYTES);
        assert!(e.peak_mlp_bytes <= e.peak_none_bytes);
    }

    #[test]
    fn a_linear_last_layer_saves_one_buffer_fewer_than_tanh() {
        use widebag_config::Activation::{Linear, Tanh};
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        spec.activations = vec![Tanh, Tanh];
        let (tanh, tanh_effect) = (ledger(&spec), checkpoint_effect(&spec).unwrap());
        spec.activations = vec![Tanh, Linear];
        let (linear, linear_effect) = (ledger(&spec), checkpoint_effect(&spec).unwrap());
        let rows = spec.batch.n_rows;
        let at = |l: &Ledger| l.live_bytes(Placement::Device, Point::ForwardLogits);
        // The last hidden layer (512 wide) keeps its output but no pre-activation.
        assert_eq!(at(&tanh) - at(&linear), 512 * rows * F32_BYTES);
        assert_eq!(
            tanh_effect.saved_bytes_per_example - linear_effect.saved_bytes_per_example,
            512 * F32_BYTES
        );
    }
}
