//! Held-out evaluation and prediction: a batch's class scores visited chunk by chunk (no
//! `[rows, classes]` matrix beyond one chunk), each row's own input ids masked where asked, a
//! running top-K, the targets' scores and each row's log-sum-exp; then the task's metrics.
//! On flex a chunk is read in place on the host; elsewhere the mask, the chunk's top-K and the
//! log-sum-exp run on the device and only `[rows, K]` comes back.

pub(crate) mod fold;
pub mod held_out;
pub(crate) mod loss;
pub mod screen;
pub(crate) mod split;

use std::sync::Mutex;

use burn::tensor::{IndexingUpdateOp, Int, Tensor};
use rayon::prelude::*;
use widebag_collective::Collective;
use widebag_collective::local::Local;
use widebag_csr::CsrBatch;
use widebag_eval::{ClassMetrics, EvalReport, PerplexityMetrics, RankingMetrics, RowTopK, Task};

use crate::cpu::ChunkRef;
use crate::cpu::access::HostMatrix;
use crate::cpu::score_blocks::visit_score_blocks;
use crate::device::BackendKind;
use crate::error::ModelError;
pub use crate::eval::fold::ScoreNeed;
use crate::eval::fold::{RowState, fold_row, masked_in, targets_in};
pub use crate::eval::screen::ScreenCache;
use crate::layout::Trainable;
use crate::output::scores::{ChunksWanted, ScoreKind};
use crate::output::softmax::RunningLse;
use crate::tensors::{floats, ints, to_vec};

/// What an evaluation computes.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalSpec {
    pub task: Task,
    /// Ranking cut-offs (recommendation).
    pub ks: Vec<usize>,
    pub recall: widebag_eval::RecallConvention,
    /// How a ranking's scores are made on flex (`eval.screening`).
    pub screening: widebag_config::Screening,
}

/// One row's scores after every chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct RowScores {
    /// The best `k` classes, best first, with their log-probabilities.
    pub top: Vec<(u32, f32)>,
    /// `Σ w log p(target)` over the row's targets (weights as in the batch).
    pub target_log_prob: f64,
}

/// How rows are scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreOptions<'s> {
    pub k: usize,
    /// Classes each row leaves out of its top-K, sorted (a user's training items); empty:
    /// none.
    pub seen: &'s [Vec<u32>],
    /// On the host (flex) or with the device's top-K (elsewhere).
    pub backend: BackendKind,
    /// What the caller reads of each row.
    pub need: ScoreNeed,
    /// A ranking on flex scored through bf16 screening ([`screen`]), the layer packed once
    /// into this evaluation's cache; `None`: every class in f32.
    pub screen: Option<&'s ScreenCache>,
}

/// The top-K and the targets' log-probabilities of every row of `batch`.
pub fn score_rows(
    layout: &mut dyn Trainable,
    batch: &CsrBatch,
    options: ScoreOptions<'_>,
) -> Result<Vec<RowScores>, ModelError> {
    let mut acc = Accumulator::new(batch, options);
    // On flex the full softmax's scores are made and read by class block on the host.
    let wanted = match options.screen {
        Some(cache) if cache.is_packed() && options.need == ScoreNeed::Ranking => {
            ChunksWanted::AlreadyPacked
        }
        _ => ChunksWanted::Lent,
    };
    let by_blocks = match (options.backend, layout.sparse()) {
        (BackendKind::Flex, Some(model)) => {
            model.host_score_blocks(batch, wanted, &mut |h, hidden, layer, offsets| {
                acc.add_host_blocks(h, hidden, layer, offsets)
            })?
        }
        _ => false,
    };
    let kind = match by_blocks {
        true => ScoreKind::Logits,
        false => layout.score_chunks(batch, &mut |start, scores| acc.add(start, scores))?,
    };
    Ok(acc.finish(kind))
}

/// The device path's log-sum-exp, read back at the end.
struct DeviceLse(RunningLse);

impl DeviceLse {
    fn finish(self) -> Vec<f64> {
        to_vec(self.0.finish())
            .map(|v| v.into_iter().map(|x| x as f64).collect())
            .unwrap_or_default()
    }
}

pub(crate) struct Accumulator<'a> {
    batch: &'a CsrBatch,
    options: ScoreOptions<'a>,
    pub(crate) top: Vec<RowTopK>,
    /// `Σ w · score` of each row's targets.
    pub(crate) target: Vec<f64>,
    /// Host path: running `(max, Σ exp(s − max))` per row.
    pub(crate) host_lse: Vec<(f64, f64)>,
    lse: Option<DeviceLse>,
}

