//! What an evaluation pass holds beside the parameters and optimizer state the run keeps: the
//! held-out batch's buffers and gathered rows, each layer's activation (no autodiff: nothing is
//! saved), and per class chunk (or adaptive cluster) its `[batch, chunk]` scores; on the tensor
//! path also the masked copy, the chunk's top-K values and indices and the running
//! log-sum-exp; flex's host path reads the scores in place and keeps `[batch, K]` on the host,
//! and scores the sparse layout's full softmax by cache-sized class block, one per thread.
//! The evaluation peak is the persistent bytes plus the largest of these at once.

use serde::Serialize;
use widebag_config::Layout;

use super::spec::{EvalScores, StepSpec};
use crate::shapes::{self, F32_BYTES};
use crate::{Ledger, Placement, Point};

/// An evaluation pass's device bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EvalPeak {
    /// Parameters and optimizer state (the ledger's setup point).
    pub persistent_bytes: u64,
    /// What the pass adds, by name.
    pub temporaries: Vec<(String, u64)>,
    /// `persistent_bytes` plus every temporary.
    pub peak_bytes: u64,
    /// The largest single buffer among the temporaries (checked against the device's buffer
    /// limit).
    pub largest_bytes: u64,
}

/// A screened ranking's buffers ([`EvalScores::Bf16Screened`]): the output layer packed once
/// per evaluation (bf16 pairs in panels of 32 classes, each class's f32 weights as a row, its
/// norm and bias), the batch's rows as bf16 pairs, and per row the K best lower bounds and the
/// candidates' list (at most its pruning limit plus one task's classes).
fn screened_ranking(spec: &StepSpec, b: u64, k: u64) -> Vec<(String, u64)> {
    let (n, hidden) = (spec.n_classes, spec.last_hidden());
    let pairs = hidden.div_ceil(2);
    let panel = shapes::SCREEN_PANEL_COLS as u64;
    // Each class chunk ends its last panel early; on the host the layer is one chunk per
    // buffer limit.
    let chunks = n.div_ceil(
        shapes::class_chunk(
            spec.class_chunk as usize,
            n as usize,
            hidden as usize,
            b as usize,
            spec.device.max_buffer_bytes,
        )
        .max(1) as u64,
    );
    let panels = n.div_ceil(panel) + chunks;
    let task = (shapes::SCREEN_TASK_PANELS * shapes::SCREEN_PANEL_COLS) as u64;
    let list = (shapes::SCREEN_PRUNE_PER_K as u64 * k + shapes::SCREEN_PRUNE_SLACK as u64) + task;
    vec![
        (
            "bf16 class panels (screened ranking), every class".into(),
            panels * panel * pairs * 4,
        ),
        (
            "f32 class rows (screened ranking's rescoring), every class".into(),
            n * hidden * F32_BYTES,
        ),
        ("class norms and biases (screened ranking)".into(), n * 12),
        (
            "batch rows as bf16 pairs and their norms".into(),
            b * (pairs * 4 + 8),
        ),
        (
            "per row: K lower bounds and the candidates".into(),
            b * (k * 8 + list * 8),
        ),
    ]
}

