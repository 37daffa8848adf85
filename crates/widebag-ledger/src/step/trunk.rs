//! What the sparse layout's trunk (the bag, the band projections and the MLP) keeps for its
//! backward pass: with `model.checkpointing = "none"` autodiff saves each layer's activations in
//! the forward pass; with `"mlp"` the forward runs off the graph, keeping only the block input
//! (the gathered rows, listed with stage 2) and its output `h`, and the trunk is recomputed on
//! autodiff after the output layer's backward (`Point::BackwardInput`), beside the output
//! gradients, with the output's `dL/dh` held for it.

use widebag_config::bands::Band;
use widebag_config::{BandPlacement, Checkpointing};

use super::builder::Builder;
use super::spec::StepSpec;
use crate::{Category, Lifetime, Point};

/// Whether the trunk is recomputed in backward.
pub(super) fn recomputed(spec: &StepSpec) -> bool {
    spec.checkpointing == Checkpointing::Mlp
}

/// The trunk's activations: each layer's pre-activation and output, and each tail band's bag.
pub(super) fn activations(b: &mut Builder, spec: &StepSpec, bands: &[(Band, BandPlacement)]) {
    use Point::*;
    let rows = spec.batch.n_rows;
    let (saved, last) = if recomputed(spec) {
        b.f32(
            "h, the MLP's output (kept for the output layer; the rest is recomputed)",
            "output",
            &[rows, spec.last_hidden()],
            Category::Activations,
            Lifetime::span(ForwardLogits, BackwardEnd),
        );
        b.f32(
            "dL/dh (held for the recomputed trunk's backward)",
            "output",
            &[rows, spec.last_hidden()],
            Category::Temporaries,
            Lifetime::at(BackwardInput),
        );
        (Lifetime::at(BackwardInput), BackwardInput)
    } else {
        (Lifetime::span(ForwardLogits, BackwardEnd), BackwardEnd)
    };
    match recomputed(spec) {
        true => b.saved_layers(spec, BackwardInput, BackwardInput, last),
        false => b.saved_layers(spec, ForwardLogits, BackwardLogits, last),
    }
    for (k, (band, _)) in bands.iter().enumerate().skip(1) {
        b.f32(
            &format!("band {k} bag (saved by its projection matmul)"),
            "input",
            &[rows, band.dim as u64],
            Category::Activations,
            saved,
        );
    }
}
