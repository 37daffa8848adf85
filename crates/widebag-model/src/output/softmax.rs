//! Full-softmax cross-entropy over many classes, computed in class chunks with a running max and
//! sum, so the `batch × classes` logits never sit in one buffer.
//!
//! The output layer is `z = h W + b` with `W` split by classes into chunks. Targets are a
//! weighted bag per row (`y`, one entry of weight 1 for next-id targets), and the loss of row `r`
//! is `sum_j y_rj * (logsumexp(z_r) - z_rj)`, averaged over rows. Both passes run off autodiff:
//!
//! 1. forward: per chunk, update the running row max `m` and the rescaled sum `s`, and accumulate
//!    `sum_j y_rj z_rj`; then `lse = m + ln s`;
//! 2. backward: per chunk, recompute `z` (or take it kept from pass 1, `Logits::Keep`: one
//!    output product fewer, the `[batch, classes]` logits alive in between), form
//!    `g = (w_r softmax(z) - y) / B` and accumulate `dW = hᵀ g`, `db = sum_r g`, `dh += g Wᵀ`
//!    ([`backward`]); or take `dh += g Wᵀ` and hand `g` to the caller, which takes the chunk's
//!    optimizer step from it at once ([`backward_applying`]: the CubeCL kernels' fused step).
//!
//! Recomputing, peak temporary memory is a few `[batch, chunk]` tensors, whatever the number of
//! classes. Under half-precision products (`model.output_precision`, [`Hidden`]) the three
//! products take half operands (`h` cast once a step, each chunk's `W` and `g` as they are
//! used; `g` scaled first, [`Operands::gradient_scale`]) and give f32: the softmax, the loss
//! and the gradients stay f32.
//!
//! The row log-sum-exp and the logit gradient run as burn's tensor operations
//! ([`SoftmaxKernels::Tensor`]) or as widebag's CubeCL kernels on wgpu
//! ([`SoftmaxKernels::Cube`], [`crate::cube`]: one pass over each chunk's logits for the
//! log-sum-exp, the gradient formed in the logits' buffer with no dense targets).

use burn::tensor::{Device, Int, Tensor};
use widebag_config::Logits;
use widebag_csr::Targets;

use crate::cube;
use crate::probe::{Point, StepProbe};
use crate::products::{self, Operands};
use crate::tensors::floats;

pub use widebag_ledger::shapes::{ClassChunk, class_chunks, max_chunk_classes};

/// Targets laid out per chunk, on the device.
pub struct ChunkTargets {
    n_rows: usize,
    /// The rows the loss is the mean over: the batch's (the adaptive softmax's tail clusters
    /// hold some of its rows and divide by all of them, [`Self::over_rows`]).
    loss_rows: usize,
    /// Per chunk: `([M, 2] (row, local class) indices, [M] weights)`, or `None` when no target of
    /// the batch falls in the chunk.
    per_chunk: Vec<Option<(Tensor<2, Int>, Tensor<1>)>>,
    /// Per chunk: `[M]` flat indices `row · n + local class` of the same targets, for the loss.
    flat: Vec<Option<Tensor<1, Int>>>,
    /// `[B, 1]` total target weight per row.
    row_weight: Tensor<2>,
}

