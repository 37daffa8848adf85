//! The throughput model behind `plan`'s predicted step time and `plan.objective = "throughput"`:
//! a step's seconds as a fixed overhead plus its matmul work plus the bytes its optimizers and
//! softmax move plus a fixed cost per extra class chunk (each chunk is its own launches of the
//! output layer's kernels, which a GPU pays far more for than it saves),
//!
//! `step_s = overhead_s + flops · s_per_gflop / 1e9 + half_flops · s_per_half_gflop / 1e9
//!           + cube_flops · s_per_cube_gflop / 1e9 + bytes · s_per_gb / 1e9
//!           + (chunks − 1) · s_per_chunk`,
//!
//! `half_flops` being the output layer's products under `model.output_precision = "f16"` or
//! `"bf16"` (a GPU's tensor cores; f32's rate where no half run was measured), and `cube_flops`
//! the output layer's weight-gradient product where widebag's CubeCL kernels form it inside the
//! step they fuse into the backward pass (`train.gpu_kernels = "cubecl"`: their own tile
//! product, not burn's matmul; f32's rate where no such run was measured), and with
//! `model.logits = "tiled"` the logits' product of each pass too (the same kernels' tiles),
//!
//! with coefficients fitted by least squares to measured steps (`widebag plan --calibrate`), one
//! set per device kind ([`Calibration::built_in`]). Examples/s is `batch / step_s`.

use serde::{Deserialize, Serialize};
use widebag_config::{Checkpointing, DenseOptim, Layout, TableOptim};
use widebag_ledger::shapes::{self, F32_BYTES};
use widebag_ledger::step::{OutputLayerKind, OutputUpdate, StepSpec};

/// Fitted coefficients, and where they were measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub overhead_s: f64,
    pub s_per_gflop: f64,
    pub s_per_gb: f64,
    /// Seconds each class chunk after the first adds (older calibration files: 0).
    #[serde(default)]
    pub s_per_chunk: f64,
    /// Seconds per GFLOP of half-precision output products, where the calibration measured
    /// some (`None`: at [`Self::s_per_gflop`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s_per_half_gflop: Option<f64>,
    /// Seconds per GFLOP of the weight-gradient product in widebag's CubeCL kernels' fused
    /// output step, where the calibration measured some (`None`: at [`Self::s_per_gflop`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s_per_cube_gflop: Option<f64>,
    /// The machine and command the steps were measured with.
    pub measured_on: String,
}

impl Calibration {
    /// Fitted with `widebag plan --calibrate --steps 10 --device wgpu` (16 runs: both layouts,
    /// widths 2,000 and 8,000, batches 64 to 1,024, three optimizer pairs, 1, 4 and 16 class
    /// chunks, and three runs with f16 output products; in relative error: within 5.6 % of the
    /// measured 0.025–0.81 s steps at the median, 25 % at worst) on this project's 2-core
    /// machine, wgpu on Mesa 22.3.6 lavapipe, 2026-11-30 (docs/results/calibration-2026-11-30/,
    /// `lavapipe-half`; an earlier fit the same day, without the half runs, split the same steps
    /// differently: 24.9 ms/GFLOP, 2.05 s/GB, 12.4 ms a chunk). Other devices: `plan --calibrate
    /// --out FILE`, then `plan --calibration FILE`.
    pub fn lavapipe_2core() -> Self {
        Self {
            overhead_s: 0.01106,
            s_per_gflop: 0.0,
            s_per_gb: 2.606,
            s_per_chunk: 0.03076,
            s_per_half_gflop: Some(0.04220),
            s_per_cube_gflop: None,
            measured_on:
                "llvmpipe (LLVM 15.0.6, 256 bits) (Cpu, Vulkan, Mesa 22.3.6 (LLVM 15.0.6)), 2 cores"
                    .to_string(),
        }
    }

