//! The adaptive softmax's parameters ([`AdaptiveParams`]: the head — its classes and one token
//! per tail cluster — and the tail clusters, `(h proj) weight + bias`), shared by its tensor and
//! host paths, with what both do alike (list them, check a batch, score every class), and who
//! holds each tail cluster across ranks: cluster `k` is owned by rank `k mod N` ([`owner`]),
//! which alone updates it; the other ranks hold a 1 × 1 placeholder without optimizer state
//! ([`release`]) and fetch the owners' values to score held-out rows whole ([`sync`]). At one
//! rank every cluster is the process's own and these do nothing.

use burn::tensor::{Device, Tensor};
use widebag_collective::Collective;
use widebag_config::DenseOptim;
use widebag_config::bands::Band;

use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::scores::{ScoreKind, Visit};
use crate::output::softmax::RunningLse;
use crate::params::init::{Init, adaptive_output};
use crate::params::{Cluster, Linear};
use crate::ranks::Ranks;
use crate::spec::ModelSpec;
use crate::tensors::{floats, to_vec};

/// The adaptive softmax's parameters and shapes.
pub struct AdaptiveParams {
    pub head: Linear<DenseParam>,
    pub clusters: Vec<Cluster<DenseParam>>,
    /// The output clusters: the head's classes, then each tail's.
    pub bands: Vec<Band>,
    /// This rank and the ranks training together (tail cluster `k` is owned by `k mod size`).
    pub ranks: Ranks,
    /// Columns one row reduction spans at most.
    pub reduce_cols: usize,
    pub max_buffer_bytes: u64,
}

impl AdaptiveParams {
    /// `spec`'s head and clusters with `optim` state; across ranks, the clusters other ranks own
    /// are placeholders ([`release`]).
    pub fn new(
        spec: &ModelSpec,
        ranks: Ranks,
        optim: DenseOptim,
        init: Init,
        device: &Device,
    ) -> Self {
        let (head, clusters) = adaptive_output(spec, optim, init, device);
        let mut params = Self {
            head,
            clusters,
            bands: spec.bands.output.clone(),
            ranks,
            reduce_cols: spec.reduce_cols,
            max_buffer_bytes: spec.max_buffer_bytes,
        };
        release(&mut params);
        params
    }

    /// The head's classes.
    pub fn head_n(&self) -> usize {
        self.bands[0].n_rows()
    }

    /// Every parameter: the head's weight and bias, then each cluster's projection, weight and
    /// bias.
    pub fn params(&self) -> Vec<&DenseParam> {
        let mut all = vec![&self.head.weight, &self.head.bias];
        for c in &self.clusters {
            all.extend([&c.proj, &c.weight, &c.bias]);
        }
        all
    }

    /// [`Self::params`] by mutable reference.
    pub fn params_mut(&mut self) -> Vec<&mut DenseParam> {
        let mut all = vec![&mut self.head.weight, &mut self.head.bias];
        for c in &mut self.clusters {
            all.extend([&mut c.proj, &mut c.weight, &mut c.bias]);
        }
        all
    }

    /// The head's and each cluster's `(weight, bias)` (not the projections), as the host kernels
    /// take them.
    pub fn pairs(&mut self) -> Vec<(&mut DenseParam, &mut DenseParam)> {
        std::iter::once((&mut self.head.weight, &mut self.head.bias))
            .chain(
                self.clusters
                    .iter_mut()
                    .map(|c| (&mut c.weight, &mut c.bias)),
            )
            .collect()
    }

    /// An error unless a batch of `n_rows` rows' head logits, and every parameter, fit a buffer.
    pub fn check_batch(&self, n_rows: usize, max_buffer_bytes: u64) -> Result<(), ModelError> {
        let head_n = self.head.bias.value.shape()[1];
        let logits = 4 * (n_rows * head_n) as u64;
        if logits > max_buffer_bytes {
            return Err(ModelError::Shape(format!(
                "the adaptive softmax's [batch, {head_n}] head logits need one {logits}-byte \
                 buffer, over the device's {max_buffer_bytes}-byte limit: use a smaller head \
                 (model.output_bands.cutoffs) or train.batch_size"
            )));
        }
        for p in self.params() {
            let bytes = 4 * p.value.shape().num_elements() as u64;
            if bytes > max_buffer_bytes {
                return Err(ModelError::Shape(format!(
                    "{} needs one {bytes}-byte buffer, over the device's {max_buffer_bytes}-byte \
                     limit",
                    p.name
                )));
            }
        }
        Ok(())
    }

