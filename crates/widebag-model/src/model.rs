//! The wide model and its training step: embedding bag over head/tail bands of row-sharded
//! tables (off autodiff; tail bands projected up to the full dim) → ReLU MLP → chunked full
//! softmax or adaptive softmax, with row-sparse table updates and dense layer updates.

use burn::tensor::activation::relu;
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor};
use rayon::prelude::*;
use serde::Serialize;
use widebag_config::bands::Band;
use widebag_config::{Config, OptimConfig, OutputKind};
use widebag_csr::{CsrBatch, Targets};
use widebag_data::rng::hash2;

use crate::memory::{MemoryMeter, Point};
use crate::optim::{DenseParam, TableState};
use crate::softmax::{self, ChunkTargets, ClassChunk};
use crate::table::{Segment, ShardedTable};
use crate::tensors::{floats, ints, scalar, to_vec};
use crate::{Compute, ModelError};

/// Shapes of the model, resolved against the device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelSpec {
    pub width: usize,
    pub n_classes: usize,
    pub dim: usize,
    pub hidden: Vec<usize>,
    /// Largest batch the output chunks were sized for.
    pub batch_size: usize,
    pub class_chunk: usize,
    pub max_buffer_bytes: u64,
    pub seed: u64,
    pub output: OutputKind,
    /// Input bands (one: the unsplit table).
    pub input_bands: Vec<Band>,
    /// Output clusters (one: the full softmax; more: the adaptive softmax's head and tails).
    pub output_bands: Vec<Band>,
}

impl ModelSpec {
    pub fn new(config: &Config, compute: &Compute) -> Self {
        let max_buffer_bytes = compute
            .clone()
            .with_buffer_cap(config.model.max_buffer_mib << 20)
            .max_buffer_bytes;
        let last = config.model.last_hidden();
        let n_classes = config.data.n_classes();
        let class_chunk = widebag_ledger::shapes::class_chunk(
            config.model.class_chunk,
            n_classes,
            last,
            config.train.batch_size,
            max_buffer_bytes,
        );
        Self {
            width: config.data.width,
            n_classes,
            dim: config.model.dim,
            hidden: config.model.hidden.clone(),
            batch_size: config.train.batch_size,
            class_chunk,
            max_buffer_bytes,
            seed: config.train.seed,
            output: config.model.output,
            // Validated by `open_data` (cutoffs within the width and classes); an invalid layout
            // here falls back to one band and the run's check refuses it.
            input_bands: widebag_config::bands::input_bands(config).unwrap_or_else(|_| {
                widebag_config::bands::bands(config.data.width, config.model.dim, 1, &[])
                    .expect("one band")
            }),
            output_bands: widebag_config::bands::output_bands(config).unwrap_or_else(|_| {
                widebag_config::bands::bands(n_classes, last, 1, &[]).expect("one band")
            }),
        }
    }

    /// Input size of every dense layer after the bag, and the output layer's input size.
    fn layer_sizes(&self) -> Vec<usize> {
        std::iter::once(self.dim)
            .chain(self.hidden.iter().copied())
            .collect()
    }

    /// Size of the last hidden representation (the output layer's input).
    pub fn last_hidden(&self) -> usize {
        self.hidden.last().copied().unwrap_or(self.dim)
    }
}

/// What one training step did.
#[derive(Clone, Debug, Serialize)]
pub struct StepStats {
    pub step: u64,
    pub loss: f32,
    pub n_rows: usize,
    pub nnz: usize,
    pub n_unique: usize,
    /// Wall seconds of the step (set by the training loop).
    pub step_s: f64,
    /// Peak bytes in use read so far in the run, after the warm-up (set by the training loop;
    /// `None` without allocator counters).
    pub peak_in_use_bytes: Option<u64>,
}

impl StepStats {
    pub fn new(step: u64, loss: f32, batch: &CsrBatch) -> Self {
        Self {
            step,
            loss,
            n_rows: batch.n_rows(),
            nnz: batch.nnz(),
            n_unique: batch.unique_ids().len(),
            step_s: 0.0,
            peak_in_use_bytes: None,
        }
    }
}

/// Gradients of one batch, off autodiff: the touched rows and every dense parameter.
pub struct Grads {
    pub loss: f32,
    /// Gradient of the batch's unique rows, one `[end - start, band dim]` tensor per band
    /// segment (runs of `unique_ids` within one shard of one band), in order.
    pub rows: Vec<(BandSegment, Tensor<2>)>,
    /// One per dense parameter, in [`WideModel::dense`] order.
    pub dense: Vec<Tensor<2>>,
}

/// Entries of the batch that read one table segment, at most a buffer's worth.
struct BagPiece {
    /// Index of the segment (and of its rows leaf).
    segment: usize,
    /// Position of each entry's id within its segment's rows.
    local_pos: Tensor<1, Int>,
    /// Row of the batch each entry belongs to.
    entry_rows: Tensor<1, Int>,
    /// `[n, 1]` entry values.
    values: Tensor<2>,
}

