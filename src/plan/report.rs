//! What `plan` reports: the `--json` object (the plan's headline, the solver's plan, and the
//! `--verify`/`--search` results) and its rendering for a terminal.

use std::fmt::Write;

use serde::Serialize;
use widebag_config::units::format_bytes;
use widebag_config::{DenseOptim, Layout, TableOptim};
use widebag_ledger::step::DeviceFacts;
use widebag_solver::{Calibration, Plan};

use super::measured::{Search, Verify};

/// Where the budget came from.
#[derive(Clone, Debug, Serialize)]
pub struct Budget {
    pub bytes: u64,
    /// `--budget`, `plan.budget`, or the device's memory minus the reserve.
    pub source: String,
}

/// The optimizers as JSON reports them.
#[derive(Clone, Debug, Serialize)]
pub struct Optimizers {
    /// `null` in the dense layout (no table).
    pub table: Option<TableOptim>,
    pub dense: DenseOptim,
}

/// What `plan --json` prints. The top-level keys are the plan's headline; `plan` holds the
/// runner-ups and suggestions. Without `--verify`/`--search` it is deterministic.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub fits: bool,
    pub batch_size: usize,
    pub optimizer: Optimizers,
    pub predicted_peak_bytes: u64,
    /// The chosen plan's seconds a step by the device's throughput model (`null`: no model for
    /// this device).
    pub predicted_step_s: Option<f64>,
    pub budget_bytes: u64,
    pub budget_source: String,
    pub slack_bytes: u64,
    pub layout: Layout,
    pub device: DeviceFacts,
    /// The throughput model behind the predicted step times (`null`: none for this device).
    pub calibration: Option<Calibration>,
    pub plan: Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<Search>,
    /// `--host-budget`: the plan's host side against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<super::host::HostCheck>,
}

impl Report {
    pub fn new(
        plan: Plan,
        budget: &Budget,
        device: DeviceFacts,
        calibration: Option<Calibration>,
    ) -> Self {
        Self {
            fits: plan.fits,
            batch_size: plan.chosen.batch_size,
            optimizer: Optimizers {
                table: (plan.layout == Layout::Sparse).then_some(plan.chosen.table),
                dense: plan.chosen.dense,
            },
            predicted_peak_bytes: plan.chosen.predicted_peak_bytes,
            predicted_step_s: calibration.as_ref().map(|_| plan.chosen.predicted_step_s),
            budget_bytes: plan.budget_bytes,
            budget_source: budget.source.clone(),
            slack_bytes: plan.slack_bytes,
            layout: plan.layout,
            device,
            calibration,
            plan,
            verify: None,
            search: None,
            host: None,
        }
    }
}

/// An optimizer pair in words (`table adam + dense sgd`; the dense layout has no table).
pub fn optimizers(layout: Layout, t: TableOptim, d: DenseOptim) -> String {
    match layout {
        Layout::Sparse => format!("table {} + dense {}", t.name(), d.name()),
        Layout::Dense => format!("dense {}", d.name()),
    }
}

/// The plan for a terminal; `planned_ms` is the solver's time.
pub fn render(r: &Report, planned_ms: f64) -> String {
    let mut s = String::new();
    write_plan(&mut s, r).expect("writing to a String");
    if let Some(h) = &r.host {
        h.write(&mut s).expect("writing to a String");
    }
    super::per_rank::write_ranks(&mut s, &r.plan.ranks).expect("writing to a String");
    write_checks(&mut s, r).expect("writing to a String");
    writeln!(
        s,
        "  planned in {planned_ms:.1} ms ({} ledger evaluations)",
        r.plan.evaluations
    )
    .expect("writing to a String");
    s
}

/// The headline, the search range, the chosen peak, the runner-ups and the suggestions.
fn write_plan(out: &mut String, r: &Report) -> std::fmt::Result {
    write_headline(out, r)?;
    write_peak(out, &r.plan)?;
    write_runner_ups(out, &r.plan)?;
    write_remedies(out, &r.plan)?;
    write_logits(out, &r.plan)?;
    write_layouts(out, &r.plan)?;
    write_suggestions(out, &r.plan)
}

