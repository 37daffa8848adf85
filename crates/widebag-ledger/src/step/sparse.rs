//! The sparse layout's ledger, one function per numbered stage of the trainer's step
//! (`train_step` in widebag-model): setup, 1. data, 2. unique rows, 3. forward, 4. backward,
//! 5. row updates, 6. dense updates (a sampled output's column update; the dense optimizers
//! allocate nothing of their own), 7. measure (nothing).

use std::collections::BTreeMap;

use widebag_config::bands::Band;
use widebag_config::{BandPlacement, TableOptim};

use super::builder::Builder;
use super::spec::{OutputLayerKind, OutputUpdate, StepSpec};
use super::{adaptive, host, sampled, trunk};
use crate::shapes::{self, ClassChunk, F32_BYTES, I32_BYTES};
use crate::{Category, Entry, Ledger, Lifetime, Placement, Point, Pool};

/// The ledger of one training step of `spec` in the sparse layout (without the step count that
/// [`super::ledger`] adds for both layouts).
pub(super) fn ledger(spec: &StepSpec) -> Ledger {
    let cuts = Cuts::of(spec);
    // `Point::BackwardInput` is sampled only where the trunk is recomputed: its saved
    // activations are alive there.
    let points = Point::ALL
        .into_iter()
        .filter(|&p| p != Point::BackwardInput || trunk::recomputed(spec))
        .collect();
    let mut b = Builder::new(spec, points, Vec::new());
    setup_tables(&mut b, spec, &cuts);
    setup_dense(&mut b, spec, &cuts);
    data(&mut b, spec, &cuts);
    unique_rows(&mut b, &cuts);
    forward(&mut b, spec, &cuts);
    backward(&mut b, spec, &cuts);
    row_updates(&mut b, spec, &cuts);
    if spec.sampled.is_some() {
        sampled::update(&mut b, spec);
    }
    // 6. dense updates and 7. measure add no tensor: the dense optimizers update each parameter
    // in place and free the gradients `setup_dense` lists with their parameters (their lifetimes
    // end at `Point::DenseUpdate`); at `Point::StepEnd` only what lives across steps is alive.
    b.ledger
}

/// How the step's tensors are cut to the device's largest buffer, computed once for every
/// stage: each band's shards, the batch's gathered segments and the output's class chunks.
struct Cuts {
    /// Input bands and where each lives.
    bands: Vec<(Band, BandPlacement)>,
    /// Per band, the rows of each shard of its table.
    shard_rows: Vec<Vec<usize>>,
    /// Per band, how its unique ids are gathered: one run per shard touched.
    segments: Vec<Segments>,
    /// The output layer's class chunks (empty for the adaptive softmax) and their size.
    chunks: Vec<ClassChunk>,
    chunk_classes: usize,
}

/// One band's gathered rows: `n` segments of at most `rows_each` rows, `dim` wide.
#[derive(Clone, Copy)]
struct Segments {
    n: u64,
    rows_each: u64,
    dim: u64,
}

impl Cuts {
    fn of(spec: &StepSpec) -> Self {
        let max_buf = spec.device.max_buffer_bytes;
        let bands = spec.bands();
        let shard_rows: Vec<Vec<usize>> = bands
            .iter()
            .map(|(band, _)| shapes::shard_rows(band.n_rows(), band.dim, max_buf))
            .collect();
        // Each band's unique ids are gathered per shard they touch.
        let segments = bands
            .iter()
            .zip(&shard_rows)
            .zip(spec.unique_per_band())
            .map(|(((band, _), shards), u)| {
                let n = (shards.len() as u64).min(u);
                Segments {
                    n,
                    rows_each: if n == 0 { 0 } else { u.div_ceil(n) },
                    dim: band.dim as u64,
                }
            })
            .collect();
        let (chunks, chunk_classes) = if spec.adaptive() {
            (Vec::new(), 0)
        } else {
            let chunk = shapes::class_chunk(
                spec.class_chunk as usize,
                spec.n_classes as usize,
                spec.last_hidden() as usize,
                spec.output_rows() as usize,
                max_buf,
            );
            (shapes::class_chunks(spec.n_classes as usize, chunk), chunk)
        };
        Self {
            bands,
            shard_rows,
            segments,
            chunks,
            chunk_classes,
        }
    }