    /// Fitted with `widebag plan --calibrate --steps 40` (the same 13 runs; within 6.3 % of the
    /// measured 1.3–37 ms steps at the median, 20 % at worst; the bytes term fitted to 0: the
    /// host kernels' traffic hides in their products) on this project's 2-core machine, flex
    /// with its host kernels, 2026-11-30 (docs/results/calibration-2026-11-30/).
    pub fn flex_2core() -> Self {
        Self {
            overhead_s: 0.0006834,
            s_per_gflop: 0.007899,
            s_per_gb: 0.0,
            s_per_chunk: 0.00004633,
            s_per_half_gflop: None,
            s_per_cube_gflop: None,
            measured_on: "flex (CPU), 2 cores".to_string(),
        }
    }

    /// The built-in calibration of the device `adapter` names (`Compute::adapter`): lavapipe
    /// (`llvmpipe …`) or flex, each fitted on this project's 2-core machine; `None` for any
    /// other device, which has to be measured (`plan --calibrate --out FILE`).
    pub fn built_in(adapter: &str) -> Option<Self> {
        if adapter.starts_with("llvmpipe") {
            Some(Self::lavapipe_2core())
        } else if adapter.starts_with("flex") {
            Some(Self::flex_2core())
        } else {
            None
        }
    }

    /// Predicted seconds of one step.
    pub fn step_s(&self, work: &StepWork) -> f64 {
        self.overhead_s
            + work.flops * self.s_per_gflop / 1e9
            + work.half_flops * self.s_per_half_gflop.unwrap_or(self.s_per_gflop) / 1e9
            + work.cube_flops * self.s_per_cube_gflop.unwrap_or(self.s_per_gflop) / 1e9
            + work.bytes * self.s_per_gb / 1e9
            + work.extra_chunks() * self.s_per_chunk
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

    /// Least-squares fit of the coefficients to `(work, measured step seconds)` pairs, in
    /// relative error (non-negative: a coefficient the data pushes below zero is dropped and the rest refitted;
    /// one whose feature never varies from zero, such as chunks in runs of one chunk, is 0).
    pub fn fit(samples: &[(StepWork, f64)], measured_on: String) -> Option<Self> {
        let features = |w: &StepWork| {
            [
                1.0,
                w.flops / 1e9,
                w.bytes / 1e9,
                w.extra_chunks(),
                w.half_flops / 1e9,
                w.cube_flops / 1e9,
            ]
        };
        let mut active = [true; 6];
        for (i, a) in active.iter_mut().enumerate().skip(1) {
            *a = samples.iter().any(|(w, _)| features(w)[i] != 0.0);
        }
        loop {
            let idx: Vec<usize> = (0..6).filter(|&i| active[i]).collect();
            // Relative errors: each run's equation divided by its own time, so a 1 ms step is
            // fitted as closely as a 1 s one.
            let coef = least_squares(
                samples
                    .iter()
                    .filter(|(_, s)| *s > 0.0)
                    .map(|(w, s)| (idx.iter().map(|&i| features(w)[i] / s).collect(), 1.0)),
                idx.len(),
            )?;
            if let Some(k) = coef.iter().position(|&c| c < 0.0) {
                active[idx[k]] = false;
                continue;
            }
            let mut full = [0.0; 6];
            for (k, &i) in idx.iter().enumerate() {
                full[i] = coef[k];
            }
            // No half (kernel) run measured: half (kernel) products at f32's rate (not at 0).
            let half = samples.iter().any(|(w, _)| w.half_flops > 0.0);
            let cube = samples.iter().any(|(w, _)| w.cube_flops > 0.0);
            return Some(Self {
                overhead_s: full[0],
                s_per_gflop: full[1],
                s_per_gb: full[2],
                s_per_chunk: full[3],
                s_per_half_gflop: half.then_some(full[4]),
                s_per_cube_gflop: cube.then_some(full[5]),
                measured_on,
            });
        }
    }
}

/// Normal equations solved by Gaussian elimination (n ≤ 6).
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

/// The work of one step: matmul flops (forward and both backward products), bytes moved by
/// the bag, the softmax's elementwise passes and the optimizer updates, and the class chunks the
/// full softmax runs in (1 for every other output layer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepWork {
    pub flops: f64,
    pub bytes: f64,
    #[serde(default)]
    pub chunks: f64,
    /// The output layer's products under half-precision operands (else in `flops`).
    #[serde(default)]
    pub half_flops: f64,
    /// The output layer's weight-gradient product inside the CubeCL kernels' fused step, and
    /// the tiled logits' products of both passes (else in `flops` or `half_flops`).
    #[serde(default)]
    pub cube_flops: f64,
}

