//! The adaptive softmax on flex's host kernel, for one process or each rank of many (one process
//! is the one-rank case: nothing is packed or exchanged). The head is replicated: each rank
//! scores its own rows against it with [`softmax_ce`], and its gradient goes to the dense
//! all-reduce with the trunk's. Tail cluster `k` is scored at its owner
//! ([`WideModel::cluster_owner`]) on the rows, of every rank, whose targets fall in it: the rows
//! and their targets go to the owner, which keeps the cluster's gradient (it alone updates the
//! cluster) and sends each row's `dL/dh` back. The forward pass ends with the loss (summed over
//! the ranks); the backward pass with `dL/dh` of this rank's rows and the output's gradients.
//! Everything before the output stays on autodiff, reached through `dL/dh`.

use burn::tensor::Tensor;
use widebag_csr::Targets;
use widebag_ledger::step::collective_names as names;

use crate::ModelError;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, ChunkGrad, HostTargets, Logits};
use crate::model::WideModel;
use crate::model::params::{Cluster, Linear, OutputParams};
use crate::output::adaptive::AdaptiveTargets;
use crate::step::exchange::Part;
use crate::tensors::{floats, to_vec};

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

/// What the adaptive softmax's forward pass hands to its backward pass.
pub(crate) struct AdaptiveForward {
    /// This rank's rows.
    h: HostMatrix,
    head_targets: HostTargets,
    head: CeForward,
    /// Per tail cluster, this rank's rows in it, in the order their `dL/dh` comes back.
    tail_rows: Vec<Vec<u32>>,
    /// Per tail cluster this rank owns with rows in it (of any rank); `None` otherwise.
    owned: Vec<Option<OwnedTail>>,
    /// Bytes this rank sends other ranks: the tail rows and their targets, and (as the owner)
    /// their rows' `dL/dh` back.
    pub(crate) sent_bytes: [(&'static str, u64); 2],
}

/// The adaptive softmax's output gradients and this rank's rows' `dL/dh`.
pub(crate) struct AdaptiveBackward {
    /// `[rows, last hidden]`, row-major.
    pub dh: Vec<f32>,
    pub output: OutputParams<Tensor<2>>,
}

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

impl WideModel {
    /// The rank that owns tail cluster `k`.
    pub(crate) fn cluster_owner(&self, k: usize) -> usize {
        k % self.ranks.size.max(1)
    }

    /// The forward pass from `h` (this rank's rows, on autodiff) to the global batch's mean loss,
    /// with the clusters' projections `clusters` (plain tensors) and the head and clusters'
    /// weights `layer`.
    pub(crate) fn adaptive_host_forward(
        &self,
        h: &Tensor<2>,
        clusters: &[Cluster<Tensor<2>>],
        targets: &Targets,
        layer: &HostLayer,
        part: &Part<'_>,
    ) -> Result<(f32, AdaptiveForward), ModelError> {
        let (me, size) = (self.ranks.rank, self.ranks.size);
        let n_rows = h.shape()[0];
        let last = self.spec.last_hidden();
        let scale = 1.0 / part.global_rows.max(1) as f32;
        let split = AdaptiveTargets::new(targets, &self.spec.bands.output);
        let h_host = HostMatrix::take(h.clone().inner())?;
        // The head, on this rank's rows (its logits kept for backward with `model.logits =
        // "keep"` in one process, as the ledger prices them).
        let head_n = layer.chunk(0).b.len();
        let head_targets = HostTargets::from_entries(n_rows, split.head, &[head_n], scale);
        let head_logits = match part.alone() {
            true => self.spec.logits,
            false => Logits::Recompute,
        };
        let head = softmax_ce::forward(
            h_host.as_slice(),
            last,
            &[layer.chunk(0)],
            &head_targets,
            head_logits,
        );
        let mut loss = head.loss;
        let tail_rows: Vec<Vec<u32>> = split.tails.iter().map(|t| t.rows.clone()).collect();
        // Each cluster's rows and targets to its owner, clusters in order; this rank's own
        // clusters' rows stay where they are.
        let (mut send_f, mut send_u) = (vec![Vec::new(); size], vec![Vec::new(); size]);
        let mut mine = Vec::with_capacity(split.tails.len());
        for (k, t) in split.tails.into_iter().enumerate() {
            let o = self.cluster_owner(k);
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
        let rows_bytes = (to_others(&send_f, me) + to_others(&send_u, me)) * 4;
        let (got_f, got_u) = match part.alone() {
            true => (send_f, send_u),
            false => (
                part.comm.all_to_all_f32(send_f)?,
                part.comm.all_to_all_u32(send_u)?,
            ),
        };
        // Every rank's rows of each cluster this rank owns, in rank order.
        let bad = || ModelError::Execution("a rank sent malformed tail rows".into());
        type Received<'g> = (usize, usize, Vec<(u32, u32, f32)>, &'g [f32]);
        let mut received: Vec<Vec<Received<'_>>> = (0..mine.len()).map(|_| Vec::new()).collect();
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
                    .filter(|_| self.cluster_owner(k) == me)
                    .ok_or_else(bad)?
                    .push((src, rows, entries, values));
                at += rows * last;
                i += 3 + 3 * n_entries;
            }
        }
        let device = self.device();
        let mut owned = Vec::with_capacity(mine.len());
        for (k, (own, others)) in mine.into_iter().zip(received).enumerate() {
            let Some(own) = own else {
                owned.push(None);
                continue;
            };
            let m = own.rows.len() + others.iter().map(|p| p.1).sum::<usize>();
            if m == 0 {
                owned.push(None);
                continue;
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
            let hk = floats(hk, [m, last], device);
            let u = HostMatrix::take(hk.clone().matmul(clusters[k].proj.clone()))?;
            let c = layer.chunk(k + 1);
            let targets = HostTargets::from_entries(m, entries, &[c.b.len()], scale);
            let fwd = softmax_ce::forward(u.as_slice(), u.cols, &[c], &targets, Logits::Recompute);
            loss += fwd.loss;
            owned.push(Some(OwnedTail {
                pieces,
                hk,
                u,
                targets,
                fwd,
            }));
        }
        let dh_rows: usize = owned
            .iter()
            .flatten()
            .flat_map(|t| &t.pieces)
            .filter(|p| p.src != me)
            .map(|p| p.rows)
            .sum();
        let sent_bytes = [
            (names::TAIL_ROWS, rows_bytes),
            (names::TAIL_DH, (dh_rows * last) as u64 * 4),
        ];
        if !part.alone() {
            let mut total = [loss];
            part.comm.all_reduce_sum(&mut total)?;
            loss = total[0];
        }
        let forward = AdaptiveForward {
            h: h_host,
            head_targets,
            head,
            tail_rows,
            owned,
            sent_bytes,
        };
        Ok((loss, forward))
    }

    /// The backward pass: each owned cluster's gradients and its rows' `dL/dh` (sent back to
    /// their ranks), the head's, and this rank's rows' `dL/dh` summed from the head and the
    /// tails in cluster order. `clusters` are the projections the forward pass used.
    pub(crate) fn adaptive_host_backward(
        &self,
        fwd: AdaptiveForward,
        clusters: &[Cluster<Tensor<2>>],
        layer: &HostLayer,
        part: &Part<'_>,
    ) -> Result<AdaptiveBackward, ModelError> {
        let AdaptiveForward {
            h: h_host,
            head_targets,
            head: mut head_fwd,
            tail_rows,
            owned,
            ..
        } = fwd;
        let size = self.ranks.size;
        let device = self.device();
        let last = h_host.cols;
        // The owned clusters: their gradients, and each row's dL/dh to its rank.
        let mut back = vec![Vec::new(); size];
        let mut grads = Vec::with_capacity(owned.len());
        for (k, tail) in owned.into_iter().enumerate() {
            let Some(OwnedTail {
                pieces,
                hk,
                u,
                targets,
                mut fwd,
            }) = tail
            else {
                grads.push(None);
                continue;
            };
            let c = [layer.chunk(k + 1)];
            let (du, mut g) = softmax_ce::backward(u.as_slice(), u.cols, &c, &targets, &mut fwd);
            let du = floats(du, [u.rows, u.cols], device);
            let proj = clusters[k].proj.clone();
            let dh = to_vec(du.clone().matmul(proj.transpose()))?;
            let dproj = hk.transpose().matmul(du);
            let mut at = 0;
            for p in pieces {
                back[p.src].extend_from_slice(&dh[at..at + p.rows * last]);
                at += p.rows * last;
            }
            let bad = || ModelError::Execution("a cluster without its gradient".into());
            grads.push(Some((dproj, g.pop().ok_or_else(bad)?)));
        }
        let got_back = match part.alone() {
            true => back,
            false => part.comm.all_to_all_f32(back)?,
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
            let o = self.cluster_owner(k);
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
        let matrix = |g: Option<ChunkGrad>, [r, c]: [usize; 2]| match g {
            Some(g) => Linear {
                weight: floats(g.dw, [r, c], device),
                bias: floats(g.db, [1, c], device),
            },
            None => Linear {
                weight: Tensor::zeros([r, c], device),
                bias: Tensor::zeros([1, c], device),
            },
        };
        let head = matrix(head_g.pop(), layer.weight_shape(0));
        let clusters = clusters
            .iter()
            .zip(grads)
            .enumerate()
            .map(|(k, (c, mine))| {
                let (proj, g) = match mine {
                    Some((p, g)) => (p, Some(g)),
                    None => (c.proj.zeros_like(), None),
                };
                let Linear { weight, bias } = matrix(g, layer.weight_shape(k + 1));
                Cluster { proj, weight, bias }
            })
            .collect();
        Ok(AdaptiveBackward {
            dh,
            output: OutputParams::Adaptive { head, clusters },
        })
    }
}