    /// The ledger layer of band `k`'s table and its per-step rows.
    fn band_layer(&self, k: usize) -> String {
        if self.bands.len() == 1 {
            "table".to_string()
        } else {
            format!("table.band{k}")
        }
    }
}

/// The batch's buffers and gathered rows: alive from the forward pass to the end of backward.
fn batch_life() -> Lifetime {
    Lifetime::span(Point::ForwardLogits, Point::BackwardEnd)
}

/// Setup (`Point::Setup`), tables: each band's shards and their optimizer state in the
/// persistent pool (exact sizes), on the device or in host memory.
fn setup_tables(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    let table_states: &[&str] = match spec.table_optim {
        TableOptim::Sgd | TableOptim::RowwiseAdagrad => &[],
        TableOptim::Momentum => &["momentum"],
        TableOptim::Adam => &["lazy_adam.m", "lazy_adam.v"],
        TableOptim::AdamW => &["lazy_adamw.m", "lazy_adamw.v"],
    };
    for (k, ((band, placement), shards)) in cuts.bands.iter().zip(&cuts.shard_rows).enumerate() {
        let layer = cuts.band_layer(k);
        let placement = match placement {
            BandPlacement::Device => Placement::Device,
            BandPlacement::Host => Placement::Host,
        };
        // Rows per shard follow the f32 rule (gathered rows are f32) whatever the storage.
        let (table_bytes, state_bytes) = (spec.band_dtype(k).bytes(), spec.state_dtype.bytes());
        let mut table = |name: String, shape: [u64; 2], count: u64, (category, element_bytes)| {
            b.ledger.push(Entry {
                name,
                layer: layer.clone(),
                shape: shape.to_vec(),
                element_bytes,
                count,
                category,
                placement,
                pool: Pool::Persistent,
                lifetime: Lifetime::Persistent,
            });
        };
        for (&r, &count) in &count_by_rows(shards) {
            let shape = [r as u64, band.dim as u64];
            let params = (Category::Parameters, table_bytes);
            table("table shard".into(), shape, count, params);
            for s in table_states {
                let state = (Category::OptimizerState, state_bytes);
                table(format!("table shard {s}"), shape, count, state);
            }
        }
        if spec.table_optim == TableOptim::RowwiseAdagrad {
            // One accumulator per row, an `[n_rows, 1]` table sharded by the same buffer limit.
            let acc_shards = shapes::shard_rows(band.n_rows(), 1, spec.device.max_buffer_bytes);
            for (&r, &count) in &count_by_rows(&acc_shards) {
                table(
                    "row-wise Adagrad accumulator shard".into(),
                    [r as u64, 1],
                    count,
                    (Category::OptimizerState, F32_BYTES),
                );
            }
        }
        if spec.table_optim == TableOptim::AdamW {
            // The step each row was last updated at, on the host (catch-up of untouched rows).
            b.ledger.push(Entry {
                name: "lazy AdamW last step per row".into(),
                layer: layer.clone(),
                shape: vec![band.n_rows() as u64],
                element_bytes: 8,
                count: 1,
                category: Category::OptimizerState,
                placement: Placement::Host,
                pool: Pool::Persistent,
                lifetime: Lifetime::Persistent,
            });
        }
    }
}

/// Shards grouped by their rows: rows → how many shards have them.
fn count_by_rows(shards: &[usize]) -> BTreeMap<usize, u64> {
    let mut by_rows = BTreeMap::new();
    for &r in shards {
        *by_rows.entry(r).or_default() += 1;
    }
    by_rows
}

