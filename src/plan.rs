//! `widebag plan`: the budget solver on a configured run (the batch size and optimizers that fit
//! a memory budget, from the ledger alone), its report and JSON, `--verify` (run the plan and
//! check the measured peak) and `--search` (the ground truth: bisect the batch on measured peaks).

use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use widebag_config::units::{format_bytes, parse_bytes};
use widebag_config::{Config, DenseOptim, Layout, Prepared, TableOptim};
use widebag_ledger::step::DeviceFacts;
use widebag_model::Compute;
use widebag_solver::{Calibration, Pins, Plan, Problem, RowSample};

use crate::explain;

/// Where the budget came from.
#[derive(Clone, Debug, Serialize)]
pub struct Budget {
    pub bytes: u64,
    /// `--budget`, `plan.budget`, or the device's memory minus the reserve.
    pub source: String,
}

/// The budget: the flag, else `plan.budget`, else the device's memory minus the documented
/// reserve; an error naming the flag when none of those exists.
pub fn budget(
    flag: Option<&str>,
    config: &Config,
    device_memory_bytes: Option<u64>,
) -> anyhow::Result<Budget> {
    if let Some(text) = flag {
        let bytes = parse_bytes(text).map_err(|e| anyhow::anyhow!("--budget: {e}"))?;
        return Ok(Budget {
            bytes,
            source: format!("--budget {text}"),
        });
    }
    if let Some(text) = &config.plan.budget {
        let bytes = parse_bytes(text).map_err(|e| anyhow::anyhow!("plan.budget: {e}"))?;
        return Ok(Budget {
            bytes,
            source: format!("plan.budget = \"{text}\""),
        });
    }
    match (
        device_memory_bytes,
        widebag_solver::default_budget_bytes(device_memory_bytes),
    ) {
        (Some(memory), Some(bytes)) => Ok(Budget {
            bytes,
            source: format!(
                "device memory {} minus the reserve {}",
                format_bytes(memory),
                format_bytes(widebag_solver::reserve_bytes(memory))
            ),
        }),
        _ => anyhow::bail!(
            "no budget: this device does not report its memory (wgpu's WGSL path cannot read a \
             GPU's heap size); pass --budget (e.g. --budget 8GiB) or set plan.budget"
        ),
    }
}

/// The knobs pinned: `plan.pin`, `--pin` flags, and knob keys given with `--set`.
pub fn pins(config: &Config, overrides: &[String], flags: &[String]) -> anyhow::Result<Pins> {
    for key in flags {
        if !widebag_config::PLAN_KNOBS.contains(&key.as_str()) {
            anyhow::bail!(
                "--pin {key}: not a knob (use {})",
                widebag_config::PLAN_KNOBS.join(", ")
            );
        }
    }
    let set_keys = overrides.iter().filter_map(|o| o.split('=').next());
    Ok(Pins::from_keys(
        config
            .plan
            .pin
            .iter()
            .map(String::as_str)
            .chain(flags.iter().map(String::as_str))
            .chain(set_keys.map(str::trim)),
    ))
}

/// The device's facts: read from the opened device, or given (`--max-buffer`, `--alignment`) to
/// plan for a device this machine does not have.
pub fn device_facts(
    compute: Option<&Compute>,
    max_buffer: Option<&str>,
    alignment_bytes: Option<u64>,
    config: &Config,
) -> anyhow::Result<DeviceFacts> {
    let mut facts = match compute {
        Some(c) => explain::device_facts(c),
        None => DeviceFacts {
            max_buffer_bytes: u64::MAX,
            alignment_bytes: 256,
        },
    };
    if let Some(text) = max_buffer {
        facts.max_buffer_bytes =
            parse_bytes(text).map_err(|e| anyhow::anyhow!("--max-buffer: {e}"))?;
    }
    if let Some(a) = alignment_bytes {
        anyhow::ensure!(a >= 1, "--alignment must be at least 1");
        facts.alignment_bytes = a;
    }
    let cap = config.model.max_buffer_mib << 20;
    if cap > 0 {
        facts.max_buffer_bytes = facts.max_buffer_bytes.min(cap);
    }
    Ok(facts)
}