/// Whether it fits (at what peak of which budget), the budget's source, the device's buffer
/// limit and what was searched.
fn write_headline(out: &mut String, r: &Report) -> std::fmt::Result {
    let p = &r.plan;
    let c = &p.chosen;
    if p.fits {
        writeln!(
            out,
            "widebag plan: batch {}, {} — predicted peak {} of a {} budget",
            c.batch_size,
            optimizers(p.layout, c.table, c.dense),
            format_bytes(c.predicted_peak_bytes),
            format_bytes(p.budget_bytes)
        )?;
    } else {
        writeln!(
            out,
            "widebag plan: does not fit — the cheapest run ({}, batch {}) needs {} of a {} budget",
            optimizers(p.layout, c.table, c.dense),
            c.batch_size,
            format_bytes(c.predicted_peak_bytes),
            format_bytes(p.budget_bytes)
        )?;
    }
    writeln!(
        out,
        "  budget      {} ({}); {} kept free as slack",
        format_bytes(p.budget_bytes),
        r.budget_source,
        format_bytes(p.slack_bytes)
    )?;
    writeln!(
        out,
        "  device      largest buffer {}, alignment {} B",
        if r.device.max_buffer_bytes == u64::MAX {
            "unlimited".to_string()
        } else {
            format_bytes(r.device.max_buffer_bytes)
        },
        r.device.alignment_bytes
    )?;
    writeln!(
        out,
        "  search      objective {}, batch {}..={}, pinned: {}",
        p.objective.name(),
        p.min_batch,
        p.max_batch,
        if p.pinned.is_empty() {
            "nothing".to_string()
        } else {
            p.pinned.join(", ")
        }
    )?;
    write_time(out, r)
}

/// The chosen plan's predicted step time beside its bytes, and whose throughput model says so.
fn write_time(out: &mut String, r: &Report) -> std::fmt::Result {
    let c = &r.plan.chosen;
    match &r.calibration {
        Some(cal) => writeln!(
            out,
            "  time        predicted {} a step, {} examples/s (throughput model of {})",
            seconds(c.predicted_step_s),
            if c.predicted_examples_per_s < 10.0 {
                format!("{:.2}", c.predicted_examples_per_s)
            } else {
                format!("{:.0}", c.predicted_examples_per_s)
            },
            cal.measured_on
        ),
        None => writeln!(
            out,
            "  time        not predicted: no throughput model for this device (`widebag plan \
             --calibrate --out cal.json` on it, then `--calibration cal.json`)"
        ),
    }
}

/// Why the chosen plan was chosen, and its peak by category.
fn write_peak(out: &mut String, p: &Plan) -> std::fmt::Result {
    let c = &p.chosen;
    writeln!(out, "  why         {}", c.verdict)?;
    writeln!(
        out,
        "  peak        {} at {} (largest tensor {})",
        format_bytes(c.predicted_peak_bytes),
        c.peak_point.name(),
        format_bytes(c.largest_allocation_bytes)
    )?;
    for (cat, bytes) in &c.categories {
        if *bytes > 0 {
            writeln!(out, "    {cat:<22} {:>12}", format_bytes(*bytes))?;
        }
    }
    Ok(())
}

/// `s` seconds as milliseconds below a second, else as seconds.
fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// The runner-ups: the other candidates and why each was not chosen.
fn write_runner_ups(out: &mut String, p: &Plan) -> std::fmt::Result {
    if !p.runner_ups.is_empty() {
        writeln!(out, "  runner-ups")?;
        writeln!(
            out,
            "    {:>6}  {:<38} {:>11} {:>11} {:>11} {:>11} {:>9}  verdict",
            "batch", "optimizers", "peak", "parameters", "opt. state", "activations", "ms/step"
        )?;
        for u in &p.runner_ups {
            let cat = |k: &str| format_bytes(u.categories.get(k).copied().unwrap_or(0));
            // 0: no throughput model for the device (`write_time` says so).
            let step_ms = if u.predicted_step_s > 0.0 {
                format!("{:.1}", u.predicted_step_s * 1e3)
            } else {
                "–".to_string()
            };
            writeln!(
                out,
                "    {:>6}  {:<38} {:>11} {:>11} {:>11} {:>11} {:>9}  {}",
                u.batch_size,
                optimizers(p.layout, u.table, u.dense),
                format_bytes(u.predicted_peak_bytes),
                cat("parameters"),
                cat("optimizer_state"),
                cat("activations"),
                step_ms,
                u.verdict
            )?;
        }
    }
    Ok(())
}

