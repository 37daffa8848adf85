//! `widebag sweep`: runs every point of a sweep file in turn, each into its own directory (the
//! resolved config, the ledger, the plan, per-step metrics, a summary), resumably, and writes the
//! results as CSV, Markdown and SVG plots.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use widebag_config::sweep::{Sweep, SweepPoint};
use widebag_ledger::{Category, Placement};
use widebag_model::{Compute, MeterMode, RunOptions, run_training_with};

use crate::{explain, plan};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Refused before it started: it does not fit (the ledger's numbers are in `error`).
    Refused,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Refused => "refused",
            Status::Failed => "failed",
        }
    }
}

/// One run's row of the results (also its `summary.json`, which resuming reads back).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRow {
    pub run: String,
    pub status: Status,
    /// Swept key → value.
    pub values: BTreeMap<String, String>,
    pub batch_size: usize,
    /// The ledger's predicted peak (device bytes in use).
    pub predicted_peak_bytes: Option<u64>,
    /// The allocator's peak bytes in use over the run after the first step (every point of the
    /// step read in steps 2 and 3, the phase ends after).
    pub measured_peak_bytes: Option<u64>,
    pub examples_per_s: Option<f64>,
    pub final_loss: Option<f32>,
    /// Ledger category → predicted bytes at the peak.
    pub categories: BTreeMap<String, u64>,
    /// Loss per step.
    pub losses: Vec<f32>,
    pub error: Option<String>,
}

/// A finished run (ok or refused) is skipped on resume; a failed one is run again.
fn finished(dir: &Path) -> Option<RunRow> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let row: RunRow = serde_json::from_str(&text).ok()?;
    (row.status != Status::Failed).then_some(row)
}

fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    std::fs::write(
        path,
        serde_json::to_string_pretty(value).expect("serialises"),
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// Runs one point into `dir`: config, ledger and plan first (refused when it does not fit),
/// then training with one metrics line per step.
fn run_point(point: &SweepPoint, dir: &Path, compute: &Compute) -> anyhow::Result<RunRow> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let config = &point.config;
    std::fs::write(
        dir.join("config.toml"),
        toml::to_string(config).context("serialising the config")?,
    )
    .with_context(|| format!("writing {}", dir.join("config.toml").display()))?;
    let mut row = RunRow {
        run: point.name.clone(),
        status: Status::Refused,
        values: point.values.clone(),
        batch_size: config.train.batch_size,
        predicted_peak_bytes: None,
        measured_peak_bytes: None,
        examples_per_s: None,
        final_loss: None,
        categories: BTreeMap::new(),
        losses: Vec::new(),
        error: None,
    };
    let mut prepared = widebag_config::open_data(config)?;
    let (spec, ledger) = explain::predict(&prepared, compute)?;
    let peak = ledger.peak(Placement::Device);
    row.predicted_peak_bytes = Some(peak.bytes);
    row.categories = ledger
        .categories_at(Placement::Device, peak.point)
        .into_iter()
        .map(|(c, b)| (c.name().to_string(), b))
        .collect();
    let fits = explain::check_fits(&ledger, &spec);
    write_json(
        &dir.join("ledger.json"),
        &explain::report(spec, ledger, compute, None),
    )?;
    if let Err(e) = fits {
        row.error = Some(format!("{e:#}"));
        return Ok(row);
    }
    // The plan with every knob pinned: does this run fit the budget (plan.budget, else the
    // device's memory minus the reserve)?
    let pinned: Vec<String> = widebag_config::PLAN_KNOBS
        .iter()
        .map(|k| k.to_string())
        .collect();
    prepared.config.plan.pin = pinned;
    match plan::budget(None, &prepared.config, compute.memory_bytes) {
        Ok(budget) => {
            let device = plan::device_facts(Some(compute), None, None, &prepared.config)?;
            let rows = plan::sample(&prepared)?;
            let pins = plan::pins(&prepared.config, &[], &[])?;
            let (solved, _) = plan::solve(
                &prepared.config,
                device,
                budget.bytes,
                &rows,
                pins,
                &widebag_solver::Calibration::lavapipe_2core(),
            )?;
            let report = plan::Report::new(solved, &budget, device);
            write_json(&dir.join("plan.json"), &report)?;
            if !report.fits {
                row.error = Some(format!(
                    "does not fit the {} budget: predicted peak {}",
                    widebag_config::units::format_bytes(report.budget_bytes),
                    widebag_config::units::format_bytes(report.predicted_peak_bytes)
                ));
                return Ok(row);
            }
        }
        Err(e) => eprintln!("widebag: {}: no plan ({e:#})", point.name),
    }
    let metrics_path = dir.join("metrics.jsonl");
    let mut metrics = std::io::BufWriter::new(
        std::fs::File::create(&metrics_path)
            .with_context(|| format!("creating {}", metrics_path.display()))?,
    );
    let mut write_error = None;
    // Every point of the step is read in the first three steps (after the first, discarded as
    // warm-up), so the measured peak covers the peaks inside a step; the rest are timed.
    let options = RunOptions {
        meter: MeterMode::PhaseEnds,
        warmup_steps: 1,
        detailed_steps: 3,
    };
    let summary = run_training_with(prepared, compute, options, |s| {
        let line = serde_json::json!({
            "step": s.step,
            "loss": s.loss,
            "step_s": s.step_s,
            "examples_per_s": s.n_rows as f64 / s.step_s.max(1e-12),
            "peak_in_use_bytes": s.peak_in_use_bytes,
        });
        if let Err(e) = writeln!(metrics, "{line}") {
            write_error.get_or_insert(e);
        }
        row.losses.push(s.loss);
    })
    .context("training")?;
    metrics
        .flush()
        .and(write_error.map_or(Ok(()), Err))
        .with_context(|| format!("writing {}", metrics_path.display()))?;
    write_json(&dir.join("run.json"), &summary)?;
    row.status = Status::Ok;
    row.measured_peak_bytes = summary.peak_in_use_bytes;
    row.examples_per_s = Some(summary.examples_per_s);
    row.final_loss = Some(summary.final_loss_mean10);
    Ok(row)
}