/// The batches the solver plans with, and the largest batch it may choose.
pub fn sample(prepared: &Prepared) -> anyhow::Result<RowSample> {
    let c = &prepared.config;
    // A pinned batch may lie above plan.max_batch.
    let largest = c.plan.max_batch.max(c.train.batch_size);
    RowSample::collect(
        &prepared.batches,
        c.data.width,
        largest,
        explain::SAMPLED_BATCHES,
    )
    .context("sampling batches for the solver")
}

/// Caps `plan.max_batch` at a data file's row count (a batch cannot hold more rows).
pub fn cap_to_data(prepared: &mut Prepared) -> Option<String> {
    let rows = prepared.data.as_ref()?.rows;
    let c = &mut prepared.config;
    if c.plan.max_batch > rows {
        let note = format!(
            "plan.max_batch {} capped at the data's {rows} rows",
            c.plan.max_batch
        );
        c.plan.max_batch = rows;
        c.plan.min_batch = c.plan.min_batch.min(rows);
        return Some(note);
    }
    None
}

/// Solves, timing the solver alone (sampling the data is not planning).
pub fn solve(
    config: &Config,
    device: DeviceFacts,
    budget_bytes: u64,
    rows: &RowSample,
    pins: Pins,
    calibration: &Calibration,
) -> anyhow::Result<(Plan, f64)> {
    let started = Instant::now();
    let plan = widebag_solver::solve(&Problem {
        config,
        device,
        budget_bytes,
        sample: rows,
        pins,
        calibration,
    })?;
    Ok((plan, started.elapsed().as_secs_f64() * 1e3))
}

/// The config with the plan's choices applied.
pub fn apply(config: &Config, plan: &Plan) -> Config {
    let mut c = config.clone();
    c.train.batch_size = plan.chosen.batch_size;
    c.optim.table = plan.chosen.table;
    c.optim.dense = plan.chosen.dense;
    c
}

/// The optimizers as JSON reports them.
#[derive(Clone, Debug, Serialize)]
pub struct Optimizers {
    /// `null` in the dense layout (no table).
    pub table: Option<TableOptim>,
    pub dense: DenseOptim,
}

/// `--verify`: the plan run on the device.
#[derive(Clone, Debug, Serialize)]
pub struct Verify {
    pub steps: usize,
    pub predicted_peak_bytes: u64,
    pub measured_peak_bytes: u64,
    pub measured_reserved_peak_bytes: Option<u64>,
    pub under_budget: bool,
}

/// One real run of `--search`.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub batch_size: usize,
    /// `None`: refused before running (a tensor over the device's largest buffer).
    pub measured_peak_bytes: Option<u64>,
    pub runs_under_budget: bool,
}

/// `--search`: the largest batch that ran under the budget, by bisection on measured peaks.
#[derive(Clone, Debug, Serialize)]
pub struct Search {
    /// The largest batch measured under the budget (`None`: not even the smallest).
    pub batch_size: Option<usize>,
    /// The smallest batch measured over it (`None`: the largest allowed ran under it).
    pub first_over: Option<usize>,
    pub table: TableOptim,
    pub dense: DenseOptim,
    pub probes: Vec<Probe>,
    /// The analytic plan's batch over the search's, in %.
    pub plan_vs_search_pct: Option<f64>,
}

/// What `plan --json` prints. The top-level keys are the plan's headline; `plan` holds the
/// runner-ups and suggestions. Without `--verify`/`--search` it is deterministic.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub fits: bool,
    pub batch_size: usize,
    pub optimizer: Optimizers,
    pub predicted_peak_bytes: u64,
    pub budget_bytes: u64,
    pub budget_source: String,
    pub slack_bytes: u64,
    pub layout: Layout,
    pub device: DeviceFacts,
    pub plan: Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<Search>,
}

