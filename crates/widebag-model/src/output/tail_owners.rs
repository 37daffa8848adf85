//! Who holds each tail cluster of the adaptive softmax across ranks: cluster `k` is owned by rank
//! `k mod N` ([`WideModel::cluster_owner`]), which alone updates it; the other ranks hold a 1 × 1
//! placeholder without optimizer state ([`WideModel::release_clusters`]) and fetch the owners'
//! values to score held-out rows whole ([`WideModel::sync_clusters`]). At one rank every
//! cluster is the process's own and these do nothing.

use burn::tensor::Tensor;
use widebag_collective::Collective;
use widebag_config::DenseOptim;

use crate::ModelError;
use crate::model::WideModel;
use crate::model::dense_optim::DenseParam;
use crate::model::params::OutputParams;
use crate::tensors::{floats, to_vec};

impl WideModel {
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