/// Setup (`Point::Setup`), dense parameters with their state and gradient slots: gradients of
/// the bag bias, the band projections and the hidden layers come out of autodiff (stage 4);
/// the output layer's are built chunk by chunk inside the output backward. All are applied and
/// freed by stage 6.
fn setup_dense(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    use Point::*;
    let dim = spec.dim;
    let dense_grad = Lifetime::span(BackwardEnd, DenseUpdate);
    b.dense_param("bag.bias", "input", &[1, dim], spec.dense_optim, dense_grad);
    for (k, (band, _)) in cuts.bands.iter().enumerate().skip(1) {
        b.dense_param(
            &format!("input_band.{k}.projection"),
            "input",
            &[band.dim as u64, dim],
            spec.dense_optim,
            dense_grad,
        );
    }
    b.hidden_params(spec, dense_grad);
    let output_grad = Lifetime::span(BackwardLogits, DenseUpdate);
    if spec.adaptive() {
        adaptive::params(b, spec, output_grad);
        return;
    }
    if spec.sampled.is_some() {
        sampled::params(b, spec, &cuts.chunks, cuts.chunk_classes);
        return;
    }
    let last = spec.last_hidden();
    // Stepped inside the backward pass, a chunk's gradient is never whole.
    let in_backward = spec.output_update() == OutputUpdate::InBackward;
    for c in &cuts.chunks {
        let n = c.n as u64;
        let layer = format!("output.{}", c.offset / cuts.chunk_classes);
        for (what, shape) in [("weight", [last, n]), ("bias", [1, n])] {
            let name = format!("{layer}.{what}");
            match in_backward {
                true => b.param_with_state(&name, &layer, &shape, spec.dense_optim),
                false => b.dense_param(&name, &layer, &shape, spec.dense_optim, output_grad),
            }
        }
    }
}

/// Stage 1, data: the batch's index and value buffers, in bag pieces within the buffer limit and
/// at least one per table segment, and the targets.
fn data(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    let n_segments = cuts.segments.iter().map(|s| s.n).sum::<u64>().max(1);
    let pieces = spec
        .batch
        .nnz
        .div_ceil(shapes::max_bag_entries(spec.dim as usize, spec.device.max_buffer_bytes) as u64)
        .max(n_segments);
    let per_piece = spec.batch.nnz.div_ceil(pieces);
    for what in [
        "bag entry positions (i32)",
        "bag entry rows (i32)",
        "bag entry values",
    ] {
        b.add(
            what,
            "batch",
            &[per_piece],
            I32_BYTES,
            pieces,
            Category::BatchBuffers,
            Pool::Dynamic,
            batch_life(),
        );
    }
    let t = spec.batch.n_targets;
    b.add(
        "target (row, class) pairs (i32)",
        "batch",
        &[t, 2],
        I32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        batch_life(),
    );
    b.add(
        "target weights",
        "batch",
        &[t],
        F32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        batch_life(),
    );
    b.f32(
        "target weight per row",
        "batch",
        &[spec.batch.n_rows, 1],
        Category::BatchBuffers,
        batch_life(),
    );
}

/// Stage 2, unique rows: each band's unique rows gathered per segment, each a gradient leaf.
fn unique_rows(b: &mut Builder, cuts: &Cuts) {
    for (k, s) in cuts.segments.iter().enumerate() {
        if s.n > 0 {
            b.add(
                "gathered unique rows (gradient leaves)",
                &cuts.band_layer(k),
                &[s.rows_each, s.dim],
                F32_BYTES,
                s.n,
                Category::Activations,
                Pool::Dynamic,
                batch_life(),
            );
        }
    }
}

/// Stage 3, forward: what autodiff saves of the bag and each layer, each tail band's bag, then
/// the output layer: the adaptive softmax, or the full softmax one class chunk at a time.
fn forward(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    trunk::activations(b, spec, &cuts.bands);
    match spec.output_layer() {
        OutputLayerKind::HostAdaptiveSoftmax => {
            host::adaptive_softmax(b, spec, adaptive::head_classes(spec))
        }
        OutputLayerKind::HostSoftmax => host::full_softmax(b, spec, cuts.chunks[0].n as u64),
        OutputLayerKind::AdaptiveSoftmax => adaptive::activations(b, spec),
        OutputLayerKind::CubeAdaptiveSoftmax => adaptive::cube_activations(b, spec),
        OutputLayerKind::ChunkedSoftmax => chunked_forward(b, spec, cuts),
        OutputLayerKind::Sampled => sampled::forward(b, spec),
    }
}

/// The chunked full softmax's forward on tensors: the targets' flat indices, one chunk's
/// logits at a time (or its tiles' pairs), each row's log-sum-exp kept for backward.
fn chunked_forward(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    use Point::*;
    b.half_hidden(spec);
    b.add(
        "target flat indices per class chunk (i32, for the loss)",
        "output",
        &[spec.batch.n_targets],
        I32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        Lifetime::span(ForwardLogits, BackwardEnd),
    );
    match spec.tiles_logits() {
        true => tile_pairs(b, spec, cuts.chunks[0].n as u64),
        false => chunk_logits(b, spec, cuts),
    }
    let (sum, at) = (
        "running sum of the targets' logits",
        Lifetime::at(ForwardLogits),
    );
    b.f32(sum, "output", &[1], Category::Temporaries, at);
    b.f32(
        "log-sum-exp per row",
        "output",
        &[spec.batch.n_rows, 1],
        Category::Activations,
        Lifetime::span(ForwardEnd, BackwardEnd),
    );
}

