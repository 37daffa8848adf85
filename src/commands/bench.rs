//! `widebag bench sparse-vs-dense`: the same model in the dense, the sparse and the head/tail
//! layout at a ladder of widths, on the same synthetic data: the ledger's prediction, the measured
//! peak and examples/s side by side, as a table, JSON and an SVG plot. A width a layout cannot run
//! on this device is reported as predicted only, and marked.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use widebag_collective::local::Local;
use widebag_config::units::format_bytes;
use widebag_config::{Config, Cutoffs, Layout, OutputKind};
use widebag_ledger::Placement;
use widebag_model::{Compute, ProbeMode, RunOptions, Watch, train};

use crate::chart::{legend, mib, series_color};
use crate::failure::{Failure, Outcome};
use crate::output::emit_rows;
use crate::preflight::{check_fits, device_facts, open_compute, predict};
use crate::request::BenchRequest;

/// Runs the comparison, prints its table (or rows as JSON) and writes bench.md, bench.json and
/// bench.svg.
pub fn run(req: &BenchRequest) -> Outcome {
    let compute = open_compute(req.config.train.device)?;
    let rows = compare(&req.config, &req.widths, req.steps, &compute, |r| {
        eprintln!(
            "widebag: width {} {}: predicted {}, measured {}, {} {}",
            r.width,
            r.layout,
            r.predicted_peak_bytes.map_or("-".into(), format_bytes),
            r.measured_peak_bytes.map_or("-".into(), format_bytes),
            r.examples_per_s
                .map_or("-".into(), |x| format!("{x:.1} examples/s")),
            r.note
        )
    })
    .map_err(Failure::run)?;
    let md = markdown(&rows, &req.config, req.steps.max(5), &compute.adapter);
    emit_rows(&rows, &md, req.json, Some(&req.out), "bench")?;
    plot(&req.out.join("bench.svg"), &rows).map_err(Failure::run)?;
    eprintln!(
        "widebag: bench.md, bench.json and bench.svg in {}",
        req.out.display()
    );
    Ok(())
}

/// One layout at one width.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    pub width: usize,
    pub layout: String,
    pub predicted_peak_bytes: Option<u64>,
    /// `None`: predicted only (see `note`).
    pub measured_peak_bytes: Option<u64>,
    pub examples_per_s: Option<f64>,
    pub note: String,
}