impl<'a> Accumulator<'a> {
    pub(crate) fn new(batch: &'a CsrBatch, options: ScoreOptions<'a>) -> Self {
        let n = batch.n_rows();
        let host = options.backend == BackendKind::Flex;
        let lse = !host && options.need == ScoreNeed::LogProbs;
        Self {
            batch,
            options,
            top: (0..n).map(|_| RowTopK::new(options.k)).collect(),
            target: vec![0.0; n],
            host_lse: vec![(f64::NEG_INFINITY, 0.0); n],
            lse: lse.then(|| DeviceLse(RunningLse::new(crate::spec::WGPU_REDUCE_COLS))),
        }
    }

    /// Row `r`'s seen classes within `start..end` (absolute ids).
    fn masked(&self, r: usize, start: usize, end: usize) -> &'a [u32] {
        masked_in(self.options.seen, r, start, end)
    }

    /// Row `r`'s target entries within `start..end`: `(class, weight)`.
    fn targets_in(&self, r: usize, start: usize, end: usize) -> Vec<(usize, f32)> {
        targets_in(self.batch, self.options.need, r, start, end)
    }

    /// The scores of every class by class block, `h` `[rows, hidden]` against `layer`'s
    /// chunks (first classes `offsets`), the blocks in parallel
    /// ([`crate::cpu::score_blocks::visit_score_blocks`]); each row's state is taken by one
    /// block at a time, each block starting at another row so that threads seldom wait, and its
    /// sums are added in block order at the end (the same result whatever the threads did).
    pub(crate) fn add_host_blocks(
        &mut self,
        h: &[f32],
        hidden: usize,
        layer: &[ChunkRef],
        offsets: &[usize],
    ) {
        let (batch, options) = (self.batch, self.options);
        if let Some(cache) = options
            .screen
            .filter(|_| options.need == ScoreNeed::Ranking)
        {
            screen::offer_screened(
                cache,
                h,
                hidden,
                layer,
                offsets,
                options.seen,
                &mut self.top,
            );
            return;
        }
        let rows: Vec<Mutex<RowState>> = std::mem::take(&mut self.top)
            .into_iter()
            .map(|top| {
                let parts = Vec::new();
                Mutex::new(RowState { top, parts })
            })
            .collect();
        let n = rows.len();
        let threads = rayon::current_num_threads().max(1);
        visit_score_blocks(h, hidden, layer, offsets, &|blk| {
            let (start, end) = (blk.class_start, blk.class_start + blk.n);
            let first = (blk.index % threads) * n / threads;
            for i in 0..n {
                let r = (first + i) % n;
                let targets = targets_in(batch, options.need, r, start, end);
                let (mut lse, mut target) = ((f64::NEG_INFINITY, 0.0), 0.0);
                let mut st = rows[r].lock().unwrap_or_else(|e| e.into_inner());
                fold_row(
                    blk.row(r),
                    start,
                    masked_in(options.seen, r, start, end),
                    &targets,
                    options.need,
                    (&mut st.top, &mut lse, &mut target),
                );
                if options.need == ScoreNeed::LogProbs || !targets.is_empty() {
                    st.parts.push((blk.index, lse.0, lse.1, target));
                }
            }
        });
        for (r, st) in rows.into_iter().enumerate() {
            let st = st.into_inner().unwrap_or_else(|e| e.into_inner());
            let (top, lse, target) = st.sums(self.host_lse[r], self.target[r]);
            self.top.push(top);
            self.host_lse[r] = lse;
            self.target[r] = target;
        }
    }

    /// Each row's top-K and targets' log-probability once every class has been folded in.
    fn finish(mut self, kind: ScoreKind) -> Vec<RowScores> {
        let (batch, options, n_rows) = (self.batch, self.options, self.top.len());
        let offsets = match (kind, self.lse.take()) {
            _ if options.need == ScoreNeed::Ranking => vec![0.0; n_rows],
            (ScoreKind::Logits, Some(lse)) => lse.finish(),
            (ScoreKind::Logits, None) => self.host_lse.iter().map(|&(m, s)| m + s.ln()).collect(),
            (ScoreKind::LogProbs, _) => vec![0.0; n_rows],
        };
        let t = batch.targets();
        self.top
            .into_iter()
            .enumerate()
            .map(|(r, top)| {
                let w: f64 = t.weights[t.row_ptr[r]..t.row_ptr[r + 1]]
                    .iter()
                    .map(|&w| w as f64)
                    .sum();
                let off = offsets[r];
                RowScores {
                    top: top
                        .into_sorted()
                        .into_iter()
                        .map(|(c, s)| (c, (s as f64 - off) as f32))
                        .collect(),
                    target_log_prob: self.target[r] - off * w,
                }
            })
            .collect()
    }

    pub(crate) fn add(&mut self, start: usize, scores: Tensor<2>) -> Result<(), ModelError> {
        match self.options.backend {
            BackendKind::Flex => self.add_host(start, scores),
            _ => self.add_device(start, scores),
        }
    }

    fn add_host(&mut self, start: usize, scores: Tensor<2>) -> Result<(), ModelError> {
        let m = HostMatrix::take(scores)?;
        let (cols, s) = (m.cols, m.as_slice());
        let end = start + cols;
        let masks: Vec<&[u32]> = (0..m.rows).map(|r| self.masked(r, start, end)).collect();
        let targets: Vec<Vec<(usize, f32)>> = (0..m.rows)
            .map(|r| self.targets_in(r, start, end))
            .collect();
        let need = self.options.need;
        self.top
            .par_iter_mut()
            .zip(self.host_lse.par_iter_mut())
            .zip(self.target.par_iter_mut())
            .enumerate()
            .for_each(|(r, ((top, lse), target))| {
                let row = &s[r * cols..(r + 1) * cols];
                fold_row(row, start, masks[r], &targets[r], need, (top, lse, target));
            });
        Ok(())
    }

    fn add_device(&mut self, start: usize, scores: Tensor<2>) -> Result<(), ModelError> {
        let [rows, cols] = scores.shape().dims();
        let end = start + cols;
        let device = scores.device();
        // The targets' scores and the log-sum-exp, before the mask.
        let mut flat = Vec::new();
        let mut owner = Vec::new();
        for r in 0..rows {
            for (c, w) in self.targets_in(r, start, end) {
                flat.push((r * cols + c - start) as u32);
                owner.push((r, w));
            }
        }
        if !flat.is_empty() {
            let picked = scores
                .clone()
                .reshape([rows * cols])
                .select(0, ints(&flat, &device));
            for (v, (r, w)) in to_vec(picked)?.into_iter().zip(owner) {
                self.target[r] += w as f64 * v as f64;
            }
        }
        if let Some(lse) = &mut self.lse {
            lse.0.add(scores.clone());
        }
        let mut masked = Vec::new();
        for r in 0..rows {
            masked.extend(
                self.masked(r, start, end)
                    .iter()
                    .map(|&i| (r * cols + i as usize - start) as u32),
            );
        }
        let scores = if masked.is_empty() {
            scores
        } else {
            let n = masked.len();
            let fill = floats(vec![f32::NEG_INFINITY; n], [n], &device);
            scores
                .reshape([rows * cols])
                .scatter(0, ints(&masked, &device), fill, IndexingUpdateOp::Add)
                .reshape([rows, cols])
        };
        let k = self.options.k.min(cols);
        let (values, indices) = scores.topk_with_indices(k, 1);
        let values = to_vec(values)?;
        let indices = int_vec(indices)?;
        for r in 0..rows {
            let (v, i) = (&values[r * k..(r + 1) * k], &indices[r * k..(r + 1) * k]);
            let classes: Vec<u32> = i.iter().map(|&c| (start as i64 + c) as u32).collect();
            self.top[r].merge(&classes, v);
        }
        Ok(())
    }
}