/// The evaluation pass of `spec` with a top-`k` ranking, beside the training `ledger`.
pub fn eval_peak(spec: &StepSpec, ledger: &Ledger, k: u64) -> EvalPeak {
    let b = spec.batch.n_rows.max(1);
    let persistent_bytes = ledger.live_bytes(Placement::Device, Point::Setup);
    let mut t: Vec<(String, u64)> = Vec::new();
    // The batch's index and value buffers, and the gathered unique rows.
    t.push(("batch ids and values".into(), spec.batch.nnz * 2 * 4));
    let rows: u64 = spec
        .input_bands
        .iter()
        .map(|(band, _)| {
            spec.batch.n_unique.min(band.n_rows() as u64) * band.dim as u64 * F32_BYTES
        })
        .sum();
    t.push(("gathered rows".into(), rows));
    // Two layers' activations at once (a layer's input and output).
    let mut widest: Vec<u64> = spec.layer_sizes();
    widest.sort_unstable();
    let two: u64 = widest.iter().rev().take(2).sum();
    t.push(("hidden activations".into(), b * two * F32_BYTES));
    let chunk = if spec.adaptive() {
        spec.output_bands
            .iter()
            .map(|c| c.n_rows() as u64)
            .max()
            .unwrap_or(1)
            + spec.output_bands.len() as u64
    } else {
        shapes::class_chunk(
            spec.class_chunk as usize,
            spec.n_classes as usize,
            spec.last_hidden() as usize,
            spec.batch.n_rows as usize,
            spec.device.max_buffer_bytes,
        ) as u64
    };
    // Flex's host path scores the sparse layout's full softmax by class block, one scratch
    // block per thread, and reads each while it is in cache; elsewhere a chunk's scores at once.
    let by_blocks = spec.host_kernels() && spec.layout == Layout::Sparse && !spec.adaptive();
    let scores = match by_blocks {
        true if spec.eval_scores == EvalScores::Bf16Screened => {
            let cols = (shapes::SCREEN_TASK_PANELS * shapes::SCREEN_PANEL_COLS) as u64;
            let tasks = spec.n_classes.div_ceil(cols).min(spec.device.host_threads);
            let name = "screened class scores [batch, 512], one per thread".to_string();
            t.push((name, tasks * b * cols * F32_BYTES));
            t.extend(screened_ranking(spec, b, k));
            if spec.sampled.is_some_and(|s| s.cosine) {
                let name = "unit columns over the temperature (cosine), every class".to_string();
                t.push((name, (spec.last_hidden() + 1) * spec.n_classes * F32_BYTES));
            }
            b * cols * F32_BYTES
        }
        true => {
            let cols = (shapes::host_block_cols(b as usize) as u64).min(spec.n_classes.max(1));
            let blocks = spec.n_classes.div_ceil(cols).min(spec.device.host_threads);
            let name = "class score blocks [batch, block], one per thread".to_string();
            t.push((name, blocks * b * cols * F32_BYTES));
            if spec.sampled.is_some_and(|s| s.cosine) {
                // Cosine scores: every class's column copied to unit norm over the temperature,
                // with zero biases, for the block scorer.
                let name = "unit columns over the temperature (cosine), every class".to_string();
                t.push((name, (spec.last_hidden() + 1) * spec.n_classes * F32_BYTES));
            }
            b * cols * F32_BYTES
        }
        false => {
            t.push(("class scores [batch, chunk]".into(), b * chunk * F32_BYTES));
            b * chunk * F32_BYTES
        }
    };
    if !spec.host_kernels() {
        t.push(("masked scores [batch, chunk]".into(), b * chunk * F32_BYTES));
        let k = k.min(chunk).max(1);
        t.push((
            "chunk top-K values and indices".into(),
            b * k * (F32_BYTES + 4),
        ));
        t.push(("running log-sum-exp".into(), b * 2 * F32_BYTES));
        t.push((
            "target and mask indices".into(),
            (spec.batch.n_targets + spec.batch.nnz) * 4,
        ));
    }
    // Single buffers: one chunk's scores, one layer's activation (rows and entries go up in
    // pieces within the limit, as in training).
    let largest_bytes = scores.max(b * widest.last().copied().unwrap_or(1) * F32_BYTES);
    let peak_bytes = persistent_bytes + t.iter().map(|x| x.1).sum::<u64>();
    EvalPeak {
        persistent_bytes,
        temporaries: t,
        peak_bytes,
        largest_bytes,
    }
}

#[cfg(test)]
mod tests {
    use widebag_config::DenseOptim;

    use super::super::spec::seed_spec;
    use super::*;

    #[test]
    fn evaluating_the_seed_model_holds_less_than_a_training_step() {
        let spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        let ledger = super::super::ledger(&spec);
        let e = eval_peak(&spec, &ledger, 20);
        let train = ledger.peak(Placement::Device).bytes;
        assert!(e.peak_bytes < train, "{} vs {train}", e.peak_bytes);
        assert!(e.peak_bytes > e.persistent_bytes);
        // The scores of one chunk: batch 128 × the chunk the buffer limit allows.
        let chunk = shapes::class_chunk(0, 240_000, 512, 128, spec.device.max_buffer_bytes) as u64;
        let scores = e
            .temporaries
            .iter()
            .find(|t| t.0.starts_with("class scores"))
            .unwrap();
        assert_eq!(scores.1, 128 * chunk * 4);
        assert!(e.largest_bytes <= spec.device.max_buffer_bytes);
    }

    /// On flex's host kernels the full softmax is scored one `[batch, block]` block per
    /// thread, not a chunk at a time.
    #[test]
    fn flex_scores_the_full_softmax_by_a_block_per_thread() {
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        spec.device.host_threads = 2;
        let ledger = super::super::ledger(&spec);
        let e = eval_peak(&spec, &ledger, 20);
        let named = |prefix: &str| e.temporaries.iter().find(|t| t.0.starts_with(prefix));
        assert!(named("class scores").is_none(), "{:?}", e.temporaries);
        let cols = shapes::host_block_cols(128) as u64;
        assert_eq!(named("class score blocks").unwrap().1, 2 * 128 * cols * 4);
        assert!(e.largest_bytes >= 128 * cols * 4);
    }
}
