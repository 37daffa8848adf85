//! The adaptive softmax on flex's host kernel, for one process or each rank of many (one process
//! is the one-rank case: nothing is packed or exchanged). The head is replicated: each rank
//! scores its own rows against it with [`softmax_ce`], and its gradient goes to the dense
//! all-reduce with the trunk's. Tail cluster `k` is scored at its owner
//! ([`clusters::owner`]) on the rows, of every rank, whose targets fall in it: the rows and
//! their targets go to the owner, which keeps the cluster's gradient (it alone updates the
//! cluster) and sends each row's `dL/dh` back. The forward pass ends with the loss (summed over
//! the ranks); the backward pass with `dL/dh` of this rank's rows and the output's gradients.
//! Everything before the output stays on autodiff, reached through `dL/dh`.

use burn::tensor::{Device, Tensor};
use widebag_collective::Collective;
use widebag_collective::partition::all_reduce_sent;
use widebag_config::{Logits, OptimConfig};
use widebag_csr::Targets;
use widebag_ledger::shapes::ClassChunk;
use widebag_ledger::step::OutputLayerKind;
use widebag_ledger::step::collective_names as names;

use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, ChunkGrad, HostTargets};
use crate::device::ComputePath;
use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::adaptive::{AdaptiveTargets, ClusterTargets};
use crate::output::clusters::{self, AdaptiveParams, owner};
use crate::output::scores::{ScoreKind, Visit};
use crate::output::{Objective, OutputGrads, OutputLayer, OutputPass, Upstream};
use crate::params::update::update_param;
use crate::probe::{Stage, StepProbe};
use crate::ranks::{RankBatch, Ranks};
use crate::tensors::{floats, to_vec};

/// The adaptive softmax on the host kernels.
pub struct HostAdaptiveSoftmax {
    pub(crate) params: AdaptiveParams,
    objective: Objective,
    /// What one process keeps of the head's logits for backward (`model.logits`).
    logits: Logits,
    device: Device,
}

/// One rank's rows of one cluster, as its owner holds them.
struct Piece {
    src: usize,
    rows: usize,
}

/// One tail cluster at its owner: every rank's rows of it (rank order), scored.
struct OwnedTail {
    pieces: Vec<Piece>,
    /// `[rows, last hidden]`, the rows' hidden states.
    hk: Tensor<2>,
    /// `[rows, cluster dim]`, `hk · proj`.
    u: HostMatrix,
    targets: HostTargets,
    fwd: CeForward,
}

/// What the forward pass hands to the backward pass: the lent layer and the pass itself.
struct Saved {
    layer: HostLayer,
    pass: Pass,
}

/// The forward pass's state.
struct Pass {
    /// This rank's rows.
    h: HostMatrix,
    head_targets: HostTargets,
    head: CeForward,
    /// Per tail cluster, this rank's rows in it, in the order their `dL/dh` comes back.
    tail_rows: Vec<Vec<u32>>,
    /// Per tail cluster this rank owns with rows in it (of any rank); `None` otherwise.
    owned: Vec<Option<OwnedTail>>,
}

