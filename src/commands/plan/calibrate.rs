//! `plan --calibrate`: measures a fixed set of runs on the device and fits the throughput model
//! (`--objective throughput`) to their step times.

use anyhow::Context;
use serde::Serialize;
use widebag_model::Compute;
use widebag_solver::Calibration;

use crate::args::DeviceArgs;
use crate::commands::explain::grid::grid_base;
use crate::failure::{Failure, Outcome};
use crate::preflight::{check_fits, device_facts, open_compute, predict};
use crate::request::{Calibrate, grid_point};

/// The runs `--calibrate` measures (over [`grid_base`]): both layouts, three batch sizes, two
/// widths and three optimizer pairs, so overhead, matmul work and optimizer traffic vary
/// independently; then the sparse layout's 8,000 classes at batch 256 in 4 and 16 class chunks,
/// so the cost of a chunk does too; with `half` (a device whose tensors take f16: not
/// flex's host kernels), both layouts with f16 output products, for their own rate; and with
/// `kernels` (wgpu), both layouts on widebag's CubeCL kernels (`train.gpu_kernels = "cubecl"`),
/// for the rate of their fused step's product, and the sparse layout with their tiled logits. `scale` multiplies every width, class count, class
/// chunk, dim and hidden size (a GPU's runs near the scale it plans, `plan --calibrate --scale`).
pub fn calibration_points(half: bool, kernels: bool, scale: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let pairs = [
        ("sgd", "sgd"),
        ("adam", "adam"),
        ("rowwise_adagrad", "momentum"),
    ];
    let mut i = 0;
    for layout in ["sparse", "dense"] {
        for width in [2000 * scale, 8000 * scale] {
            for batch in [64, 256, 1024] {
                if layout == "dense" && width == 8000 * scale && batch == 1024 {
                    continue;
                }
                let (t, d) = pairs[i % pairs.len()];
                i += 1;
                out.push(vec![
                    format!("model.layout=\"{layout}\""),
                    format!("data.width={width}"),
                    format!("data.n_classes={width}"),
                    format!("train.batch_size={batch}"),
                    format!("optim.table=\"{t}\""),
                    format!("optim.dense=\"{d}\""),
                ]);
            }
        }
    }
    let wide = 8000 * scale;
    for chunk in [2000 * scale, 500 * scale] {
        out.push(vec![
            "model.layout=\"sparse\"".to_string(),
            format!("data.width={wide}"),
            format!("data.n_classes={wide}"),
            "train.batch_size=256".to_string(),
            "optim.table=\"adam\"".to_string(),
            "optim.dense=\"adam\"".to_string(),
            format!("model.class_chunk={chunk}"),
        ]);
    }
    // Each product kind with a rate of its own: three runs, both layouts, 8,000 classes.
    let kinds = [
        (half, "model.output_precision=\"f16\""),
        (kernels, "train.gpu_kernels=\"cubecl\""),
    ];
    for (_, set) in kinds.into_iter().filter(|(on, _)| *on) {
        for (layout, batch) in [("sparse", 256), ("sparse", 1024), ("dense", 256)] {
            out.push(vec![
                format!("model.layout=\"{layout}\""),
                format!("data.width={wide}"),
                format!("data.n_classes={wide}"),
                format!("train.batch_size={batch}"),
                "optim.table=\"adam\"".to_string(),
                "optim.dense=\"adam\"".to_string(),
                set.to_string(),
            ]);
        }
    }
    // The CubeCL kernels' tiled logits (`model.logits = "tiled"`): their products in both
    // passes at the kernels' rate, the sparse layout's two batches.
    if kernels {
        for batch in [256, 1024] {
            out.push(vec![
                "model.layout=\"sparse\"".to_string(),
                format!("data.width={wide}"),
                format!("data.n_classes={wide}"),
                format!("train.batch_size={batch}"),
                "optim.table=\"adam\"".to_string(),
                "optim.dense=\"adam\"".to_string(),
                "train.gpu_kernels=\"cubecl\"".to_string(),
                "model.logits=\"tiled\"".to_string(),
            ]);
        }
    }
    // grid_base's dim (32) and hidden size (64), scaled.
    if scale > 1 {
        let sizes = [
            format!("model.dim={}", 32 * scale),
            format!("model.hidden=[{}]", 64 * scale),
        ];
        for run in &mut out {
            run.extend(sizes.iter().cloned());
        }
    }
    out
}

/// One calibration run: its work, and its measured and fitted seconds per step.
#[derive(Clone, Debug, Serialize)]
pub struct CalibrationRow {
    pub overrides: Vec<String>,
    pub work: widebag_solver::StepWork,
    pub measured_step_s: f64,
    pub fitted_step_s: f64,
}