impl Grads {
    /// The unique rows' gradient as one host vector, `[U, dim]` row-major.
    pub fn rows_to_vec(&self) -> Result<Vec<f32>, ModelError> {
        let mut out = Vec::new();
        for (_, g) in &self.rows {
            out.extend(to_vec(g.clone())?);
        }
        Ok(out)
    }
}

/// A run of the batch's unique ids within one shard of one band: `seg` indexes the band's
/// local ids, which start at position `offset` of the batch's `unique_ids`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandSegment {
    pub band: usize,
    pub seg: Segment,
    pub offset: usize,
}

impl BandSegment {
    /// Positions in the batch's `unique_ids`.
    pub fn global(&self) -> std::ops::Range<usize> {
        self.offset + self.seg.start..self.offset + self.seg.end
    }
}

/// An input band: ids `band.start..band.end`, `band.dim`-wide rows, and their optimizer state.
pub struct InputBand {
    pub band: Band,
    pub table: ShardedTable,
    pub state: TableState,
}

/// The batch's index and value buffers on the autodiff device, grouped by band segment and cut
/// into pieces whose `[n, band dim]` weighted entries fit the buffer limit.
struct BagInputs {
    n_rows: usize,
    segments: Vec<BandSegment>,
    pieces: Vec<BagPiece>,
}

impl BagInputs {
    fn upload(
        batch: &CsrBatch,
        segments: Vec<BandSegment>,
        max_entries: impl Fn(usize) -> usize,
        device: &Device,
    ) -> Self {
        let mut buckets: Vec<(Vec<u32>, Vec<u32>, Vec<f32>)> =
            vec![(Vec::new(), Vec::new(), Vec::new()); segments.len()];
        let row_ptr = batch.row_ptr();
        for r in 0..batch.n_rows() {
            for k in row_ptr[r]..row_ptr[r + 1] {
                let local = batch.local_pos()[k] as usize;
                let s = segments.partition_point(|seg| seg.global().end <= local);
                let b = &mut buckets[s];
                b.0.push((local - segments[s].global().start) as u32);
                b.1.push(r as u32);
                b.2.push(batch.values()[k]);
            }
        }
        let mut pieces = Vec::new();
        for (segment, (pos, rows, vals)) in buckets.into_iter().enumerate() {
            let max_entries = max_entries(segments[segment].band);
            for start in (0..pos.len()).step_by(max_entries.max(1)) {
                let end = (start + max_entries.max(1)).min(pos.len());
                pieces.push(BagPiece {
                    segment,
                    local_pos: ints(&pos[start..end], device),
                    entry_rows: ints(&rows[start..end], device),
                    values: floats(vals[start..end].to_vec(), [end - start, 1], device),
                });
            }
        }
        Self {
            n_rows: batch.n_rows(),
            segments,
            pieces,
        }
    }
}

/// Deterministic uniform init in `[-bound, bound]`, one hash per element so that any sharding or
/// chunking of a tensor gives the same values.
fn uniform_init(seed: u64, salt: u64, index: u64, bound: f64) -> f32 {
    let u = (hash2(seed ^ salt, index) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    ((2.0 * u - 1.0) * bound) as f32
}

/// `[rows, cols]` tensor whose element `(i, j)` is `f(i * stride + offset + j)`.
fn init_matrix(
    rows: usize,
    cols: usize,
    stride: usize,
    offset: usize,
    device: &Device,
    f: impl Fn(u64) -> f32 + Sync,
) -> Tensor<2> {
    let mut host = vec![0.0f32; rows * cols];
    host.par_chunks_mut(cols.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            for (j, x) in row.iter_mut().enumerate() {
                *x = f((i * stride + offset + j) as u64);
            }
        });
    floats(host, [rows, cols], device)
}

/// Rows of the batch whose targets fall in one output cluster, and those targets.
struct ClusterTargets {
    /// Rows of the batch (sorted, distinct) with a target in the cluster.
    rows: Vec<u32>,
    /// Per target entry: `(position in rows, class within the cluster, weight)`.
    entries: Vec<(u32, u32, f32)>,
}

/// A batch's targets split over the adaptive softmax's head and tail clusters.
struct AdaptiveTargets {
    /// `(row, head column, weight)`: head classes, and each tail target's cluster token.
    head: Vec<(u32, u32, f32)>,
    tails: Vec<ClusterTargets>,
}

