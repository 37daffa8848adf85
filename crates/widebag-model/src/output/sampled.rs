//! The sampled output losses ([`SampledOutput`]): a step scores only the batch's positives and
//! the step's drawn negatives ([`NegativeStream`]), shared by every row, on autodiff with the
//! trunk; the gradient and the optimizer step touch only those classes' columns
//! ([`update_columns`]). On wgpu a step's candidates and target entries are padded
//! to a few lengths ([`shapes::step_length_bucket`]: more drawn classes, target entries that
//! weigh nothing), so a JIT backend (wgpu) compiles its kernels in the first steps, not at
//! every step's new count. The losses: a sampled softmax with log-Q correction, word2vec's
//! negative sampling, SimpleX's cosine contrastive loss (`model.output`). The parameters are the
//! full softmax's ([`FullParams`]): evaluation and perplexity score every class, checkpoints,
//! export and prediction read them as they read the full softmax's.

use burn::tensor::activation::relu;
use burn::tensor::{Device, Int, Tensor};
use widebag_config::{OutputKind, SamplingConfig, Score};
use widebag_csr::Targets;
use widebag_ledger::shapes::{self, ClassChunk};
use widebag_ledger::step::OutputLayerKind;

use crate::cpu::access::HostMatrix;
use crate::cpu::column_update::update_columns as host_columns;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::ChunkRef;
use crate::device::ComputePath;
use crate::error::ModelError;
use crate::optim::columns::update_columns;
use crate::optim::dense::DenseParam;
use crate::output::clusters::log_softmax_rows;
use crate::output::full::FullParams;
use crate::output::negatives::{Fill, NegativeStream};
use crate::output::sampled_host;
use crate::output::scores::{BlockScorer, ChunksWanted, ScoreKind, Visit};
use crate::output::softmax::{self, ChunkTargets};
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass, Upstream};
use crate::probe::{Point, Stage, StepProbe};
use crate::ranks::{RankBatch, Ranks};
use crate::tensors::{floats, ints, scalar};

/// Which sampled loss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SampledLoss {
    /// Softmax over the candidates, each drawn score less its log-inclusion probability.
    Softmax,
    /// `softplus(−s)` per target, `softplus(s)` per drawn negative, per unit of target weight.
    NegativeSampling,
    /// `1 − cos` per target, `weight` times the mean `max(0, cos − margin)` over the row's
    /// negatives per unit of target weight.
    Contrastive { margin: f32, weight: f32 },
}

impl SampledLoss {
    /// The loss `kind` names with `sampling`'s constants; `None` unless it is a sampled one.
    pub fn of(kind: OutputKind, sampling: &SamplingConfig) -> Option<Self> {
        match kind {
            OutputKind::SampledSoftmax => Some(SampledLoss::Softmax),
            OutputKind::NegativeSampling => Some(SampledLoss::NegativeSampling),
            OutputKind::CosineContrastive => Some(SampledLoss::Contrastive {
                margin: sampling.margin as f32,
                weight: sampling.negative_weight as f32,
            }),
            _ => None,
        }
    }
}

/// A sampled output layer.
pub struct SampledOutput {
    pub(crate) full: FullParams,
    loss: SampledLoss,
    score: Score,
    temperature: f32,
    /// Whether the batch's other rows' positives are a row's negatives too.
    batch_negatives: bool,
    stream: NegativeStream,
    reduce_cols: usize,
    device: Device,
    /// The step the next forward pass belongs to (its negatives).
    step: u64,
    /// While set, forward passes compute the full softmax's loss (the held-out loss).
    held_out: bool,
    /// The classes the last backward pass's gradients belong to, by chunk: `(chunk, first
    /// gradient column, local columns)`.
    touched: Touched,
    /// Whether training steps run on flex's host kernels ([`sampled_host`]: the sampled softmax
    /// with the batch's positives as negatives, on flex); else on tensors with autodiff.
    host: bool,
    /// Whether evaluation scores every class by block on flex's host kernels (any loss).
    host_scores: bool,
}

/// One chunk's candidates: the chunk, the first of their gradient columns, their local columns.
type Touched = Vec<(usize, usize, Vec<u32>, Tensor<1, Int>)>;