/// The layout remedies taken (or, when nothing fits, tried), with what they saved.
fn write_remedies(out: &mut String, p: &Plan) -> std::fmt::Result {
    if !p.remedies.is_empty() {
        let head = if p.fits {
            "  layout remedies taken (in their order)"
        } else {
            "  layout remedies tried (all of them, still over)"
        };
        writeln!(out, "{head}")?;
        for t in &p.remedies {
            writeln!(
                out,
                "    {} {} → {} (costs {}) saves {}",
                t.key,
                t.from,
                t.to,
                t.cost,
                signed_bytes(t.saves_bytes)
            )?;
            if p.fits {
                writeln!(out, "      measured on the references: {}", t.reference)?;
            }
        }
        if p.fits {
            writeln!(
                out,
                "      (docs/remedies.md: what these remedies cost other data, not a promise for \
                 this data; `widebag frontier` measures it on this data)"
            )?;
        }
    }
    Ok(())
}

/// The full softmax's logits chosen by time, each form weighed with its peak and throughput.
fn write_logits(out: &mut String, p: &Plan) -> std::fmt::Result {
    let Some(choice) = &p.logits else {
        return Ok(());
    };
    writeln!(
        out,
        "  logits      model.logits = \"{}\" (configured \"{}\"), by the throughput model:",
        choice.chosen.name(),
        choice.configured.name()
    )?;
    for o in &choice.options {
        writeln!(
            out,
            "    {:<10} peak {:>11}  {:>10.0} examples/s  {}",
            o.logits.name(),
            format_bytes(o.predicted_peak_bytes),
            o.predicted_examples_per_s,
            match (o.logits == choice.chosen, o.fits) {
                (true, _) => "chosen",
                (false, true) => "fits, slower",
                (false, false) => "does not fit",
            }
        )?;
    }
    Ok(())
}

/// The layouts compared, when there were remedies to compare.
fn write_layouts(out: &mut String, p: &Plan) -> std::fmt::Result {
    if !p.remedies.is_empty() || !p.layouts.iter().all(|l| l.remedies.is_empty()) {
        writeln!(out, "  layouts compared")?;
        for l in &p.layouts {
            let remedies: Vec<&str> = l.remedies.iter().map(|r| r.name()).collect();
            writeln!(
                out,
                "    {:<42} batch {:>6}  {:<38} {:>11}  {}",
                if remedies.is_empty() {
                    "as configured".to_string()
                } else {
                    format!("+ {}", remedies.join(", "))
                },
                l.batch_size,
                optimizers(p.layout, l.table, l.dense),
                format_bytes(l.predicted_peak_bytes),
                l.verdict
            )?;
        }
    }
    Ok(())
}

/// The smallest changes that fit, when nothing does.
fn write_suggestions(out: &mut String, p: &Plan) -> std::fmt::Result {
    if !p.suggestions.is_empty() {
        writeln!(out, "  smallest changes that fit")?;
        for (i, s) in p.suggestions.iter().enumerate() {
            writeln!(out, "    {}. {}", i + 1, s.text)?;
        }
    }
    Ok(())
}

/// Bytes with a sign: a remedy that costs bytes at the chosen plan shows as negative savings.
fn signed_bytes(b: i64) -> String {
    match b {
        b if b < 0 => format!("-{}", format_bytes(b.unsigned_abs())),
        b => format_bytes(b as u64),
    }
}