/// Runs the sweep into `out` (resuming what is there) and writes the results; returns the rows.
pub fn run(sweep: &Sweep, out: &Path, compute: &Compute) -> anyhow::Result<Vec<RunRow>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut rows = Vec::new();
    let n = sweep.points.len();
    for (i, point) in sweep.points.iter().enumerate() {
        let dir = out.join(&point.name);
        if let Some(row) = finished(&dir) {
            eprintln!(
                "widebag: [{}/{n}] {}: {} (done before, skipped)",
                i + 1,
                point.name,
                row.status.name()
            );
            rows.push(row);
            continue;
        }
        let row = match run_point(point, &dir, compute) {
            Ok(row) => row,
            Err(e) => RunRow {
                run: point.name.clone(),
                status: Status::Failed,
                values: point.values.clone(),
                batch_size: point.config.train.batch_size,
                predicted_peak_bytes: None,
                measured_peak_bytes: None,
                examples_per_s: None,
                final_loss: None,
                categories: BTreeMap::new(),
                losses: Vec::new(),
                error: Some(format!("{e:#}")),
            },
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        write_json(&dir.join("summary.json"), &row)?;
        eprintln!(
            "widebag: [{}/{n}] {}: {}{}",
            i + 1,
            point.name,
            row.status.name(),
            match (&row.error, row.examples_per_s) {
                (Some(e), _) => format!(" ({e})"),
                (None, Some(x)) => format!(
                    ", {x:.1} examples/s, loss {:.4}, peak {}",
                    row.final_loss.unwrap_or(f32::NAN),
                    row.measured_peak_bytes
                        .map_or("-".into(), widebag_config::units::format_bytes)
                ),
                _ => String::new(),
            }
        );
        rows.push(row);
    }
    let keys: Vec<String> = sweep.spec.grid.keys().cloned().collect();
    std::fs::write(out.join("results.csv"), csv(&rows, &keys))
        .with_context(|| format!("writing {}", out.join("results.csv").display()))?;
    std::fs::write(
        out.join("results.md"),
        markdown(&rows, &keys, &compute.adapter),
    )
    .with_context(|| format!("writing {}", out.join("results.md").display()))?;
    plot_memory(&out.join("memory.svg"), &rows)?;
    plot_losses(&out.join("loss.svg"), &rows)?;
    plot_throughput(&out.join("throughput.svg"), &rows, &keys)?;
    Ok(rows)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// One row per run: run, status, the swept keys, then the measurements.
pub fn csv(rows: &[RunRow], keys: &[String]) -> String {
    let mut s = String::from("run,status");
    for k in keys {
        s.push(',');
        s.push_str(&csv_field(k));
    }
    s.push_str(
        ",batch_size,predicted_peak_bytes,measured_peak_bytes,examples_per_s,final_loss,error\n",
    );
    for r in rows {
        let mut line = vec![csv_field(&r.run), r.status.name().to_string()];
        for k in keys {
            line.push(csv_field(r.values.get(k).map_or("", String::as_str)));
        }
        line.push(r.batch_size.to_string());
        line.push(opt(r.predicted_peak_bytes));
        line.push(opt(r.measured_peak_bytes));
        line.push(
            r.examples_per_s
                .map_or(String::new(), |x| format!("{x:.3}")),
        );
        line.push(r.final_loss.map_or(String::new(), |x| format!("{x:.6}")));
        line.push(csv_field(r.error.as_deref().unwrap_or("")));
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

/// The same table in Markdown.
pub fn markdown(rows: &[RunRow], keys: &[String], adapter: &str) -> String {
    let mib = |b: Option<u64>| b.map_or("-".into(), |b| format!("{:.2}", b as f64 / 1048576.0));
    let mut s = format!(
        "Measured on {adapter}. Memory in MiB: the ledger's predicted peak and the allocator's \
         peak bytes in use after the first step; loss: mean of the last 10 steps.\n\n| run | status |"
    );
    for k in keys {
        s.push_str(&format!(" {k} |"));
    }
    s.push_str(" predicted MiB | measured MiB | examples/s | final loss |\n|---|---|");
    s.push_str(&"---|".repeat(keys.len() + 4));
    s.push('\n');
    for (i, r) in rows.iter().enumerate() {
        s.push_str(&format!("| {} | {} |", i + 1, r.status.name()));
        for k in keys {
            s.push_str(&format!(
                " {} |",
                r.values.get(k).map_or("", String::as_str).trim_matches('"')
            ));
        }
        s.push_str(&format!(
            " {} | {} | {} | {} |\n",
            mib(r.predicted_peak_bytes),
            mib(r.measured_peak_bytes),
            r.examples_per_s.map_or("-".into(), |x| format!("{x:.1}")),
            r.final_loss.map_or("-".into(), |x| format!("{x:.4}")),
        ));
    }
    s
}

fn svg_error(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("writing {}: {e}", path.display())
}

/// Per run: the predicted peak stacked by category, the measured peak beside it.
pub fn plot_memory(path: &PathBuf, rows: &[RunRow]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let mib = |b: u64| b as f64 / 1048576.0;
        let top = rows
            .iter()
            .map(|r| {
                r.predicted_peak_bytes
                    .unwrap_or(0)
                    .max(r.measured_peak_bytes.unwrap_or(0))
            })
            .max()
            .unwrap_or(1)
            .max(1);
        let root = SVGBackend::new(path, (1000, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let n = rows.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Peak memory per run: predicted by category (stacked), measured (black)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5f64..n + 0.5, 0f64..mib(top) * 1.45)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(rows.len().clamp(1, 40))
            .x_label_formatter(&|x| format!("{}", x.round()))
            .x_desc("run (results.md)")
            .y_desc("MiB")
            .draw()?;
        for (ci, cat) in Category::ALL.iter().enumerate() {
            let mut bars = Vec::new();
            for (i, r) in rows.iter().enumerate() {
                let below: u64 = Category::ALL[..ci]
                    .iter()
                    .map(|c| r.categories.get(c.name()).copied().unwrap_or(0))
                    .sum();
                let own = r.categories.get(cat.name()).copied().unwrap_or(0);
                if own > 0 {
                    let x = (i + 1) as f64;
                    bars.push(Rectangle::new(
                        [(x - 0.4, mib(below)), (x - 0.02, mib(below + own))],
                        explain::PALETTE[ci % explain::PALETTE.len()].filled(),
                    ));
                }
            }
            if !bars.is_empty() {
                let color = explain::PALETTE[ci % explain::PALETTE.len()];
                chart
                    .draw_series(bars)?
                    .label(cat.name())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                    });
            }
        }
        let measured: Vec<_> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.measured_peak_bytes.map(|m| {
                    let x = (i + 1) as f64;
                    Rectangle::new([(x + 0.02, 0.0), (x + 0.4, mib(m))], BLACK.filled())
                })
            })
            .collect();
        if !measured.is_empty() {
            chart
                .draw_series(measured)?
                .label("measured")
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], BLACK.filled()));
        }
        explain::legend(&mut chart, SeriesLabelPosition::UpperLeft, 12)?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| svg_error(path, e))
}

