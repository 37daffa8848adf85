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
//! Sparse layout, point by point: parameters and optimizer state always; from the forward pass
//! on, the batch's index and value buffers, the gathered unique rows (the gradient leaves) and
//! each layer's saved tensors; inside the output layer one class chunk's `[batch, chunk]`
//! logits and dense targets (forward), then every output gradient, the last chunk's logit
//! gradient and `dL/dh` (backward); after backward the row gradients and dense gradients; inside
//! the lazy-Adam row update two `[rows, dim]` temporaries.
//!
//! Dense layout: the dense `[batch, width]` input, `[batch, classes]` targets and one saved
//! `[batch, classes]` buffer of `log_softmax`, each layer's saved tensors, then a gradient for
//! every weight.

use serde::{Deserialize, Serialize};
use widebag_config::bands::{self, Band};
use widebag_config::{BandPlacement, Config, DenseOptim, Layout, TableOptim};

use crate::shapes::{self, F32_BYTES, I32_BYTES};
use crate::{Category, Entry, Ledger, Lifetime, Placement, Point, Pool};

/// What the ledger needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// The largest single buffer.
    pub max_buffer_bytes: u64,
    /// Every allocation is rounded up to a multiple of this.
    pub alignment_bytes: u64,
}

/// What the ledger needs to know about a batch (from data statistics at the batch size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFacts {
    pub n_rows: u64,
    /// Stored `(id, value)` entries.
    pub nnz: u64,
    /// Distinct ids (table rows touched).
    pub n_unique: u64,
    /// Target entries (one per row for next-id targets).
    pub n_targets: u64,
}

impl BatchFacts {
    /// The largest nnz, unique ids and targets among the first `n_batches` batches of `source`
    /// at `batch_size` (the source is cloned, so the run still sees those batches).
    pub fn sample(
        source: &widebag_data::BatchSource,
        batch_size: usize,
        n_batches: usize,
    ) -> Result<Self, widebag_data::DataError> {
        let mut source = source.clone();
        let mut out = Self::default();
        for _ in 0..n_batches.max(1) {
            let b = source.next_batch(batch_size)?;
            out.n_rows = out.n_rows.max(b.n_rows() as u64);
            out.nnz = out.nnz.max(b.nnz() as u64);
            out.n_unique = out.n_unique.max(b.unique_ids().len() as u64);
            out.n_targets = out.n_targets.max(b.targets().classes.len() as u64);
        }
        Ok(out)
    }
}

/// The step the ledger describes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSpec {
    pub layout: Layout,
    pub width: u64,
    pub n_classes: u64,
    pub dim: u64,
    pub hidden: Vec<u64>,
    pub batch: BatchFacts,
    pub table_optim: TableOptim,
    pub dense_optim: DenseOptim,
    /// `model.class_chunk` (0: as large as the buffer limit allows).
    pub class_chunk: u64,
    pub device: DeviceFacts,
    /// Input bands and where each lives (one device band: the unsplit table).
    #[serde(default)]
    pub input_bands: Vec<(Band, BandPlacement)>,
    /// Output clusters (one or none: the full softmax; more: the adaptive softmax).
    #[serde(default)]
    pub output_bands: Vec<Band>,
    /// Per tail cluster, the most batch rows with a target in it among sampled batches
    /// ([`StepSpec::sample_bands`]); empty: bounded by the batch's rows and targets.
    #[serde(default)]
    pub cluster_rows: Vec<u64>,
    /// Per input band, the most distinct ids of the band among sampled batches
    /// ([`StepSpec::sample_bands`]); empty: each band may hold all of the batch's unique ids.
    #[serde(default)]
    pub band_unique: Vec<u64>,
}