/// What the forward pass returns: the loss, the bytes it sent by the ledger's names, its state.
type Forwarded = (f32, Vec<(&'static str, u64)>, Pass);

/// One rank's rows of a cluster as its owner received them: `(rank, rows, entries, values)`.
type Received<'g> = (usize, usize, Vec<(u32, u32, f32)>, &'g [f32]);

/// Values in the buffers bound for other ranks.
fn to_others<T>(v: &[Vec<T>], me: usize) -> u64 {
    let n: usize = v
        .iter()
        .enumerate()
        .filter(|(r, _)| *r != me)
        .map(|(_, x)| x.len())
        .sum();
    n as u64
}

impl HostAdaptiveSoftmax {
    pub fn new(
        params: AdaptiveParams,
        objective: Objective,
        logits: Logits,
        device: Device,
    ) -> Self {
        Self {
            params,
            objective,
            logits,
            device,
        }
    }

    fn ranks(&self) -> Ranks {
        self.params.ranks
    }

    /// The forward pass on the lent `layer`: the head on this rank's rows, every owned cluster
    /// on every rank's rows of it; the global batch's mean loss.
    fn forward_on(
        &self,
        layer: &HostLayer,
        h: &Tensor<2>,
        targets: &Targets,
        batch: &RankBatch<'_>,
    ) -> Result<Forwarded, ModelError> {
        let n_rows = h.shape()[0];
        let scale = 1.0 / batch.global_rows.max(1) as f32;
        let split = AdaptiveTargets::new(targets, &self.params.bands);
        let h_host = HostMatrix::take(h.clone().inner())?;
        // The head, on this rank's rows (its logits kept for backward with `model.logits =
        // "keep"` in one process, as the ledger prices them).
        let head_n = layer.chunk(0).b.len();
        let head_targets = HostTargets::from_entries(n_rows, split.head, &[head_n], scale);
        let head_logits = match batch.alone() {
            true => self.logits,
            false => Logits::Recompute,
        };
        let last = h_host.cols;
        let head = softmax_ce::forward(
            h_host.as_slice(),
            last,
            &[layer.chunk(0)],
            &head_targets,
            head_logits,
        );
        let mut loss = head.loss;
        let tail_rows: Vec<Vec<u32>> = split.tails.iter().map(|t| t.rows.clone()).collect();
        let (mine, send_f, send_u) = self.route_tails(split.tails, &h_host);
        let me = self.ranks().rank;
        let rows_bytes = (to_others(&send_f, me) + to_others(&send_u, me)) * 4;
        let (got_f, got_u) = match batch.alone() {
            true => (send_f, send_u),
            false => (
                batch.comm.all_to_all_f32(send_f)?,
                batch.comm.all_to_all_u32(send_u)?,
            ),
        };
        let received = self.received(&got_f, &got_u, mine.len(), last)?;
        let mut owned = Vec::with_capacity(mine.len());
        for (k, (own, others)) in mine.into_iter().zip(received).enumerate() {
            let tail = match own {
                Some(own) => self.score_tail(k, own, others, &h_host, layer, scale)?,
                None => None,
            };
            if let Some(t) = &tail {
                loss += t.fwd.loss;
            }
            owned.push(tail);
        }
        let dh_rows: usize = owned
            .iter()
            .flatten()
            .flat_map(|t| &t.pieces)
            .filter(|p| p.src != me)
            .map(|p| p.rows)
            .sum();
        let sent = vec![
            (names::TAIL_ROWS, rows_bytes),
            (names::TAIL_DH, (dh_rows * last) as u64 * 4),
        ];
        if !batch.alone() {
            let mut total = [loss];
            batch.comm.all_reduce_sum(&mut total)?;
            loss = total[0];
        }
        let pass = Pass {
            h: h_host,
            head_targets,
            head,
            tail_rows,
            owned,
        };
        Ok((loss, sent, pass))
    }

    /// Each cluster's rows and targets packed for its owner, clusters in order (this rank's own
    /// clusters' rows stay where they are): the clusters this rank owns, and the values and
    /// the `(cluster, rows, entries…)` words bound for each rank.
    #[allow(
        clippy::type_complexity,
        reason = "three parallel lists, named at the one caller"
    )]
    fn route_tails(
        &self,
        tails: Vec<ClusterTargets>,
        h_host: &HostMatrix,
    ) -> (Vec<Option<ClusterTargets>>, Vec<Vec<f32>>, Vec<Vec<u32>>) {
        let Ranks { rank: me, size } = self.ranks();
        let (mut send_f, mut send_u) = (vec![Vec::new(); size], vec![Vec::new(); size]);
        let mut mine = Vec::with_capacity(tails.len());
        for (k, t) in tails.into_iter().enumerate() {
            let o = owner(k, size);
            if o == me {
                mine.push(Some(t));
                continue;
            }
            mine.push(None);
            send_u[o].extend([k as u32, t.rows.len() as u32, t.entries.len() as u32]);
            for &(pos, class, w) in &t.entries {
                send_u[o].extend([pos, class, w.to_bits()]);
            }
            for &r in &t.rows {
                send_f[o].extend_from_slice(h_host.row(r as usize));
            }
        }
        (mine, send_f, send_u)
    }

    /// Every other rank's rows of each cluster this rank owns, in rank order, unpacked.
    fn received<'g>(
        &self,
        got_f: &'g [Vec<f32>],
        got_u: &[Vec<u32>],
        n_clusters: usize,
        last: usize,
    ) -> Result<Vec<Vec<Received<'g>>>, ModelError> {
        let me = self.ranks().rank;
        let bad = || ModelError::Execution("a rank sent malformed tail rows".into());
        let mut received: Vec<Vec<Received<'_>>> = (0..n_clusters).map(|_| Vec::new()).collect();
        for (src, u) in got_u.iter().enumerate().filter(|(src, _)| *src != me) {
            let (mut i, mut at) = (0, 0);
            while i < u.len() {
                let head = u.get(i..i + 3).ok_or_else(bad)?;
                let (k, rows, n_entries) = (head[0] as usize, head[1] as usize, head[2] as usize);
                let e = u.get(i + 3..i + 3 + 3 * n_entries).ok_or_else(bad)?;
                let entries = e
                    .chunks_exact(3)
                    .map(|x| (x[0], x[1], f32::from_bits(x[2])))
                    .collect();
                let values = got_f[src].get(at..at + rows * last).ok_or_else(bad)?;
                received
                    .get_mut(k)
                    .filter(|_| owner(k, self.ranks().size) == me)
                    .ok_or_else(bad)?
                    .push((src, rows, entries, values));
                at += rows * last;
                i += 3 + 3 * n_entries;
            }
        }
        Ok(received)
    }

    /// Owned cluster `k` scored on every rank's rows of it (`own`: this rank's; `others`: the
    /// rest, in rank order); `None` when no rank has rows in it.
    fn score_tail(
        &self,
        k: usize,
        own: ClusterTargets,
        others: Vec<Received<'_>>,
        h_host: &HostMatrix,
        layer: &HostLayer,
        scale: f32,
    ) -> Result<Option<OwnedTail>, ModelError> {
        let me = self.ranks().rank;
        let last = h_host.cols;
        let m = own.rows.len() + others.iter().map(|p| p.1).sum::<usize>();
        if m == 0 {
            return Ok(None);
        }
        // In rank order: the ranks before this one, this rank's own rows, the ranks after.
        let mut order: Vec<Received<'_>> = Vec::with_capacity(others.len() + 1);
        let after = others.partition_point(|p| p.0 < me);
        let mut others = others.into_iter();
        order.extend(others.by_ref().take(after));
        order.push((me, own.rows.len(), own.entries, &[]));
        order.extend(others);
        let mut hk = Vec::with_capacity(m * last);
        let (mut entries, mut pieces, mut first) = (Vec::new(), Vec::new(), 0u32);
        for (src, rows, e, values) in order {
            match src == me {
                true => own.rows.iter().for_each(|&r| {
                    hk.extend_from_slice(h_host.row(r as usize));
                }),
                false => hk.extend_from_slice(values),
            }
            entries.extend(e.into_iter().map(|(pos, c, w)| (first + pos, c, w)));
            first += rows as u32;
            pieces.push(Piece { src, rows });
        }
        let hk = floats(hk, [m, last], &self.device);
        let proj = self.params.clusters[k].proj.value.clone();
        let u = HostMatrix::take(hk.clone().matmul(proj))?;
        let c = layer.chunk(k + 1);
        let targets = HostTargets::from_entries(m, entries, &[c.b.len()], scale);
        let fwd = softmax_ce::forward(u.as_slice(), u.cols, &[c], &targets, Logits::Recompute);
        Ok(Some(OwnedTail {
            pieces,
            hk,
            u,
            targets,
            fwd,
        }))
    }

    /// The backward pass: each owned cluster's gradients and its rows' `dL/dh` (sent back to
    /// their ranks), the head's, and this rank's rows' `dL/dh` summed from the head and the
    /// tails in cluster order; the gradients in [`AdaptiveParams::params`] order.
    fn backward_on(
        &self,
        layer: &HostLayer,
        pass: Pass,
        batch: &RankBatch<'_>,
    ) -> Result<(Vec<f32>, Vec<Tensor<2>>), ModelError> {
        let Pass {
            h: h_host,
            head_targets,
            head: mut head_fwd,
            tail_rows,
            owned,
        } = pass;
        let size = self.ranks().size;
        let last = h_host.cols;
        // The owned clusters: their gradients, and each row's dL/dh to its rank.
        let mut back = vec![Vec::new(); size];
        let mut grads = Vec::with_capacity(owned.len());
        for (k, tail) in owned.into_iter().enumerate() {
            let Some(tail) = tail else {
                grads.push(None);
                continue;
            };
            grads.push(Some(self.tail_backward(k, tail, layer, &mut back, last)?));
        }
        let got_back = match batch.alone() {
            true => back,
            false => batch.comm.all_to_all_f32(back)?,
        };
        // This rank's rows: the head's dL/dh plus each tail's, back from its owner.
        let (mut dh, mut head_g) = softmax_ce::backward(
            h_host.as_slice(),
            last,
            &[layer.chunk(0)],
            &head_targets,
            &mut head_fwd,
        );
        let mut cursor = vec![0usize; size];
        let bad = || ModelError::Execution("a rank sent malformed tail gradients".into());
        for (k, rows) in tail_rows.iter().enumerate() {
            let o = owner(k, size);
            for &r in rows {
                let r = r as usize;
                let from = got_back[o]
                    .get(cursor[o]..cursor[o] + last)
                    .ok_or_else(bad)?;
                for (a, &g) in dh[r * last..(r + 1) * last].iter_mut().zip(from) {
                    *a += g;
                }
                cursor[o] += last;
            }
        }
        let device = &self.device;
        let matrix = |g: Option<ChunkGrad>, [r, c]: [usize; 2]| match g {
            Some(g) => [floats(g.dw, [r, c], device), floats(g.db, [1, c], device)],
            None => [Tensor::zeros([r, c], device), Tensor::zeros([1, c], device)],
        };
        let mut params: Vec<Tensor<2>> = matrix(head_g.pop(), layer.weight_shape(0)).into();
        for (k, (c, mine)) in self.params.clusters.iter().zip(grads).enumerate() {
            let (proj, g) = match mine {
                Some((p, g)) => (p, Some(g)),
                None => (c.proj.value.zeros_like(), None),
            };
            params.push(proj);
            params.extend(matrix(g, layer.weight_shape(k + 1)));
        }
        Ok((dh, params))
    }

    /// Owned cluster `k`'s backward: its projection's gradient and its chunk's, each row's
    /// `dL/dh` appended to `back` for the row's rank.
    fn tail_backward(
        &self,
        k: usize,
        tail: OwnedTail,
        layer: &HostLayer,
        back: &mut [Vec<f32>],
        last: usize,
    ) -> Result<(Tensor<2>, ChunkGrad), ModelError> {
        let OwnedTail {
            pieces,
            hk,
            u,
            targets,
            mut fwd,
        } = tail;
        let c = [layer.chunk(k + 1)];
        let (du, mut g) = softmax_ce::backward(u.as_slice(), u.cols, &c, &targets, &mut fwd);
        let du = floats(du, [u.rows, u.cols], &self.device);
        let proj = self.params.clusters[k].proj.value.clone();
        let dh = to_vec(du.clone().matmul(proj.transpose()))?;
        let dproj = hk.transpose().matmul(du);
        let mut at = 0;
        for p in pieces {
            back[p.src].extend_from_slice(&dh[at..at + p.rows * last]);
            at += p.rows * last;
        }
        let bad = || ModelError::Execution("a cluster without its gradient".into());
        Ok((dproj, g.pop().ok_or_else(bad)?))
    }
}

