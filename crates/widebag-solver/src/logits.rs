//! The full softmax's logits chosen by memory and by time: under the throughput objective with
//! `model.logits` unpinned, each form that runs here is priced at the chosen batch and
//! optimizers — made again in the backward pass (`recompute`: one output product more, one
//! chunk's logits at a time), kept from the forward pass (`keep`: every chunk's logits alive
//! between the passes), or formed tile by tile inside widebag's CubeCL kernels (`tiled`: no
//! logits written; where the config runs the kernels on a device of its own and the
//! calibration measured their rate) — and the fastest that fits is taken, ties to the
//! configured form.

use widebag_config::{Config, GpuKernels, Logits, Objective};

use crate::estimate::{Estimator, Variant};
use crate::problem::Problem;
use crate::remedy::bands_of;
use crate::report::{LogitsChoice, LogitsOption, Plan};

/// The forms `config` can run on the problem's device: `tiled` only with widebag's CubeCL
/// kernels on a device of its own whose calibration measured their products' rate (a form the
/// model cannot price is not chosen by time).
fn forms(problem: &Problem, config: &Config) -> Vec<Logits> {
    let measured_kernels = problem
        .calibration
        .is_some_and(|c| c.s_per_cube_gflop.is_some());
    let tiles = config.train.gpu_kernels == GpuKernels::Cubecl
        && !problem.device.host_memory
        && measured_kernels;
    [Logits::Recompute, Logits::Keep, Logits::Tiled]
        .into_iter()
        .filter(|&l| l != Logits::Tiled || tiles)
        .filter(|&l| {
            let mut c = config.clone();
            c.model.logits = l;
            widebag_config::validate(&c).is_ok()
        })
        .collect()
}

/// The logits' form for the fitting `plan` of `config` (its batch and optimizers), with the
/// config that takes it; `None` unless the objective is throughput, the key is unpinned and
/// the forms differ in what the ledger or the throughput model predicts.
pub(crate) fn choose(
    problem: &Problem,
    est: &Estimator,
    plan: &Plan,
    config: &Config,
) -> Option<(LogitsChoice, Config)> {
    if problem.config.plan.objective != Objective::Throughput || problem.pins.logits || !plan.fits {
        return None;
    }
    let (batch, t, d) = (plan.chosen.batch_size, plan.chosen.table, plan.chosen.dense);
    let options: Vec<(LogitsOption, Config)> = forms(problem, config)
        .into_iter()
        .map(|logits| {
            let mut c = config.clone();
            c.model.logits = logits;
            let bands = bands_of(&c, problem.bands);
            let v = Variant {
                config: &c,
                bands: &bands,
            };
            let candidate = est.candidate_with(v, batch, t, d);
            let option = LogitsOption {
                logits,
                fits: candidate.fits,
                predicted_peak_bytes: candidate.predicted_peak_bytes,
                predicted_examples_per_s: candidate.predicted_examples_per_s,
            };
            (option, c)
        })
        .collect();
    let differ = options.windows(2).any(|w| {
        let (a, b) = (&w[0].0, &w[1].0);
        a.predicted_peak_bytes != b.predicted_peak_bytes
            || a.predicted_examples_per_s != b.predicted_examples_per_s
    });
    if !differ {
        return None;
    }
    let configured = config.model.logits;
    let mut best = options.iter().position(|(o, _)| o.logits == configured)?;
    for (i, (o, _)) in options.iter().enumerate() {
        let b = &options[best].0;
        if (o.fits, o.predicted_examples_per_s) > (b.fits, b.predicted_examples_per_s) {
            best = i;
        }
    }
    let chosen = options[best].clone();
    let choice = LogitsChoice {
        chosen: chosen.0.logits,
        configured,
        options: options.into_iter().map(|(o, _)| o).collect(),
    };
    Some((choice, chosen.1))
}

#[cfg(test)]
mod tests {
    use widebag_config::bands::ModelBands;
    use widebag_ledger::step::DeviceFacts;

    use super::*;
    use crate::problem::Pins;
    use crate::solve::solve;
    use crate::solve::tests::{config, sample};
    use crate::throughput::Calibration;