impl AdaptiveTargets {
    fn new(targets: &Targets, clusters: &[Band]) -> Self {
        let head_n = clusters[0].n_rows();
        let mut head = Vec::new();
        let mut tails: Vec<ClusterTargets> = clusters[1..]
            .iter()
            .map(|_| ClusterTargets {
                rows: Vec::new(),
                entries: Vec::new(),
            })
            .collect();
        for r in 0..targets.row_ptr.len() - 1 {
            for k in targets.row_ptr[r]..targets.row_ptr[r + 1] {
                let (class, w) = (targets.classes[k] as usize, targets.weights[k]);
                let c = clusters.partition_point(|b| b.end <= class);
                if c == 0 {
                    head.push((r as u32, class as u32, w));
                    continue;
                }
                head.push((r as u32, (head_n + c - 1) as u32, w));
                let t = &mut tails[c - 1];
                if t.rows.last() != Some(&(r as u32)) {
                    t.rows.push(r as u32);
                }
                let pos = (t.rows.len() - 1) as u32;
                t.entries.push((pos, (class - clusters[c].start) as u32, w));
            }
        }
        Self { head, tails }
    }
}

/// Row-wise `z - logsumexp(z)` from `max_dim`/`sum_dim` reductions (burn 0.22's own
/// `log_softmax` returned wrong values over 240,000 columns on lavapipe). The max is detached:
/// its gradient cancels.
fn log_softmax_rows(z: Tensor<2>) -> Tensor<2> {
    let m = z.clone().max_dim(1).detach();
    let shifted = z - m;
    let lse = shifted.clone().exp().sum_dim(1).log();
    shifted - lse
}

/// `sum_i w_i · logp[row_i, col_i]` for `(row, col, w)` entries of a `[rows, cols]` matrix.
fn weighted_pick(logp: Tensor<2>, entries: &[(u32, u32, f32)], device: &Device) -> Tensor<1> {
    let cols = logp.shape()[1];
    let rows = logp.shape()[0];
    let flat: Vec<u32> = entries
        .iter()
        .map(|&(r, c, _)| r * cols as u32 + c)
        .collect();
    let w: Vec<f32> = entries.iter().map(|e| e.2).collect();
    let picked = logp.reshape([rows * cols]).select(0, ints(&flat, device));
    (picked * floats(w, [entries.len()], device)).sum()
}

/// The sparse-input model.
pub struct WideModel {
    pub spec: ModelSpec,
    /// Class chunks of the full softmax (empty with the adaptive softmax).
    pub chunks: Vec<ClassChunk>,
    /// Input bands: the head, then each tail band (one band: the unsplit table).
    pub bands: Vec<InputBand>,
    /// Bag bias, each tail band's projection, then `(weight, bias)` of each hidden layer, then
    /// the output layer: `(weight, bias)` per class chunk (full softmax), or the head's
    /// `(weight, bias)` and per tail cluster `(projection, weight, bias)` (adaptive softmax).
    pub dense: Vec<DenseParam>,
    pub optim: OptimConfig,
    pub step: u64,
    device: Device,
}