impl StepSpec {
    /// The step of `config` on a device with `device` facts and batches like `batch`.
    /// `model.max_buffer_mib` caps the device's buffer limit, as in the trainer.
    pub fn from_config(config: &Config, device: DeviceFacts, batch: BatchFacts) -> Self {
        let cap = config.model.max_buffer_mib << 20;
        let max_buffer_bytes = if cap > 0 {
            device.max_buffer_bytes.min(cap)
        } else {
            device.max_buffer_bytes
        };
        Self {
            layout: config.model.layout,
            width: config.data.width as u64,
            n_classes: config.data.n_classes() as u64,
            dim: config.model.dim as u64,
            hidden: config.model.hidden.iter().map(|&h| h as u64).collect(),
            batch,
            table_optim: config.optim.table,
            dense_optim: config.optim.dense,
            class_chunk: config.model.class_chunk as u64,
            device: DeviceFacts {
                max_buffer_bytes,
                alignment_bytes: device.alignment_bytes,
            },
            input_bands: bands::input_bands(config)
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(k, b)| (b, config.model.input_bands.placement_of(k)))
                .collect(),
            output_bands: bands::output_bands(config).unwrap_or_default(),
            cluster_rows: Vec::new(),
            band_unique: Vec::new(),
        }
    }

    /// The input bands (one device band of the whole width when none are set).
    pub fn bands(&self) -> Vec<(Band, BandPlacement)> {
        if self.input_bands.is_empty() {
            let whole = Band {
                start: 0,
                end: self.width as usize,
                dim: self.dim as usize,
            };
            vec![(whole, BandPlacement::Device)]
        } else {
            self.input_bands.clone()
        }
    }

    /// Samples [`Self::cluster_rows`] and [`Self::band_unique`] from the first `n_batches`
    /// batches of `source` (cloned, so the run still sees those batches).
    pub fn sample_bands(
        &mut self,
        source: &widebag_data::BatchSource,
        batch_size: usize,
        n_batches: usize,
    ) -> Result<(), widebag_data::DataError> {
        let split_input = self.input_bands.len() > 1;
        if !self.adaptive() && !split_input {
            return Ok(());
        }
        let clusters = self.output_bands.clone();
        let bands = self.bands();
        let mut most = vec![0u64; clusters.len().saturating_sub(1)];
        let mut most_unique = vec![0u64; bands.len()];
        let mut source = source.clone();
        for _ in 0..n_batches.max(1) {
            let b = source.next_batch(batch_size)?;
            let mut unique = vec![0u64; bands.len()];
            for &id in b.unique_ids() {
                let k = bands.partition_point(|(x, _)| x.end <= id as usize);
                unique[k.min(bands.len() - 1)] += 1;
            }
            for (m, u) in most_unique.iter_mut().zip(unique) {
                *m = (*m).max(u);
            }
            let t = b.targets();
            let mut count = vec![0u64; most.len()];
            for r in 0..b.n_rows() {
                let mut seen = vec![false; most.len()];
                for &class in &t.classes[t.row_ptr[r]..t.row_ptr[r + 1]] {
                    let c = clusters.partition_point(|x| x.end <= class as usize);
                    if c > 0 && !seen[c - 1] {
                        seen[c - 1] = true;
                        count[c - 1] += 1;
                    }
                }
            }
            for (m, c) in most.iter_mut().zip(count) {
                *m = (*m).max(c);
            }
        }
        if self.adaptive() {
            self.cluster_rows = most;
        }
        if split_input {
            self.band_unique = most_unique;
        }
        Ok(())
    }

    /// Per input band, the batch's distinct ids in it: sampled, or bounded by the batch's
    /// unique ids and the band's rows.
    pub fn unique_per_band(&self) -> Vec<u64> {
        self.bands()
            .iter()
            .enumerate()
            .map(|(k, (band, _))| match self.band_unique.get(k) {
                Some(&u) => u,
                None => self.batch.n_unique.min(band.n_rows() as u64),
            })
            .collect()
    }

    /// Whether the output is the adaptive softmax.
    pub fn adaptive(&self) -> bool {
        self.output_bands.len() > 1
    }

    /// Upper bounds of the bytes host bands move per step, `(to the device, back)`: each host
    /// band's distinct ids of the batch ([`Self::unique_per_band`]) at its width, with the table
    /// optimizer's state rows.
    pub fn host_traffic_bytes(&self) -> (u64, u64) {
        // AdamW gathers its rows twice (catch-up and update).
        let extra = u64::from(self.table_optim == TableOptim::AdamW);
        let moved: u64 = self
            .bands()
            .iter()
            .zip(self.unique_per_band())
            .filter(|((_, p), _)| *p == BandPlacement::Host)
            .map(|((b, _), rows)| {
                let d = b.dim as u64;
                F32_BYTES * rows * ((1 + extra) * d + self.table_optim.state_per_row(d))
            })
            .sum();
        (moved, moved)
    }

    /// Input size of every layer after the first: `dim`, then each hidden size.
    fn layer_sizes(&self) -> Vec<u64> {
        std::iter::once(self.dim)
            .chain(self.hidden.iter().copied())
            .collect()
    }

    fn last_hidden(&self) -> u64 {
        self.hidden.last().copied().unwrap_or(self.dim)
    }
}

