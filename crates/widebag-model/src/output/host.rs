//! The full softmax on flex's host kernels ([`softmax_ce`]: forward and backward fused over
//! cache-sized class blocks), its weights lent to the kernels without a copy for each pass
//! ([`HostLayer`]). One process scores its rows against every class; across ranks the layer is
//! split by classes (Megatron's class-split output): every rank's hidden rows are gathered,
//! each rank scores them against its own classes, each row's log-sum-exp is combined from
//! per-row scalars (an all-reduced max and sum), and `dL/dh` is all-reduced.

use burn::tensor::{Device, Tensor};
use widebag_collective::Collective;
use widebag_collective::partition::all_reduce_sent;
use widebag_config::Logits;
use widebag_csr::Targets;
use widebag_ledger::shapes::ClassChunk;
use widebag_ledger::step::OutputLayerKind;
use widebag_ledger::step::collective_names as names;

use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, ChunkGrad, HostTargets};
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::full::FullParams;
use crate::output::scores::{BlockScorer, ChunksWanted, ScoreKind, Visit};
use crate::output::softmax;
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass, Upstream};
use crate::probe::{Stage, StepProbe};
use crate::ranks::{RankBatch, Ranks};
use crate::tensors::{floats, to_vec};

/// The full softmax on the host kernels.
pub struct HostSoftmax {
    pub(crate) full: FullParams,
    objective: Objective,
    /// What one process keeps of the logits for backward (`model.logits`).
    logits: Logits,
    ranks: Ranks,
    n_classes: usize,
    /// The output layer's input size.
    last: usize,
    device: Device,
}

/// What the forward pass keeps for the backward pass: the lent layer, the rows scored (this
/// process's, or across ranks every rank's), their targets and the kernel's forward state.
struct Saved {
    layer: HostLayer,
    h: HostMatrix,
    targets: HostTargets,
    fwd: CeForward,
}

impl HostSoftmax {
    pub fn new(
        full: FullParams,
        objective: Objective,
        logits: Logits,
        ranks: Ranks,
        [last, n_classes]: [usize; 2],
        device: Device,
    ) -> Self {
        Self {
            full,
            objective,
            logits,
            ranks,
            n_classes,
            last,
            device,
        }
    }

    /// Puts the lent layer back into the parameters.
    fn restore(&mut self, layer: HostLayer) {
        layer.restore(self.full.pairs(), &self.device);
    }

    /// The forward pass on the lent `layer`.
    fn forward_on(
        &self,
        layer: &HostLayer,
        h: &Tensor<2>,
        targets: &Targets,
        batch: &RankBatch<'_>,
    ) -> Result<(f32, HostMatrix, HostTargets, CeForward), ModelError> {
        if batch.alone() {
            let targets = HostTargets::new(targets, &layer.chunk_classes());
            let h = HostMatrix::take(h.clone().inner())?;
            let fwd =
                softmax_ce::forward(h.as_slice(), h.cols, &layer.refs(), &targets, self.logits);
            return Ok((fwd.loss, h, targets, fwd));
        }
        // Split by classes: every rank's rows against this rank's classes.
        let global = gather_targets(targets, batch.comm, self.ranks.size)?;
        let mine = to_vec(h.clone().inner())?;
        self.split_forward(&global, &mine, layer, batch)
    }

