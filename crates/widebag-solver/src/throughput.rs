//! The throughput model behind `plan.objective = "throughput"`: a step's seconds as a fixed
//! overhead plus its matmul work plus the bytes its optimizers and softmax move,
//!
//! `step_s = overhead_s + flops · s_per_gflop / 1e9 + bytes · s_per_gb / 1e9`,
//!
//! with coefficients fitted by least squares to measured steps (`widebag plan --calibrate`).
//! Examples/s is `batch / step_s`.

use serde::{Deserialize, Serialize};
use widebag_config::{Checkpointing, DenseOptim, Layout, TableOptim};
use widebag_ledger::shapes::{self, F32_BYTES};
use widebag_ledger::step::StepSpec;

/// Fitted coefficients, and where they were measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub overhead_s: f64,
    pub s_per_gflop: f64,
    pub s_per_gb: f64,
    /// The machine and command the steps were measured with.
    pub measured_on: String,
}

impl Calibration {
    /// Fitted with `widebag plan --calibrate --steps 6` (11 runs: both layouts, widths 2,000 and
    /// 8,000, batches 64 to 1,024, three optimizer pairs; fitted within 7 % median, 36 % worst,
    /// of the measured 0.09–3.0 s steps) on this project's 2-core machine, wgpu on Mesa 22.3.6
    /// lavapipe. Other devices: `plan --calibrate --out FILE`, then `plan --calibration FILE`.
    pub fn lavapipe_2core() -> Self {
        Self {
            overhead_s: 0.01630,
            s_per_gflop: 0.4265,
            s_per_gb: 7.231,
            measured_on:
                "llvmpipe (LLVM 15.0.6, 256 bits) (Cpu, Vulkan, Mesa 22.3.6 (LLVM 15.0.6)), 2 cores"
                    .to_string(),
        }
    }

    /// Predicted seconds of one step.
    pub fn step_s(&self, work: &StepWork) -> f64 {
        self.overhead_s + work.flops * self.s_per_gflop / 1e9 + work.bytes * self.s_per_gb / 1e9
    }

    /// Predicted examples per second.
    pub fn examples_per_s(&self, spec: &StepSpec) -> f64 {
        let work = StepWork::of(spec);
        let s = self.step_s(&work);
        if s > 0.0 {
            spec.batch.n_rows as f64 / s
        } else {
            0.0
        }
    }

    /// Least-squares fit of the three coefficients to `(work, measured step seconds)` pairs
    /// (non-negative: a coefficient the data pushes below zero is dropped and the rest refitted).
    pub fn fit(samples: &[(StepWork, f64)], measured_on: String) -> Option<Self> {
        let features = |w: &StepWork| [1.0, w.flops / 1e9, w.bytes / 1e9];
        let mut active = [true; 3];
        loop {
            let idx: Vec<usize> = (0..3).filter(|&i| active[i]).collect();
            let coef = least_squares(
                samples
                    .iter()
                    .map(|(w, s)| (idx.iter().map(|&i| features(w)[i]).collect(), *s)),
                idx.len(),
            )?;
            if let Some(k) = coef.iter().position(|&c| c < 0.0) {
                active[idx[k]] = false;
                continue;
            }
            let mut full = [0.0; 3];
            for (k, &i) in idx.iter().enumerate() {
                full[i] = coef[k];
            }
            return Some(Self {
                overhead_s: full[0],
                s_per_gflop: full[1],
                s_per_gb: full[2],
                measured_on,
            });
        }
    }
}