/// One chunk's logits at a time; kept for the backward pass (which then makes none again),
/// every chunk's logits stay to the forward pass's end: the first chunk's from its moment, the
/// others' after it.
fn chunk_logits(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    use Point::*;
    let rows = spec.batch.n_rows;
    let kept = spec.keeps_logits();
    let first_to = if kept { ForwardEnd } else { ForwardLogits };
    b.f32(
        "logits of one class chunk",
        "output",
        &[rows, cuts.chunks[0].n as u64],
        Category::Logits,
        Lifetime::span(ForwardLogits, first_to),
    );
    // Kept, each other chunk's logits are a buffer of their own (the chunks are of one width
    // but the last).
    let mut others: BTreeMap<u64, u64> = BTreeMap::new();
    for c in &cuts.chunks[1..] {
        *others.entry(c.n as u64).or_default() += 1;
    }
    for (n, count) in others.into_iter().filter(|_| kept) {
        b.add(
            "the other chunks' logits, kept for the backward pass",
            "output",
            &[rows, n],
            F32_BYTES,
            count,
            Category::Logits,
            Pool::Dynamic,
            Lifetime::at(ForwardEnd),
        );
    }
}

/// The logits formed tile by tile in the CubeCL kernels (`model.logits = "tiled"`): each row's
/// `(max, sum)` per 64-class tile of the first chunk. (The targets' rows of `h` and columns of
/// `W` gathered for their logits run fused into their sum: measured on lavapipe, no buffer of
/// theirs is alive at this point.)
fn tile_pairs(b: &mut Builder, spec: &StepSpec, first: u64) {
    let tiles = first.div_ceil(shapes::LOGIT_TILE as u64);
    b.f32(
        "each row's (max, sum) per 64-class tile of one class chunk",
        "output",
        &[spec.batch.n_rows, 2 * tiles],
        Category::Logits,
        Lifetime::at(Point::ForwardLogits),
    );
}

/// Stage 4, backward: the full softmax's output layer by chunk (its weight gradients are
/// listed with the parameters), then autodiff's row gradients per segment.
fn backward(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    use Point::*;
    let rows = spec.batch.n_rows;
    if spec.output_layer() == OutputLayerKind::Sampled {
        sampled::backward(b, spec);
    }
    if spec.output_layer() == OutputLayerKind::ChunkedSoftmax {
        let last_chunk = cuts.chunks[cuts.chunks.len() - 1].n as u64;
        b.f32(
            "logit gradient of the last chunk",
            "output",
            &[rows, last_chunk],
            Category::Logits,
            Lifetime::at(BackwardLogits),
        );
        b.f32(
            "dL/dh (accumulated over chunks)",
            "output",
            &[rows, spec.last_hidden()],
            Category::Temporaries,
            Lifetime::at(BackwardLogits),
        );
        // On a device with its own memory a chunk's `dL/dh = g · Wᵀ` sums its classes in
        // blocks (`shapes::split_k_blocks`): their `[blocks, rows, last]` partial products are
        // freed before the chunk's weight gradient is formed, so they are at no point here
        // (measured on lavapipe: pricing them here over-predicted this point by their bytes).
    }
    for (k, s) in cuts.segments.iter().enumerate() {
        if s.n > 0 {
            b.add(
                "row gradients",
                &cuts.band_layer(k),
                &[s.rows_each, s.dim],
                F32_BYTES,
                s.n,
                Category::RowGradients,
                Pool::Dynamic,
                Lifetime::span(BackwardEnd, TableUpdate),
            );
        }
    }
}