impl Report {
    pub fn new(plan: Plan, budget: &Budget, device: DeviceFacts) -> Self {
        Self {
            fits: plan.fits,
            batch_size: plan.chosen.batch_size,
            optimizer: Optimizers {
                table: (plan.layout == Layout::Sparse).then_some(plan.chosen.table),
                dense: plan.chosen.dense,
            },
            predicted_peak_bytes: plan.chosen.predicted_peak_bytes,
            budget_bytes: plan.budget_bytes,
            budget_source: budget.source.clone(),
            slack_bytes: plan.slack_bytes,
            layout: plan.layout,
            device,
            plan,
            verify: None,
            search: None,
        }
    }
}

fn optimizers(layout: Layout, t: TableOptim, d: DenseOptim) -> String {
    match layout {
        Layout::Sparse => format!("table {} + dense {}", t.name(), d.name()),
        Layout::Dense => format!("dense {}", d.name()),
    }
}

/// The plan for a terminal.
pub fn print(r: &Report, planned_ms: f64) {
    let p = &r.plan;
    let c = &p.chosen;
    if p.fits {
        println!(
            "widebag plan: batch {}, {} — predicted peak {} of a {} budget",
            c.batch_size,
            optimizers(p.layout, c.table, c.dense),
            format_bytes(c.predicted_peak_bytes),
            format_bytes(p.budget_bytes)
        );
    } else {
        println!(
            "widebag plan: does not fit — the cheapest run ({}, batch {}) needs {} of a {} budget",
            optimizers(p.layout, c.table, c.dense),
            c.batch_size,
            format_bytes(c.predicted_peak_bytes),
            format_bytes(p.budget_bytes)
        );
    }
    println!(
        "  budget      {} ({}); {} kept free as slack",
        format_bytes(p.budget_bytes),
        r.budget_source,
        format_bytes(p.slack_bytes)
    );
    println!(
        "  device      largest buffer {}, alignment {} B",
        if r.device.max_buffer_bytes == u64::MAX {
            "unlimited".to_string()
        } else {
            format_bytes(r.device.max_buffer_bytes)
        },
        r.device.alignment_bytes
    );
    println!(
        "  search      objective {}, batch {}..={}, pinned: {}",
        p.objective.name(),
        p.min_batch,
        p.max_batch,
        if p.pinned.is_empty() {
            "nothing".to_string()
        } else {
            p.pinned.join(", ")
        }
    );
    println!("  why         {}", c.verdict);
    println!(
        "  peak        {} at {} (largest tensor {})",
        format_bytes(c.predicted_peak_bytes),
        c.peak_point.name(),
        format_bytes(c.largest_allocation_bytes)
    );
    for (cat, bytes) in &c.categories {
        if *bytes > 0 {
            println!("    {cat:<22} {:>12}", format_bytes(*bytes));
        }
    }
    if !p.runner_ups.is_empty() {
        println!("  runner-ups");
        println!(
            "    {:>6}  {:<38} {:>11} {:>11} {:>11} {:>11}  verdict",
            "batch", "optimizers", "peak", "parameters", "opt. state", "activations"
        );
        for u in &p.runner_ups {
            let cat = |k: &str| format_bytes(u.categories.get(k).copied().unwrap_or(0));
            println!(
                "    {:>6}  {:<38} {:>11} {:>11} {:>11} {:>11}  {}",
                u.batch_size,
                optimizers(p.layout, u.table, u.dense),
                format_bytes(u.predicted_peak_bytes),
                cat("parameters"),
                cat("optimizer_state"),
                cat("activations"),
                u.verdict
            );
        }
    }
    if !p.suggestions.is_empty() {
        println!("  smallest changes that fit");
        for (i, s) in p.suggestions.iter().enumerate() {
            println!("    {}. {}", i + 1, s.text);
        }
    }
    if let Some(v) = &r.verify {
        println!(
            "  verify      {} steps: measured peak {} (predicted {}) — {}",
            v.steps,
            format_bytes(v.measured_peak_bytes),
            format_bytes(v.predicted_peak_bytes),
            if v.under_budget {
                "under the budget"
            } else {
                "OVER the budget"
            }
        );
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
        println!(
            "  search      largest batch measured under the budget: {} (first over: {}); plan/search {}; probes {}",
            s.batch_size.map_or("none".into(), |b| b.to_string()),
            s.first_over.map_or("none".into(), |b| b.to_string()),
            s.plan_vs_search_pct
                .map_or("-".into(), |x| format!("{x:.1}%")),
            probes.join(" ")
        );
    }
    println!(
        "  planned in {planned_ms:.1} ms ({} ledger evaluations)",
        p.evaluations
    );
}

