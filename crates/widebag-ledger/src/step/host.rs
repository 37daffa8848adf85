//! What flex's host kernels hold in place of the tensor path's chunk-wide output temporaries
//! (`widebag_model::cpu`): one `[batch, block]` logit block per thread
//! (`shapes::host_block_cols`), one `[batch, hidden]` `dL/dh` partial per thread, and host
//! copies of the softmax's input (`h`, and each tail cluster's projected rows). The dense
//! layout, and the sparse layout's full softmax with `model.logits = "keep"`, keep the full
//! `[batch, classes]` logits instead of the blocks, turned into their gradient in place (the
//! adaptive softmax keeps its head's `[batch, head]`, its tails still in blocks); the dense
//! layout builds no dense targets. Chosen when the device reports host threads (flex).

use super::adaptive;
use super::builder::Builder;
use super::spec::StepSpec;
use crate::shapes::{self, F32_BYTES};
use crate::{Category, Lifetime, Point, Pool};

/// One logit block per thread, for softmaxes over at most `classes` classes of `rows` rows.
pub(super) fn blocks(
    b: &mut Builder,
    spec: &StepSpec,
    layer: &str,
    rows: u64,
    classes: u64,
    at: Point,
) {
    let cols = (shapes::host_block_cols(rows as usize) as u64).min(classes);
    b.add(
        "logit block (one per host thread)",
        layer,
        &[rows, cols],
        F32_BYTES,
        spec.device.host_threads,
        Category::Logits,
        Pool::Dynamic,
        Lifetime::at(at),
    );
}

/// `dL/dh` partials, one per thread, and their sum.
pub(super) fn dh_partials(b: &mut Builder, spec: &StepSpec, rows: u64) {
    b.add(
        "dL/dh (one partial per host thread, and their sum)",
        "output",
        &[rows, spec.last_hidden()],
        F32_BYTES,
        spec.device.host_threads + 1,
        Category::Temporaries,
        Pool::Dynamic,
        Lifetime::at(Point::BackwardLogits),
    );
}

/// The softmax's input `h` copied out of autodiff for the kernel, and each row's log-sum-exp.
pub(super) fn host_input(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let rows = spec.output_rows();
    b.f32(
        "h on the host (the kernel's input)",
        "output",
        &[rows, spec.last_hidden()],
        Category::Activations,
        Lifetime::span(ForwardLogits, BackwardEnd),
    );
    b.f32(
        "log-sum-exp per row",
        "output",
        &[rows, 1],
        Category::Activations,
        Lifetime::span(ForwardEnd, BackwardEnd),
    );
}

/// Sparse layout, full softmax: forward and backward over blocks of the widest class chunk.
pub(super) fn full_softmax(b: &mut Builder, spec: &StepSpec, chunk_classes: u64) {
    if spec.keeps_logits() {
        return kept_logits(b, spec);
    }
    // Across ranks the class-split layer scores the global batch's rows (`StepSpec::output_rows`).
    let rows = spec.output_rows();
    host_input(b, spec);
    blocks(b, spec, "output", rows, chunk_classes, Point::ForwardLogits);
    blocks(
        b,
        spec,
        "output",
        rows,
        chunk_classes,
        Point::BackwardLogits,
    );
    dh_partials(b, spec, rows);
}

/// Sparse layout, adaptive softmax: the head's and each tail's softmax in blocks (one softmax
/// at a time), and per tail cluster with targets the rows autodiff selects and projects, with
/// the projection's host copy.
pub(super) fn adaptive_softmax(b: &mut Builder, spec: &StepSpec, head_classes: u64) {
    use Point::*;
    let rows = spec.batch.n_rows;
    let last = spec.last_hidden();
    host_input(b, spec);
    // With `model.logits = "keep"` the head's logits are kept whole; the blocks serve the tails.
    let kept = spec.keeps_logits();
    if kept {
        b.f32(
            "head logits (kept by the host softmax, then their gradient in place)",
            "output.head",
            &[rows, head_classes],
            Category::Logits,
            Lifetime::span(ForwardLogits, BackwardLogits),
        );
    }
    let widest = spec
        .output_bands
        .iter()
        .skip(1)
        .map(|c| c.n_rows() as u64)
        .fold(if kept { 0 } else { head_classes }, u64::max);
    blocks(b, spec, "output", rows, widest, ForwardLogits);
    blocks(b, spec, "output", rows, widest, BackwardLogits);
    dh_partials(b, spec, rows);
    for (k, c) in spec.output_bands.iter().enumerate().skip(1) {
        let cluster_rows = adaptive::cluster_rows(spec, k);
        if cluster_rows == 0 {
            continue;
        }
        b.f32(
            "selected hidden rows, their projection and its host copy",
            &format!("output.tail.{k}"),
            &[cluster_rows, last + 2 * c.dim as u64],
            Category::Activations,
            Lifetime::span(ForwardLogits, BackwardEnd),
        );
    }
}