impl StepWork {
    /// Chunks after the first (0 for one chunk, or none counted).
    pub fn extra_chunks(&self) -> f64 {
        (self.chunks - 1.0).max(0.0)
    }

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
        let output_flops = 6.0 * b * last * classes;
        let dim = spec.dim as f64;
        let mut bytes = 6.0 * b * classes * f32b; // logits: exp, normalise, gradient passes
        let dense_state = spec.dense_optim.state_per_weight() as f64;
        let mut chunks = 1.0;
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
                // The full softmax makes its logits again in backward unless it keeps them
                // (`model.logits = "keep"`): one output matmul more, on flex's host kernels as
                // on burn's tensors; tiled (`"tiled"`), the CubeCL kernels form them in both
                // passes (below).
                let full = matches!(
                    spec.output_layer(),
                    OutputLayerKind::ChunkedSoftmax | OutputLayerKind::HostSoftmax
                );
                if full && !spec.keeps_logits() && !spec.tiles_logits() {
                    flops += 2.0 * b * last * classes;
                }
                if matches!(
                    spec.output_layer(),
                    OutputLayerKind::ChunkedSoftmax | OutputLayerKind::HostSoftmax
                ) {
                    let chunk = shapes::class_chunk(
                        spec.class_chunk as usize,
                        spec.n_classes as usize,
                        last as usize,
                        spec.batch.n_rows as usize,
                        spec.device.max_buffer_bytes,
                    );
                    let n_chunks = spec.n_classes.div_ceil(chunk.max(1) as u64) as f64;
                    bytes += n_chunks * 4.0 * b * last * f32b;
                    chunks = n_chunks;
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
        // The weight-gradient product, one of the three, in the kernels' fused step (f32); with
        // tiled logits the logits' product too, in each pass (the forward's moved out of
        // `output_flops`), and a third of the logits' traffic: the gradient written once and
        // read by the two products, no logits written or read.
        let mut cube_flops = match spec.output_update() {
            OutputUpdate::InBackward => output_flops / 3.0,
            OutputUpdate::AfterBackward => 0.0,
        };
        let mut output_flops = output_flops - cube_flops;
        if spec.tiles_logits() {
            let logits_product = 2.0 * b * last * classes;
            output_flops -= logits_product;
            cube_flops += 2.0 * logits_product;
            bytes -= 3.0 * b * classes * f32b;
        }
        // Half operands where the output layer is the full softmax on tensors (the key is
        // refused elsewhere).
        let (flops, half_flops) = match spec.output_precision.is_f32() {
            true => (flops + output_flops, 0.0),
            false => (flops, output_flops),
        };
        Self {
            flops,
            bytes,
            chunks,
            half_flops,
            cube_flops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(flops: f64, bytes: f64, chunks: f64) -> StepWork {
        StepWork {
            flops,
            bytes,
            chunks,
            half_flops: 0.0,
            cube_flops: 0.0,
        }
    }

    #[test]
    fn the_kernels_fused_step_moves_the_weight_gradient_product_to_its_own_rate() {
        use widebag_config::bands::ModelBands;
        use widebag_config::{Config, GpuKernels};
        use widebag_ledger::step::{BatchFacts, DeviceFacts};
        let device = DeviceFacts {
            max_buffer_bytes: 128 << 20,
            alignment_bytes: 32,
            host_threads: 0,
            bf16: false,
            host_memory: false,
        };
        let spec = |kernels: GpuKernels| {
            let mut c = Config::default();
            c.train.gpu_kernels = kernels;
            let bands = ModelBands::resolve(&c).unwrap();
            let batch = BatchFacts {
                n_rows: 128,
                nnz: 1_000,
                n_unique: 900,
                n_targets: 128,
            };
            StepSpec::from_config(&c, &bands, device, batch)
        };
        let (tensor, kernels) = (spec(GpuKernels::Tensor), spec(GpuKernels::Cubecl));
        assert_eq!(kernels.output_update(), OutputUpdate::InBackward);
        let (t, k) = (StepWork::of(&tensor), StepWork::of(&kernels));
        assert_eq!(t.cube_flops, 0.0);
        let s = &kernels;
        let last = s.hidden.last().copied().unwrap_or(s.dim);
        let product = 2.0 * (s.batch.n_rows * last * s.n_classes) as f64;
        assert!(
            product > 0.0 && (k.cube_flops - product).abs() < 1.0,
            "{k:?}"
        );
        assert!((t.flops - (k.flops + k.cube_flops)).abs() < 1.0);
    }

    #[test]
    fn fit_recovers_known_coefficients() {
        let truth = Calibration {
            overhead_s: 0.01,
            s_per_gflop: 0.5,
            s_per_gb: 2.0,
            s_per_chunk: 0.003,
            s_per_half_gflop: None,
            s_per_cube_gflop: None,
            measured_on: "t".into(),
        };
        let samples: Vec<(StepWork, f64)> = [
            (1e8, 1e7, 1.0),
            (4e9, 2e8, 1.0),
            (2e9, 9e8, 4.0),
            (5e7, 3e9, 1.0),
            (1e9, 1e9, 16.0),
        ]
        .into_iter()
        .map(|(flops, bytes, chunks)| {
            let w = work(flops, bytes, chunks);
            (w, truth.step_s(&w))
        })
        .collect();
        let fit = Calibration::fit(&samples, "t".into()).unwrap();
        assert!((fit.overhead_s - 0.01).abs() < 1e-9);
        assert!((fit.s_per_gflop - 0.5).abs() < 1e-9);
        assert!((fit.s_per_gb - 2.0).abs() < 1e-9);
        assert!((fit.s_per_chunk - 0.003).abs() < 1e-9);
    }

    /// A product kind with a rate of its own: its work, and its rate in a calibration.
    struct Kind {
        name: &'static str,
        set_work: fn(&mut StepWork, f64),
        rate: fn(&Calibration) -> Option<f64>,
        set_rate: fn(&mut Calibration, f64),
    }

    #[test]
    fn half_and_kernel_runs_fit_their_own_rates_and_without_them_cost_f32s() {
        let kinds = [
            Kind {
                name: "half",
                set_work: |w, f| w.half_flops = f,
                rate: |c| c.s_per_half_gflop,
                set_rate: |c, r| c.s_per_half_gflop = Some(r),
            },
            Kind {
                name: "kernel",
                set_work: |w, f| w.cube_flops = f,
                rate: |c| c.s_per_cube_gflop,
                set_rate: |c, r| c.s_per_cube_gflop = Some(r),
            },
        ];
        for (kind, own_rate) in kinds.iter().zip([0.002, 0.3]) {
            let mut truth = Calibration {
                overhead_s: 0.002,
                s_per_gflop: 0.02,
                s_per_gb: 0.5,
                s_per_chunk: 0.001,
                s_per_half_gflop: None,
                s_per_cube_gflop: None,
                measured_on: "t".into(),
            };
            (kind.set_rate)(&mut truth, own_rate);
            let of_kind = |flops: f64, bytes: f64, kind_flops: f64| {
                let mut w = work(flops, bytes, 1.0);
                (kind.set_work)(&mut w, kind_flops);
                w
            };
            let mut samples: Vec<(StepWork, f64)> = [
                work(1e8, 1e7, 1.0),
                work(4e9, 2e8, 1.0),
                work(2e9, 9e8, 4.0),
                work(5e7, 3e9, 1.0),
                of_kind(1e9, 1e8, 3e9),
                of_kind(2e8, 4e8, 8e9),
            ]
            .into_iter()
            .map(|w| (w, truth.step_s(&w)))
            .collect();
            let fit = Calibration::fit(&samples, "t".into()).unwrap();
            let name = kind.name;
            let fitted = (kind.rate)(&fit).unwrap();
            assert!((fitted - own_rate).abs() < 1e-9, "{name}: {fit:?}");
            assert!((fit.s_per_gflop - 0.02).abs() < 1e-9, "{name}: {fit:?}");
            // No run of the kind: no rate of its own, and its products are priced at f32's.
            samples.truncate(4);
            let fit = Calibration::fit(&samples, "t".into()).unwrap();
            assert_eq!((kind.rate)(&fit), None, "{name}");
            let (as_kind, as_f32) = (of_kind(1e9, 1e8, 3e9), work(4e9, 1e8, 1.0));
            assert!(
                (fit.step_s(&as_kind) - fit.step_s(&as_f32)).abs() < 1e-12,
                "{name}"
            );
        }
    }

    #[test]
    fn runs_of_one_chunk_fit_no_chunk_cost() {
        // Every run in one chunk: the chunk column is all zeros, so its coefficient is 0 and the
        // other three are fitted as before (no singular system).
        let truth = Calibration {
            overhead_s: 0.02,
            s_per_gflop: 0.1,
            s_per_gb: 1.0,
            s_per_chunk: 0.0,
            s_per_half_gflop: None,
            s_per_cube_gflop: None,
            measured_on: "t".into(),
        };
        let samples: Vec<(StepWork, f64)> = [(1e8, 1e7), (4e9, 2e8), (2e9, 9e8), (5e7, 3e9)]
            .into_iter()
            .map(|(flops, bytes)| {
                let w = work(flops, bytes, 1.0);
                (w, truth.step_s(&w))
            })
            .collect();
        let fit = Calibration::fit(&samples, "t".into()).unwrap();
        assert_eq!(fit.s_per_chunk, 0.0);
        assert!((fit.s_per_gflop - 0.1).abs() < 1e-9);
    }

    #[test]
    fn negative_coefficients_are_dropped() {
        // Time falls as bytes grow: the bytes term is dropped, the rest refitted.
        let samples = vec![
            (work(1e9, 1e9, 1.0), 1.0),
            (work(2e9, 0.5e9, 1.0), 2.0),
            (work(3e9, 0.1e9, 1.0), 3.0),
        ];
        let fit = Calibration::fit(&samples, "t".into()).unwrap();
        assert!(fit.overhead_s >= 0.0 && fit.s_per_gflop > 0.0 && fit.s_per_gb >= 0.0);
    }

    #[test]
    fn built_in_calibrations_by_adapter_and_none_for_a_gpu() {
        let lavapipe = "llvmpipe (LLVM 15.0.6, 256 bits) (Cpu, Vulkan)";
        assert_eq!(
            Calibration::built_in(lavapipe),
            Some(Calibration::lavapipe_2core())
        );
        assert_eq!(
            Calibration::built_in("flex (CPU)"),
            Some(Calibration::flex_2core())
        );
        assert_eq!(
            Calibration::built_in("NVIDIA H200 (DiscreteGpu, Vulkan)"),
            None
        );
    }

    #[test]
    fn older_calibration_files_read_with_no_chunk_cost() {
        let c: Calibration = serde_json::from_str(
            r#"{"overhead_s": 0.5, "s_per_gflop": 0.0, "s_per_gb": 0.0, "measured_on": "t"}"#,
        )
        .unwrap();
        assert_eq!(c.s_per_chunk, 0.0);
        // A step of one chunk and one of 30 cost the same without it, 29 chunk costs apart with.
        let (one, thirty) = (work(1e9, 1e9, 1.0), work(1e9, 1e9, 30.0));
        assert_eq!(c.step_s(&one), c.step_s(&thirty));
        let gpu = Calibration {
            s_per_chunk: 0.01,
            ..c
        };
        assert!((gpu.step_s(&thirty) - gpu.step_s(&one) - 0.29).abs() < 1e-12);
    }
}
