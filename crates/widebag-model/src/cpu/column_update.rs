//! A dense parameter's update on some of its columns, on the host (flex): the rule of
//! [`crate::optim::columns`] (the parameter's own optimizer on those columns only, lazy) in one
//! parallel pass over the rows, each touched value and its state written in place, where the
//! tensor path gathers, steps and scatters back with a dozen `[rows, columns]` temporaries.

use burn::tensor::Tensor;
use rayon::prelude::*;
use widebag_config::OptimConfig;

use crate::error::ModelError;
use crate::optim::dense::{DenseParam, DenseState};

use super::access::{HostMatrix, update_in_place};
use super::dense_update::{momentum, with_adam_buffers};
use crate::optim::adam::AdamScalars;

/// One optimizer step of `p`'s columns `cols` (distinct, each below `p`'s width) with their
/// gradient `grad` (`[rows, cols.len()]`, column `j` that of `cols[j]`), in place.
pub fn update_columns(
    p: &mut DenseParam,
    cols: &[u32],
    grad: Tensor<2>,
    config: &OptimConfig,
    step: u64,
) -> Result<(), ModelError> {
    let [rows, n] = p.value.shape().dims();
    let g = HostMatrix::take(grad)?;
    if (g.rows, g.cols) != (rows, cols.len()) || cols.iter().any(|&c| c as usize >= n) {
        return Err(ModelError::Shape(format!(
            "a [{}, {}] gradient for {} columns of a [{rows}, {n}] parameter",
            g.rows,
            g.cols,
            cols.len()
        )));
    }
    let (g, k) = (g.as_slice(), cols.len().max(1));
    let lr = config.lr_at(step) as f32;
    let value = &mut p.value;
    match &mut p.state {
        DenseState::Sgd => update_in_place(value, |v| {
            v.par_chunks_mut(n).zip(g.par_chunks(k)).for_each(|(v, g)| {
                for (&c, &g) in cols.iter().zip(g) {
                    v[c as usize] -= lr * g;
                }
            });
        }),
        DenseState::Momentum(buf) => {
            let mu = config.momentum as f32;
            update_in_place(buf, |b| {
                update_in_place(value, |v| {
                    v.par_chunks_mut(n)
                        .zip(b.par_chunks_mut(n))
                        .zip(g.par_chunks(k))
                        .for_each(|((v, b), g)| {
                            for (&c, &g) in cols.iter().zip(g) {
                                let c = c as usize;
                                momentum(lr, mu, &mut v[c], &mut b[c], g);
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
                v.par_chunks_mut(n)
                    .zip(m.par_chunks_mut(n))
                    .zip(s.par_chunks_mut(n))
                    .zip(g.par_chunks(k))
                    .for_each(|(((v, m), s), g)| {
                        for (&c, &g) in cols.iter().zip(g) {
                            let c = c as usize;
                            a.apply(&mut v[c], &mut m[c], &mut s[c], g);
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
    use crate::tensors::{floats, ints, to_vec};

    #[test]
    fn every_optimizer_matches_the_tensor_rule_on_the_columns_and_leaves_the_rest() {
        let device = Device::flex();
        let (rows, n) = (7, 50);
        let value: Vec<f32> = (0..rows * n)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) * 0.01)
            .collect();
        let config = OptimConfig {
            lr: 0.01,
            momentum: 0.9,
            weight_decay: 0.1,
            ..OptimConfig::default()
        };
        for optim in [
            DenseOptim::Sgd,
            DenseOptim::Momentum,
            DenseOptim::Adam,
            DenseOptim::AdamW,
        ] {
            let mut host = DenseParam::new("w", floats(value.clone(), [rows, n], &device), optim);
            let mut tensor = host.clone();
            host.value = floats(value.clone(), [rows, n], &device);
            for step in 1..=3u64 {
                let cols: Vec<u32> = (0..n as u32)
                    .filter(|c| !(c + step as u32).is_multiple_of(3))
                    .collect();
                let g: Vec<f32> = (0..rows * cols.len())
                    .map(|i| ((i * 7 + step as usize) % 13) as f32 * 0.1 - 0.6)
                    .collect();
                let grad = |d: &Device| floats(g.clone(), [rows, cols.len()], d);
                update_columns(&mut host, &cols, grad(&device), &config, step).unwrap();
                crate::optim::columns::update_columns(
                    &mut tensor,
                    &ints(&cols, &device),
                    grad(&device),
                    (&config, step),
                    &mut || {},
                );
            }
            let (a, b) = (to_vec(host.value).unwrap(), to_vec(tensor.value).unwrap());
            assert_eq!((a.len(), b.len()), (rows * n, rows * n), "{optim:?}");
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= 1e-6 * y.abs().max(1.0),
                    "{optim:?}: {x} vs {y}"
                );
            }
        }
    }

    #[test]
    fn a_gradient_of_the_wrong_shape_or_a_column_out_of_range_is_an_error() {
        let device = Device::flex();
        let mut p = DenseParam::new(
            "w",
            floats(vec![0.0; 12], [3, 4], &device),
            DenseOptim::Adam,
        );
        let config = OptimConfig::default();
        let g = floats(vec![1.0; 6], [3, 2], &device);
        assert!(update_columns(&mut p, &[0, 4], g.clone(), &config, 1).is_err());
        assert!(update_columns(&mut p, &[0], g, &config, 1).is_err());
    }
}