/// Adds entries with shared defaults.
struct Builder {
    ledger: Ledger,
}

impl Builder {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        name: impl Into<String>,
        layer: &str,
        shape: &[u64],
        element_bytes: u64,
        count: u64,
        category: Category,
        pool: Pool,
        lifetime: Lifetime,
    ) {
        self.ledger.push(Entry {
            name: name.into(),
            layer: layer.to_string(),
            shape: shape.to_vec(),
            element_bytes,
            count,
            category,
            placement: Placement::Device,
            pool,
            lifetime,
        });
    }

    /// An f32 tensor in the dynamic pools.
    fn f32(&mut self, name: &str, layer: &str, shape: &[u64], category: Category, life: Lifetime) {
        self.add(
            name,
            layer,
            shape,
            F32_BYTES,
            1,
            category,
            Pool::Dynamic,
            life,
        );
    }

    /// A dense parameter, its optimizer state and its gradient (alive over `grad`).
    fn dense_param(
        &mut self,
        name: &str,
        layer: &str,
        shape: &[u64],
        optim: DenseOptim,
        grad: Lifetime,
    ) {
        self.f32(
            name,
            layer,
            shape,
            Category::Parameters,
            Lifetime::Persistent,
        );
        let states: &[&str] = match optim {
            DenseOptim::Sgd => &[],
            DenseOptim::Momentum => &["momentum"],
            DenseOptim::Adam | DenseOptim::AdamW => &["adam.m", "adam.v"],
        };
        for s in states {
            self.f32(
                &format!("{name}.{s}"),
                layer,
                shape,
                Category::OptimizerState,
                Lifetime::Persistent,
            );
        }
        self.f32(
            &format!("{name}.grad"),
            layer,
            shape,
            Category::DenseGradients,
            grad,
        );
    }

    /// What autodiff keeps of the bag/first layer and each hidden layer: the pre-activation
    /// (saved by `relu`) and the output (saved by the next `matmul`), `[batch, size]` each.
    /// The last output lives on to `last_to` (the trainer holds it).
    fn saved_layers(&mut self, spec: &StepSpec, from: Point, saved_to: Point, last_to: Point) {
        let b = spec.batch.n_rows;
        let sizes = spec.layer_sizes();
        for (l, &size) in sizes.iter().enumerate() {
            let layer = if l == 0 {
                "input".to_string()
            } else {
                format!("hidden.{}", l - 1)
            };
            let last = l + 1 == sizes.len();
            self.f32(
                "pre-activation (saved by relu)",
                &layer,
                &[b, size],
                Category::Activations,
                Lifetime::span(from, saved_to),
            );
            self.f32(
                "output (saved by the next matmul)",
                &layer,
                &[b, size],
                Category::Activations,
                Lifetime::span(from, if last { last_to } else { saved_to }),
            );
        }
    }
}