    /// The class-split forward pass: every rank's `h` gathered (the global batch's rows, in rank
    /// order), this rank's classes scored, each row's log-sum-exp over every rank's classes from
    /// the per-row max and sum, and the global batch's mean loss.
    fn split_forward(
        &self,
        targets: &Targets,
        h: &[f32],
        host: &HostLayer,
        batch: &RankBatch<'_>,
    ) -> Result<(f32, HostMatrix, HostTargets, CeForward), ModelError> {
        // Every rank's rows, in rank order: the global batch's.
        let comm = batch.comm;
        let last = self.last;
        let h_all: Vec<f32> = comm.all_gather_f32(h)?.concat();
        let n = targets.row_ptr.len() - 1;
        let classes = self.ranks.class_block(self.n_classes);
        let entries = (0..n).flat_map(|r| {
            let t = targets;
            (t.row_ptr[r]..t.row_ptr[r + 1])
                .filter(|&k| classes.contains(&(t.classes[k] as usize)))
                .map(move |k| (r as u32, t.classes[k] - classes.start as u32, t.weights[k]))
        });
        let weights: Vec<f32> = (0..n).map(|r| targets.row_weight(r)).collect();
        let targets = HostTargets::from_entries(n, entries, &host.chunk_classes(), 1.0 / n as f32)
            .with_row_weights(weights.clone());
        let mut fwd = softmax_ce::forward(&h_all, last, &host.refs(), &targets, Logits::Recompute);
        // Each row's log-sum-exp over every rank's classes, from the per-row scalars.
        let local_lse = fwd.lse.clone();
        let mut max = local_lse.clone();
        comm.all_reduce_max(&mut max)?;
        let mut sum: Vec<f32> = local_lse
            .iter()
            .zip(&max)
            .map(|(l, m)| (l - m).exp())
            .collect();
        comm.all_reduce_sum(&mut sum)?;
        fwd.lse = max.iter().zip(&sum).map(|(m, s)| m + s.ln()).collect();
        // The loss: Σ weight · lse over rows, less every rank's picked logits (this rank's part
        // is its own loss less its own log-sum-exp term).
        let lse_term = |lse: &[f32]| -> f64 {
            (0..n)
                .map(|r| weights[r] as f64 * lse[r] as f64)
                .sum::<f64>()
                / n as f64
        };
        let mut picked = [(lse_term(&local_lse) - fwd.loss as f64) as f32];
        comm.all_reduce_sum(&mut picked)?;
        let loss = (lse_term(&fwd.lse) - picked[0] as f64) as f32;
        Ok((loss, HostMatrix::from_vec(h_all, n, last), targets, fwd))
    }
}

/// The host kernel's per-chunk output gradients as `[hidden, n]` and `[1, n]` tensors, each
/// chunk's weight then its bias.
pub(crate) fn chunk_tensors(out: Vec<ChunkGrad>, hidden: usize, device: &Device) -> Vec<Tensor<2>> {
    out.into_iter()
        .flat_map(|g| {
            let n = g.db.len();
            [
                floats(g.dw, [hidden, n], device),
                floats(g.db, [1, n], device),
            ]
        })
        .collect()
}

/// Every rank's `local` targets (its rows'), concatenated in rank order: the global batch's.
pub(crate) fn gather_targets(
    local: &Targets,
    comm: &dyn Collective,
    size: usize,
) -> Result<Targets, ModelError> {
    let n = local.row_ptr.len() - 1;
    let mut mine = Vec::with_capacity(1 + n + 2 * local.classes.len());
    mine.push(n as u32);
    mine.extend(local.row_ptr.windows(2).map(|w| (w[1] - w[0]) as u32));
    mine.extend_from_slice(&local.classes);
    mine.extend(local.weights.iter().map(|w| w.to_bits()));
    let all = comm.all_to_all_u32(vec![mine; size])?;
    let bad = || ModelError::Execution("a rank sent malformed targets".into());
    let mut out = Targets {
        n_classes: local.n_classes,
        row_ptr: vec![0],
        classes: Vec::new(),
        weights: Vec::new(),
        single_class: true,
    };
    for part in &all {
        let rows = *part.first().ok_or_else(bad)? as usize;
        let lens = part.get(1..1 + rows).ok_or_else(bad)?;
        let m: usize = lens.iter().map(|&l| l as usize).sum();
        let classes = part.get(1 + rows..1 + rows + m).ok_or_else(bad)?;
        let weights = part.get(1 + rows + m..1 + rows + 2 * m).ok_or_else(bad)?;
        for &l in lens {
            let last = *out.row_ptr.last().expect("starts at 0");
            out.row_ptr.push(last + l as usize);
        }
        out.classes.extend_from_slice(classes);
        out.weights
            .extend(weights.iter().map(|&b| f32::from_bits(b)));
    }
    out.single_class = (0..out.row_ptr.len() - 1).all(|r| out.row_ptr[r + 1] - out.row_ptr[r] == 1)
        && out.weights.iter().all(|&w| w == 1.0);
    Ok(out)
}