impl ChunkTargets {
    pub fn new(targets: &Targets, chunks: &[ClassChunk], device: &Device) -> Self {
        let n_rows = targets.row_ptr.len() - 1;
        let mut lists: Vec<(Vec<i32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); chunks.len()];
        let chunk_of = |class: usize| chunks.partition_point(|c| c.offset + c.n <= class);
        for r in 0..n_rows {
            for k in targets.row_ptr[r]..targets.row_ptr[r + 1] {
                let class = targets.classes[k] as usize;
                let c = chunk_of(class);
                lists[c]
                    .0
                    .extend([r as i32, (class - chunks[c].offset) as i32]);
                lists[c].1.push(targets.weights[k]);
            }
        }
        let flat = lists
            .iter()
            .zip(chunks)
            .map(|((idx, _), chunk)| {
                let flat: Vec<i32> = idx
                    .chunks(2)
                    .map(|rc| rc[0] * chunk.n as i32 + rc[1])
                    .collect();
                let m = flat.len();
                (m > 0).then(|| {
                    Tensor::<1, Int>::from_data(burn::tensor::TensorData::new(flat, [m]), device)
                })
            })
            .collect();
        let per_chunk = lists
            .into_iter()
            .map(|(idx, w)| {
                if w.is_empty() {
                    return None;
                }
                let m = w.len();
                let idx =
                    Tensor::<2, Int>::from_data(burn::tensor::TensorData::new(idx, [m, 2]), device);
                Some((idx, floats(w, [m], device)))
            })
            .collect();
        let row_weight = (0..n_rows).map(|r| targets.row_weight(r)).collect();
        Self {
            n_rows,
            loss_rows: n_rows,
            per_chunk,
            flat,
            row_weight: floats(row_weight, [n_rows, 1], device),
        }
    }

    /// The same targets with the loss (and its gradient) the mean over `loss_rows` rows, of
    /// which these targets' rows are some.
    pub fn over_rows(mut self, loss_rows: usize) -> Self {
        self.loss_rows = loss_rows;
        self
    }

    /// Chunk `c`'s targets as the CubeCL gradient takes them: `[M]` flat positions
    /// `row · n + class` (each once: a batch's targets hold each class once a row) and `[M]`
    /// weights times `scale`; `None` when it holds none.
    fn scaled(&self, c: usize, scale: f64) -> Option<(Tensor<1, Int>, Tensor<1>)> {
        let flat = self.flat[c].as_ref()?;
        let (_, weights) = self.per_chunk[c].as_ref()?;
        Some((flat.clone(), weights.clone().mul_scalar(scale)))
    }

    /// Dense `[B, n]` targets of chunk `c`, or `None` when it holds none.
    fn dense(&self, c: usize, n: usize, device: &Device) -> Option<Tensor<2>> {
        self.per_chunk[c].as_ref().map(|(idx, w)| {
            Tensor::<2>::zeros([self.n_rows, n], device).scatter_nd(
                idx.clone(),
                w.clone(),
                burn::tensor::IndexingUpdateOp::Add,
            )
        })
    }
}

/// Output of the forward pass.
pub struct SoftmaxForward {
    /// `[B, 1]` log-sum-exp of each row's logits.
    pub lse: Tensor<2>,
    /// `[1]` mean loss over rows.
    pub loss: Tensor<1>,
    /// What the backward pass forms each chunk's logit gradient from.
    pub kept: Pass1Logits,
}

/// What pass 1 leaves pass 2 of each chunk's logits.
pub enum Pass1Logits {
    /// Nothing: pass 2 makes them again ([`Logits::Recompute`]).
    Recompute,
    /// Each chunk's logits ([`Logits::Keep`]): pass 2 makes none again.
    Kept(Vec<Tensor<2>>),
    /// Nothing, and pass 2 forms the gradient from the logits' tiles inside the CubeCL kernels
    /// ([`Logits::Tiled`], [`cube::tiles`]): no logits buffer in either pass.
    Tiles,
}

impl Pass1Logits {
    /// The next chunk's kept logits, if any, moved out (their buffer is then written in place).
    fn next_kept(&mut self) -> Option<Tensor<2>> {
        match self {
            Pass1Logits::Kept(kept) if !kept.is_empty() => Some(kept.remove(0)),
            _ => None,
        }
    }
}

/// Gradients of the output layer.
pub struct SoftmaxGrads {
    pub dh: Tensor<2>,
    /// Per chunk: `(dW [hidden, n], db [1, n])`.
    pub chunks: Vec<(Tensor<2>, Tensor<2>)>,
}

pub(crate) fn logits(h: &Tensor<2>, w: &Tensor<2>, b: &Tensor<2>) -> Tensor<2> {
    h.clone().matmul(w.clone()) + b.clone()
}

/// The output layer's input `h` (f32) with its copy in the products' operand dtype (the same
/// tensor under f32 operands), made once a step and kept to the end of the backward pass.
pub struct Hidden {
    pub h: Tensor<2>,
    operand: Tensor<2>,
    operands: Operands,
}

impl Hidden {
    pub fn new(h: Tensor<2>, operands: Operands) -> Self {
        Self {
            operand: operands.cast(h.clone()),
            h,
            operands,
        }
    }