/// The ledger of one training step of `spec`.
pub fn ledger(spec: &StepSpec) -> Ledger {
    let mut ledger = match spec.layout {
        Layout::Sparse => sparse_ledger(spec),
        Layout::Dense => dense_ledger(spec),
    };
    // Adam's bias correction reads the step count, kept on the host (one u64 per model).
    let adam = matches!(spec.dense_optim, DenseOptim::Adam | DenseOptim::AdamW)
        || (spec.layout == Layout::Sparse
            && matches!(spec.table_optim, TableOptim::Adam | TableOptim::AdamW));
    if adam {
        ledger.push(Entry {
            name: "Adam step count".into(),
            layer: "optimizer".into(),
            shape: vec![1],
            element_bytes: 8,
            count: 1,
            category: Category::OptimizerState,
            placement: Placement::Host,
            pool: Pool::Dynamic,
            lifetime: Lifetime::Persistent,
        });
    }
    ledger
}

fn hidden_params(b: &mut Builder, spec: &StepSpec, grad: Lifetime) {
    let sizes = spec.layer_sizes();
    for (i, pair) in sizes.windows(2).enumerate() {
        let layer = format!("hidden.{i}");
        b.dense_param(
            &format!("{layer}.weight"),
            &layer,
            &[pair[0], pair[1]],
            spec.dense_optim,
            grad,
        );
        b.dense_param(
            &format!("{layer}.bias"),
            &layer,
            &[1, pair[1]],
            spec.dense_optim,
            grad,
        );
    }
}

/// The adaptive softmax's parameters: the head over its classes plus one token per tail cluster,
/// and per tail cluster its projection, weight and bias (gradients out of autodiff).
fn adaptive_params(b: &mut Builder, spec: &StepSpec, grad: Lifetime) {
    let last = spec.last_hidden();
    let clusters = &spec.output_bands;
    let head_n = (clusters[0].n_rows() + clusters.len() - 1) as u64;
    b.dense_param(
        "output.head.weight",
        "output.head",
        &[last, head_n],
        spec.dense_optim,
        grad,
    );
    b.dense_param(
        "output.head.bias",
        "output.head",
        &[1, head_n],
        spec.dense_optim,
        grad,
    );
    for (k, c) in clusters.iter().enumerate().skip(1) {
        let layer = format!("output.tail.{k}");
        let (d, n) = (c.dim as u64, c.n_rows() as u64);
        for (what, shape) in [
            ("projection", [last, d]),
            ("weight", [d, n]),
            ("bias", [1, n]),
        ] {
            b.dense_param(
                &format!("{layer}.{what}"),
                &layer,
                &shape,
                spec.dense_optim,
                grad,
            );
        }
    }
}

/// What the adaptive softmax holds on autodiff: the head's logits and log-probabilities over
/// `[batch, head]`, and per tail cluster, on the rows whose targets fall in it (at most the
/// batch or its target count, in row pieces within the buffer limit), the selected hidden rows,
/// their projection and the cluster's logits and log-probabilities. Freed by backward.
fn adaptive_activations(b: &mut Builder, spec: &StepSpec) {
    use Point::*;
    let (rows, last) = (spec.batch.n_rows, spec.last_hidden());
    let clusters = &spec.output_bands;
    let head_n = (clusters[0].n_rows() + clusters.len() - 1) as u64;
    let fwd = Lifetime::span(ForwardLogits, ForwardEnd);
    // The log-softmax chain is fused: one `[rows, n]` buffer per head and cluster piece.
    b.f32(
        "head log-probabilities",
        "output.head",
        &[rows, head_n],
        Category::Logits,
        fwd,
    );
    for (k, c) in clusters.iter().enumerate().skip(1) {
        let cluster_rows = spec
            .cluster_rows
            .get(k - 1)
            .copied()
            .unwrap_or(rows.min(spec.batch.n_targets));
        if cluster_rows == 0 {
            continue;
        }
        let layer = format!("output.tail.{k}");
        let n = c.n_rows() as u64;
        let per = (spec.device.max_buffer_bytes / (F32_BYTES * n.max(1))).max(1);
        let r = cluster_rows.min(per);
        let pieces = cluster_rows.div_ceil(r).max(1);
        b.add(
            "cluster log-probabilities (rows with a target here)",
            &layer,
            &[r, n],
            F32_BYTES,
            pieces,
            Category::Logits,
            Pool::Dynamic,
            fwd,
        );
        b.add(
            "selected hidden rows and their projection",
            &layer,
            &[r, last + c.dim as u64],
            F32_BYTES,
            pieces,
            Category::Activations,
            Pool::Dynamic,
            fwd,
        );
    }
}