impl OutputLayer for HostSoftmax {
    fn priced_as(&self) -> OutputLayerKind {
        OutputLayerKind::HostSoftmax
    }

    fn objective(&self) -> Objective {
        self.objective
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

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        batch: &RankBatch<'_>,
        _probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        let layer = HostLayer::take(self.full.pairs())?;
        match self.forward_on(&layer, h, targets, batch) {
            Ok((loss, h, targets, fwd)) => {
                let saved = Saved {
                    layer,
                    h,
                    targets,
                    fwd,
                };
                Ok(OutputPass::new(loss, Vec::new(), saved))
            }
            Err(e) => {
                self.restore(layer);
                Err(e)
            }
        }
    }

    fn backward(
        &mut self,
        pass: OutputPass,
        batch: &RankBatch<'_>,
        probe: &mut StepProbe,
    ) -> Result<OutputGrads, ModelError> {
        let Saved {
            layer,
            h,
            targets,
            mut fwd,
        } = pass.into_saved();
        let hidden = h.cols;
        let (dh, out) =
            softmax_ce::backward(h.as_slice(), hidden, &layer.refs(), &targets, &mut fwd);
        // The kept logits (now their gradient, read by the gemms) go before autodiff allocates
        // the trunk's gradients, as the ledger has it: the step's peak is the output backward's,
        // not the two together.
        drop((fwd, targets, h));
        self.restore(layer);
        // Across ranks: every rank's part of dL/dh summed, this rank's rows kept.
        let dh = batch.own_dh(dh, hidden)?;
        probe.lap(Stage::OutputBackward);
        let dh = floats(dh, [batch.mine.len(), hidden], &self.device);
        Ok(OutputGrads {
            upstream: Upstream::Dh(dh),
            params: chunk_tensors(out, hidden, &self.device),
        })
    }

    fn end_pass(&mut self, pass: OutputPass) {
        let Saved { layer, .. } = pass.into_saved();
        self.restore(layer);
    }

    fn traffic(
        &self,
        batch: &RankBatch<'_>,
        n_targets: usize,
        _pass_sent: &[(&'static str, u64)],
    ) -> Vec<(&'static str, u64)> {
        let ranks = self.ranks;
        let others = (ranks.size - 1) as u64;
        let n = batch.global_rows;
        let last = self.last;
        let reduced = |len: usize| all_reduce_sent(len, ranks.rank, ranks.size) * 4;
        // The targets went to every rank: a count, each row's length, each entry's class and
        // weight ([`gather_targets`]).
        let targets = 1 + batch.rows + 2 * n_targets;
        vec![
            (names::HIDDEN, (batch.rows * last) as u64 * 4 * others),
            (names::LSE, 2 * reduced(n) + reduced(1)),
            (names::DH, reduced(n * last)),
            (names::TARGETS, targets as u64 * 4 * others),
        ]
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        for (chunk, (w, b)) in self.full.chunks.iter().zip(self.full.tensors()) {
            visit(chunk.offset, softmax::logits(h, &w, &b))?;
        }
        Ok(ScoreKind::Logits)
    }

    fn scores_by_block(&self) -> bool {
        true
    }

    fn score_blocks(
        &mut self,
        h: Tensor<2>,
        _wanted: ChunksWanted,
        f: &mut BlockScorer<'_>,
    ) -> Result<bool, ModelError> {
        let h = HostMatrix::take(h)?;
        let layer = HostLayer::take(self.full.pairs())?;
        let offsets: Vec<usize> = self.full.chunks.iter().map(|c| c.offset).collect();
        f(h.as_slice(), h.cols, &layer.refs(), &offsets);
        self.restore(layer);
        Ok(true)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        let layer = self.full.tensors();
        let refs: Vec<(&Tensor<2>, &Tensor<2>)> = layer.iter().map(|(w, b)| (w, b)).collect();
        softmax::log_probs(
            h,
            &refs,
            crate::spec::reduce_cols(crate::device::BackendKind::Flex),
        )
    }

    fn splits_classes(&self) -> bool {
        true
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, _ranks: Ranks) -> Result<(), ModelError> {
        self.full.gather_owned(part.class_chunks(), &part.params())
    }
}