/// Stage 5, row updates: the table optimizer's temporaries for one segment at a time, the
/// largest segment's (`[rows, dim]` for moments, `[rows, 1]` for row-wise Adagrad).
fn row_updates(b: &mut Builder, spec: &StepSpec, cuts: &Cuts) {
    let (per_segment, seg_dim) = cuts
        .segments
        .iter()
        .map(|s| (s.rows_each, s.dim))
        .max_by_key(|&(r, d)| match spec.table_optim {
            TableOptim::RowwiseAdagrad => r,
            _ => r * d,
        })
        .unwrap_or((0, spec.dim));
    let (what, cols, n) = match spec.table_optim {
        TableOptim::Sgd => ("", 0, 0),
        TableOptim::Adam => ("lazy Adam moment deltas (dm, dv)", seg_dim, 2),
        TableOptim::AdamW => (
            "lazy AdamW moment deltas (dm, dv; the rows' decay fuses into the update)",
            seg_dim,
            2,
        ),
        TableOptim::Momentum => (
            "momentum buffer delta (the gradient's buffer is reused)",
            seg_dim,
            1,
        ),
        TableOptim::RowwiseAdagrad => ("mean squared gradient per row", 1, 1),
    };
    b.add(
        what,
        "table",
        &[per_segment, cols],
        F32_BYTES,
        n,
        Category::Temporaries,
        Pool::Dynamic,
        Lifetime::at(Point::TableUpdate),
    );
}

#[cfg(test)]
mod tests {
    use widebag_config::{DenseOptim, Layout};

    use super::super::ledger;
    use super::super::spec::{BatchFacts, seed_spec};
    use crate::{Category, Entry, Placement};

    #[test]
    fn sparse_layout_has_no_width_sized_gradient_or_buffer_over_the_limit() {
        let spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        let l = ledger(&spec);
        let row_bytes = spec.dim * 4;
        for e in &l.entries {
            assert!(e.bytes_each() <= spec.device.max_buffer_bytes, "{}", e.name);
            if matches!(
                e.category,
                Category::RowGradients | Category::DenseGradients
            ) && e.layer == "table"
            {
                assert!(e.bytes() <= spec.batch.n_unique.div_ceil(1) * row_bytes + row_bytes * 8);
            }
        }
        let rows: u64 = l
            .entries
            .iter()
            .filter(|e| e.category == Category::RowGradients)
            .map(Entry::bytes)
            .sum();
        assert!(rows < 2 * spec.batch.n_unique * row_bytes);
        // The dense layout of the same model does not fit a 128 MiB buffer.
        let dense = ledger(&seed_spec(Layout::Dense, DenseOptim::Adam));
        assert!(dense.largest_allocation().unwrap().1 > 128 << 20);
        assert_eq!(dense.peak(Placement::Host).bytes, 8, "Adam's step count");
    }

    /// Half-precision output products add `h`'s half copy from the first chunk's logits to the
    /// last chunk's gradient, in both layouts, and nothing at any other point.
    #[test]
    fn half_output_products_price_the_half_copy_of_h() {
        use widebag_config::Precision;

        use crate::Point;
        for layout in [Layout::Sparse, Layout::Dense] {
            let f32_spec = seed_spec(layout, DenseOptim::Adam);
            let at = |spec: &super::super::spec::StepSpec, p: Point| -> u64 {
                ledger(spec)
                    .categories_at(Placement::Device, p)
                    .values()
                    .sum()
            };
            for (precision, bytes) in [(Precision::F16, 2), (Precision::Bf16, 2)] {
                let mut half = f32_spec.clone();
                half.output_precision = precision;
                let copy = f32_spec.batch.n_rows * f32_spec.last_hidden() * bytes;
                for p in ledger(&f32_spec).points {
                    let extra = at(&half, p) - at(&f32_spec, p);
                    let alive = matches!(p, Point::ForwardLogits | Point::ForwardEnd)
                        || p == Point::BackwardLogits;
                    assert_eq!(extra, if alive { copy } else { 0 }, "{layout:?} {p:?}");
                }
            }
        }
    }

    #[test]
    fn peak_grows_with_the_batch() {
        let mut last = 0;
        for rows in [32u64, 128, 512, 2048] {
            let mut spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
            spec.batch = BatchFacts {
                n_rows: rows,
                nnz: 20 * rows,
                n_unique: 10 * rows,
                n_targets: rows,
            };
            let peak = ledger(&spec).peak(Placement::Device).bytes;
            assert!(peak > last);
            last = peak;
        }
    }
}
