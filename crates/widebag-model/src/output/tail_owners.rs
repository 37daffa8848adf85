//! Who holds each tail cluster of the adaptive softmax across ranks: cluster `k` is owned by rank
//! `k mod N` ([`owner`]), which alone updates it; the other ranks hold a 1 × 1 placeholder
//! without optimizer state ([`release`]) and fetch the owners' values to score held-out rows
//! whole ([`sync`]). At one rank every cluster is the process's own and these do nothing.

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_config::DenseOptim;

use crate::error::ModelError;
use crate::optim::dense::DenseParam;
use crate::output::adaptive::AdaptiveParams;
use crate::tensors::{floats, to_vec};

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