    const GPU: DeviceFacts = DeviceFacts {
        max_buffer_bytes: 1 << 30,
        alignment_bytes: 256,
        host_threads: 0,
        bf16: true,
        host_memory: false,
    };

    /// The plan under the throughput objective with `calibration`, in `budget` bytes, every
    /// layout remedy and the optimizers pinned (the logits' form alone free).
    fn planned(c: &Config, calibration: &Calibration, budget: u64, pins: Pins) -> Plan {
        let rows = sample(c);
        let bands = ModelBands::resolve(c).unwrap();
        solve(&Problem {
            config: c,
            bands: &bands,
            device: GPU,
            budget_bytes: budget,
            sample: &rows,
            pins,
            calibration: Some(calibration),
            ranks: 1,
        })
        .unwrap()
    }

    /// A GPU-like model: f32 products at 0.1 ms a GFLOP, the kernels' at `cube_ms` (`None`:
    /// never measured).
    fn gpu(cube_ms: Option<f64>) -> Calibration {
        Calibration {
            overhead_s: 0.002,
            s_per_gflop: 1e-4,
            s_per_gb: 1e-3,
            s_per_chunk: 1e-3,
            s_per_half_gflop: None,
            s_per_cube_gflop: cube_ms.map(|ms| ms * 1e-3),
            measured_on: "test".to_string(),
        }
    }

    #[test]
    fn the_fastest_form_that_fits_is_taken_and_tiles_only_where_measured() {
        let c = config(&[
            "plan.objective=\"throughput\"",
            "train.gpu_kernels=\"cubecl\"",
            "plan.max_batch=256",
            // Four class chunks: kept, three chunks' logits wait for the backward pass.
            "model.class_chunk=500",
        ]);
        let pins = Pins {
            table: true,
            dense: true,
            class_chunk: true,
            checkpointing: true,
            placement: true,
            table_dtype: true,
            state_dtype: true,
            input_cutoffs: true,
            output_bands: true,
            ..Pins::default()
        };
        let big = 4 << 30;
        let chosen = |p: &Plan| p.logits.as_ref().map(|l| l.chosen);
        // The kernels' products cheaper than burn's: tiled, and the plan applies it.
        let cheap = planned(&c, &gpu(Some(1e-5)), big, pins);
        assert_eq!(chosen(&cheap), Some(Logits::Tiled), "{:?}", cheap.logits);
        assert_eq!(cheap.apply_to(&c).model.logits, Logits::Tiled);
        // Dearer: the logits kept (one product fewer), with the bytes to keep them.
        let dear = planned(&c, &gpu(Some(1.0)), big, pins);
        assert_eq!(chosen(&dear), Some(Logits::Keep), "{:?}", dear.logits);
        let options = &dear.logits.as_ref().unwrap().options;
        let peak = |l: Logits| {
            let o = options.iter().find(|o| o.logits == l).unwrap();
            o.predicted_peak_bytes
        };
        assert!(peak(Logits::Keep) > peak(Logits::Recompute));
        // Never measured: no tiles offered.
        let unmeasured = planned(&c, &gpu(None), big, pins);
        let forms: Vec<Logits> = unmeasured
            .logits
            .as_ref()
            .unwrap()
            .options
            .iter()
            .map(|o| o.logits)
            .collect();
        assert_eq!(forms, vec![Logits::Recompute, Logits::Keep]);
        // Pinned: the configured form, no choice.
        let pinned = Pins {
            logits: true,
            ..pins
        };
        assert_eq!(planned(&c, &gpu(Some(1e-5)), big, pinned).logits, None);
        // Where keeping does not fit at the chosen batch: made again.
        let tight = planned(
            &c,
            &gpu(Some(1.0)),
            peak(Logits::Recompute) * 21 / 20 + (1 << 20),
            pins,
        );
        let choice = tight.logits.as_ref().unwrap();
        assert_eq!(choice.chosen, Logits::Recompute, "{choice:?}");
        assert!(
            choice
                .options
                .iter()
                .any(|o| o.logits == Logits::Keep && !o.fits)
        );
    }
}