/// The measured peak (bytes in use at the step's readable points, after a warm-up step) of
/// `config` at `batch_size`, or `None` when the step is refused for the buffer limit.
fn measured_peak(
    prepared: &Prepared,
    config: &Config,
    compute: &Compute,
    steps: usize,
) -> anyhow::Result<Option<(u64, Option<u64>)>> {
    let probe = Prepared {
        config: config.clone(),
        batches: prepared.batches.clone(),
        data: prepared.data.clone(),
        warnings: Vec::new(),
        eval: Vec::new(),
        bands: prepared.bands.clone(),
    };
    let (spec, ledger) = explain::predict(&probe, compute)?;
    if explain::check_fits(&ledger, &spec).is_err() {
        return Ok(None);
    }
    let summary = explain::measure(probe, compute, steps)?;
    let in_use = summary
        .peak_in_use_bytes
        .context("the backend reports no allocator counters: --verify and --search need wgpu")?;
    Ok(Some((in_use, summary.peak_reserved_bytes)))
}

/// Runs the plan for `steps` steps and checks the measured peak against the budget.
pub fn verify(
    prepared: &Prepared,
    plan: &Plan,
    compute: &Compute,
    steps: usize,
) -> anyhow::Result<Verify> {
    let config = apply(&prepared.config, plan);
    let (measured, reserved) = measured_peak(prepared, &config, compute, steps)?
        .context("the plan's step has a tensor over the device's largest buffer")?;
    Ok(Verify {
        steps: steps.max(2),
        predicted_peak_bytes: plan.chosen.predicted_peak_bytes,
        measured_peak_bytes: measured,
        measured_reserved_peak_bytes: reserved,
        under_budget: measured <= plan.budget_bytes,
    })
}

/// The ground truth: doubles the batch from `plan.min_batch` until a run's measured peak exceeds
/// the budget (or `plan.max_batch` runs under it), then bisects until the bracket is within
/// `tolerance_pct` of the batch (one row at most when 0). Uses the plan's optimizers.
pub fn search(
    prepared: &Prepared,
    plan: &Plan,
    compute: &Compute,
    steps: usize,
    tolerance_pct: f64,
    mut progress: impl FnMut(&Probe),
) -> anyhow::Result<Search> {
    let (table, dense) = (plan.chosen.table, plan.chosen.dense);
    let mut probes = Vec::new();
    let mut run = |batch: usize| -> anyhow::Result<bool> {
        let mut config = prepared.config.clone();
        config.train.batch_size = batch;
        config.optim.table = table;
        config.optim.dense = dense;
        let measured = measured_peak(prepared, &config, compute, steps)?;
        let probe = Probe {
            batch_size: batch,
            measured_peak_bytes: measured.map(|m| m.0),
            runs_under_budget: measured.is_some_and(|m| m.0 <= plan.budget_bytes),
        };
        progress(&probe);
        let ok = probe.runs_under_budget;
        probes.push(probe);
        Ok(ok)
    };
    let (lo, hi) = (plan.min_batch, plan.max_batch);
    let mut good: Option<usize> = None;
    let mut bad: Option<usize> = None;
    let mut b = lo;
    loop {
        if run(b)? {
            good = Some(b);
            if b == hi {
                break;
            }
            b = (b * 2).min(hi);
        } else {
            bad = Some(b);
            break;
        }
    }
    if let (Some(mut g), Some(mut x)) = (good, bad) {
        while x - g > 1 && (x - g) as f64 > g as f64 * tolerance_pct / 100.0 {
            let mid = g + (x - g) / 2;
            if run(mid)? {
                g = mid;
            } else {
                x = mid;
            }
        }
        good = Some(g);
        bad = Some(x);
    }
    Ok(Search {
        batch_size: good,
        first_over: bad,
        table,
        dense,
        plan_vs_search_pct: good
            .filter(|_| plan.fits)
            .map(|g| plan.chosen.batch_size as f64 / g as f64 * 100.0),
        probes,
    })
}