    /// One chunk's logits `h W + b` in f32, from operands in the products' dtype.
    fn logits(&self, w: &Tensor<2>, b: &Tensor<2>) -> Tensor<2> {
        match self.operands.half() {
            None => logits(&self.h, w, b),
            Some(_) => {
                let w = self.operands.cast(w.clone());
                products::product(self.operand.clone(), w) + b.clone()
            }
        }
    }

    /// One chunk's `(dL/dh part g Wᵀ, dW = hᵀ g)` in f32 from its logit gradient `g` (f32): in
    /// half precision from `g` scaled by [`Operands::gradient_scale`], the products scaled back.
    fn gradient_products(&self, g: &Tensor<2>, w: &Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        (self.dh_product(g, w), self.dw_product(g))
    }

    /// One chunk's part of `dL/dh`, `g Wᵀ`, alone (as [`Self::gradient_products`] forms it).
    pub fn dh_product(&self, g: &Tensor<2>, w: &Tensor<2>) -> Tensor<2> {
        if self.operands.half().is_none() {
            return products::matmul_nt(g.clone(), w.clone());
        }
        let scale = self.operands.gradient_scale(self.h.dims()[0]);
        let g = self.operands.cast(g.clone().mul_scalar(scale));
        let w = self.operands.cast(w.clone());
        products::matmul_nt(g, w).mul_scalar(1.0 / scale)
    }

    /// One chunk's weight gradient `hᵀ g` alone (as [`Self::gradient_products`] forms it).
    pub fn dw_product(&self, g: &Tensor<2>) -> Tensor<2> {
        let ht = self.operand.clone().transpose();
        if self.operands.half().is_none() {
            return ht.matmul(g.clone());
        }
        let scale = self.operands.gradient_scale(self.h.dims()[0]);
        let g = self.operands.cast(g.clone().mul_scalar(scale));
        products::product(ht, g).mul_scalar(1.0 / scale)
    }
}

pub use crate::spec::{SoftmaxKernels, WGPU_REDUCE_COLS, reduce_cols};

/// Each row's running log-sum-exp, on the kernels chosen.
enum ChunkLse {
    Tensor(RunningLse),
    Cube(cube::row_lse::RowLse),
}

impl ChunkLse {
    fn new(kernels: SoftmaxKernels, device: &Device) -> Self {
        match kernels {
            SoftmaxKernels::Cube if cube::bridge::on_cubecl(device) => {
                ChunkLse::Cube(cube::row_lse::RowLse::new())
            }
            other => ChunkLse::Tensor(RunningLse::new(other.reduce_cols())),
        }
    }

    fn add(&mut self, z: Tensor<2>) {
        match self {
            ChunkLse::Tensor(lse) => lse.add(z),
            ChunkLse::Cube(lse) => {
                let on_device = lse.add(z);
                debug_assert!(on_device, "the logits live on the cubecl device checked");
            }
        }
    }

    /// Folds in the logits `h w + b` formed tile by tile in the CubeCL kernels, and gives the
    /// tiles' pairs (`cube::tiles::pairs`); `None`, with nothing done, on the tensor path or
    /// past the tile grid's limit.
    fn add_products(
        &mut self,
        h: &Tensor<2>,
        w: &Tensor<2>,
        b: &Tensor<2>,
    ) -> Option<burn_cubecl::tensor::CubeTensor> {
        match self {
            ChunkLse::Tensor(_) => None,
            ChunkLse::Cube(lse) => {
                let pairs = cube::tiles::pairs(h, w, b)?;
                lse.add_pairs(pairs.clone());
                Some(pairs)
            }
        }
    }

    fn finish(self) -> Tensor<2> {
        match self {
            ChunkLse::Tensor(lse) => lse.finish(),
            ChunkLse::Cube(lse) => lse.finish().expect("at least one class chunk"),
        }
    }
}

/// `t` whole when it has at most `max_cols` columns, else its column pieces of that width.
fn column_pieces(t: Tensor<2>, max_cols: usize) -> Vec<Tensor<2>> {
    let cols = t.shape()[1];
    if cols <= max_cols {
        return vec![t];
    }
    (0..cols)
        .step_by(max_cols)
        .map(|start| t.clone().narrow(1, start, max_cols.min(cols - start)))
        .collect()
}

/// `[B, 1]` sums of the rows of `t`, over at most `max_cols` columns at a time.
pub fn sum_cols(t: Tensor<2>, max_cols: usize) -> Tensor<2> {
    column_pieces(t, max_cols.max(1))
        .into_iter()
        .map(|piece| piece.sum_dim(1))
        .reduce(|a, b| a + b)
        .expect("at least one column")
}