    /// The head's log-probabilities `[rows, head + clusters]` for the rows of `h`.
    fn head_log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        let head = &self.head;
        log_softmax_rows(
            h.clone().matmul(head.weight.value.clone()) + head.bias.value.clone(),
            self.reduce_cols,
        )
    }

    /// Visits the log-probabilities of every class for the rows of `h`: the head's classes,
    /// then each cluster's.
    pub fn scores(&self, h: &Tensor<2>, visit: &mut Visit<'_>) -> Result<ScoreKind, ModelError> {
        let head_n = self.head_n();
        let head_lp = self.head_log_probs(h);
        visit(0, head_lp.clone().narrow(1, 0, head_n))?;
        for (k, cluster) in self.clusters.iter().enumerate() {
            let z = cluster_logits(h.clone(), &cluster.map(|p| p.value.clone()));
            let lp =
                log_softmax_rows(z, self.reduce_cols) + head_lp.clone().narrow(1, head_n + k, 1);
            visit(self.bands[k + 1].start, lp)?;
        }
        Ok(ScoreKind::LogProbs)
    }

    /// Log-probabilities `[rows, n_classes]` of every class (every cluster evaluated).
    pub fn log_probs(&self, h: &Tensor<2>) -> Tensor<2> {
        let head_n = self.head_n();
        let head = self.head_log_probs(h);
        let mut parts = vec![head.clone().narrow(1, 0, head_n)];
        for (k, cluster) in self.clusters.iter().enumerate() {
            let z = cluster_logits(h.clone(), &cluster.map(|p| p.value.clone()));
            parts.push(
                log_softmax_rows(z, self.reduce_cols) + head.clone().narrow(1, head_n + k, 1),
            );
        }
        Tensor::cat(parts, 1)
    }

    /// Each tail cluster `part`'s rank owns, taken from `part` (the same layer as that rank
    /// holds it).
    pub fn gather_owned(&mut self, part: &[&DenseParam], ranks: Ranks) -> Result<(), ModelError> {
        for (k, to) in self.clusters.iter_mut().enumerate() {
            if owner(k, ranks.size) != ranks.rank {
                continue;
            }
            let from = part.get(2 + 3 * k..5 + 3 * k).ok_or_else(|| {
                ModelError::Checkpoint(format!("rank {} holds no tail cluster {k}", ranks.rank))
            })?;
            to.proj.value = from[0].value.clone();
            to.weight.value = from[1].value.clone();
            to.bias.value = from[2].value.clone();
        }
        Ok(())
    }
}

/// Row-wise `z - logsumexp(z)`, the log-sum-exp from [`RunningLse`] over at most `max_cols`
/// columns at a time (on lavapipe, one `max_dim`/`sum_dim` pass over a 140,000-column tail
/// cluster returned a row of `+inf`).
pub(crate) fn log_softmax_rows(z: Tensor<2>, max_cols: usize) -> Tensor<2> {
    let mut lse = RunningLse::new(max_cols);
    lse.add(z.clone());
    z - lse.finish()
}

/// A cluster's logits `(h proj) weight + bias`.
pub(crate) fn cluster_logits(h: Tensor<2>, c: &Cluster<Tensor<2>>) -> Tensor<2> {
    h.matmul(c.proj.clone()).matmul(c.weight.clone()) + c.bias.clone()
}

/// The rank that owns tail cluster `k` of a run of `size` ranks.
pub fn owner(k: usize, size: usize) -> usize {
    k % size.max(1)
}

/// Refreshes every rank's copy of each tail cluster (projection, weight, bias) from its owner,
/// which alone updates it.
pub fn sync(params: &mut AdaptiveParams, comm: &dyn Collective) -> Result<(), ModelError> {
    let (me, size) = (params.ranks.rank, params.ranks.size);
    if size <= 1 {
        return Ok(());
    }
    let device = params.head.weight.value.device();
    let last = params.head.weight.value.shape()[0];
    let bands = params.bands.clone();
    for (k, c) in params.clusters.iter_mut().enumerate() {
        let owner = owner(k, size);
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
pub fn release(params: &mut AdaptiveParams) {
    let (me, size) = (params.ranks.rank, params.ranks.size);
    if size <= 1 {
        return;
    }
    let device = params.head.weight.value.device();
    for (k, c) in params.clusters.iter_mut().enumerate() {
        if owner(k, size) != me {
            for p in [&mut c.proj, &mut c.weight, &mut c.bias] {
                let name = std::mem::take(&mut p.name);
                *p = DenseParam::new(name, Tensor::zeros([1, 1], &device), DenseOptim::Sgd);
            }
        }
    }
}

/// Whether this rank trains parameter `i` of [`AdaptiveParams::params`]: the head (replicated)
/// and the tail clusters it owns.
pub fn trains(params: &AdaptiveParams, i: usize) -> bool {
    let (me, size) = (params.ranks.rank, params.ranks.size);
    size <= 1 || i < 2 || owner((i - 2) / 3, size) == me
}