/// One model of the solver's grid and the budgets it is planned for.
pub struct GridModel {
    pub name: String,
    pub overrides: Vec<String>,
    pub budgets_bytes: Vec<u64>,
}

/// The accuracy grid of the solver: per model, its overrides and budgets.
///
/// `small` (CI and README): a sparse and a dense-layout model of width 1,000–2,000, five budgets
/// each, batches 16..=1024. (Wider models work the same way but each search probe costs tens of
/// seconds of lavapipe time; the grid is kept where CI can afford it.)
pub fn grid_points(name: &str) -> anyhow::Result<Vec<GridModel>> {
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mib = |v: &[u64]| v.iter().map(|m| m << 20).collect::<Vec<u64>>();
    Ok(match name {
        "small" => vec![
            GridModel {
                name: "sparse 2000→16→[32]→2000".to_string(),
                overrides: set(&[
                    "data.width=2000",
                    "data.n_classes=2000",
                    "model.dim=16",
                    "model.hidden=[32]",
                    "plan.min_batch=16",
                    "plan.max_batch=1024",
                ]),
                budgets_bytes: mib(&[3, 4, 6, 9, 14]),
            },
            GridModel {
                name: "dense 1000→16→[32]→1000".to_string(),
                overrides: set(&[
                    "model.layout=\"dense\"",
                    "data.width=1000",
                    "data.n_classes=1000",
                    "model.dim=16",
                    "model.hidden=[32]",
                    "plan.min_batch=16",
                    "plan.max_batch=1024",
                ]),
                budgets_bytes: mib(&[2, 3, 5, 7, 10]),
            },
        ],
        other => anyhow::bail!("unknown grid `{other}`: use `small`"),
    })
}

/// The bars: the analytic batch is at least this % of the searched one.
pub const SEARCH_BAR_PCT: f64 = 97.0;
/// Planning (the solver alone) takes under this many milliseconds.
pub const PLANNING_BAR_MS: f64 = 50.0;

/// One finished grid point.
#[derive(Clone, Debug, Serialize)]
pub struct GridRow {
    pub model: String,
    pub budget_bytes: u64,
    pub batch_size: usize,
    pub optimizers: String,
    pub predicted_peak_bytes: u64,
    pub planned_ms: f64,
    /// `None`: the plan did not fit, so nothing was run.
    pub measured_peak_bytes: Option<u64>,
    pub under_budget: bool,
    pub search_batch_size: Option<usize>,
    pub search_first_over: Option<usize>,
    pub plan_vs_search_pct: Option<f64>,
    pub probes: usize,
    /// Every bar met at this point.
    pub pass: bool,
}