fn int_vec(t: Tensor<2, Int>) -> Result<Vec<i64>, ModelError> {
    t.into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| ModelError::Read(format!("{e:?}")))
}

/// Held-out rows: batches and, per batch, each row's seen classes (empty: none).
#[derive(Clone, Debug, Default)]
pub struct EvalSet {
    pub batches: Vec<CsrBatch>,
    pub seen: Vec<Vec<Vec<u32>>>,
}

/// Evaluates `layout` on held-out rows: the task's metrics over all of them (the one-rank case of
/// [`evaluate_part`]).
pub fn evaluate(
    layout: &mut dyn Trainable,
    set: &EvalSet,
    spec: &EvalSpec,
    backend: BackendKind,
) -> Result<EvalReport, ModelError> {
    evaluate_part(layout, set, spec, backend, &Local)?
        .ok_or_else(|| ModelError::Execution("one process is rank 0".into()))
}

/// The task's metrics over held-out `set` by every rank of `comm`; rank 0 gets the report, the
/// others `None`. One process scores each batch whole through its layout; across ranks only the
/// sparse layout trains, each part scored where it is and merged at rank 0 ([`split`]). Either
/// way the rows are folded into the metrics here, in the held-out rows' order.
pub fn evaluate_part(
    layout: &mut dyn Trainable,
    set: &EvalSet,
    spec: &EvalSpec,
    backend: BackendKind,
    comm: &dyn Collective,
) -> Result<Option<EvalReport>, ModelError> {
    let split = comm.size() > 1;
    if split {
        let model = layout.sparse().ok_or_else(crate::layout::sparse_only)?;
        model.begin_split_scoring(comm)?;
    }
    let k = top_k(spec);
    let none = Vec::new();
    // One packing of the output layer for every batch of this evaluation (its weights hold).
    let cache = ScreenCache::default();
    let screen = (spec.screening == widebag_config::Screening::Bf16
        && backend == BackendKind::Flex
        && ScoreNeed::for_task(spec.task) == ScoreNeed::Ranking
        && crate::cpu::bf16_products::hardware())
    .then_some(&cache);
    let mut metrics = Metrics::new(spec)?;
    for (i, batch) in set.batches.iter().enumerate() {
        let seen = set.seen.get(i).unwrap_or(&none);
        let rows = match split {
            false => Some(score_rows(
                layout,
                batch,
                ScoreOptions {
                    k,
                    seen,
                    backend,
                    need: ScoreNeed::for_task(spec.task),
                    screen,
                },
            )?),
            true => {
                let model = layout.sparse().ok_or_else(crate::layout::sparse_only)?;
                model.score_split(batch, seen, k, comm)?
            }
        };
        let Some(rows) = rows else { continue };
        let t = batch.targets();
        for (r, s) in rows.iter().enumerate() {
            metrics.add(s, &t.classes[t.row_ptr[r]..t.row_ptr[r + 1]]);
        }
    }
    if let Some(model) = layout.sparse().filter(|_| split) {
        model.end_split_scoring();
    }
    Ok((comm.rank() == 0).then(|| metrics.report()))
}