impl WideModel {
    pub fn new(config: &Config, compute: &Compute) -> Self {
        let spec = ModelSpec::new(config, compute);
        let device = compute.device.clone();
        let seed = spec.seed;
        let dim = spec.dim;
        let mut bands = Vec::new();
        for (k, band) in spec.input_bands.iter().enumerate() {
            let (bd, start) = (band.dim, band.start);
            let bound = (3.0 / bd as f64).sqrt();
            let salt = 0x7ab1e + k as u64;
            let table = ShardedTable::placed(
                band.n_rows(),
                bd,
                spec.max_buffer_bytes,
                &device,
                config.model.input_bands.placement_of(k),
                |r, out| {
                    // The head keeps the unsplit table's numbers (row r, column j).
                    let row = if k == 0 { start + r } else { r };
                    for (j, x) in out.iter_mut().enumerate() {
                        *x = uniform_init(seed, salt, (row * bd + j) as u64, bound);
                    }
                },
            );
            let state = TableState::new(config.optim.table, &table, spec.max_buffer_bytes);
            bands.push(InputBand {
                band: *band,
                table,
                state,
            });
        }
        let optim_kind = config.optim.dense;
        let mut dense = vec![DenseParam::new(
            "bag.bias",
            Tensor::zeros([1, dim], &device),
            optim_kind,
        )];
        // Tail projections: row variance 1/dim_k times dim_k inputs of variance 1/dim.
        for (k, band) in spec.input_bands.iter().enumerate().skip(1) {
            let bound = (3.0 / dim as f64).sqrt() / (band.dim as f64).sqrt();
            let salt = 0x9000 + k as u64;
            let p = init_matrix(band.dim, dim, dim, 0, &device, |i| {
                uniform_init(seed, salt, i, bound * (band.dim as f64).sqrt())
            });
            dense.push(DenseParam::new(
                format!("input_band.{k}.projection"),
                p,
                optim_kind,
            ));
        }
        let sizes = spec.layer_sizes();
        for (i, pair) in sizes.windows(2).enumerate() {
            let (fan_in, fan_out) = (pair[0], pair[1]);
            let bound = 1.0 / (fan_in as f64).sqrt();
            let salt = 0x1000 + 2 * i as u64;
            let w = init_matrix(fan_in, fan_out, fan_out, 0, &device, |k| {
                uniform_init(seed, salt, k, bound)
            });
            let b = init_matrix(1, fan_out, fan_out, 0, &device, |k| {
                uniform_init(seed, salt + 1, k, bound)
            });
            dense.push(DenseParam::new(format!("hidden.{i}.weight"), w, optim_kind));
            dense.push(DenseParam::new(format!("hidden.{i}.bias"), b, optim_kind));
        }
        let last = spec.last_hidden();
        let bound = 1.0 / (last as f64).sqrt();
        let mut chunks = Vec::new();
        if spec.output_bands.len() == 1 {
            chunks = softmax::class_chunks(spec.n_classes, spec.class_chunk);
            for (c, chunk) in chunks.iter().enumerate() {
                let n_classes = spec.n_classes;
                let w = init_matrix(last, chunk.n, n_classes, chunk.offset, &device, |k| {
                    uniform_init(seed, 0x0a7, k, bound)
                });
                let b = init_matrix(1, chunk.n, n_classes, chunk.offset, &device, |k| {
                    uniform_init(seed, 0x0a8, k, bound)
                });
                dense.push(DenseParam::new(format!("output.{c}.weight"), w, optim_kind));
                dense.push(DenseParam::new(format!("output.{c}.bias"), b, optim_kind));
            }
        } else {
            let clusters = &spec.output_bands;
            let head_n = clusters[0].n_rows() + clusters.len() - 1;
            let init = |rows: usize, cols: usize, salt: u64, bound: f64| {
                init_matrix(rows, cols, cols, 0, &device, |k| {
                    uniform_init(seed, salt, k, bound)
                })
            };
            dense.push(DenseParam::new(
                "output.head.weight",
                init(last, head_n, 0x0b0, bound),
                optim_kind,
            ));
            dense.push(DenseParam::new(
                "output.head.bias",
                init(1, head_n, 0x0b1, bound),
                optim_kind,
            ));
            for (k, c) in clusters.iter().enumerate().skip(1) {
                let salt = 0x0c0 + 4 * k as u64;
                let tail_bound = 1.0 / (c.dim as f64).sqrt();
                dense.push(DenseParam::new(
                    format!("output.tail.{k}.projection"),
                    init(last, c.dim, salt, bound),
                    optim_kind,
                ));
                dense.push(DenseParam::new(
                    format!("output.tail.{k}.weight"),
                    init(c.dim, c.n_rows(), salt + 1, tail_bound),
                    optim_kind,
                ));
                dense.push(DenseParam::new(
                    format!("output.tail.{k}.bias"),
                    init(1, c.n_rows(), salt + 2, tail_bound),
                    optim_kind,
                ));
            }
        }
        Self {
            spec,
            chunks,
            bands,
            dense,
            optim: config.optim.clone(),
            step: 0,
            device,
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the output layer is the adaptive softmax.
    pub fn adaptive(&self) -> bool {
        self.spec.output_bands.len() > 1
    }

    fn n_hidden(&self) -> usize {
        self.spec.hidden.len()
    }

    /// Tail bands' projections (after the bag bias in [`Self::dense`]).
    fn n_projections(&self) -> usize {
        self.bands.len() - 1
    }

    /// Index in [`Self::dense`] of the first output parameter.
    pub fn output_start(&self) -> usize {
        1 + self.n_projections() + 2 * self.n_hidden()
    }

    /// The targets the objective sees: a distribution per row (`full`, `adaptive`), or the bag's
    /// raw counts (`multinomial`).
    fn objective_targets(&self, batch: &CsrBatch) -> Targets {
        match self.spec.output {
            OutputKind::Multinomial => batch.targets().clone(),
            OutputKind::Full | OutputKind::Adaptive => batch.targets().normalised(),
        }
    }

    fn check_batch(&self, batch: &CsrBatch) -> Result<(), ModelError> {
        if batch.width() != self.spec.width {
            return Err(ModelError::Shape(format!(
                "batch width {} but the model's width is {}",
                batch.width(),
                self.spec.width
            )));
        }
        if batch.targets().n_classes > self.spec.n_classes {
            return Err(ModelError::Shape(format!(
                "targets have {} classes but the model has {}",
                batch.targets().n_classes,
                self.spec.n_classes
            )));
        }
        if batch.n_rows() > self.spec.batch_size {
            return Err(ModelError::Shape(format!(
                "batch of {} rows but the output chunks were sized for {}",
                batch.n_rows(),
                self.spec.batch_size
            )));
        }
        // Gathered rows and bag entries are split by segment and piece; the `[batch, width]`
        // hidden activations are single buffers: refuse, before any work, one over the limit.
        let widest = self.spec.layer_sizes().into_iter().max().unwrap_or(1);
        let bytes = 4 * (batch.n_rows() * widest) as u64;
        if bytes > self.spec.max_buffer_bytes {
            return Err(ModelError::Shape(format!(
                "the batch's hidden activations need one {bytes}-byte buffer, over the device's \
                 {}-byte limit: use a smaller train.batch_size or hidden size",
                self.spec.max_buffer_bytes
            )));
        }
        if self.adaptive() {
            let head_n = self.spec.output_bands[0].n_rows() + self.spec.output_bands.len() - 1;
            let logits = 4 * (batch.n_rows() * head_n) as u64;
            if logits > self.spec.max_buffer_bytes {
                return Err(ModelError::Shape(format!(
                    "the adaptive softmax's [batch, {head_n}] head logits need one {logits}-byte \
                     buffer, over the device's {}-byte limit: use a smaller head \
                     (model.output_bands.cutoffs) or train.batch_size",
                    self.spec.max_buffer_bytes
                )));
            }
            for p in &self.dense[self.output_start()..] {
                let bytes = 4 * p.value.shape().num_elements() as u64;
                if bytes > self.spec.max_buffer_bytes {
                    return Err(ModelError::Shape(format!(
                        "{} needs one {bytes}-byte buffer, over the device's {}-byte limit",
                        p.name, self.spec.max_buffer_bytes
                    )));
                }
            }
        }
        Ok(())
    }

    /// The batch's unique ids split by band, as band-local ids, and each band's segments.
    fn band_segments(&self, uniq: &[u32]) -> (Vec<Vec<u32>>, Vec<BandSegment>) {
        let mut local = Vec::with_capacity(self.bands.len());
        let mut segments = Vec::new();
        for (k, b) in self.bands.iter().enumerate() {
            let lo = uniq.partition_point(|&id| (id as usize) < b.band.start);
            let hi = uniq.partition_point(|&id| (id as usize) < b.band.end);
            let ids: Vec<u32> = uniq[lo..hi]
                .iter()
                .map(|&id| id - b.band.start as u32)
                .collect();
            segments.extend(b.table.segments(&ids).into_iter().map(|seg| BandSegment {
                band: k,
                seg,
                offset: lo,
            }));
            local.push(ids);
        }
        (local, segments)
    }

    /// The embedding bag on the autodiff device: each row's weighted sum of its ids' rows, band
    /// by band, the tails projected up to `dim` (`leaves[1..]` hold the projections), `[rows,
    /// dim]`, before the bias.
    fn bag_sum(&self, rows: &[Tensor<2>], leaves: &[Tensor<2>], inputs: &BagInputs) -> Tensor<2> {
        let ad = self.device.clone().autodiff();
        let mut bags: Vec<Tensor<2>> = self
            .bands
            .iter()
            .map(|b| Tensor::<2>::zeros([inputs.n_rows, b.band.dim], &ad))
            .collect();
        for piece in &inputs.pieces {
            let band = inputs.segments[piece.segment].band;
            let entries = rows[piece.segment]
                .clone()
                .select(0, piece.local_pos.clone())
                * piece.values.clone();
            bags[band] = bags[band].clone().select_assign(
                0,
                piece.entry_rows.clone(),
                entries,
                IndexingUpdateOp::Add,
            );
        }
        let mut bags = bags.into_iter();
        let mut x = bags.next().expect("a head band");
        for (k, tail) in bags.enumerate() {
            x = x + tail.matmul(leaves[1 + k].clone());
        }
        x
    }

    /// Forward through the bag and the hidden layers, on the autodiff device.
    /// `leaves` are the bag bias, projections and hidden parameters as gradient leaves.
    fn forward_hidden(
        &self,
        rows: &[Tensor<2>],
        leaves: &[Tensor<2>],
        inputs: &BagInputs,
    ) -> Tensor<2> {
        let x = self.bag_sum(rows, leaves, inputs);
        let mut h = relu(x + leaves[0].clone());
        let first = 1 + self.n_projections();
        for layer in 0..self.n_hidden() {
            let (w, b) = (&leaves[first + 2 * layer], &leaves[first + 1 + 2 * layer]);
            h = relu(h.matmul(w.clone()) + b.clone());
        }
        h
    }

    /// The embedding bag of `batch` alone (upload, gather of the unique rows, weighted sums,
    /// tail projections), `[rows, dim]`: the first layer's forward, for benchmarks and checks.
    pub fn bag_forward(&self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        self.check_batch(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch);
        let leaves = self.leaves();
        Ok(self.bag_sum(&rows, &leaves, &inputs).inner())
    }

    /// The embedding bag's forward and backward for the loss `sum(bag ⊙ upstream)`: the
    /// gradient of each band segment's unique rows (what the table optimizers consume), in
    /// segment order.
    pub fn bag_row_gradients(
        &self,
        batch: &CsrBatch,
        upstream: Tensor<2>,
    ) -> Result<Vec<Tensor<2>>, ModelError> {
        self.check_batch(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch);
        let rows: Vec<Tensor<2>> = rows.into_iter().map(|r| r.require_grad()).collect();
        let leaves = self.leaves();
        let x = self.bag_sum(&rows, &leaves, &inputs);
        let grads = (x * Tensor::from_inner(upstream)).sum().backward();
        Ok(inputs
            .segments
            .iter()
            .zip(&rows)
            .map(|(s, leaf)| {
                leaf.grad(&grads).unwrap_or_else(|| {
                    Tensor::zeros(
                        [s.seg.end - s.seg.start, self.bands[s.band].band.dim],
                        &self.device,
                    )
                })
            })
            .collect())
    }

    fn output_layer(&self) -> Vec<(&Tensor<2>, &Tensor<2>)> {
        self.dense[self.output_start()..]
            .chunks(2)
            .map(|p| (&p[0].value, &p[1].value))
            .collect()
    }

    /// Bag bias, projections and hidden parameters as fresh gradient leaves (with the adaptive
    /// softmax, the output parameters too: it runs on autodiff).
    fn leaves(&self) -> Vec<Tensor<2>> {
        let end = if self.adaptive() {
            self.dense.len()
        } else {
            self.output_start()
        };
        self.dense[..end]
            .iter()
            .map(|p| p.value.clone().autodiff().require_grad())
            .collect()
    }

    /// Rows per piece of a `[rows, n]` matrix that fits the buffer limit.
    fn rows_per_piece(&self, n: usize) -> usize {
        ((self.spec.max_buffer_bytes / (4 * n.max(1) as u64)) as usize).max(1)
    }

    /// The adaptive softmax's loss on autodiff: `-(1/B) sum w log p(target)`, where
    /// `log p(c) = log p_head(c)` for head classes and `log p_head(token_k) + log p_k(c)` for
    /// classes of tail cluster `k`. Only clusters holding a target are evaluated, on the rows
    /// whose targets fall in them, in row pieces within the buffer limit.
    fn adaptive_loss(
        &self,
        h: &Tensor<2>,
        out: &[Tensor<2>],
        targets: &Targets,
        meter: &mut MemoryMeter,
    ) -> Tensor<1> {
        let ad = h.device();
        let n_rows = h.shape()[0];
        let split = AdaptiveTargets::new(targets, &self.spec.output_bands);
        let head = h.clone().matmul(out[0].clone()) + out[1].clone();
        let mut total = weighted_pick(log_softmax_rows(head), &split.head, &ad);
        for (k, t) in split.tails.iter().enumerate() {
            if t.rows.is_empty() {
                continue;
            }
            let (proj, w, b) = (&out[2 + 3 * k], &out[3 + 3 * k], &out[4 + 3 * k]);
            let per = self.rows_per_piece(w.shape()[1]);
            let mut first = 0;
            while first < t.rows.len() {
                let end = (first + per).min(t.rows.len());
                let hk = h.clone().select(0, ints(&t.rows[first..end], &ad));
                let z = hk.matmul(proj.clone()).matmul(w.clone()) + b.clone();
                let entries: Vec<(u32, u32, f32)> = t
                    .entries
                    .iter()
                    .filter(|e| (first..end).contains(&(e.0 as usize)))
                    .map(|&(r, c, w)| (r - first as u32, c, w))
                    .collect();
                total = total + weighted_pick(log_softmax_rows(z), &entries, &ad);
                first = end;
            }
        }
        meter.probe(Point::ForwardLogits);
        total.mul_scalar(-1.0 / n_rows.max(1) as f64)
    }

    /// Log-probabilities of every class for each row of `batch`, `[rows, n_classes]` (the
    /// adaptive softmax evaluates every cluster here; evaluation only).
    pub fn log_probs(&self, batch: &CsrBatch) -> Result<Tensor<2>, ModelError> {
        self.check_batch(batch)?;
        let (inputs, rows) = self.upload_and_gather(batch);
        let leaves: Vec<Tensor<2>> = self
            .dense
            .iter()
            .map(|p| p.value.clone().autodiff())
            .collect();
        let h = self.forward_hidden(&rows, &leaves, &inputs).inner();
        if !self.adaptive() {
            let layer = self.output_layer();
            let parts: Vec<Tensor<2>> = layer
                .iter()
                .map(|(w, b)| h.clone().matmul((*w).clone()) + (*b).clone())
                .collect();
            return Ok(log_softmax_rows(Tensor::cat(parts, 1)));
        }
        let out: Vec<&Tensor<2>> = self.dense[self.output_start()..]
            .iter()
            .map(|p| &p.value)
            .collect();
        let clusters = &self.spec.output_bands;
        let head_n = clusters[0].n_rows();
        let head = log_softmax_rows(h.clone().matmul(out[0].clone()) + out[1].clone());
        let mut parts = vec![head.clone().narrow(1, 0, head_n)];
        for k in 0..clusters.len() - 1 {
            let (proj, w, b) = (out[2 + 3 * k], out[3 + 3 * k], out[4 + 3 * k]);
            let z = h.clone().matmul(proj.clone()).matmul(w.clone()) + b.clone();
            parts.push(log_softmax_rows(z) + head.clone().narrow(1, head_n + k, 1));
        }
        Ok(Tensor::cat(parts, 1))
    }

    /// The batch's bag inputs on the autodiff device and, per band segment, its unique rows
    /// gathered off the table (autodiff tensors, not yet gradient leaves).
    fn upload_and_gather(&self, batch: &CsrBatch) -> (BagInputs, Vec<Tensor<2>>) {
        let ad = self.device.clone().autodiff();
        let (local, segments) = self.band_segments(batch.unique_ids());
        let inputs = BagInputs::upload(batch, segments, |b| self.max_entries(b), &ad);
        let rows = inputs
            .segments
            .iter()
            .map(|s| {
                self.bands[s.band]
                    .table
                    .gather_segment(&local[s.band], s.seg)
                    .autodiff()
            })
            .collect();
        (inputs, rows)
    }

    /// Largest bag piece of band `b` (entries whose `[n, dim]` weighted rows fit a buffer).
    fn max_entries(&self, band: usize) -> usize {
        widebag_ledger::shapes::max_bag_entries(
            self.bands[band].band.dim,
            self.spec.max_buffer_bytes,
        )
    }

    /// Loss and gradients of one batch without changing the model (steps 1–4 of the training
    /// step; used by tests and by [`Self::train_step`]'s numerical checks).
    pub fn gradients(&self, batch: &CsrBatch) -> Result<Grads, ModelError> {
        let mut unused = MemoryMeter::new(&self.device);
        self.forward_backward(batch, &mut unused)
    }

    fn forward_backward(
        &self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<Grads, ModelError> {
        self.check_batch(batch)?;
        // 1–2. data and unique rows: the batch's index and value buffers grouped by band
        //    segment, and each segment's rows (host bands upload just these), made gradient
        //    leaves.
        let (inputs, rows) = self.upload_and_gather(batch);
        let rows: Vec<Tensor<2>> = rows.into_iter().map(|r| r.require_grad()).collect();
        let targets = self.objective_targets(batch);
        // 3. forward: bag → projections → MLP on autodiff; the full softmax's output layer in
        //    class chunks off autodiff, or the adaptive softmax on autodiff.
        let leaves = self.leaves();
        let h = self.forward_hidden(&rows, &leaves, &inputs);
        let (loss, ad_grads, output_grads) = if self.adaptive() {
            let loss = self.adaptive_loss(&h, &leaves[self.output_start()..], &targets, meter);
            let value = scalar(loss.clone().inner())?;
            meter.sample(Point::ForwardEnd);
            // 4. backward: autodiff through the adaptive softmax, the MLP and the bag.
            let grads = loss.backward();
            meter.probe(Point::BackwardLogits);
            (value, grads, Vec::new())
        } else {
            let chunk_targets = ChunkTargets::new(&targets, &self.chunks, &self.device);
            let h_plain = h.clone().inner();
            let layer = self.output_layer();
            let fwd = softmax::forward(&h_plain, &layer, &self.chunks, &chunk_targets, meter);
            let value = scalar(fwd.loss)?;
            meter.sample(Point::ForwardEnd);
            // 4. backward: output gradients by chunk, then autodiff from dL/dh through the MLP
            //    and bag.
            let out = softmax::backward(
                &h_plain,
                &layer,
                &self.chunks,
                &chunk_targets,
                &fwd.lse,
                meter,
            );
            let surrogate = (h * Tensor::from_inner(out.dh)).sum();
            (value, surrogate.backward(), out.chunks)
        };
        let rows_grad = inputs
            .segments
            .iter()
            .zip(&rows)
            .map(|(&s, leaf)| {
                let g = leaf.grad(&ad_grads).unwrap_or_else(|| {
                    Tensor::zeros(
                        [s.seg.end - s.seg.start, self.bands[s.band].band.dim],
                        &self.device,
                    )
                });
                (s, g)
            })
            .collect();
        let mut dense: Vec<Tensor<2>> = leaves
            .iter()
            .zip(&self.dense)
            .map(|(leaf, p)| leaf.grad(&ad_grads).unwrap_or_else(|| p.value.zeros_like()))
            .collect();
        for (dw, db) in output_grads {
            dense.push(dw);
            dense.push(db);
        }
        drop(ad_grads);
        meter.sample(Point::BackwardEnd);
        Ok(Grads {
            loss,
            rows: rows_grad,
            dense,
        })
    }

    /// One training step: data → unique rows → forward → backward → row updates → dense updates
    /// → measure.
    pub fn train_step(
        &mut self,
        batch: &CsrBatch,
        meter: &mut MemoryMeter,
    ) -> Result<StepStats, ModelError> {
        meter.probe(Point::Setup);
        // Steps 1–4: data, unique rows, forward, backward.
        let grads = self.forward_backward(batch, meter)?;
        self.step += 1;
        // 5. row updates: only the batch's unique rows of each band, in place, with deduplicated
        //    ids (a host band takes back only these rows' updates).
        let (local, _) = self.band_segments(batch.unique_ids());
        for (s, rows_grad) in grads.rows {
            let band = &mut self.bands[s.band];
            band.state.step(
                &mut band.table,
                &local[s.band][s.seg.start..s.seg.end],
                rows_grad,
                &self.optim,
                self.step,
                meter,
            )?;
        }
        meter.probe(Point::DenseUpdate);
        // 6. dense updates.
        crate::optim::step_all(&mut self.dense, grads.dense, &self.optim, self.step);
        // 7. measure.
        meter.sample(Point::StepEnd);
        Ok(StepStats::new(self.step, grads.loss, batch))
    }

    /// Mean loss of a batch.
    pub fn loss(&self, batch: &CsrBatch) -> Result<f32, ModelError> {
        Ok(self.gradients(batch)?.loss)
    }

    /// Mean loss over held-out batches, weighted by their rows.
    pub fn eval_loss(&self, batches: &[CsrBatch]) -> Result<Option<f64>, ModelError> {
        let (mut sum, mut rows) = (0.0f64, 0usize);
        for b in batches {
            sum += self.loss(b)? as f64 * b.n_rows() as f64;
            rows += b.n_rows();
        }
        Ok((rows > 0).then(|| sum / rows as f64))
    }

    /// Adds `delta` to one entry of an input id's row (finite-difference tests).
    pub fn perturb_table(&mut self, id: u32, col: usize, delta: f32) -> Result<(), ModelError> {
        let k = self
            .bands
            .partition_point(|b| b.band.end <= id as usize)
            .min(self.bands.len() - 1);
        let band = &mut self.bands[k];
        let mut v = vec![0.0; band.band.dim];
        v[col] = delta;
        let t = floats(v, [1, band.band.dim], &self.device);
        band.table.scatter_add(&[id - band.band.start as u32], t)
    }

    /// Adds `delta` to one element of a dense parameter (finite-difference tests).
    pub fn perturb_dense(
        &mut self,
        param: usize,
        index: usize,
        delta: f32,
    ) -> Result<(), ModelError> {
        let p = &mut self.dense[param];
        let shape = p.value.shape();
        let mut v = to_vec(p.value.clone())?;
        v[index] += delta;
        p.value = floats(v, [shape[0], shape[1]], &self.device);
        Ok(())
    }

    /// Values (f32) of the input bands' tables and projections.
    pub fn table_parameters(&self) -> u64 {
        let tables: u64 = self.bands.iter().map(|b| b.table.bytes() / 4).sum();
        let projections: u64 = self.dense[1..1 + self.n_projections()]
            .iter()
            .map(|p| p.value.shape().num_elements() as u64)
            .sum();
        tables + projections
    }

    /// Values (f32) of the output layer.
    pub fn output_parameters(&self) -> u64 {
        self.dense[self.output_start()..]
            .iter()
            .map(|p| p.value.shape().num_elements() as u64)
            .sum()
    }

    /// Bytes of the input bands' tables and their state placed in host memory.
    pub fn host_bytes(&self) -> u64 {
        self.bands
            .iter()
            .filter(|b| b.table.placement() == widebag_config::BandPlacement::Host)
            .map(|b| b.table.bytes() + b.state.bytes())
            .sum()
    }

    /// Bytes host bands sent to the device and took back so far (tables and state).
    pub fn host_traffic(&self) -> (u64, u64) {
        let mut total = (0, 0);
        for b in &self.bands {
            for t in b.state.tables().into_iter().chain([&b.table]) {
                let (up, down) = t.traffic();
                total = (total.0 + up, total.1 + down);
            }
        }
        total
    }

    /// Bytes of all parameters (tables and dense).
    pub fn parameter_bytes(&self) -> u64 {
        self.bands.iter().map(|b| b.table.bytes()).sum::<u64>()
            + self
                .dense
                .iter()
                .map(|p| p.value.shape().num_elements() as u64 * 4)
                .sum::<u64>()
    }
}
