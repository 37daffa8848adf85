//! The adaptive softmax on flex's host kernel: the head's softmax and each tail cluster's are
//! [`softmax_ce`] passes over class blocks, off autodiff, with the same loss as
//! [`crate::output::adaptive`]; the tail projections and everything before the output stay on autodiff,
//! reached through `dL/dh` and each cluster's `dL/du` (`u = h[rows] · proj`).

use burn::tensor::{Gradients, Tensor};
use widebag_csr::Targets;

use crate::ModelError;
use crate::cpu::access::HostMatrix;
use crate::cpu::host_layer::HostLayer;
use crate::cpu::softmax_ce::{self, CeForward, ChunkGrad, HostTargets, Logits};
use crate::model::WideModel;
use crate::model::params::Cluster;
use crate::output::adaptive::AdaptiveTargets;
use crate::step::memory::{MemoryMeter, Stage};
use crate::tensors::{floats, ints};

/// One tail cluster's forward pass over the rows whose targets fall in it.
struct TailForward {
    /// `[rows, cluster dim]` projected rows, on autodiff.
    u: Tensor<2>,
    u_host: HostMatrix,
    targets: HostTargets,
    fwd: CeForward,
}

/// What the adaptive softmax's forward pass hands to its backward pass.
pub(crate) struct AdaptiveForward {
    h: HostMatrix,
    head_targets: HostTargets,
    head: CeForward,
    /// Per tail cluster; `None` when no target of the batch falls in it.
    tails: Vec<Option<TailForward>>,
}

/// The adaptive softmax's gradients: autodiff's (the projections, the trunk), the head's
/// `(dW, db)` and each cluster's (`None`: no target fell in it, zero gradient).
pub(crate) struct AdaptiveGrads {
    pub autodiff: Gradients,
    pub head: ChunkGrad,
    pub clusters: Vec<Option<ChunkGrad>>,
}

impl WideModel {
    /// The loss and the forward state, from `h` (on autodiff) and the clusters' projections
    /// (autodiff leaves); the head and clusters' weights are `layer`'s.
    pub(crate) fn adaptive_host_forward(
        &self,
        h: &Tensor<2>,
        clusters: &[Cluster<Tensor<2>>],
        targets: &Targets,
        layer: &HostLayer,
    ) -> Result<(f32, AdaptiveForward), ModelError> {
        let n_rows = h.shape()[0];
        let scale = 1.0 / n_rows.max(1) as f32;
        let split = AdaptiveTargets::new(targets, &self.spec.bands.output);
        let h_host = HostMatrix::take(h.clone().inner())?;
        let head = layer.chunk(0);
        let head_targets = HostTargets::from_entries(n_rows, split.head, &[head.b.len()], scale);
        let head_fwd = softmax_ce::forward(
            h_host.as_slice(),
            h_host.cols,
            &[head],
            &head_targets,
            Logits::Recompute,
        );
        let mut loss = head_fwd.loss;
        let ad = h.device();
        let mut tails = Vec::with_capacity(clusters.len());
        for (k, (t, cluster)) in split.tails.into_iter().zip(clusters).enumerate() {
            if t.rows.is_empty() {
                tails.push(None);
                continue;
            }
            let u = h
                .clone()
                .select(0, ints(&t.rows, &ad))
                .matmul(cluster.proj.clone());
            let u_host = HostMatrix::take(u.clone().inner())?;
            let c = layer.chunk(k + 1);
            let targets = HostTargets::from_entries(t.rows.len(), t.entries, &[c.b.len()], scale);
            let fwd = softmax_ce::forward(
                u_host.as_slice(),
                u_host.cols,
                &[c],
                &targets,
                Logits::Recompute,
            );
            loss += fwd.loss;
            tails.push(Some(TailForward {
                u,
                u_host,
                targets,
                fwd,
            }));
        }
        Ok((
            loss,
            AdaptiveForward {
                h: h_host,
                head_targets,
                head: head_fwd,
                tails,
            },
        ))
    }

    /// The backward pass: the head's and clusters' gradients from the host kernel, then
    /// autodiff from `dL/dh` and each `dL/du` through the projections, the MLP and the bag.
    pub(crate) fn adaptive_host_backward(
        &self,
        h: Tensor<2>,
        fwd: AdaptiveForward,
        layer: &HostLayer,
        meter: &mut MemoryMeter,
    ) -> AdaptiveGrads {
        let AdaptiveForward {
            h: h_host,
            head_targets,
            head: mut head_fwd,
            tails,
        } = fwd;
        let device = self.device();
        let (rows, hidden) = (h_host.rows, h_host.cols);
        let (dh, mut head) = softmax_ce::backward(
            h_host.as_slice(),
            hidden,
            &[layer.chunk(0)],
            &head_targets,
            &mut head_fwd,
        );
        let mut surrogate = (h * Tensor::from_inner(floats(dh, [rows, hidden], device))).sum();
        let mut clusters = Vec::with_capacity(tails.len());
        for (k, tail) in tails.into_iter().enumerate() {
            let Some(TailForward {
                u,
                u_host,
                targets,
                mut fwd,
            }) = tail
            else {
                clusters.push(None);
                continue;
            };
            let (du, mut g) = softmax_ce::backward(
                u_host.as_slice(),
                u_host.cols,
                &[layer.chunk(k + 1)],
                &targets,
                &mut fwd,
            );
            let du = floats(du, [u_host.rows, u_host.cols], device);
            surrogate = surrogate + (u * Tensor::from_inner(du)).sum();
            clusters.push(g.pop());
        }
        meter.lap(Stage::OutputBackward);
        AdaptiveGrads {
            autodiff: surrogate.backward(),
            head: head.pop().expect("one head chunk"),
            clusters,
        }
    }
}