/// Row-wise log-sum-exp over column chunks, from a running max and a rescaled sum, so that no
/// reduction spans more than `max_cols` columns (burn 0.22's `log_softmax` over 240,000
/// columns returned wrong values on lavapipe; see [`WGPU_REDUCE_COLS`]). The max is detached:
/// on autodiff the gradient flows through the sum alone, and is the softmax.
pub struct RunningLse {
    /// `[B, 1]` running max and sum of `exp(z − max)`.
    running: Option<(Tensor<2>, Tensor<2>)>,
    max_cols: usize,
}

impl RunningLse {
    /// Reductions over at most `max_cols` columns ([`reduce_cols`] of the backend).
    pub fn new(max_cols: usize) -> Self {
        Self {
            running: None,
            max_cols: max_cols.max(1),
        }
    }

    /// Folds in the `[B, n]` logits of one chunk, at most `max_cols` columns at a time.
    pub fn add(&mut self, z: Tensor<2>) {
        for piece in column_pieces(z, self.max_cols) {
            self.add_piece(piece);
        }
    }

    fn add_piece(&mut self, z: Tensor<2>) {
        let chunk_max = z.clone().detach().max_dim(1);
        self.running = Some(match self.running.take() {
            None => {
                let s = (z - chunk_max.clone()).exp().sum_dim(1);
                (chunk_max, s)
            }
            Some((m, s)) => {
                let m_new = m.clone().max_pair(chunk_max);
                let s = s * (m - m_new.clone()).exp() + (z - m_new.clone()).exp().sum_dim(1);
                (m_new, s)
            }
        });
    }

    /// `[B, 1]` log-sum-exp of every chunk added.
    pub fn finish(self) -> Tensor<2> {
        let (m, s) = self.running.expect("at least one class chunk");
        m + s.log()
    }
}

/// Log-probabilities `[B, classes]` of the chunked output layer (evaluation: the chunks'
/// logits are alive together).
pub fn log_probs(h: &Tensor<2>, layer: &[(&Tensor<2>, &Tensor<2>)], max_cols: usize) -> Tensor<2> {
    let z: Vec<Tensor<2>> = layer.iter().map(|(w, b)| logits(h, w, b)).collect();
    let mut lse = RunningLse::new(max_cols);
    for zc in &z {
        lse.add(zc.clone());
    }
    let lse = lse.finish();
    Tensor::cat(z.into_iter().map(|zc| zc - lse.clone()).collect(), 1)
}

/// Pass 1: running max and sum over chunks, and the loss; with [`Logits::Keep`] each chunk's
/// logits kept for pass 2; with [`Logits::Tiled`] on the CubeCL kernels none formed outside
/// them (each target's logit from its row of `h` and its column of `W`).
pub fn forward(
    h: &Hidden,
    layer: &[(&Tensor<2>, &Tensor<2>)],
    chunks: &[ClassChunk],
    targets: &ChunkTargets,
    kernels: SoftmaxKernels,
    keep: Logits,
    probe: &mut StepProbe,
) -> SoftmaxForward {
    let mut kept = Vec::new();
    let device = h.h.device();
    let mut lse = ChunkLse::new(kernels, &device);
    // Tiles need f32 operands (the config refuses half ones with them).
    let mut tiled = keep == Logits::Tiled && h.operands.half().is_none();
    // Σ over the batch's targets of weight · logit: the loss needs only the batch's total (its
    // mean over rows), so each chunk's target logits are picked by flat index and summed. (A
    // dense `[B, n]` target tensor built by `scatter_nd` into zeros and reduced with the logits
    // in the same fused graph gave losses up to 7 % low on lavapipe with several chunks; the
    // backward pass's use of it is right.)
    let mut target_sum = Tensor::<1>::zeros([1], &device);
    for (c, (chunk, (w, b))) in chunks.iter().zip(layer).enumerate() {
        let pairs = tiled.then(|| lse.add_products(&h.h, w, b)).flatten();
        tiled = pairs.is_some();
        if tiled {
            if let Some(sum) = target_logit_sum(&h.h, (w, b), targets, c) {
                target_sum = target_sum + sum;
            }
            if c == 0 {
                // The first chunk's tiles' pairs alive here, as its logits are otherwise.
                probe.detail(Point::ForwardLogits);
            }
            drop(pairs);
            continue;
        }
        let z = h.logits(w, b);
        if c == 0 {
            // The first chunk is the largest and, classes being sorted by frequency, the one
            // holding targets: its logits and dense targets are alive here.
            probe.detail(Point::ForwardLogits);
        }
        if let (Some(flat), Some((_, weights))) = (&targets.flat[c], &targets.per_chunk[c]) {
            let picked = z
                .clone()
                .reshape([targets.n_rows * chunk.n])
                .select(0, flat.clone());
            target_sum = target_sum + (picked * weights.clone()).sum();
        }
        if keep == Logits::Keep {
            kept.push(z.clone());
        }
        lse.add(z);
    }
    let lse = lse.finish();
    let loss_rows = targets.loss_rows.max(1) as f64;
    let loss = ((lse.clone() * targets.row_weight.clone())
        .sum()
        .reshape([1])
        - target_sum)
        .div_scalar(loss_rows);
    let kept = match keep {
        Logits::Keep => Pass1Logits::Kept(kept),
        Logits::Tiled if tiled => Pass1Logits::Tiles,
        _ => Pass1Logits::Recompute,
    };
    SoftmaxForward { lse, loss, kept }
}