/// Autodiff's graph from the loss, its leaves (the gathered columns) and their classes.
struct GraphPass {
    loss: Tensor<1>,
    weight: Tensor<2>,
    bias: Tensor<2>,
    touched: Touched,
}

/// What a training forward pass keeps for its backward pass: autodiff's graph from the loss
/// and the gathered columns (its leaves), or the host kernels' pass.
enum Saved {
    Graph(Box<GraphPass>),
    Host {
        pass: Box<sampled_host::HostPass>,
        touched: Touched,
    },
}

/// A step's candidates: the batch's positives and the drawn negatives, sorted and distinct,
/// with what the loss needs of each `(row, candidate)`.
pub(crate) struct Candidates {
    pub classes: Vec<u32>,
    /// Per target entry: its flat index `row · C + position`, and its weight.
    pub flat: Vec<u32>,
    pub weights: Vec<f32>,
    /// Per candidate: whether it is a positive of some row of the batch.
    pub positive: Vec<bool>,
    /// Per candidate: whether it was drawn (or filled in).
    pub drawn: Vec<bool>,
    /// The classes that filled the candidates up to their length (none on flex).
    pub fill: Fill,
    /// Whether the candidates were filled up to their length bucket and the target entries
    /// are padded to theirs (wgpu).
    pub padded: bool,
}

impl Candidates {
    pub(crate) fn new(targets: &Targets, drawn: &[u32]) -> Self {
        let classes = sorted_union(&targets.classes, drawn);
        let at = |c: u32| classes.binary_search(&c).expect("a candidate") as u32;
        let n = classes.len() as u32;
        let (mut flat, mut weights) = (Vec::new(), Vec::new());
        let mut positive = vec![false; classes.len()];
        for r in 0..targets.row_ptr.len() - 1 {
            for k in targets.row_ptr[r]..targets.row_ptr[r + 1] {
                let p = at(targets.classes[k]);
                positive[p as usize] = true;
                flat.push(r as u32 * n + p);
                weights.push(targets.weights[k]);
            }
        }
        let mut is_drawn = vec![false; classes.len()];
        for &c in drawn {
            is_drawn[at(c) as usize] = true;
        }
        Self {
            classes,
            flat,
            weights,
            positive,
            drawn: is_drawn,
            fill: Fill::default(),
            padded: false,
        }
    }

    /// The candidates of the batch's `targets` and the step's `drawn` classes, filled up to
    /// their length bucket with classes from `stream`'s fill for `step`.
    pub(crate) fn filled(
        targets: &Targets,
        drawn: Vec<u32>,
        stream: &NegativeStream,
        step: u64,
    ) -> Self {
        let taken = sorted_union(&targets.classes, &drawn);
        let n_classes = stream.n_classes();
        let length = shapes::step_length_bucket(taken.len(), n_classes);
        let fill = stream.fill(step, &taken, length - taken.len());
        let mut all = drawn;
        all.extend_from_slice(&fill.classes);
        all.sort_unstable();
        let mut cand = Self::new(targets, &all);
        cand.fill = fill;
        cand.padded = true;
        cand
    }

    /// `[rows, C]`: each row's weight on each candidate as a negative (0 for its own
    /// positives; `per_row(row, n_negatives)` for the others: drawn ones, and with
    /// `batch_negatives` the other rows' positives).
    fn negative_weights(
        &self,
        targets: &Targets,
        batch_negatives: bool,
        per_row: impl Fn(usize, usize) -> f32,
    ) -> Vec<f32> {
        let (rows, n) = (targets.row_ptr.len() - 1, self.classes.len());
        let eligible: Vec<bool> = (0..n)
            .map(|c| self.drawn[c] || (batch_negatives && self.positive[c]))
            .collect();
        let n_eligible = eligible.iter().filter(|&&e| e).count();
        let mut out = vec![0.0f32; rows * n];
        for r in 0..rows {
            let own: Vec<usize> = (targets.row_ptr[r]..targets.row_ptr[r + 1])
                .map(|k| self.flat[k] as usize - r * n)
                .collect();
            let own_eligible = own.iter().filter(|&&p| eligible[p]).count();
            let w = per_row(r, n_eligible - own_eligible);
            let row = &mut out[r * n..(r + 1) * n];
            for (c, e) in eligible.iter().enumerate() {
                if *e {
                    row[c] = w;
                }
            }
            for p in own {
                row[p] = 0.0;
            }
        }
        out
    }
}

