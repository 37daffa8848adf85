//! The ledger of a configured run: every tensor one training step of the sparse or the dense
//! layout holds, following what widebag's trainer allocates and what burn's autodiff keeps.
//!
//! What burn 0.22 keeps, as read from `burn-autodiff` and checked against the allocator:
//! - `relu` saves its *input* (the pre-activation) and `matmul` saves both operands, so each
//!   layer keeps its pre-activation and its output `[batch, size]` until backward has passed it.
//! - `mul` by a tensor that needs no gradient saves only that tensor: the bag's weighted entries
//!   `[nnz, dim]` are not kept, only the `[nnz]` values.
//! - Saved tensors are released as backward passes them; gradients are new buffers.
//! - Elementwise chains are fused, so an `exp`/`sub`/`mul` chain materialises only its output,
//!   and an op on a tensor nobody else holds writes in place.
//!
//! Sparse layout (`sparse`), point by point: parameters and optimizer state always; from the
//! forward pass on, the batch's index and value buffers, the gathered unique rows (the gradient
//! leaves) and each layer's saved tensors; inside the output layer one class chunk's
//! `[batch, chunk]` logits and dense targets (forward), then every output gradient, the last
//! chunk's logit gradient and `dL/dh` (backward); after backward the row gradients and dense
//! gradients; inside the lazy-Adam row update two `[rows, dim]` temporaries. The adaptive
//! softmax's entries are in `adaptive`.
//!
//! Dense layout (`dense`): the dense `[batch, width]` input, `[batch, classes]` targets and one
//! saved `[batch, classes]` buffer of `log_softmax`, each layer's saved tensors, then a gradient
//! for every weight.
//!
//! On flex (`DeviceFacts::host_threads` > 0) the output layer runs on host kernels, whose
//! temporaries (a logit block and a `dL/dh` partial per thread, the dense layout's kept logits)
//! replace the chunk-wide ones above: `host`.
//!
//! An evaluation pass (held-out metrics) holds less than a training step: `eval`.
//!
//! One rank of a multi-process run (`StepSpec::ranks`) holds its block of each table, its class
//! block of the full softmax and the exchanges' buffers: `exchange`.
//!
//! What the ledger is told (device, batch, model) is in `spec`; how entries are written, in
//! `builder`.

mod adaptive;
mod builder;
mod by_layout;
mod checkpoint;
mod dense;
mod eval;
mod exchange;
mod host;
mod sampled;
mod sparse;
mod spec;
mod trunk;

pub use by_layout::ledger;
pub use checkpoint::{CheckpointEffect, checkpoint_effect};
pub use eval::{EvalPeak, eval_peak};
pub use exchange::{Traffic, names as collective_names, traffic};
pub use spec::{
    BatchFacts, DeviceFacts, EvalScores, OutputLayerKind, OutputUpdate, RankFacts, SampledFacts,
    SampledLossKind, Sampling, StepSpec,
};