/// `[1]` Σ weight · logit over chunk `c`'s targets, each target's logit `h_r · W[:, j] + b_j`
/// from the row of `h` and the column of `W` it takes (`[targets, last]` gathers; no logits
/// formed); `None` when the chunk holds no target.
fn target_logit_sum(
    h: &Tensor<2>,
    (w, b): (&Tensor<2>, &Tensor<2>),
    targets: &ChunkTargets,
    c: usize,
) -> Option<Tensor<1>> {
    let (idx, weights) = targets.per_chunk[c].as_ref()?;
    let m = weights.dims()[0];
    let rows = idx.clone().narrow(1, 0, 1).reshape([m]);
    let cols = idx.clone().narrow(1, 1, 1).reshape([m]);
    let h_rows = h.clone().select(0, rows);
    let w_cols = w.clone().select(1, cols.clone()).transpose();
    let b_cols = b.clone().select(1, cols).reshape([m]);
    let z = (h_rows * w_cols).sum_dim(1).reshape([m]) + b_cols;
    Some((z * weights.clone()).sum())
}

/// One chunk's logit gradient `(w_r softmax(z) − y) / B` as burn's tensor operations, `y`
/// the chunk's dense targets.
fn tensor_gradient(
    z: Tensor<2>,
    lse: &Tensor<2>,
    targets: &ChunkTargets,
    (c, n): (usize, usize),
    inv_rows: f64,
) -> Tensor<2> {
    let device = z.device();
    let p = (z - lse.clone()).exp();
    let mut g = p * targets.row_weight.clone();
    if let Some(y) = targets.dense(c, n, &device) {
        g = g - y;
    }
    g.mul_scalar(inv_rows)
}

/// What pass 2 reads for every chunk's logit gradient.
struct Pass2<'a> {
    h: &'a Hidden,
    targets: &'a ChunkTargets,
    lse: &'a Tensor<2>,
    /// `w_r / B` per row, where the CubeCL kernels form the gradient.
    row_scale: Option<Tensor<2>>,
    inv_rows: f64,
    /// Whether the kernels form the gradient from the logits' tiles (pass 1 did).
    tiles: bool,
}

impl<'a> Pass2<'a> {
    fn new(
        h: &'a Hidden,
        targets: &'a ChunkTargets,
        lse: &'a Tensor<2>,
        (kernels, kept): (SoftmaxKernels, &Pass1Logits),
    ) -> Self {
        let inv_rows = 1.0 / targets.loss_rows.max(1) as f64;
        let cube = kernels == SoftmaxKernels::Cube && cube::bridge::on_cubecl(&h.h.device());
        Self {
            h,
            targets,
            lse,
            row_scale: cube.then(|| targets.row_weight.clone().mul_scalar(inv_rows)),
            inv_rows,
            tiles: cube && matches!(kept, Pass1Logits::Tiles),
        }
    }