/// Normal equations solved by Gaussian elimination (n ≤ 3).
#[allow(clippy::needless_range_loop)]
fn least_squares(rows: impl Iterator<Item = (Vec<f64>, f64)>, n: usize) -> Option<Vec<f64>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let mut a = vec![vec![0.0; n + 1]; n];
    for (x, y) in rows {
        for i in 0..n {
            for j in 0..n {
                a[i][j] += x[i] * x[j];
            }
            a[i][n] += x[i] * y;
        }
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        for r in 0..n {
            if r != col {
                let f = a[r][col] / a[col][col];
                for c in col..=n {
                    a[r][c] -= f * a[col][c];
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// The work of one step: matmul flops (forward and both backward products) and bytes moved by
/// the bag, the softmax's elementwise passes and the optimizer updates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepWork {
    pub flops: f64,
    pub bytes: f64,
}

impl StepWork {
    pub fn of(spec: &StepSpec) -> Self {
        let b = spec.batch.n_rows as f64;
        let f32b = F32_BYTES as f64;
        let mut sizes = vec![spec.dim as f64];
        sizes.extend(spec.hidden.iter().map(|&h| h as f64));
        let classes = spec.n_classes as f64;
        let last = *sizes.last().expect("dim is first");
        // Dense weights (hidden layers, output layer) and their update traffic.
        let mut dense_params: f64 = sizes.windows(2).map(|p| p[0] * p[1] + p[1]).sum();
        dense_params += last * classes + classes;
        let mut flops = 6.0 * b * (sizes.windows(2).map(|p| p[0] * p[1]).sum::<f64>());
        flops += 6.0 * b * last * classes;
        let dim = spec.dim as f64;
        let mut bytes = 6.0 * b * classes * f32b; // logits: exp, normalise, gradient passes
        let dense_state = spec.dense_optim.state_per_weight() as f64;
        match spec.layout {
            Layout::Sparse => {
                let nnz = spec.batch.nnz as f64;
                let rows = spec.batch.n_unique as f64;
                flops += 4.0 * nnz * dim;
                bytes += 4.0 * nnz * dim * f32b;
                let row_state = spec.table_optim.state_per_row(spec.dim) as f64 / dim;
                let table_passes = match spec.table_optim {
                    TableOptim::Sgd => 3.0,
                    TableOptim::Momentum | TableOptim::RowwiseAdagrad => 5.0,
                    TableOptim::Adam => 9.0,
                    TableOptim::AdamW => 11.0,
                };
                bytes += rows * dim * f32b * (table_passes + 2.0 * row_state);
                // The layout remedies' time: checkpointing runs the trunk's forward again; the
                // host tier moves the batch's rows and state each way; every class chunk reads
                // `h` and writes a `dL/dh` part in both passes.
                if spec.checkpointing == Checkpointing::Mlp {
                    flops += 2.0 * b * sizes.windows(2).map(|p| p[0] * p[1]).sum::<f64>();
                    flops += 2.0 * nnz * dim;
                }
                let (up, down) = spec.host_traffic_bytes();
                bytes += (up + down) as f64;
                // flex's host softmax makes the logits again in backward unless it keeps them
                // (`model.logits`): one output matmul more.
                if spec.host_kernels() && !spec.keeps_logits() {
                    flops += 2.0 * b * last * classes;
                }
                if !spec.adaptive() {
                    let chunk = shapes::class_chunk(
                        spec.class_chunk as usize,
                        spec.n_classes as usize,
                        last as usize,
                        spec.batch.n_rows as usize,
                        spec.device.max_buffer_bytes,
                    );
                    let n_chunks = spec.n_classes.div_ceil(chunk.max(1) as u64) as f64;
                    bytes += n_chunks * 4.0 * b * last * f32b;
                }
            }
            Layout::Dense => {
                let width = spec.width as f64;
                flops += 6.0 * b * width * dim;
                bytes += b * width * f32b;
                dense_params += width * dim + dim;
            }
        }
        let dense_passes = match spec.dense_optim {
            DenseOptim::Sgd => 3.0,
            DenseOptim::Momentum => 5.0,
            DenseOptim::Adam | DenseOptim::AdamW => 9.0,
        };
        bytes += dense_params * f32b * (dense_passes + 2.0 * dense_state);
        Self { flops, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_known_coefficients() {
        let truth = Calibration {
            overhead_s: 0.01,
            s_per_gflop: 0.5,
            s_per_gb: 2.0,
            measured_on: "t".into(),
        };
        let samples: Vec<(StepWork, f64)> = [(1e8, 1e7), (4e9, 2e8), (2e9, 9e8), (5e7, 3e9)]
            .into_iter()
            .map(|(flops, bytes)| {
                let w = StepWork { flops, bytes };
                (w, truth.step_s(&w))
            })
            .collect();
        let fit = Calibration::fit(&samples, "t".into()).unwrap();
        assert!((fit.overhead_s - 0.01).abs() < 1e-9);
        assert!((fit.s_per_gflop - 0.5).abs() < 1e-9);
        assert!((fit.s_per_gb - 2.0).abs() < 1e-9);
    }

    #[test]
    fn negative_coefficients_are_dropped() {
        // Time falls as bytes grow: the bytes term is dropped, the rest refitted.
        let samples = vec![
            (
                StepWork {
                    flops: 1e9,
                    bytes: 1e9,
                },
                1.0,
            ),
            (
                StepWork {
                    flops: 2e9,
                    bytes: 0.5e9,
                },
                2.0,
            ),
            (
                StepWork {
                    flops: 3e9,
                    bytes: 0.1e9,
                },
                3.0,
            ),
        ];
        let fit = Calibration::fit(&samples, "t".into()).unwrap();
        assert!(fit.overhead_s >= 0.0 && fit.s_per_gflop > 0.0 && fit.s_per_gb >= 0.0);
    }
}