/// The distinct classes of `a` and `b`, sorted.
fn sorted_union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = a.iter().chain(b).copied().collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// `log(1 + e^x)` without overflow.
fn softplus(x: Tensor<2>) -> Tensor<2> {
    relu(x.clone()) + x.abs().neg().exp().log1p()
}

impl SampledOutput {
    /// `host`: train on flex's host kernels where they compute the loss (the sampled softmax
    /// with `batch_negatives`); the other losses stay on tensors.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        full: FullParams,
        loss: SampledLoss,
        score: Score,
        temperature: f64,
        batch_negatives: bool,
        stream: NegativeStream,
        reduce_cols: usize,
        (device, host): (Device, bool),
    ) -> Self {
        Self {
            host: host && loss == SampledLoss::Softmax && batch_negatives,
            host_scores: host,
            full,
            loss,
            score,
            temperature: temperature as f32,
            batch_negatives,
            stream,
            reduce_cols,
            device,
            step: 1,
            held_out: false,
            touched: Vec::new(),
        }
    }

    /// Scores `[rows, C]` of `h` against the gathered columns `weight` (`[hidden, C]`) and
    /// `bias` (`[1, C]`).
    fn scores_of(&self, h: Tensor<2>, weight: Tensor<2>, bias: Tensor<2>) -> Tensor<2> {
        match self.score {
            Score::Dot => h.matmul(weight) + bias,
            Score::Cosine => {
                let hn = h.clone() / (h.powi_scalar(2).sum_dim(1) + 1e-12).sqrt();
                let wn = weight.clone() / (weight.powi_scalar(2).sum_dim(0) + 1e-12).sqrt();
                hn.matmul(wn).div_scalar(self.temperature)
            }
        }
    }

    /// The whole layer's chunks as they score: `(weight, bias)` each, cosine's columns
    /// normalised and divided by the temperature (bias zero).
    fn scoring_chunks(&self) -> Vec<(Tensor<2>, Tensor<2>)> {
        let chunks = self.full.tensors();
        match self.score {
            Score::Dot => chunks,
            Score::Cosine => chunks
                .into_iter()
                .map(|(w, b)| {
                    let wn = w.clone() / (w.powi_scalar(2).sum_dim(0) + 1e-12).sqrt();
                    (wn.div_scalar(self.temperature), b.zeros_like())
                })
                .collect(),
        }
    }

    /// `h` as the whole layer's scoring reads it (unit rows for cosine).
    fn scoring_h(&self, h: &Tensor<2>) -> Tensor<2> {
        match self.score {
            Score::Dot => h.clone(),
            Score::Cosine => h.clone() / (h.clone().powi_scalar(2).sum_dim(1) + 1e-12).sqrt(),
        }
    }

    /// The held-out loss: the full softmax over every class (the multinomial objective's).
    fn full_loss(
        &self,
        h: &Tensor<2>,
        targets: &Targets,
        probe: &mut StepProbe,
    ) -> Result<f32, ModelError> {
        let chunks = self.scoring_chunks();
        let refs: Vec<(&Tensor<2>, &Tensor<2>)> = chunks.iter().map(|(w, b)| (w, b)).collect();
        let targets = ChunkTargets::new(targets, &self.full.chunks, &self.device);
        let h = softmax::Hidden::new(
            self.scoring_h(&h.clone().inner()),
            crate::products::Operands::F32,
        );
        let fwd = softmax::forward(
            &h,
            &refs,
            &self.full.chunks,
            &targets,
            softmax::SoftmaxKernels::Tensor {
                reduce_cols: self.reduce_cols,
            },
            widebag_config::Logits::Recompute,
            probe,
        );
        scalar(fwd.loss)
    }

    /// The candidates' columns cut by chunk: `(chunk, first column, local columns, the local
    /// columns as a tensor)`.
    fn cut(&self, classes: &[u32]) -> Touched {
        let mut touched = Vec::new();
        let mut first = 0;
        for (k, chunk) in self.full.chunks.iter().enumerate() {
            let end = first
                + classes[first..].partition_point(|&c| (c as usize) < chunk.offset + chunk.n);
            if end > first {
                let local: Vec<u32> = classes[first..end]
                    .iter()
                    .map(|&c| c - chunk.offset as u32)
                    .collect();
                let idx = ints(&local, &self.device);
                touched.push((k, first, local, idx));
            }
            first = end;
        }
        touched
    }

    /// The gathered `[hidden, C]` weight and `[1, C]` bias of the columns `touched` cuts.
    fn gather(&self, touched: &Touched) -> (Tensor<2>, Tensor<2>) {
        let (mut ws, mut bs) = (Vec::new(), Vec::new());
        for (k, _, _, idx) in touched {
            let lin = &self.full.layer[*k];
            ws.push(lin.weight.value.clone().select(1, idx.clone()));
            bs.push(lin.bias.value.clone().select(1, idx.clone()));
        }
        (Tensor::cat(ws, 1), Tensor::cat(bs, 1))
    }

    /// Each candidate's log-inclusion probability, 0 for the batch's positives (log-Q): by the
    /// step's draw, and the fill's where the candidates were filled up.
    fn log_q(&self, cand: &Candidates) -> Vec<f32> {
        (0..cand.classes.len())
            .map(|c| match cand.positive[c] {
                true => 0.0,
                false => cand
                    .fill
                    .log_inclusion(self.stream.log_inclusion(cand.classes[c])),
            })
            .collect()
    }

    /// The training forward pass on flex's host kernels ([`sampled_host`]).
    fn forward_host(
        &mut self,
        h: &Tensor<2>,
        cand: &Candidates,
        touched: Touched,
    ) -> Result<OutputPass, ModelError> {
        let h = HostMatrix::take(h.clone().inner())?;
        let n = cand.classes.len();
        let cut: Vec<(usize, usize, Vec<u32>)> = touched
            .iter()
            .map(|(k, first, local, _)| (*k, *first, local.clone()))
            .collect();
        let columns = sampled_host::gather(&mut self.full, &cut, h.cols, n)?;
        let log_q = self.log_q(cand);
        let per_row = n.max(1) as u32;
        let entries =
            (cand.flat.iter().zip(&cand.weights)).map(|(&f, &w)| (f / per_row, f % per_row, w));
        let temperature = (self.score == Score::Cosine).then_some(self.temperature);
        let pass = Box::new(sampled_host::forward(
            h,
            columns,
            &log_q,
            entries,
            temperature,
        ));
        let loss = pass.loss;
        Ok(OutputPass::new(
            loss,
            Vec::new(),
            Saved::Host { pass, touched },
        ))
    }

    /// The sampled loss of `s` (`[rows, C]` scores on autodiff) for the candidates `cand`.
    fn loss_of(&self, s: Tensor<2>, cand: &Candidates, targets: &Targets) -> Tensor<1> {
        let (rows, n) = (targets.row_ptr.len() - 1, cand.classes.len());
        let dev = s.device();
        let wsum: Vec<f32> = (0..rows)
            .map(|r| {
                targets.weights[targets.row_ptr[r]..targets.row_ptr[r + 1]]
                    .iter()
                    .sum()
            })
            .collect();
        // On wgpu the target entries padded to their length bucket by entry 0 weighing nothing.
        let entries = match cand.padded {
            false => cand.flat.len(),
            true => shapes::step_length_bucket(cand.flat.len(), usize::MAX),
        };
        let (mut flat, mut weights) = (cand.flat.clone(), cand.weights.clone());
        flat.resize(entries, 0);
        weights.resize(entries, 0.0);
        let pick = |t: Tensor<2>| -> Tensor<1> {
            let picked = t.reshape([rows * n]).select(0, ints(&flat, &dev));
            (picked * floats(weights.clone(), [entries], &dev)).sum()
        };
        let total = match self.loss {
            SampledLoss::Softmax => {
                let mut z = s - floats(self.log_q(cand), [1, n], &dev);
                if !self.batch_negatives {
                    let keep = cand.negative_weights(targets, false, |_, _| 1.0);
                    let own: Vec<f32> = keep
                        .iter()
                        .map(|&k| if k > 0.0 { 0.0 } else { -1e9 })
                        .collect();
                    let mut mask = own;
                    for &f in &cand.flat {
                        mask[f as usize] = 0.0;
                    }
                    z = z + floats(mask, [rows, n], &dev);
                }
                pick(log_softmax_rows(z, self.reduce_cols)).neg()
            }
            SampledLoss::NegativeSampling => {
                let nw = cand.negative_weights(targets, self.batch_negatives, |r, _| wsum[r]);
                pick(softplus(s.clone().neg())) + (softplus(s) * floats(nw, [rows, n], &dev)).sum()
            }
            SampledLoss::Contrastive { margin, weight } => {
                let nw = cand.negative_weights(targets, self.batch_negatives, |r, k| {
                    wsum[r] * weight / k.max(1) as f32
                });
                let positives = floats(vec![1.0f32; rows * n], [rows, n], &dev) - s.clone();
                pick(positives) + (relu(s.sub_scalar(margin)) * floats(nw, [rows, n], &dev)).sum()
            }
        };
        total.div_scalar(rows.max(1) as f32)
    }
}

