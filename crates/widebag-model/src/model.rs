//! The wide model and its training step: embedding bag (row-sharded table, off autodiff) → ReLU
//! MLP → chunked full softmax, with row-sparse table updates and dense layer updates.

use burn::tensor::activation::relu;
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor};
use rayon::prelude::*;
use serde::Serialize;
use widebag_config::{Config, OptimConfig};
use widebag_csr::CsrBatch;
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
}

impl ModelSpec {
    pub fn new(config: &Config, compute: &Compute) -> Self {
        let max_buffer_bytes = compute
            .clone()
            .with_buffer_cap(config.model.max_buffer_mib << 20)
            .max_buffer_bytes;
        let last = config
            .model
            .hidden
            .last()
            .copied()
            .unwrap_or(config.model.dim);
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
    /// Gradient of the batch's unique rows, one `[end - start, dim]` tensor per table segment
    /// (runs of `unique_ids` within one shard), in order.
    pub rows: Vec<(Segment, Tensor<2>)>,
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

/// The batch's index and value buffers on the autodiff device, grouped by table segment and cut
/// into pieces whose `[n, dim]` weighted entries fit the buffer limit.
struct BagInputs {
    n_rows: usize,
    segments: Vec<Segment>,
    pieces: Vec<BagPiece>,
}

impl BagInputs {
    fn upload(
        batch: &CsrBatch,
        segments: Vec<Segment>,
        max_entries: usize,
        device: &Device,
    ) -> Self {
        let mut buckets: Vec<(Vec<u32>, Vec<u32>, Vec<f32>)> =
            vec![(Vec::new(), Vec::new(), Vec::new()); segments.len()];
        let row_ptr = batch.row_ptr();
        for r in 0..batch.n_rows() {
            for k in row_ptr[r]..row_ptr[r + 1] {
                let local = batch.local_pos()[k] as usize;
                let s = segments.partition_point(|seg| seg.end <= local);
                let b = &mut buckets[s];
                b.0.push((local - segments[s].start) as u32);
                b.1.push(r as u32);
                b.2.push(batch.values()[k]);
            }
        }
        let mut pieces = Vec::new();
        for (segment, (pos, rows, vals)) in buckets.into_iter().enumerate() {
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

/// The sparse-input model.
pub struct WideModel {
    pub spec: ModelSpec,
    pub chunks: Vec<ClassChunk>,
    pub table: ShardedTable,
    pub table_state: TableState,
    /// Bag bias, then `(weight, bias)` of each hidden layer, then of each output chunk.
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
        let table_bound = (1.0 / dim as f64).sqrt() * 3f64.sqrt();
        let table =
            ShardedTable::from_fn(spec.width, dim, spec.max_buffer_bytes, &device, |r, out| {
                for (j, x) in out.iter_mut().enumerate() {
                    *x = uniform_init(seed, 0x7ab1e, (r * dim + j) as u64, table_bound);
                }
            });
        let table_state = TableState::new(config.optim.table, &table, spec.max_buffer_bytes);
        let optim_kind = config.optim.dense;
        let mut dense = vec![DenseParam::new(
            "bag.bias",
            Tensor::zeros([1, dim], &device),
            optim_kind,
        )];
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
        let chunks = softmax::class_chunks(spec.n_classes, spec.class_chunk);
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
        Self {
            spec,
            chunks,
            table,
            table_state,
            dense,
            optim: config.optim.clone(),
            step: 0,
            device,
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn n_hidden(&self) -> usize {
        self.spec.hidden.len()
    }

    /// Index in [`Self::dense`] of the first output parameter.
    pub fn output_start(&self) -> usize {
        1 + 2 * self.n_hidden()
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
        Ok(())
    }

    /// Forward through the bag and the hidden layers, on the autodiff device.
    /// `leaves` are the bag bias and hidden parameters as gradient leaves.
    fn forward_hidden(
        &self,
        rows: &[Tensor<2>],
        leaves: &[Tensor<2>],
        inputs: &BagInputs,
    ) -> Tensor<2> {
        let ad = self.device.clone().autodiff();
        let mut bags = Tensor::<2>::zeros([inputs.n_rows, self.spec.dim], &ad);
        for piece in &inputs.pieces {
            let entries = rows[piece.segment]
                .clone()
                .select(0, piece.local_pos.clone())
                * piece.values.clone();
            bags = bags.select_assign(0, piece.entry_rows.clone(), entries, IndexingUpdateOp::Add);
        }
        let mut h = relu(bags + leaves[0].clone());
        for layer in 0..self.n_hidden() {
            let (w, b) = (&leaves[1 + 2 * layer], &leaves[2 + 2 * layer]);
            h = relu(h.matmul(w.clone()) + b.clone());
        }
        h
    }

    fn output_layer(&self) -> Vec<(&Tensor<2>, &Tensor<2>)> {
        self.dense[self.output_start()..]
            .chunks(2)
            .map(|p| (&p[0].value, &p[1].value))
            .collect()
    }

    /// Bag bias and hidden parameters as fresh gradient leaves.
    fn hidden_leaves(&self) -> Vec<Tensor<2>> {
        self.dense[..self.output_start()]
            .iter()
            .map(|p| p.value.clone().autodiff().require_grad())
            .collect()
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
        let ad = self.device.clone().autodiff();
        // 1. data: the batch's index and value buffers, grouped by table segment.
        let uniq = batch.unique_ids();
        let max_entries =
            widebag_ledger::shapes::max_bag_entries(self.spec.dim, self.spec.max_buffer_bytes);
        let inputs = BagInputs::upload(batch, self.table.segments(uniq), max_entries, &ad);
        let targets = ChunkTargets::new(batch.targets(), &self.chunks, &self.device);
        // 2. unique rows: gather them per segment and make each a gradient leaf.
        let rows: Vec<Tensor<2>> = inputs
            .segments
            .iter()
            .map(|&seg| {
                self.table
                    .gather_segment(uniq, seg)
                    .autodiff()
                    .require_grad()
            })
            .collect();
        // 3. forward: bag → MLP on autodiff; the output layer in class chunks, off autodiff.
        let leaves = self.hidden_leaves();
        let h = self.forward_hidden(&rows, &leaves, &inputs);
        let h_plain = h.clone().inner();
        let layer = self.output_layer();
        let fwd = softmax::forward(&h_plain, &layer, &self.chunks, &targets, meter);
        let loss = scalar(fwd.loss)?;
        meter.sample(Point::ForwardEnd);
        // 4. backward: output gradients by chunk, then autodiff from dL/dh through the MLP and bag.
        let out = softmax::backward(&h_plain, &layer, &self.chunks, &targets, &fwd.lse, meter);
        let surrogate = (h * Tensor::from_inner(out.dh)).sum();
        let ad_grads = surrogate.backward();
        let rows_grad = inputs
            .segments
            .iter()
            .zip(&rows)
            .map(|(&seg, leaf)| {
                let g = leaf.grad(&ad_grads).unwrap_or_else(|| {
                    Tensor::zeros([seg.end - seg.start, self.spec.dim], &self.device)
                });
                (seg, g)
            })
            .collect();
        let mut dense: Vec<Tensor<2>> = leaves
            .iter()
            .zip(&self.dense)
            .map(|(leaf, p)| leaf.grad(&ad_grads).unwrap_or_else(|| p.value.zeros_like()))
            .collect();
        for (dw, db) in out.chunks {
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
        // 5. row updates: only the batch's unique rows, in place, with deduplicated ids.
        let uniq = batch.unique_ids();
        for (seg, rows_grad) in grads.rows {
            self.table_state.step(
                &mut self.table,
                &uniq[seg.start..seg.end],
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

    /// Mean loss of a batch (forward only).
    pub fn loss(&self, batch: &CsrBatch) -> Result<f32, ModelError> {
        Ok(self.gradients(batch)?.loss)
    }

    /// Adds `delta` to one table entry (finite-difference tests).
    pub fn perturb_table(&mut self, row: u32, col: usize, delta: f32) {
        let mut v = vec![0.0; self.spec.dim];
        v[col] = delta;
        let t = floats(v, [1, self.spec.dim], &self.device);
        self.table.scatter_add(&[row], t);
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

    /// Bytes of all parameters (table and dense).
    pub fn parameter_bytes(&self) -> u64 {
        self.table.bytes()
            + self
                .dense
                .iter()
                .map(|p| p.value.shape().num_elements() as u64 * 4)
                .sum::<u64>()
    }
}