/// Loss per step, one line per run.
pub fn plot_losses(path: &PathBuf, rows: &[RunRow]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let steps = rows
            .iter()
            .map(|r| r.losses.len())
            .max()
            .unwrap_or(1)
            .max(2);
        let finite = rows.iter().flat_map(|r| r.losses.iter().copied());
        let (lo, hi) = finite.fold((f32::MAX, f32::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let (lo, hi) = if lo <= hi {
            (lo as f64, hi as f64)
        } else {
            (0.0, 1.0)
        };
        let root = SVGBackend::new(path, (1000, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Training loss per step", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(
                0f64..(steps - 1) as f64,
                lo..hi + (hi - lo).max(1e-3) * 0.05,
            )?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("loss")
            .draw()?;
        for (i, r) in rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.losses.is_empty())
        {
            let color = explain::PALETTE[i % explain::PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    r.losses
                        .iter()
                        .enumerate()
                        .map(|(s, &l)| (s as f64, l as f64)),
                    color.stroke_width(2),
                ))?
                .label(format!("{} {}", i + 1, r.run))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        explain::legend(&mut chart, SeriesLabelPosition::UpperRight, 10)?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| svg_error(path, e))
}

/// Examples/s against the batch size, one line per combination of the other swept keys.
pub fn plot_throughput(path: &PathBuf, rows: &[RunRow], keys: &[String]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in rows {
            if let Some(x) = r.examples_per_s {
                let label = keys
                    .iter()
                    .filter(|k| k.as_str() != "train.batch_size")
                    .map(|k| {
                        let v = r.values.get(k).map_or("", String::as_str);
                        format!(
                            "{}={}",
                            k.rsplit('.').next().unwrap_or(k),
                            v.trim_matches('"')
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                series
                    .entry(label)
                    .or_default()
                    .push((r.batch_size as f64, x));
            }
        }
        let max_b = rows.iter().map(|r| r.batch_size).max().unwrap_or(2).max(2) as f64;
        let min_b = rows.iter().map(|r| r.batch_size).min().unwrap_or(1).max(1) as f64;
        let max_x = series
            .values()
            .flatten()
            .map(|p| p.1)
            .fold(1.0f64, f64::max);
        let root = SVGBackend::new(path, (1000, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Examples/s against batch size", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d((min_b / 1.5..max_b * 1.5).log_scale(), 0f64..max_x * 1.15)?;
        chart
            .configure_mesh()
            .x_desc("batch size")
            .y_desc("examples/s")
            .draw()?;
        for (i, (label, mut points)) in series.into_iter().enumerate() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let color = explain::PALETTE[i % explain::PALETTE.len()];
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )?;
        }
        explain::legend(&mut chart, SeriesLabelPosition::UpperLeft, 12)?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| svg_error(path, e))
}
