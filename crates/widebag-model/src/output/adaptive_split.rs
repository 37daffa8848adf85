//! The adaptive softmax across ranks: the head is replicated (each rank scores its own rows
//! against it; its gradient is all-reduced with the trunk's) and each tail cluster is owned by
//! one rank (cluster `k` by rank `k mod N`). The rows whose targets fall in cluster `k` go to its
//! owner with those targets; the owner scores them, keeps the cluster's gradient (it alone
//! updates the cluster) and sends each row's `dL/dh` back. The other ranks hold a 1 × 1
//! placeholder of it (with no optimizer state); [`WideModel::sync_clusters`] fetches the owners'
//! values for held-out evaluation and [`WideModel::release_clusters`] lets them go again.

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_csr::CsrBatch;
use widebag_ledger::step::collective_names as names;

use crate::ModelError;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, ChunkGrad, HostTargets, Logits};
use crate::model::WideModel;
use crate::model::bag::{BagInputs, BandIds};
use crate::model::dense_optim::DenseParam;
use crate::model::params::{Cluster, Linear, OutputParams};
use crate::output::adaptive::AdaptiveTargets;
use crate::step::Grads;
use crate::step::memory::{MemoryMeter, Point, Stage};
use crate::step::trunk::leaf_grad;
use crate::tensors::{floats, to_vec};
use widebag_config::DenseOptim;

/// One rank's rows of one cluster, as the owner receives them.
struct Piece {
    src: usize,
    rows: usize,
    /// `(position among the piece's rows, class within the cluster, weight)`.
    entries: Vec<(u32, u32, f32)>,
    /// Where the piece's hidden rows start in what `src` sent.
    at: usize,
}

impl WideModel {
    /// The rank that owns tail cluster `k`.
    pub(crate) fn cluster_owner(&self, k: usize) -> usize {
        k % self.ranks.size.max(1)
    }