/// How many classes a row's top list keeps for the task's metrics.
pub(crate) fn top_k(spec: &EvalSpec) -> usize {
    match spec.task {
        Task::Recommendation => spec.ks.iter().copied().max().unwrap_or(20),
        Task::Classification => 5,
        Task::LanguageModel => 1,
    }
}

/// The task's metrics, folded row by row in the held-out rows' order.
pub(crate) struct Metrics {
    task: Task,
    ranking: RankingMetrics,
    class: ClassMetrics,
    lm: PerplexityMetrics,
}

impl Metrics {
    pub(crate) fn new(spec: &EvalSpec) -> Result<Self, ModelError> {
        let bad = |e: widebag_eval::EvalError| ModelError::Shape(e.to_string());
        Ok(Self {
            task: spec.task,
            ranking: RankingMetrics::new(&spec.ks, spec.recall).map_err(bad)?,
            class: ClassMetrics::new(),
            lm: PerplexityMetrics::new(),
        })
    }

    /// One row's scores and its target classes.
    pub(crate) fn add(&mut self, s: &RowScores, classes: &[u32]) {
        match self.task {
            Task::Recommendation => {
                let ranked: Vec<u32> = s.top.iter().map(|&(c, _)| c).collect();
                self.ranking.add_user(&ranked, classes);
            }
            Task::Classification => {
                let ranked: Vec<u32> = s.top.iter().map(|&(c, _)| c).collect();
                if let Some(&c) = classes.first() {
                    self.class.add_row(c, s.target_log_prob, &ranked);
                }
            }
            Task::LanguageModel => {
                if !classes.is_empty() {
                    self.lm.add_token(-s.target_log_prob);
                }
            }
        }
    }

    pub(crate) fn report(self) -> EvalReport {
        match self.task {
            Task::Recommendation => self.ranking.report(),
            Task::Classification => self.class.report(),
            Task::LanguageModel => self.lm.report(),
        }
    }
}

/// The task a config trains for, and so its metrics: a bag of targets (LightGCN data,
/// `data.target = "bag"`, the multinomial output, a text document's own bag) is
/// recommendation; next-id targets
/// (synthetic) and CBOW rows are language modelling; one label per row is classification.
pub fn eval_spec(config: &widebag_config::Config) -> EvalSpec {
    use widebag_config::TaskKind;
    let task = match config.task_kind() {
        TaskKind::Recommendation => Task::Recommendation,
        TaskKind::LanguageModel => Task::LanguageModel,
        TaskKind::Classification => Task::Classification,
    };
    EvalSpec {
        task,
        ks: config.eval.k.clone(),
        recall: match config.eval.recall {
            widebag_config::RecallConvention::Lightgcn => widebag_eval::RecallConvention::LightGcn,
            widebag_config::RecallConvention::Multvae => widebag_eval::RecallConvention::MultVae,
        },
        screening: config.eval.screening,
    }
}

#[cfg(test)]
mod tests;