/// Measures the calibration runs (`steps` steps each; the first, which compiles kernels, is not
/// timed) and fits the throughput model to them.
fn calibrate(
    compute: &Compute,
    (steps, scale): (usize, usize),
    device: &DeviceArgs,
    mut progress: impl FnMut(&CalibrationRow),
) -> Result<(Calibration, Vec<CalibrationRow>), Failure> {
    let mut rows = Vec::new();
    let half = widebag_model::device::runs_f16_products(compute);
    let kernels = compute.backend == widebag_model::device::BackendKind::Wgpu;
    for overrides in calibration_points(half, kernels, scale) {
        let mut all = grid_base();
        all.extend(overrides.iter().cloned());
        all.push(format!("train.steps={}", steps.max(3)));
        let config = grid_point(&all, device)?;
        let measured = || -> anyhow::Result<CalibrationRow> {
            let prepared =
                widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)?;
            let (spec, ledger) = predict(&prepared, device_facts(compute))?;
            check_fits(&ledger, &spec)?;
            let summary = widebag_model::train(
                prepared,
                compute,
                &widebag_collective::local::Local,
                widebag_model::RunOptions::default(),
                |_| {},
            )?;
            Ok(CalibrationRow {
                overrides: overrides.clone(),
                work: widebag_solver::StepWork::of(&spec),
                measured_step_s: summary.batch_size as f64 / summary.examples_per_s.max(1e-12),
                fitted_step_s: 0.0,
            })
        };
        let row = measured().map_err(Failure::run)?;
        progress(&row);
        rows.push(row);
    }
    let samples: Vec<_> = rows.iter().map(|r| (r.work, r.measured_step_s)).collect();
    let calibration = Calibration::fit(&samples, compute.adapter.clone())
        .context("the calibration runs do not determine the model")
        .map_err(Failure::run)?;
    for r in &mut rows {
        r.fitted_step_s = calibration.step_s(&r.work);
    }
    Ok((calibration, rows))
}

/// Runs the calibration, prints each run and the fitted coefficients (JSON), and writes them to
/// `--out` when given.
pub fn run_calibrate(req: &Calibrate) -> Outcome {
    let config = grid_point(&[], &req.device)?;
    let compute = open_compute(config.train.device)?;
    let steps_scale = (req.steps.max(6), req.scale);
    let (calibration, rows) = calibrate(&compute, steps_scale, &req.device, |r| {
        eprintln!(
            "widebag: calibrate {}: {:.4} s/step",
            r.overrides.join(" "),
            r.measured_step_s
        )
    })?;
    for r in &rows {
        println!(
            "{:<110} measured {:>8.4} s/step  fitted {:>8.4}",
            r.overrides.join(" "),
            r.measured_step_s,
            r.fitted_step_s
        );
    }
    let text = serde_json::to_string_pretty(&calibration).expect("calibration serialises");
    println!("{text}");
    if let Some(path) = &req.out {
        std::fs::write(path, &text)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::run)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::calibration_points;

    #[test]
    fn half_kernel_and_tiled_runs_come_after_the_thirteen_where_the_device_takes_them() {
        assert_eq!(calibration_points(false, false, 1).len(), 13);
        let all = calibration_points(true, true, 1);
        assert_eq!(all.len(), 21);
        let with = |runs: &[Vec<String>], set: &str| {
            runs.iter()
                .filter(|r| r.iter().any(|s| s.contains(set)))
                .count()
        };
        assert_eq!(with(&all[13..16], "output_precision=\"f16\""), 3);
        assert_eq!(with(&all[16..], "gpu_kernels=\"cubecl\""), 5);
        assert_eq!(with(&all[19..], "logits=\"tiled\""), 2);
        assert_eq!(with(&calibration_points(false, true, 1), "f16"), 0);
    }

    #[test]
    fn a_scaled_calibration_runs_the_same_points_wider_and_deeper() {
        let (one, eight) = (
            calibration_points(true, true, 1),
            calibration_points(true, true, 8),
        );
        assert_eq!(one.len(), eight.len());
        for (a, b) in one.iter().zip(&eight) {
            assert!(!a.iter().any(|s| s.starts_with("model.dim")), "{a:?}");
            assert!(b.contains(&"model.dim=256".to_string()), "{b:?}");
            assert!(b.contains(&"model.hidden=[512]".to_string()), "{b:?}");
            for key in ["data.width=", "data.n_classes=", "model.class_chunk="] {
                let value = |run: &[String]| -> Option<usize> {
                    run.iter()
                        .find_map(|s| s.strip_prefix(key))
                        .map(|v| v.parse().unwrap())
                };
                assert_eq!(value(a).map(|v| v * 8), value(b), "{key}: {a:?} {b:?}");
            }
        }
    }
}