impl GridRow {
    pub fn new(model: &str, report: &Report, planned_ms: f64) -> anyhow::Result<Self> {
        let v = report.verify.as_ref();
        let s = report.search.as_ref().context("grid points are searched")?;
        let p = &report.plan.chosen;
        let under_budget = v.is_some_and(|v| v.under_budget);
        let pass = report.fits
            && under_budget
            && planned_ms < PLANNING_BAR_MS
            && s.plan_vs_search_pct.is_some_and(|x| x >= SEARCH_BAR_PCT);
        Ok(Self {
            model: model.to_string(),
            budget_bytes: report.budget_bytes,
            batch_size: p.batch_size,
            optimizers: optimizers(report.layout, p.table, p.dense),
            predicted_peak_bytes: p.predicted_peak_bytes,
            planned_ms,
            measured_peak_bytes: v.map(|v| v.measured_peak_bytes),
            under_budget,
            search_batch_size: s.batch_size,
            search_first_over: s.first_over,
            plan_vs_search_pct: s.plan_vs_search_pct,
            probes: s.probes.len(),
            pass,
        })
    }
}

/// The grid as a Markdown table.
pub fn grid_markdown(rows: &[GridRow], adapter: &str) -> String {
    let mut s = format!(
        "Measured on {adapter}. Plan: the analytic solver; measured: the plan run for two steps \
         (peak bytes in use after a warm-up step); search: the largest batch real runs kept \
         under the budget (bisection to 1%).\n\n| model | budget | plan batch | optimizers | \
         predicted | measured | search batch | plan/search | planning |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} ms |\n",
            r.model,
            format_bytes(r.budget_bytes),
            r.batch_size,
            r.optimizers,
            format_bytes(r.predicted_peak_bytes),
            r.measured_peak_bytes
                .map_or("(does not fit)".into(), format_bytes),
            r.search_batch_size.map_or("none".into(), |b| format!(
                "{b} (< {})",
                r.search_first_over.map_or("-".into(), |x| x.to_string())
            )),
            r.plan_vs_search_pct
                .map_or("-".into(), |x| format!("{x:.1}%")),
            r.planned_ms
        ));
    }
    s
}

/// The runs `--calibrate` measures (over [`explain::grid_base`]): both layouts, three batch
/// sizes, two widths and three optimizer pairs, so overhead, matmul work and optimizer traffic
/// vary independently.
pub fn calibration_points() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let pairs = [
        ("sgd", "sgd"),
        ("adam", "adam"),
        ("rowwise_adagrad", "momentum"),
    ];
    let mut i = 0;
    for layout in ["sparse", "dense"] {
        for width in [2000, 8000] {
            for batch in [64, 256, 1024] {
                if layout == "dense" && width == 8000 && batch == 1024 {
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
pub fn calibrate(
    compute: &Compute,
    steps: usize,
    device_choice: widebag_config::DeviceChoice,
    mut progress: impl FnMut(&CalibrationRow),
) -> anyhow::Result<(Calibration, Vec<CalibrationRow>)> {
    let mut rows = Vec::new();
    for overrides in calibration_points() {
        let mut all = explain::grid_base();
        all.extend(overrides.iter().cloned());
        all.push(format!("train.steps={}", steps.max(3)));
        let mut config = widebag_config::load(None, &all)?;
        config.train.device = device_choice;
        let prepared = widebag_config::open_data(&config)?;
        let (spec, ledger) = explain::predict(&prepared, compute)?;
        explain::check_fits(&ledger, &spec)?;
        let summary = widebag_model::run_training(prepared, compute, |_| {})?;
        let row = CalibrationRow {
            overrides,
            work: widebag_solver::StepWork::of(&spec),
            measured_step_s: summary.batch_size as f64 / summary.examples_per_s.max(1e-12),
            fitted_step_s: 0.0,
        };
        progress(&row);
        rows.push(row);
    }
    let samples: Vec<_> = rows.iter().map(|r| (r.work, r.measured_step_s)).collect();
    let calibration = Calibration::fit(&samples, compute.adapter.clone())
        .context("the calibration runs do not determine the model")?;
    for r in &mut rows {
        r.fitted_step_s = calibration.step_s(&r.work);
    }
    Ok((calibration, rows))
}