impl OutputLayer for SampledOutput {
    fn priced_as(&self) -> OutputLayerKind {
        OutputLayerKind::Sampled
    }

    fn objective(&self) -> Objective {
        Objective::Multinomial
    }

    fn class_chunks(&self) -> &[ClassChunk] {
        &self.full.chunks
    }

    fn params(&self) -> Vec<&DenseParam> {
        self.full.params()
    }

    fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.full.params_mut()
    }

    fn replicated(&self) -> usize {
        0
    }

    fn at_step(&mut self, step: u64) {
        self.step = step;
    }

    fn held_out(&mut self, on: bool) {
        self.held_out = on;
    }

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        if self.held_out {
            let loss = self.full_loss(h, targets, probe)?;
            return Ok(OutputPass::new(loss, Vec::new(), ()));
        }
        let drawn = self.stream.draw(self.step)?;
        let cand = match crate::device::is_flex(&self.device) {
            true => Candidates::new(targets, &drawn),
            false => Candidates::filled(targets, drawn, &self.stream, self.step),
        };
        let touched = self.cut(&cand.classes);
        if self.host {
            let pass = self.forward_host(h, &cand, touched);
            probe.detail(Point::ForwardLogits);
            return pass;
        }
        let (weight, bias) = self.gather(&touched);
        let weight = weight.autodiff().require_grad();
        let bias = bias.autodiff().require_grad();
        let s = self.scores_of(h.clone(), weight.clone(), bias.clone());
        probe.detail(Point::ForwardLogits);
        let loss = self.loss_of(s, &cand, targets);
        let value = scalar(loss.clone().inner())?;
        let saved = Saved::Graph(Box::new(GraphPass {
            loss,
            weight,
            bias,
            touched,
        }));
        Ok(OutputPass::new(value, Vec::new(), saved))
    }

    fn backward(
        &mut self,
        pass: OutputPass,
        _batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        match pass.into_saved::<Saved>() {
            Saved::Graph(g) => {
                let GraphPass {
                    loss,
                    weight,
                    bias,
                    touched,
                } = *g;
                self.touched = touched;
                Ok(OutputGrads::by_autodiff(loss, &[&weight, &bias], probe))
            }
            Saved::Host { pass, touched } => {
                let (rows, hidden, n) = (pass.rows(), pass.hidden(), pass.candidates());
                let peak = &mut || probe.detail(Point::BackwardLogits);
                let (dh, dw, db) = sampled_host::backward(*pass, peak);
                probe.lap(Stage::OutputBackward);
                self.touched = touched;
                Ok(OutputGrads {
                    upstream: Upstream::Dh(floats(dh, [rows, hidden], &self.device)),
                    params: vec![
                        floats(dw, [hidden, n], &self.device),
                        floats(db, [1, n], &self.device),
                    ],
                })
            }
        }
    }

    /// The candidates' columns of each chunk, by their gradient columns (`grads`: the gathered
    /// weight's and bias's, `[hidden, C]` and `[1, C]`); nothing else moves.
    fn update(
        &mut self,
        grads: Vec<Tensor<2>>,
        optim: &widebag_config::OptimConfig,
        step: u64,
        path: ComputePath,
        probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        let [dw, db]: [Tensor<2>; 2] = grads.try_into().map_err(|_| {
            ModelError::Shape("a sampled layer's update takes its two gathered gradients".into())
        })?;
        let bias_trains = self.score == Score::Dot;
        let touched = std::mem::take(&mut self.touched);
        // One chunk's candidates are every gradient column: the gradients move, uncopied.
        let whole = touched.len() == 1;
        let (mut dw, mut db) = (Some(dw), Some(db));
        for (k, first, local, idx) in touched {
            let n = local.len();
            let lin = &mut self.full.layer[k];
            let cut = |t: &mut Option<Tensor<2>>| match whole {
                true => t.take().expect("one chunk"),
                false => t.clone().expect("every chunk").narrow(1, first, n),
            };
            let g = cut(&mut dw);
            let gb = bias_trains.then(|| cut(&mut db));
            if path == ComputePath::Host {
                host_columns(&mut lin.weight, &local, g, optim, step)?;
                probe.detail(Point::DenseUpdate);
                if let Some(gb) = gb {
                    host_columns(&mut lin.bias, &local, gb, optim, step)?;
                }
                continue;
            }
            let mut peak = || probe.detail(Point::DenseUpdate);
            update_columns(&mut lin.weight, &idx, g, (optim, step), &mut peak);
            if let Some(gb) = gb {
                update_columns(&mut lin.bias, &idx, gb, (optim, step), &mut || {});
            }
        }
        Ok(())
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        let h = self.scoring_h(h);
        for (chunk, (w, b)) in self.full.chunks.iter().zip(self.scoring_chunks()) {
            visit(chunk.offset, softmax::logits(&h, &w, &b))?;
        }
        Ok(ScoreKind::Logits)
    }

    fn scores_by_block(&self) -> bool {
        self.host_scores
    }

    /// Every class scored by block on the host: the layer's chunks lent as they are (dot), or
    /// copied with unit columns over the temperature, `h` with unit rows (cosine).
    fn score_blocks(
        &mut self,
        h: Tensor<2>,
        wanted: ChunksWanted,
        f: &mut BlockScorer<'_>,
    ) -> Result<bool, ModelError> {
        let mut h = HostMatrix::take(h)?;
        let offsets: Vec<usize> = self.full.chunks.iter().map(|c| c.offset).collect();
        match self.score {
            Score::Cosine if wanted == ChunksWanted::AlreadyPacked => {
                let hidden = h.cols;
                sampled_host::unit_rows(h.as_mut_slice(), hidden);
                f(h.as_slice(), hidden, &[], &offsets);
            }
            Score::Dot => {
                let layer = HostLayer::take(self.full.pairs())?;
                f(h.as_slice(), h.cols, &layer.refs(), &offsets);
                layer.restore(self.full.pairs(), &self.device);
            }
            Score::Cosine => {
                let hidden = h.cols;
                sampled_host::unit_rows(h.as_mut_slice(), hidden);
                let chunks = sampled_host::cosine_chunks(&mut self.full, self.temperature)?;
                let refs: Vec<ChunkRef> = chunks.iter().map(|(w, b)| ChunkRef { w, b }).collect();
                f(h.as_slice(), h.cols, &refs, &offsets);
            }
        }
        Ok(true)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        let chunks = self.scoring_chunks();
        let refs: Vec<(&Tensor<2>, &Tensor<2>)> = chunks.iter().map(|(w, b)| (w, b)).collect();
        softmax::log_probs(&self.scoring_h(h), &refs, self.reduce_cols)
    }

    fn splits_classes(&self) -> bool {
        false
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, _ranks: Ranks) -> Result<(), ModelError> {
        self.full.gather_owned(part.class_chunks(), &part.params())
    }
}