/// The full logits, kept from the forward pass and turned into their gradient in place by the
/// backward pass (the dense layout; the sparse layout with `model.logits = "keep"`).
pub(super) fn kept_logits(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let rows = spec.batch.n_rows;
    host_input(b, spec);
    b.f32(
        "logits (kept by the host softmax, then their gradient in place)",
        "output",
        &[rows, spec.n_classes],
        Category::Logits,
        Lifetime::span(ForwardLogits, BackwardLogits),
    );
    dh_partials(b, spec, rows);
}

#[cfg(test)]
mod tests {
    use widebag_config::{DenseOptim, Layout};

    use super::super::ledger;
    use super::super::spec::seed_spec;
    use crate::{Category, Placement};

    #[test]
    fn flex_prices_a_block_per_thread_instead_of_a_chunk() {
        let tensor = seed_spec(Layout::Sparse, DenseOptim::Adam);
        let mut host = tensor.clone();
        host.device.host_threads = 2;
        let (t, h) = (ledger(&tensor), ledger(&host));
        let logits = |l: &crate::Ledger| {
            l.entries
                .iter()
                .filter(|e| e.category == Category::Logits)
                .map(|e| e.bytes())
                .max()
                .unwrap()
        };
        // Seed batch 128: 2,048-column blocks, two threads: 2 · 128 · 2,048 · 4 bytes.
        assert_eq!(logits(&h), 2 * 128 * 2048 * 4);
        assert!(
            logits(&t) > 10 * logits(&h),
            "{} vs {}",
            logits(&t),
            logits(&h)
        );
        assert!(h.peak(Placement::Device).bytes < t.peak(Placement::Device).bytes);
        // Parameters, state and gradients are the same on both paths.
        let params = |l: &crate::Ledger| {
            l.entries
                .iter()
                .filter(|e| matches!(e.category, Category::Parameters | Category::OptimizerState))
                .map(|e| e.bytes())
                .sum::<u64>()
        };
        assert_eq!(params(&t), params(&h));

        // The dense layout keeps its full logits either way; neither path builds dense targets.
        let tensor = seed_spec(Layout::Dense, DenseOptim::Adam);
        let mut host = tensor.clone();
        host.device.host_threads = 2;
        let names =
            |l: &crate::Ledger| l.entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        let h = ledger(&host);
        assert!(
            names(&ledger(&tensor))
                .iter()
                .any(|n| n.starts_with("logits (kept"))
        );
        assert!(!names(&ledger(&tensor)).iter().any(|n| n == "dense targets"));
        assert!(!names(&h).iter().any(|n| n == "dense targets"));
        assert_eq!(logits(&h), 128 * 240_000 * 4);
    }

    /// Bytes of the entries whose name starts with `name`.
    fn named(l: &crate::Ledger, name: &str) -> u64 {
        l.entries
            .iter()
            .filter(|e| e.name.starts_with(name))
            .map(|e| e.bytes())
            .sum()
    }

    #[test]
    fn kept_logits_replace_the_blocks_and_cost_the_full_logits() {
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        spec.device.host_threads = 2;
        let blocks = ledger(&spec);
        spec.logits = widebag_config::Logits::Keep;
        let kept = ledger(&spec);
        assert_eq!(named(&kept, "logit block"), 0);
        assert_eq!(named(&kept, "logits (kept"), 128 * 240_000 * 4);
        assert_eq!(named(&blocks, "logits (kept"), 0);
        assert!(named(&blocks, "logit block") > 0);
        let peak = |l: &crate::Ledger| l.peak(Placement::Device).bytes;
        assert!(peak(&kept) > peak(&blocks));
        // On the tensor path (wgpu) the key changes nothing.
        spec.device.host_threads = 0;
        let tensor_kept = ledger(&spec);
        spec.logits = widebag_config::Logits::Recompute;
        assert_eq!(peak(&tensor_kept), peak(&ledger(&spec)));
    }

    #[test]
    fn the_adaptive_softmax_keeps_its_heads_logits_and_blocks_its_tails() {
        use widebag_config::bands::Band;
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        spec.device.host_threads = 2;
        spec.output_bands = vec![
            Band {
                start: 0,
                end: 20_000,
                dim: 512,
            },
            Band {
                start: 20_000,
                end: 240_000,
                dim: 128,
            },
        ];
        let blocks = ledger(&spec);
        spec.logits = widebag_config::Logits::Keep;
        let kept = ledger(&spec);
        // The head's 20,000 classes and one token for the tail cluster, 128 rows.
        assert_eq!(named(&kept, "head logits (kept"), 128 * 20_001 * 4);
        assert_eq!(named(&blocks, "head logits (kept"), 0);
        // The tail still scores in blocks.
        assert_eq!(named(&kept, "logit block"), named(&blocks, "logit block"));
        let peak = |l: &crate::Ledger| l.peak(Placement::Device).bytes;
        assert!(peak(&kept) > peak(&blocks));
    }
}