/// A compared layout: its name and the change it makes to the configured model.
type LayoutChange = (&'static str, fn(&mut Config));

/// The layouts compared.
const LAYOUTS: [LayoutChange; 3] = [
    ("dense", dense_layout),
    ("sparse", sparse_layout),
    ("head/tail", head_tail_layout),
];

fn dense_layout(c: &mut Config) {
    c.model.layout = Layout::Dense;
    c.model.output = OutputKind::Full;
    c.model.input_bands.cutoffs = Cutoffs::None;
    c.model.output_bands.cutoffs = Cutoffs::None;
}

fn sparse_layout(c: &mut Config) {
    dense_layout(c);
    c.model.layout = Layout::Sparse;
}

/// Adaptive input and adaptive softmax, cutoffs chosen from the data for a fifth of the unsplit
/// bytes (the configured `input_bands` placement and factors are kept).
fn head_tail_layout(c: &mut Config) {
    c.model.layout = Layout::Sparse;
    c.model.output = OutputKind::Adaptive;
    c.model.input_bands.cutoffs = Cutoffs::Auto;
    c.model.output_bands.cutoffs = Cutoffs::Auto;
}

/// Runs the comparison: for each width, each layout predicted, then run when it fits the
/// device (its largest buffer, and the default budget when the device reports its memory).
fn compare(
    base: &Config,
    widths: &[usize],
    steps: usize,
    compute: &Compute,
    mut progress: impl FnMut(&BenchRow),
) -> anyhow::Result<Vec<BenchRow>> {
    let mut rows = Vec::new();
    for &width in widths {
        for (name, apply) in LAYOUTS {
            let mut row = BenchRow {
                width,
                layout: name.to_string(),
                predicted_peak_bytes: None,
                measured_peak_bytes: None,
                examples_per_s: None,
                note: String::new(),
            };
            let mut config = base.clone();
            config.data.width = width;
            config.data.n_classes = Some(width);
            apply(&mut config);
            config.train.steps = steps.max(5);
            widebag_config::validate(&config)
                .map_err(|(key, msg)| anyhow::anyhow!("{key}: {msg} (width {width})"))?;
            let prepared =
                widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)?;
            let layout_note: Vec<String> = prepared
                .bands
                .iter()
                .map(|b| {
                    let dims: Vec<String> = b.bands.iter().map(|x| x.dim.to_string()).collect();
                    format!(
                        "{} cutoffs {:?} dims [{}] head {:.0}%",
                        b.side,
                        b.cutoffs,
                        dims.join(", "),
                        100.0 * b.coverage.first().copied().unwrap_or(0.0)
                    )
                })
                .collect();
            row.note = layout_note.join("; ");
            let (spec, ledger) = predict(&prepared, device_facts(compute))?;
            let peak = ledger.peak(Placement::Device).bytes;
            row.predicted_peak_bytes = Some(peak);
            let budget = widebag_solver::default_budget_bytes(compute.memory_bytes);
            let mut note = |extra: String| {
                row.note = if row.note.is_empty() {
                    extra
                } else {
                    format!("{extra}; {}", row.note)
                };
            };
            if let Err(e) = check_fits(&ledger, &spec) {
                note(format!("predicted only: {e:#}"));
            } else if let Some(b) = budget.filter(|&b| peak > b) {
                note(format!(
                    "predicted only: over the device's {} (memory minus the reserve)",
                    format_bytes(b)
                ));
            } else {
                let options = RunOptions {
                    watch: Watch {
                        probe: ProbeMode::PhaseEnds,
                        warmup_steps: 1,
                        detailed_steps: 3,
                        ..Watch::default()
                    },
                    ..RunOptions::default()
                };
                let summary = train(prepared, compute, &Local, options, |_| {})
                    .with_context(|| format!("{name} layout at width {width}"))?;
                row.measured_peak_bytes = summary.peak_in_use_bytes;
                row.examples_per_s = Some(summary.examples_per_s);
                if row.measured_peak_bytes.is_none() {
                    note("memory not measured: this backend has no allocator counters".into());
                }
            }
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// `layout` over dense, per width where both ran: (peak memory ratio, examples/s ratio).
pub fn ratios(rows: &[BenchRow], layout: &str) -> Vec<(usize, f64, f64)> {
    let find = |w: usize, l: &str| rows.iter().find(|r| r.width == w && r.layout == l);
    let mut widths: Vec<usize> = rows.iter().map(|r| r.width).collect();
    widths.dedup();
    widths
        .into_iter()
        .filter_map(|w| {
            let (d, s) = (find(w, "dense")?, find(w, layout)?);
            Some((
                w,
                s.measured_peak_bytes? as f64 / d.measured_peak_bytes? as f64,
                s.examples_per_s? / d.examples_per_s?,
            ))
        })
        .collect()
}

/// The comparison as Markdown.
pub fn markdown(rows: &[BenchRow], config: &Config, steps: usize, adapter: &str) -> String {
    let hidden: Vec<String> = config.model.hidden.iter().map(|h| h.to_string()).collect();
    let mut s = format!(
        "Measured on {adapter}: width → {} → [{}] → width classes, batch {}, optimizers table {} \
         / dense {}, {steps} steps per run (peak bytes in use, every point of the step read in \
         steps 2–3; examples/s from step 4).\n\n| width | layout | predicted peak | measured \
         peak | examples/s | note |\n|---|---|---|---|---|---|\n",
        config.model.dim,
        hidden.join(", "),
        config.train.batch_size,
        config.optim.table.name(),
        config.optim.dense.name()
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.width,
            r.layout,
            r.predicted_peak_bytes.map_or("-".into(), format_bytes),
            r.measured_peak_bytes.map_or("-".into(), format_bytes),
            r.examples_per_s.map_or("-".into(), |x| format!("{x:.1}")),
            r.note
        ));
    }
    let sparse = ratios(rows, "sparse");
    let head_tail = ratios(rows, "head/tail");
    if !sparse.is_empty() || !head_tail.is_empty() {
        s.push_str(
            "\n| width | layout | peak memory / dense | examples/s / dense |\n|---|---|---|---|\n",
        );
        for (name, list) in [("sparse", sparse), ("head/tail", head_tail)] {
            for (w, m, x) in list {
                s.push_str(&format!("| {w} | {name} | {m:.3}× | {x:.2}× |\n"));
            }
        }
    }
    s
}

/// Peak memory against width: per layout the prediction (line) and the measurement (dots).
pub fn plot(path: &Path, rows: &[BenchRow]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let max_w = rows.iter().map(|r| r.width).max().unwrap_or(2) as f64;
        let min_w = rows.iter().map(|r| r.width).min().unwrap_or(1).max(1) as f64;
        let top = rows
            .iter()
            .filter_map(|r| r.predicted_peak_bytes.max(r.measured_peak_bytes))
            .max()
            .unwrap_or(1);
        let root = SVGBackend::new(path, (1000, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Peak memory against width: predicted (line), measured (dots)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (min_w / 1.5..max_w * 1.5).log_scale(),
                (0.5f64..mib(top) * 2.0).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("width (ids = classes)")
            .y_desc("MiB")
            .draw()?;
        for (i, (name, _)) in LAYOUTS.iter().enumerate() {
            let color = series_color(i);
            let predicted: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.layout == *name)
                .filter_map(|r| Some((r.width as f64, mib(r.predicted_peak_bytes?))))
                .collect();
            if predicted.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(predicted, color.stroke_width(2)))?
                .label(format!("{name} (predicted)"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            chart.draw_series(
                rows.iter()
                    .filter(|r| r.layout == *name)
                    .filter_map(|r| Some((r.width as f64, mib(r.measured_peak_bytes?))))
                    .map(|p| Circle::new(p, 5, color.filled())),
            )?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft, 12)?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}