/// `--verify` and `--search`, when they ran.
fn write_checks(out: &mut String, r: &Report) -> std::fmt::Result {
    if let Some(v) = &r.verify {
        writeln!(
            out,
            "  verify      {} steps: measured peak {} (predicted {}) — {}",
            v.steps,
            format_bytes(v.measured_peak_bytes),
            format_bytes(v.predicted_peak_bytes),
            if v.under_budget {
                "under the budget"
            } else {
                "OVER the budget"
            }
        )?;
    }
    if let Some(s) = &r.search {
        let probes: Vec<String> = s
            .probes
            .iter()
            .map(|p| {
                format!(
                    "{}{}",
                    p.batch_size,
                    if p.runs_under_budget { "✓" } else { "✗" }
                )
            })
            .collect();
        writeln!(
            out,
            "  search      largest batch measured under the budget: {} (first over: {}); \
             plan/search {}; probes {}",
            s.batch_size.map_or("none".into(), |b| b.to_string()),
            s.first_over.map_or("none".into(), |b| b.to_string()),
            s.plan_vs_search_pct
                .map_or("-".into(), |x| format!("{x:.1}%")),
            probes.join(" ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use widebag_config::Config;
    use widebag_prepare::{PrepareOptions, open_data};
    use widebag_solver::Calibration;

    use super::*;
    use crate::plan::planner::make_plan;
    use crate::request::SolverFlags;

    /// The schema's default run (240,000 ids and classes, Adam on both parts) planned for a
    /// device with lavapipe's limits, `pins` kept at the config's values: no device opened,
    /// deterministic.
    fn default_plan(budget: &str, pins: &[&str]) -> Report {
        let mut prepared = open_data(&Config::default(), &PrepareOptions::READ_ONLY).unwrap();
        let bytes = widebag_config::units::parse_bytes(budget).unwrap();
        let flags = SolverFlags {
            budget: Some((budget.to_string(), bytes)),
            pins: pins.iter().map(|p| p.to_string()).collect(),
            max_buffer_bytes: Some(128 << 20),
            alignment_bytes: Some(32),
            ..SolverFlags::with_calibration(Some(Calibration::lavapipe_2core()))
        };
        make_plan(&mut prepared, &flags, &[], None).unwrap().report
    }

    #[test]
    fn a_plan_that_fits_renders_with_its_remedies_and_layouts() {
        expect![[r#"
            widebag plan: batch 4096, table adam + dense adam — predicted peak 401.10 MiB of a 512.00 MiB budget
              budget      512.00 MiB (--budget 512MiB); 5.14 MiB kept free as slack
              device      largest buffer 128.00 MiB, alignment 32 B
              search      objective batch, batch 1..=4096, pinned: nothing
              time        predicted 65.01 s a step, 63 examples/s (throughput model of llvmpipe (LLVM 15.0.6, 256 bits) (Cpu, Vulkan, Mesa 22.3.6 (LLVM 15.0.6)), 2 cores)
              why         the largest batch allowed (plan.max_batch = 4096); the most capable optimizers that fit at it
              peak        401.10 MiB at forward.logits (largest tensor 128.00 MiB)
                activations                5.87 MiB
                allocator_padding              40 B
                batch_buffers            801.30 KiB
                logits                   128.00 MiB
                optimizer_state          177.63 MiB
                parameters                88.81 MiB
                temporaries                     4 B
              runner-ups
                 batch  optimizers                                    peak  parameters  opt. state activations   ms/step  verdict
                  4096  table adam + dense momentum             341.58 MiB   88.81 MiB  118.11 MiB    5.87 MiB   64036.9  fits, less capable than the chosen optimizers
                  4096  table rowwise_adagrad + dense adam      343.42 MiB   88.81 MiB  119.95 MiB    5.87 MiB   64950.4  fits, less capable than the chosen optimizers
                  4096  table adam + dense sgd                  282.06 MiB   88.81 MiB   58.59 MiB    5.87 MiB   63386.3  fits, less capable than the chosen optimizers
                  4096  table rowwise_adagrad + dense momentum  283.90 MiB   88.81 MiB   60.43 MiB    5.87 MiB   63974.6  fits, less capable than the chosen optimizers
                  4096  table momentum + dense adam             371.80 MiB   88.81 MiB  148.33 MiB    5.87 MiB   64965.6  fits, less capable than the chosen optimizers
                  4096  table rowwise_adagrad + dense sgd       224.38 MiB   88.81 MiB  937.50 KiB    5.87 MiB   63324.0  fits, less capable than the chosen optimizers
                  4096  table momentum + dense momentum         312.28 MiB   88.81 MiB   88.81 MiB    5.87 MiB   63989.8  fits, less capable than the chosen optimizers
                  4096  table sgd + dense adam                  342.50 MiB   88.81 MiB  119.03 MiB    5.87 MiB   64934.2  fits, less capable than the chosen optimizers
                  4096  table momentum + dense sgd              252.77 MiB   88.81 MiB   29.30 MiB    5.87 MiB   63339.2  fits, less capable than the chosen optimizers
                  4096  table sgd + dense momentum              282.99 MiB   88.81 MiB   59.52 MiB    5.87 MiB   63958.4  fits, less capable than the chosen optimizers
                  4096  table sgd + dense sgd                   223.47 MiB   88.81 MiB         0 B    5.87 MiB   63307.8  fits, less capable than the chosen optimizers
              planned in 1.5 ms (28 ledger evaluations)
        "#]].assert_eq(&render(&default_plan("512MiB", &[]), 1.5));
    }

    #[test]
    fn a_plan_that_does_not_fit_lists_the_smallest_changes() {
        let pins = [
            "optim.table",
            "optim.dense",
            "model.input_bands.placement",
            "model.input_bands.dtype",
            "optim.state_dtype",
            "model.input_bands.cutoffs",
            "model.output_bands",
        ];
        let pinned = default_plan("256MiB", &pins);
        expect![[r#"
            widebag plan: does not fit — the cheapest run (table adam + dense adam, batch 1) needs 325.97 MiB of a 256.00 MiB budget
              budget      256.00 MiB (--budget 256MiB); 2.58 MiB kept free as slack
              device      largest buffer 128.00 MiB, alignment 32 B
              search      objective batch, batch 1..=4096, pinned: optim.table, optim.dense, model.input_bands.placement, model.input_bands.dtype, optim.state_dtype, model.input_bands.cutoffs, model.output_bands
              time        predicted 4.08 s a step, 0.25 examples/s (throughput model of llvmpipe (LLVM 15.0.6, 256 bits) (Cpu, Vulkan, Mesa 22.3.6 (LLVM 15.0.6)), 2 cores)
              why         nothing fits: even table adam + dense adam at batch 1 needs 325.97 MiB (+ 2.58 MiB slack) of 256.00 MiB
              peak        325.97 MiB at backward.logits (largest tensor 29.30 MiB)
                activations                2.75 KiB
                allocator_padding          2.19 KiB
                batch_buffers                 260 B
                dense_gradients           59.51 MiB
                logits                    14.65 KiB
                optimizer_state          177.63 MiB
                parameters                88.81 MiB
                temporaries                   256 B
              layout remedies tried (all of them, still over)
                model.class_chunk 0 (largest) → 3750 (costs time) saves 920.84 KiB
                model.checkpointing none → mlp (costs time) saves 512 B
              layouts compared
                as configured                              batch      1  table adam + dense adam                 326.87 MiB  nothing fits
                + narrower chunk                           batch      1  table adam + dense adam                 325.97 MiB  nothing fits
              smallest changes that fit
                1. model.input_bands.placement ["device"] → ["host"] frees 87.89 MiB
                2. optim.dense adam → sgd frees 119.04 MiB
                3. model.output_bands none (full softmax) → 35.71 MiB (cutoffs [19985, 79940]) frees 190.43 MiB
                4. model.dim 32 → 5 frees 74.18 MiB
                5. budget 256.00 MiB → 330.00 MiB (adds 74.00 MiB)
              planned in 1.5 ms (65 ledger evaluations)
        "#]].assert_eq(&render(&pinned, 1.5));
    }
}