    /// Steps 3–4 with the adaptive softmax split: the trunk and the head on this rank's rows,
    /// each tail cluster at its owner on the rows (of every rank) whose targets fall in it.
    /// Returns the global batch's loss (all-reduced) and gradients already of its mean.
    pub(crate) fn adaptive_split(
        &mut self,
        batch: &CsrBatch,
        global_rows: usize,
        (ids, inputs, rows): (BandIds, BagInputs, Vec<Tensor<2>>),
        host: &HostLayer,
        comm: &dyn Collective,
        meter: &mut MemoryMeter,
    ) -> Result<Grads, ModelError> {
        let (me, size) = (self.ranks.rank, self.ranks.size);
        let rows: Vec<Tensor<2>> = rows.into_iter().map(|r| r.require_grad()).collect();
        let leaf = |p: &DenseParam| p.value.clone().autodiff().require_grad();
        let params = self.dense.map_split(leaf, |p| p.value.clone());
        let h = self.forward_hidden(&rows, &params, &inputs);
        meter.lap(Stage::Forward);
        let targets = self.objective_targets(batch);
        let split = AdaptiveTargets::new(&targets, &self.spec.bands.output);
        let scale = 1.0 / global_rows.max(1) as f32;
        let (b, last) = (batch.n_rows(), self.spec.last_hidden());
        let h_host = to_vec(h.clone().inner())?;
        // The head, on this rank's rows.
        let head_n = host.chunk(0).b.len();
        let head_targets = HostTargets::from_entries(b, split.head, &[head_n], scale);
        let mut head_fwd = softmax_ce::forward(
            &h_host,
            last,
            &[host.chunk(0)],
            &head_targets,
            Logits::Recompute,
        );
        let mut loss = head_fwd.loss;
        // Each cluster's rows and targets to its owner, clusters in order.
        let (mut send_f, mut send_u) = (vec![Vec::new(); size], vec![Vec::new(); size]);
        for (k, t) in split.tails.iter().enumerate() {
            let o = self.cluster_owner(k);
            send_u[o].extend([k as u32, t.rows.len() as u32, t.entries.len() as u32]);
            for &(pos, class, w) in &t.entries {
                send_u[o].extend([pos, class, w.to_bits()]);
            }
            for &r in &t.rows {
                let r = r as usize;
                send_f[o].extend_from_slice(&h_host[r * last..(r + 1) * last]);
            }
        }
        let out_bytes = |v: &[Vec<f32>]| -> u64 {
            let n: usize = v
                .iter()
                .enumerate()
                .filter(|(r, _)| *r != me)
                .map(|(_, x)| x.len())
                .sum();
            n as u64 * 4
        };
        let meta: usize = (0..size)
            .filter(|&r| r != me)
            .map(|r| send_u[r].len())
            .sum();
        *self.sent_bytes.entry(names::TAIL_ROWS).or_default() +=
            out_bytes(&send_f) + meta as u64 * 4;
        let got_f = comm.all_to_all_f32(send_f)?;
        let got_u = comm.all_to_all_u32(send_u)?;
        // The owner: every rank's rows of each of its clusters, in rank order.
        let bad = || ModelError::Execution("a rank sent malformed tail rows".into());
        let n_clusters = split.tails.len();
        let mut pieces: Vec<Vec<Piece>> = (0..n_clusters).map(|_| Vec::new()).collect();
        for (src, u) in got_u.iter().enumerate() {
            let (mut i, mut at) = (0, 0);
            while i < u.len() {
                let head = u.get(i..i + 3).ok_or_else(bad)?;
                let (k, n_rows, n_entries) = (head[0] as usize, head[1] as usize, head[2] as usize);
                let e = u.get(i + 3..i + 3 + 3 * n_entries).ok_or_else(bad)?;
                let entries = e
                    .chunks_exact(3)
                    .map(|x| (x[0], x[1], f32::from_bits(x[2])))
                    .collect();
                pieces.get_mut(k).ok_or_else(bad)?.push(Piece {
                    src,
                    rows: n_rows,
                    entries,
                    at,
                });
                at += n_rows * last;
                i += 3 + 3 * n_entries;
            }
        }
        let device = self.device().clone();
        let OutputParams::Adaptive { clusters, .. } = &params.output else {
            return Err(ModelError::Execution(
                "the adaptive split needs an adaptive output".into(),
            ));
        };
        let mut owned: Vec<Option<(Tensor<2>, ChunkGrad)>> =
            (0..n_clusters).map(|_| None).collect();
        let mut back = vec![Vec::new(); size];
        for (k, ps) in pieces.iter().enumerate() {
            let m: usize = ps.iter().map(|p| p.rows).sum();
            if self.cluster_owner(k) != me || m == 0 {
                continue;
            }
            let mut hk = Vec::with_capacity(m * last);
            let mut entries = Vec::new();
            let mut first = 0u32;
            for p in ps {
                hk.extend_from_slice(
                    got_f[p.src]
                        .get(p.at..p.at + p.rows * last)
                        .ok_or_else(bad)?,
                );
                entries.extend(p.entries.iter().map(|&(pos, c, w)| (first + pos, c, w)));
                first += p.rows as u32;
            }
            let hk = floats(hk, [m, last], &device).autodiff().require_grad();
            let proj = clusters[k].proj.clone().autodiff().require_grad();
            let u = hk.clone().matmul(proj.clone());
            let u_host = HostMatrix::take(u.clone().inner())?;
            let c = host.chunk(k + 1);
            let t = HostTargets::from_entries(m, entries, &[c.b.len()], scale);
            let mut fwd =
                softmax_ce::forward(u_host.as_slice(), u_host.cols, &[c], &t, Logits::Recompute);
            loss += fwd.loss;
            let (du, mut g) = softmax_ce::backward(
                u_host.as_slice(),
                u_host.cols,
                &[host.chunk(k + 1)],
                &t,
                &mut fwd,
            );
            let du = floats(du, [m, u_host.cols], &device);
            let grads = (u * Tensor::from_inner(du)).sum().backward();
            let dh = to_vec(leaf_grad(&hk, &grads))?;
            let mut at = 0;
            for p in ps {
                back[p.src].extend_from_slice(&dh[at..at + p.rows * last]);
                at += p.rows * last;
            }
            owned[k] = Some((leaf_grad(&proj, &grads), g.pop().ok_or_else(bad)?));
        }
        *self.sent_bytes.entry(names::TAIL_DH).or_default() += out_bytes(&back);
        let got_back = comm.all_to_all_f32(back)?;
        meter.lap(Stage::OutputForward);
        meter.sample(Point::ForwardEnd);
        // Backward: the head's dL/dh plus each tail's, back from its owner, on this rank's rows.
        let (mut dh, mut head_g) = softmax_ce::backward(
            &h_host,
            last,
            &[host.chunk(0)],
            &head_targets,
            &mut head_fwd,
        );
        let mut cursor = vec![0usize; size];
        for (k, t) in split.tails.iter().enumerate() {
            let o = self.cluster_owner(k);
            for &r in &t.rows {
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
        meter.lap(Stage::OutputBackward);
        let grads = (h * Tensor::from_inner(floats(dh, [b, last], &device)))
            .sum()
            .backward();
        let matrix = |g: Option<ChunkGrad>, [r, c]: [usize; 2]| match g {
            Some(g) => Linear {
                weight: floats(g.dw, [r, c], &device),
                bias: floats(g.db, [1, c], &device),
            },
            None => Linear {
                weight: Tensor::zeros([r, c], &device),
                bias: Tensor::zeros([1, c], &device),
            },
        };
        let head = matrix(head_g.pop(), host.weight_shape(0));
        let clusters = clusters
            .iter()
            .zip(owned)
            .enumerate()
            .map(|(k, (c, mine))| {
                let (proj, g) = match mine {
                    Some((p, g)) => (p, Some(g)),
                    None => (c.proj.zeros_like(), None),
                };
                let Linear { weight, bias } = matrix(g, host.weight_shape(k + 1));
                Cluster { proj, weight, bias }
            })
            .collect();
        let output = OutputParams::Adaptive { head, clusters };
        let (rows_grad, dense) = self.trunk_grads(&ids, &rows, &params, &grads, output);
        drop(grads);
        meter.sample(Point::BackwardEnd);
        meter.lap(Stage::TrunkBackward);
        let mut total = [loss];
        comm.all_reduce_sum(&mut total)?;
        Ok(Grads {
            loss: total[0],
            ids,
            rows: rows_grad,
            dense,
        })
    }

    /// Refreshes every rank's copy of each tail cluster (projection, weight, bias) from its
    /// owner, which alone updates it.
    pub fn sync_clusters(&mut self, comm: &dyn Collective) -> Result<(), ModelError> {
        let size = self.ranks.size;
        if size <= 1 || !self.adaptive() {
            return Ok(());
        }
        let me = self.ranks.rank;
        let device = self.device().clone();
        let (bands, last) = (self.spec.bands.output.clone(), self.spec.last_hidden());
        let OutputParams::Adaptive { clusters, .. } = &mut self.dense.output else {
            return Ok(());
        };
        for (k, c) in clusters.iter_mut().enumerate() {
            let owner = k % size;
            let mut send = vec![Vec::new(); size];
            if owner == me {
                let mut v = to_vec(c.proj.value.clone())?;
                v.extend(to_vec(c.weight.value.clone())?);
                v.extend(to_vec(c.bias.value.clone())?);
                for (r, s) in send.iter_mut().enumerate() {
                    if r != me {
                        *s = v.clone();
                    }
                }
            }
            let got = comm.all_to_all_f32(send)?;
            if owner != me {
                let v = &got[owner];
                let band = bands[k + 1];
                let (sp, sw, sb) = (
                    [last, band.dim],
                    [band.dim, band.n_rows()],
                    [1, band.n_rows()],
                );
                let (np, nw) = (sp[0] * sp[1], sw[0] * sw[1]);
                if v.len() != np + nw + sb[0] * sb[1] {
                    return Err(ModelError::Execution(format!(
                        "rank {owner} sent {} values of cluster {k}",
                        v.len()
                    )));
                }
                c.proj.value = floats(v[..np].to_vec(), sp, &device);
                c.weight.value = floats(v[np..np + nw].to_vec(), sw, &device);
                c.bias.value = floats(v[np + nw..].to_vec(), sb, &device);
            }
        }
        Ok(())
    }

    /// Replaces every tail cluster this rank does not own with a 1 × 1 placeholder without
    /// optimizer state: only its owner holds (and updates) a cluster.
    pub fn release_clusters(&mut self) {
        let (me, size) = (self.ranks.rank, self.ranks.size);
        if size <= 1 {
            return;
        }
        let device = self.device().clone();
        let OutputParams::Adaptive { clusters, .. } = &mut self.dense.output else {
            return;
        };
        for (k, c) in clusters.iter_mut().enumerate() {
            if k % size != me {
                for p in [&mut c.proj, &mut c.weight, &mut c.bias] {
                    let name = std::mem::take(&mut p.name);
                    *p = DenseParam::new(name, Tensor::zeros([1, 1], &device), DenseOptim::Sgd);
                }
            }
        }
    }

    /// Whether this rank trains the dense parameter `name`: every one but the tail clusters
    /// other ranks own (`output.tail.{band}.…`, cluster `band - 1`).
    pub(crate) fn trains_param(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix("output.tail.") else {
            return true;
        };
        let band: usize = rest
            .split('.')
            .next()
            .and_then(|b| b.parse().ok())
            .unwrap_or(1);
        self.ranks.size <= 1 || (band.max(1) - 1) % self.ranks.size == self.ranks.rank
    }
}