impl OutputLayer for HostAdaptiveSoftmax {
    fn priced_as(&self) -> OutputLayerKind {
        OutputLayerKind::HostAdaptiveSoftmax
    }

    fn objective(&self) -> Objective {
        self.objective
    }

    fn class_chunks(&self) -> &[ClassChunk] {
        &[]
    }

    fn params(&self) -> Vec<&DenseParam> {
        self.params.params()
    }

    fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        self.params.params_mut()
    }

    fn replicated(&self) -> usize {
        2
    }

    fn check_batch(&self, n_rows: usize, max_buffer_bytes: u64) -> Result<(), ModelError> {
        self.params.check_batch(n_rows, max_buffer_bytes)
    }

    fn forward(
        &mut self,
        h: &Tensor<2>,
        targets: &Targets,
        batch: &RankBatch<'_>,
        _probe: &mut StepProbe,
    ) -> Result<OutputPass, ModelError> {
        let layer = HostLayer::take(self.params.pairs())?;
        match self.forward_on(&layer, h, targets, batch) {
            Ok((loss, sent, pass)) => Ok(OutputPass::new(loss, sent, Saved { layer, pass })),
            Err(e) => {
                layer.restore(self.params.pairs(), &self.device);
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
        let Saved { layer, pass } = pass.into_saved();
        let rows = pass.h.rows;
        let out = self.backward_on(&layer, pass, batch);
        layer.restore(self.params.pairs(), &self.device);
        let (dh, params) = out?;
        probe.lap(Stage::OutputBackward);
        let last = self.params.head.weight.value.shape()[0];
        let dh = floats(dh, [rows, last], &self.device);
        Ok(OutputGrads {
            upstream: Upstream::Dh(dh),
            params,
        })
    }

    fn end_pass(&mut self, pass: OutputPass) {
        let saved: Saved = pass.into_saved();
        saved.layer.restore(self.params.pairs(), &self.device);
    }

    fn update(
        &mut self,
        grads: Vec<Tensor<2>>,
        optim: &OptimConfig,
        step: u64,
        path: ComputePath,
        _probe: &mut StepProbe,
    ) -> Result<(), ModelError> {
        // Across ranks, only the clusters this rank owns (and the replicated head).
        let trained: Vec<bool> = (0..grads.len())
            .map(|i| clusters::trains(&self.params, i))
            .collect();
        for ((p, g), trains) in self.params.params_mut().into_iter().zip(grads).zip(trained) {
            if trains {
                update_param(p, g, optim, step, path)?;
            }
        }
        Ok(())
    }

    fn traffic(
        &self,
        _batch: &RankBatch<'_>,
        _n_targets: usize,
        pass_sent: &[(&'static str, u64)],
    ) -> Vec<(&'static str, u64)> {
        let Ranks { rank, size } = self.ranks();
        let mut sent = vec![(names::LOSS, all_reduce_sent(1, rank, size) * 4)];
        sent.extend_from_slice(pass_sent);
        sent
    }

    fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        self.params.scores(h, visit)
    }

    fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        self.params.log_probs(h)
    }

    fn splits_classes(&self) -> bool {
        false
    }

    fn begin_scoring(&mut self, comm: &dyn Collective) -> Result<(), ModelError> {
        clusters::sync(&mut self.params, comm)
    }

    fn end_scoring(&mut self) {
        clusters::release(&mut self.params);
    }

    fn gather_owned(&mut self, part: &dyn OutputLayer, ranks: Ranks) -> Result<(), ModelError> {
        self.params.gather_owned(&part.params(), ranks)
    }
}