    /// Chunk `c`'s logit gradient from its logits (`kept`, else made again from `w`, `b`).
    fn gradient(
        &self,
        (c, chunk): (usize, &ClassChunk),
        kept: Option<Tensor<2>>,
        (w, b): (&Tensor<2>, &Tensor<2>),
    ) -> Tensor<2> {
        let (h, targets, lse, inv_rows) = (self.h, self.targets, self.lse, self.inv_rows);
        let scaled = targets.scaled(c, inv_rows);
        let chunk_targets = || {
            scaled
                .as_ref()
                .map(|(flat, weight)| cube::logit_gradient::ScaledTargets { flat, weight })
        };
        if let (true, Some(row_scale)) = (self.tiles, &self.row_scale) {
            let tiled = cube::tiles::gradient((&h.h, w, b), lse, row_scale, chunk_targets());
            if let Some(g) = tiled {
                return g;
            }
        }
        let z = kept.unwrap_or_else(|| h.logits(w, b));
        let Some(row_scale) = &self.row_scale else {
            return tensor_gradient(z, lse, targets, (c, chunk.n), inv_rows);
        };
        let chunk_targets = chunk_targets();
        // `None` only off a cubecl device or past the grid's limit: the logits made again and
        // the gradient formed by tensor operations.
        cube::logit_gradient::in_place(z, lse, row_scale, chunk_targets).unwrap_or_else(|| {
            tensor_gradient(h.logits(w, b), lse, targets, (c, chunk.n), inv_rows)
        })
    }
}

/// `acc + part`, or `part` first.
fn accumulate(acc: Option<Tensor<2>>, part: Tensor<2>) -> Option<Tensor<2>> {
    Some(match acc {
        None => part,
        Some(acc) => acc + part,
    })
}

/// Pass 2: each chunk's logits (`kept` from pass 1, else made again) and the gradients.
pub fn backward(
    h: &Hidden,
    layer: &[(&Tensor<2>, &Tensor<2>)],
    chunks: &[ClassChunk],
    targets: &ChunkTargets,
    lse: &Tensor<2>,
    (mut kept, kernels): (Pass1Logits, SoftmaxKernels),
    probe: &mut StepProbe,
) -> SoftmaxGrads {
    let last = chunks.len().saturating_sub(1);
    let pass = Pass2::new(h, targets, lse, (kernels, &kept));
    let mut dh: Option<Tensor<2>> = None;
    let mut grads = Vec::with_capacity(chunks.len());
    for (c, (chunk, &(w, b))) in chunks.iter().zip(layer).enumerate() {
        let g = pass.gradient((c, chunk), kept.next_kept(), (w, b));
        let (dh_c, dw) = h.gradient_products(&g, w);
        dh = accumulate(dh, dh_c);
        grads.push((dw, g.clone().sum_dim(0)));
        if c == last {
            probe.detail(Point::BackwardLogits);
        }
        drop(g);
    }
    SoftmaxGrads {
        dh: dh.expect("at least one class chunk"),
        chunks: grads,
    }
}

/// Pass 2 with each chunk's gradient applied as it is formed: chunk `c`'s logit gradient `g`
/// handed to `apply(c, g)` once its part of `dL/dh` is taken and the chunk's own handles in
/// `layer` are dropped (so `apply` may write the chunk's weight in place). No chunk's weight
/// gradient is returned: `dL/dh` alone.
#[allow(clippy::too_many_arguments)]
pub fn backward_applying(
    h: &Hidden,
    layer: Vec<(Tensor<2>, Tensor<2>)>,
    chunks: &[ClassChunk],
    targets: &ChunkTargets,
    lse: &Tensor<2>,
    (mut kept, kernels): (Pass1Logits, SoftmaxKernels),
    apply: &mut dyn FnMut(usize, &Tensor<2>),
    probe: &mut StepProbe,
) -> Tensor<2> {
    let last = chunks.len().saturating_sub(1);
    let pass = Pass2::new(h, targets, lse, (kernels, &kept));
    let mut dh: Option<Tensor<2>> = None;
    for (c, (chunk, (w, b))) in chunks.iter().zip(layer).enumerate() {
        let g = pass.gradient((c, chunk), kept.next_kept(), (&w, &b));
        dh = accumulate(dh, h.dh_product(&g, &w));
        drop((w, b));
        if c == last {
            probe.detail(Point::BackwardLogits);
        }
        apply(c, &g);
    }
    dh.expect("at least one class chunk")
}
