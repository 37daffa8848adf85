//! The dense optimizers on the host, for the flex CPU backend: the same update as
//! [`crate::optim::dense`] (PyTorch's SGD, momentum, Adam and AdamW), one parallel pass over the
//! value, its state and its gradient, each buffer written in place.

use rayon::prelude::*;
use widebag_config::OptimConfig;

use crate::error::ModelError;
use crate::optim::adam::AdamScalars;
use crate::optim::dense::{DenseParam, DenseState, Moments};

use super::access::{HostMatrix, update_in_place};

/// Elements per parallel task.
const TASK: usize = 1 << 14;

/// `f` on a value's buffer and its Adam moments' (`m`, `v`), each in place.
pub(crate) fn with_adam_buffers<R>(
    value: &mut burn::tensor::Tensor<2>,
    moments: &mut Moments,
    f: impl FnOnce(&mut [f32], &mut [f32], &mut [f32]) -> R,
) -> Result<R, ModelError> {
    let Moments { m, v: second } = moments;
    update_in_place(m, |m| {
        update_in_place(second, |s| update_in_place(value, |v| f(v, m, s)))
    })??
}

/// Momentum's element update: `b = mu b + g; v -= lr b`.
#[inline]
pub(crate) fn momentum(lr: f32, mu: f32, v: &mut f32, b: &mut f32, g: f32) {
    *b = mu * *b + g;
    *v -= lr * *b;
}

/// One optimizer step of `p` with `grad`, in place (no copy on flex while each buffer has one
/// handle).
pub fn update(
    p: &mut DenseParam,
    grad: burn::tensor::Tensor<2>,
    config: &OptimConfig,
    step: u64,
) -> Result<(), ModelError> {
    let g = HostMatrix::take(grad)?;
    let g = g.as_slice();
    let lr = config.lr_at(step) as f32;
    let value = &mut p.value;
    match &mut p.state {
        DenseState::Sgd => update_in_place(value, |v| {
            v.par_chunks_mut(TASK)
                .zip(g.par_chunks(TASK))
                .for_each(|(v, g)| v.iter_mut().zip(g).for_each(|(v, g)| *v -= lr * g));
        }),
        DenseState::Momentum(buf) => {
            let mu = config.momentum as f32;
            update_in_place(buf, |b| {
                update_in_place(value, |v| {
                    v.par_chunks_mut(TASK)
                        .zip(b.par_chunks_mut(TASK))
                        .zip(g.par_chunks(TASK))
                        .for_each(|((v, b), g)| {
                            for ((v, b), &g) in v.iter_mut().zip(b).zip(g) {
                                momentum(lr, mu, v, b, g);
                            }
                        });
                })
            })?
        }
        DenseState::Adam {
            moments,
            decoupled_decay,
        } => {
            let a = AdamScalars::new(config, step, *decoupled_decay);
            with_adam_buffers(value, moments, |v, m, s| {
                v.par_chunks_mut(TASK)
                    .zip(m.par_chunks_mut(TASK))
                    .zip(s.par_chunks_mut(TASK))
                    .zip(g.par_chunks(TASK))
                    .for_each(|(((v, m), s), g)| {
                        for (((v, m), s), &g) in v.iter_mut().zip(m).zip(s).zip(g) {
                            a.apply(v, m, s, g);
                        }
                    });
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;
    use widebag_config::DenseOptim;

    use super::*;
    use crate::tensors::{floats, to_vec};

    #[test]
    fn every_optimizer_matches_the_tensor_update_over_steps() {
        let device = Device::flex();
        let shape = [37, 1000];
        let n = shape[0] * shape[1];
        let value: Vec<f32> = (0..n)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) * 0.01)
            .collect();
        for optim in [
            DenseOptim::Sgd,
            DenseOptim::Momentum,
            DenseOptim::Adam,
            DenseOptim::AdamW,
        ] {
            let config = OptimConfig {
                lr: 0.01,
                momentum: 0.9,
                weight_decay: 0.1,
                ..OptimConfig::default()
            };
            let mut host = DenseParam::new("w", floats(value.clone(), shape, &device), optim);
            let mut tensor = host.clone();
            host.value = floats(value.clone(), shape, &device);
            for step in 1..=3u64 {
                let g: Vec<f32> = (0..n)
                    .map(|i| ((i * 7 + step as usize) % 13) as f32 * 0.1 - 0.6)
                    .collect();
                update(&mut host, floats(g.clone(), shape, &device), &config, step).unwrap();
                tensor = tensor.step(floats(g, shape, &device), &config, step);
            }
            let (a, b) = (to_vec(host.value).unwrap(), to_vec(tensor.value).unwrap());
            assert_eq!((a.len(), b.len()), (n, n), "{optim:?}");
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= 1e-6 * y.abs().max(1.0),
                    "{optim:?}: {x} vs {y}"
                );
            }
        }
    }
}