fn sparse_ledger(spec: &StepSpec) -> Ledger {
    use Point::*;
    let max_buf = spec.device.max_buffer_bytes;
    let mut b = Builder {
        ledger: Ledger {
            points: Point::ALL
                .into_iter()
                .filter(|&p| p != BackwardInput)
                .collect(),
            unsampled: Vec::new(),
            alignment_bytes: spec.device.alignment_bytes,
            entries: Vec::new(),
        },
    };
    let (dim, rows) = (spec.dim, spec.batch.n_rows);
    let last = spec.last_hidden();

    // Parameters and optimizer state: each band's shards in the persistent pool (exact sizes),
    // on the device or in host memory.
    let table_states: &[&str] = match spec.table_optim {
        TableOptim::Sgd | TableOptim::RowwiseAdagrad => &[],
        TableOptim::Momentum => &["momentum"],
        TableOptim::Adam => &["lazy_adam.m", "lazy_adam.v"],
        TableOptim::AdamW => &["lazy_adamw.m", "lazy_adamw.v"],
    };
    let bands = spec.bands();
    let band_layer = |k: usize| {
        if bands.len() == 1 {
            "table".to_string()
        } else {
            format!("table.band{k}")
        }
    };
    let mut band_shards = Vec::with_capacity(bands.len());
    for (k, (band, placement)) in bands.iter().enumerate() {
        let layer = band_layer(k);
        let placement = match placement {
            BandPlacement::Device => Placement::Device,
            BandPlacement::Host => Placement::Host,
        };
        let shards = shapes::shard_rows(band.n_rows(), band.dim, max_buf);
        band_shards.push(shards.len() as u64);
        let mut by_rows: std::collections::BTreeMap<usize, u64> = Default::default();
        for &r in &shards {
            *by_rows.entry(r).or_default() += 1;
        }
        let mut table = |name: String, shape: [u64; 2], count: u64, category: Category| {
            b.ledger.push(Entry {
                name,
                layer: layer.clone(),
                shape: shape.to_vec(),
                element_bytes: F32_BYTES,
                count,
                category,
                placement,
                pool: Pool::Persistent,
                lifetime: Lifetime::Persistent,
            });
        };
        for (&r, &count) in &by_rows {
            let shape = [r as u64, band.dim as u64];
            table("table shard".into(), shape, count, Category::Parameters);
            for s in table_states {
                table(
                    format!("table shard {s}"),
                    shape,
                    count,
                    Category::OptimizerState,
                );
            }
        }
        if spec.table_optim == TableOptim::RowwiseAdagrad {
            // One accumulator per row, an `[n_rows, 1]` table sharded by the same buffer limit.
            let mut acc_by_rows: std::collections::BTreeMap<usize, u64> = Default::default();
            for r in shapes::shard_rows(band.n_rows(), 1, max_buf) {
                *acc_by_rows.entry(r).or_default() += 1;
            }
            for (&r, &count) in &acc_by_rows {
                table(
                    "row-wise Adagrad accumulator shard".into(),
                    [r as u64, 1],
                    count,
                    Category::OptimizerState,
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
    // Dense parameters: gradients of the bag bias and hidden layers come out of autodiff; the
    // output layer's are built chunk by chunk inside the output backward.
    let dense_grad = Lifetime::span(BackwardEnd, DenseUpdate);
    b.dense_param("bag.bias", "input", &[1, dim], spec.dense_optim, dense_grad);
    for (k, (band, _)) in bands.iter().enumerate().skip(1) {
        b.dense_param(
            &format!("input_band.{k}.projection"),
            "input",
            &[band.dim as u64, dim],
            spec.dense_optim,
            dense_grad,
        );
    }
    hidden_params(&mut b, spec, dense_grad);
    let output_grad = Lifetime::span(BackwardLogits, DenseUpdate);
    let chunks = if spec.adaptive() {
        adaptive_params(&mut b, spec, output_grad);
        Vec::new()
    } else {
        let chunk = shapes::class_chunk(
            spec.class_chunk as usize,
            spec.n_classes as usize,
            last as usize,
            rows as usize,
            max_buf,
        );
        let chunks = shapes::class_chunks(spec.n_classes as usize, chunk);
        for c in &chunks {
            let n = c.n as u64;
            let layer = format!("output.{}", c.offset / chunk);
            b.dense_param(
                &format!("{layer}.weight"),
                &layer,
                &[last, n],
                spec.dense_optim,
                output_grad,
            );
            b.dense_param(
                &format!("{layer}.bias"),
                &layer,
                &[1, n],
                spec.dense_optim,
                output_grad,
            );
        }
        chunks
    };

    // 1. data: index and value buffers, grouped by table segment (one per shard touched).
    // Each band's unique ids are gathered per shard they touch: (segments, rows each, dim).
    let segments: Vec<(u64, u64, u64)> = bands
        .iter()
        .zip(&band_shards)
        .zip(spec.unique_per_band())
        .map(|(((band, _), &shards), u)| {
            let n = shards.min(u);
            (n, if n == 0 { 0 } else { u.div_ceil(n) }, band.dim as u64)
        })
        .collect();
    let n_segments = segments.iter().map(|s| s.0).sum::<u64>().max(1);
    let batch_life = Lifetime::span(ForwardLogits, BackwardEnd);
    let pieces = spec
        .batch
        .nnz
        .div_ceil(shapes::max_bag_entries(dim as usize, max_buf) as u64)
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
            batch_life,
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
        batch_life,
    );
    b.add(
        "target weights",
        "batch",
        &[t],
        F32_BYTES,
        1,
        Category::BatchBuffers,
        Pool::Dynamic,
        batch_life,
    );
    b.f32(
        "target weight per row",
        "batch",
        &[rows, 1],
        Category::BatchBuffers,
        batch_life,
    );

    // 2. unique rows: gathered per segment, each a gradient leaf.
    for (k, &(n, rows_each, d)) in segments.iter().enumerate() {
        if n > 0 {
            b.add(
                "gathered unique rows (gradient leaves)",
                &band_layer(k),
                &[rows_each, d],
                F32_BYTES,
                n,
                Category::Activations,
                Pool::Dynamic,
                batch_life,
            );
        }
    }

    // 3. forward: what autodiff saves, then the output layer chunk by chunk.
    b.saved_layers(spec, ForwardLogits, BackwardLogits, BackwardEnd);
    for (k, (band, _)) in bands.iter().enumerate().skip(1) {
        b.f32(
            &format!("band {k} bag (saved by its projection matmul)"),
            "input",
            &[rows, band.dim as u64],
            Category::Activations,
            Lifetime::span(ForwardLogits, BackwardEnd),
        );
    }
    if spec.adaptive() {
        adaptive_activations(&mut b, spec);
    } else {
        let first = chunks[0].n as u64;
        b.f32(
            "logits of one class chunk",
            "output",
            &[rows, first],
            Category::Logits,
            Lifetime::at(ForwardLogits),
        );
        b.f32(
            "dense targets of one class chunk",
            "output",
            &[rows, first],
            Category::Logits,
            Lifetime::at(ForwardLogits),
        );
        b.f32(
            "running target logit",
            "output",
            &[rows, 1],
            Category::Temporaries,
            Lifetime::at(ForwardLogits),
        );
        b.f32(
            "log-sum-exp per row",
            "output",
            &[rows, 1],
            Category::Activations,
            Lifetime::span(ForwardEnd, BackwardEnd),
        );

        // 4. backward: the output layer by chunk (gradients above), then autodiff.
        let last_chunk = chunks[chunks.len() - 1].n as u64;
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
            &[rows, last],
            Category::Temporaries,
            Lifetime::at(BackwardLogits),
        );
    }
    for (k, &(n, rows_each, d)) in segments.iter().enumerate() {
        if n > 0 {
            b.add(
                "row gradients",
                &band_layer(k),
                &[rows_each, d],
                F32_BYTES,
                n,
                Category::RowGradients,
                Pool::Dynamic,
                Lifetime::span(BackwardEnd, TableUpdate),
            );
        }
    }

    // 5. row updates: the optimizer's temporaries for one segment at a time, the largest
    //    segment's (`[rows, dim]` for moments, `[rows, 1]` for row-wise Adagrad).
    let (per_segment, seg_dim) = segments
        .iter()
        .map(|&(_, r, d)| (r, d))
        .max_by_key(|&(r, d)| match spec.table_optim {
            TableOptim::RowwiseAdagrad => r,
            _ => r * d,
        })
        .unwrap_or((0, dim));
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
        Lifetime::at(TableUpdate),
    );
    b.ledger
}

fn dense_ledger(spec: &StepSpec) -> Ledger {
    use Point::*;
    let mut b = Builder {
        ledger: Ledger {
            points: vec![
                Setup,
                ForwardEnd,
                BackwardLogits,
                BackwardInput,
                BackwardEnd,
                StepEnd,
            ],
            // Inside `loss.backward()` nothing can be read; these two moments are predicted from
            // the order of autodiff's backward (output layer first, first layer last).
            unsampled: vec![BackwardLogits, BackwardInput],
            alignment_bytes: spec.device.alignment_bytes,
            entries: Vec::new(),
        },
    };
    let (dim, rows) = (spec.dim, spec.batch.n_rows);
    let early = Lifetime::span(BackwardInput, DenseUpdate);
    b.dense_param(
        "input.weight",
        "input",
        &[spec.width, dim],
        spec.dense_optim,
        early,
    );
    b.dense_param("input.bias", "input", &[1, dim], spec.dense_optim, early);
    hidden_params(&mut b, spec, early);
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

    let fwd = Lifetime::at(ForwardEnd);
    // The first matmul saves the dense input until the first layer's gradient is formed.
    b.f32(
        "dense input batch",
        "batch",
        &[rows, spec.width],
        Category::BatchBuffers,
        Lifetime::span(ForwardEnd, BackwardInput),
    );
    b.f32(
        "dense targets",
        "batch",
        &[rows, spec.n_classes],
        Category::BatchBuffers,
        fwd,
    );
    b.saved_layers(spec, ForwardEnd, BackwardLogits, BackwardLogits);
    b.f32(
        "logits (saved by log_softmax)",
        "output",
        &[rows, spec.n_classes],
        Category::Logits,
        fwd,
    );
    b.f32(
        "logit gradient",
        "output",
        &[rows, spec.n_classes],
        Category::Logits,
        Lifetime::at(BackwardLogits),
    );
    b.f32(
        "gradient at the first layer's output",
        "input",
        &[rows, dim],
        Category::Temporaries,
        Lifetime::at(BackwardInput),
    );
    b.ledger
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    fn seed_spec(layout: Layout, dense_optim: DenseOptim) -> StepSpec {
        StepSpec {
            layout,
            width: 240_000,
            n_classes: 240_000,
            dim: 1024,
            hidden: vec![512],
            batch: BatchFacts {
                n_rows: 128,
                nnz: 2_560,
                n_unique: 1_400,
                n_targets: 128,
            },
            table_optim: TableOptim::Adam,
            dense_optim,
            class_chunk: 0,
            device: DeviceFacts {
                max_buffer_bytes: 128 << 20,
                alignment_bytes: 32,
            },
            input_bands: Vec::new(),
            output_bands: Vec::new(),
            cluster_rows: Vec::new(),
            band_unique: Vec::new(),
        }
    }

    #[test]
    fn head_tail_bands_on_the_host_leave_the_device() {
        let mut c = widebag_config::Config::default();
        c.data.n_classes = Some(240_000);
        c.model.dim = 64;
        c.model.hidden = vec![64];
        c.model.output = widebag_config::OutputKind::Adaptive;
        c.model.input_bands.cutoffs = widebag_config::Cutoffs::Ids(vec![20_000, 80_000]);
        c.model.output_bands.cutoffs = widebag_config::Cutoffs::Ids(vec![20_000, 80_000]);
        let facts = DeviceFacts {
            max_buffer_bytes: 128 << 20,
            alignment_bytes: 32,
        };
        let batch = BatchFacts {
            n_rows: 256,
            nnz: 5_000,
            n_unique: 2_000,
            n_targets: 256,
        };
        let device_spec = StepSpec::from_config(&c, facts, batch);
        c.model.input_bands.placement = vec![BandPlacement::Device, BandPlacement::Host];
        let host_spec = StepSpec::from_config(&c, facts, batch);
        let (on_device, on_host) = (ledger(&device_spec), ledger(&host_spec));
        let host_bytes: u64 = on_host
            .entries
            .iter()
            .filter(|e| e.placement == Placement::Host && e.layer.starts_with("table.band"))
            .map(|e| e.bytes())
            .sum();
        // Tail tables: 60,000 rows × 16 and 160,000 × 4, each with two Adam moments.
        assert_eq!(host_bytes, 3 * 4 * (60_000 * 16 + 160_000 * 4));
        assert_eq!(
            on_device.peak(Placement::Device).bytes - on_host.peak(Placement::Device).bytes,
            host_bytes
        );
        assert_eq!(device_spec.host_traffic_bytes(), (0, 0));
        // Unsampled, each tail band may hold all 2,000 unique ids: rows and two moments each.
        let bound = 4 * 2_000 * 3 * (16 + 4);
        assert_eq!(host_spec.host_traffic_bytes(), (bound, bound));
        // Sampled per band: 1,500 head ids on the device, 400 and 100 on the host.
        let mut sampled = host_spec.clone();
        sampled.band_unique = vec![1_500, 400, 100];
        assert_eq!(
            sampled.host_traffic_bytes(),
            (4 * 3 * (400 * 16 + 100 * 4), 4 * 3 * (400 * 16 + 100 * 4))
        );
        // Each band's gathered rows and row gradients at its own width.
        let l = ledger(&sampled);
        for (band, rows, dim) in [("table.band0", 1_500, 64), ("table.band1", 400, 16)] {
            for name in ["gathered unique rows (gradient leaves)", "row gradients"] {
                let e = l
                    .entries
                    .iter()
                    .find(|e| e.layer == band && e.name == name)
                    .unwrap();
                assert_eq!((e.shape.clone(), e.count), (vec![rows, dim], 1));
            }
        }
        // The adaptive head covers 20,000 classes plus 2 cluster tokens; no class chunks.
        assert!(
            on_host
                .entries
                .iter()
                .any(|e| e.name == "output.head.weight" && e.shape == vec![64, 20_002])
        );
        assert!(
            !on_host
                .entries
                .iter()
                .any(|e| e.layer.starts_with("output.0"))
        );
    }

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

    #[test]
    fn optimizer_state_multipliers() {
        let params = 369_405_824u64 * 4;
        for opt in DenseOptim::ALL {
            let l = ledger(&seed_spec(Layout::Dense, opt));
            let c = l.categories_at(Placement::Device, Point::StepEnd);
            assert_eq!(
                c.get(&Category::OptimizerState).copied().unwrap_or(0),
                opt.state_per_weight() * params,
                "{opt:?}"
            );
        }
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Sgd);
        for opt in TableOptim::ALL {
            spec.table_optim = opt;
            let l = ledger(&spec);
            let c = l.categories_at(Placement::Device, Point::StepEnd);
            assert_eq!(
                c.get(&Category::OptimizerState).copied().unwrap_or(0),
                opt.state_per_row(1024) * 240_000 * 4,
                "{opt:?}"
            );
        }
    }

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
