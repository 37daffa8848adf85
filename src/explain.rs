//! `widebag explain`: the memory ledger of a configured step as a table, optionally measured on
//! the device point by point, as JSON and as an SVG chart; and the accuracy grid.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use widebag_config::{Config, Prepared};
use widebag_ledger::step::{BatchFacts, DeviceFacts, StepSpec};
use widebag_ledger::{Category, Ledger, Phase, Placement, Point};
use widebag_model::{Compute, MeterMode, RunOptions, RunSummary, run_training_with};

/// Batches sampled for the ledger's batch statistics.
pub const SAMPLED_BATCHES: usize = 8;
/// The accuracy bar: |predicted − measured| ≤ 3 % of measured, at the peak.
pub const BAR_PCT: f64 = 3.0;

/// What the device tells the ledger.
pub fn device_facts(compute: &Compute) -> DeviceFacts {
    DeviceFacts {
        max_buffer_bytes: compute.max_buffer_bytes,
        alignment_bytes: compute.alignment_bytes,
    }
}

/// The step of `prepared`'s config on `compute`, and its ledger: batch facts are the largest
/// among the first [`SAMPLED_BATCHES`] batches (the bound a plan keeps to).
pub fn predict(prepared: &Prepared, compute: &Compute) -> anyhow::Result<(StepSpec, Ledger)> {
    predict_batches(prepared, compute, 0, SAMPLED_BATCHES)
}

/// [`predict`] from batches `skip .. skip + n` of the run: what `explain --measure` compares
/// with the steps it reads (all but the warm-up).
pub fn predict_batches(
    prepared: &Prepared,
    compute: &Compute,
    skip: usize,
    n: usize,
) -> anyhow::Result<(StepSpec, Ledger)> {
    let config = &prepared.config;
    let bs = config.train.batch_size;
    let mut source = prepared.batches.clone();
    for _ in 0..skip {
        source
            .next_batch(bs)
            .context("sampling batches for the ledger")?;
    }
    let batch = BatchFacts::sample(&source, bs, n).context("sampling batches for the ledger")?;
    let mut spec = StepSpec::from_config(config, device_facts(compute), batch);
    spec.sample_bands(&source, bs, n)
        .context("sampling batches for the ledger")?;
    let ledger = widebag_ledger::step::ledger(&spec);
    Ok((spec, ledger))
}

/// One point of the step, predicted and (when measured) read.
#[derive(Clone, Debug, Serialize)]
pub struct PointRow {
    pub point: Point,
    pub phase: Phase,
    pub predicted_bytes: u64,
    pub measured_bytes: Option<u64>,
    pub error_pct: Option<f64>,
}

/// What `explain` reports (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub layout: widebag_config::Layout,
    pub adapter: String,
    pub spec: StepSpec,
    pub predicted_peak_bytes: u64,
    pub predicted_peak_point: Point,
    pub predicted_peak_phase: Phase,
    /// The predicted peak among the points the trainer can read (what a measurement is compared
    /// with; equal to `predicted_peak_bytes` unless the peak falls inside autodiff's backward).
    pub predicted_sampled_peak_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_point: Option<Point>,
    /// |predicted − measured| / measured of the peaks at the readable points, in %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_pct: Option<f64>,
    /// Category → bytes alive at the predicted peak.
    pub categories: BTreeMap<String, u64>,
    pub points: Vec<PointRow>,
    /// Phase → (predicted, measured) peak bytes.
    pub phases: BTreeMap<String, (u64, Option<u64>)>,
    /// The allocator's reservation: estimated from the ledger, and read (pages at their peak).
    pub reserved_estimate_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_reserved_peak_bytes: Option<u64>,
    /// The largest single allocation and the device's limit.
    pub largest_allocation_bytes: u64,
    pub max_buffer_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_steps: Option<usize>,
    pub ledger: Ledger,
}

impl Report {
    /// Bytes the ledger places in host memory at its host peak.
    pub fn ledger_host_bytes(&self) -> u64 {
        self.ledger.peak(Placement::Host).bytes
    }
}

fn pct(predicted: u64, measured: u64) -> f64 {
    (predicted as f64 - measured as f64).abs() / (measured.max(1) as f64) * 100.0
}

/// Builds the report from the ledger and, when given, a measured run.
pub fn report(
    spec: StepSpec,
    ledger: Ledger,
    compute: &Compute,
    measured: Option<&RunSummary>,
) -> Report {
    let peak = ledger.peak(Placement::Device);
    let sampled = ledger.sampled_peak(Placement::Device);
    let reading = |p: Point| measured.and_then(|m| m.point_peak_in_use_bytes.get(&p).copied());
    let points: Vec<PointRow> = ledger
        .points
        .iter()
        .map(|&point| {
            let predicted_bytes = ledger.live_bytes(Placement::Device, point);
            let measured_bytes = reading(point);
            PointRow {
                point,
                phase: point.phase(),
                predicted_bytes,
                measured_bytes,
                error_pct: measured_bytes.map(|m| pct(predicted_bytes, m)),
            }
        })
        .collect();
    let mut phases: BTreeMap<String, (u64, Option<u64>)> = BTreeMap::new();
    for row in &points {
        let e = phases
            .entry(row.phase.name().to_string())
            .or_insert((0, None));
        e.0 = e.0.max(row.predicted_bytes);
        if let Some(m) = row.measured_bytes {
            e.1 = Some(e.1.unwrap_or(0).max(m));
        }
    }
    let measured_peak = points
        .iter()
        .filter_map(|r| r.measured_bytes.map(|m| (m, r.point)))
        .max_by_key(|&(m, _)| m);
    let categories = ledger
        .categories_at(Placement::Device, peak.point)
        .into_iter()
        .map(|(c, b)| (c.name().to_string(), b))
        .collect();
    let (_, largest) = ledger.largest_allocation().unwrap_or(("", 0));
    Report {
        layout: spec.layout,
        adapter: compute.adapter.clone(),
        predicted_peak_bytes: peak.bytes,
        predicted_peak_point: peak.point,
        predicted_peak_phase: peak.phase,
        predicted_sampled_peak_bytes: sampled.bytes,
        measured_peak_bytes: measured_peak.map(|(m, _)| m),
        measured_peak_point: measured_peak.map(|(_, p)| p),
        error_pct: measured_peak.map(|(m, _)| pct(sampled.bytes, m)),
        categories,
        points,
        phases,
        reserved_estimate_bytes: widebag_ledger::alloc::reserved_estimate_bytes(
            &ledger,
            spec.device.max_buffer_bytes,
        ),
        measured_reserved_peak_bytes: measured.and_then(|m| m.peak_reserved_bytes),
        largest_allocation_bytes: largest,
        max_buffer_bytes: spec.device.max_buffer_bytes,
        measured_steps: measured.map(|m| m.steps),
        spec,
        ledger,
    }
}

/// Refuses a step whose largest allocation exceeds the device's buffer limit, with the numbers.
pub fn check_fits(ledger: &Ledger, spec: &StepSpec) -> anyhow::Result<()> {
    if let Some((name, bytes)) = ledger.largest_allocation()
        && bytes > spec.device.max_buffer_bytes
    {
        anyhow::bail!(
            "does not fit: `{name}` needs one {} buffer, over the device's largest buffer of {} \
             (the step's predicted peak is {})",
            human(bytes),
            human(spec.device.max_buffer_bytes),
            human(ledger.peak(Placement::Device).bytes)
        );
    }
    Ok(())
}

/// Runs `steps` steps (the first a warm-up) reading the allocator at every ledger point.
pub fn measure(prepared: Prepared, compute: &Compute, steps: usize) -> anyhow::Result<RunSummary> {
    let mut prepared = prepared;
    prepared.config.train.steps = steps.max(2);
    let options = RunOptions {
        meter: MeterMode::Detailed,
        warmup_steps: 1,
        detailed_steps: 0,
    };
    let summary =
        run_training_with(prepared, compute, options, |_| {}).context("running the step")?;
    if summary.peak_in_use_bytes.is_none() {
        anyhow::bail!(
            "the {:?} backend reports no allocator counters: --measure needs wgpu",
            compute.backend
        );
    }
    Ok(summary)
}

/// Bytes as MiB or GiB with two decimals.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    }
}

/// The table: entries alive at the predicted peak grouped by category and layer, then every
/// point with its prediction and reading.
pub fn print_report(r: &Report) {
    let s = &r.spec;
    println!(
        "widebag explain: {} layout, {} → {} → {:?} → {} classes, batch {} ({} nnz, {} unique ids, \
         {} targets), optimizers table {} / dense {}",
        s.layout.name(),
        s.width,
        s.dim,
        s.hidden,
        s.n_classes,
        s.batch.n_rows,
        s.batch.nnz,
        s.batch.n_unique,
        s.batch.n_targets,
        s.table_optim.name(),
        s.dense_optim.name()
    );
    println!(
        "  device: {} (largest buffer {}, alignment {} B)",
        r.adapter,
        human(s.device.max_buffer_bytes),
        s.device.alignment_bytes
    );
    println!(
        "\nAt the predicted peak ({}, {} phase):",
        r.predicted_peak_point.name(),
        r.predicted_peak_phase.name()
    );
    println!(
        "  {:<18} {:<12} {:>12}  tensors",
        "category", "layer", "bytes"
    );
    let a = r.ledger.alignment_bytes;
    for cat in Category::ALL {
        let mut by_layer: BTreeMap<&str, (u64, Vec<String>)> = BTreeMap::new();
        for e in r.ledger.entries.iter().filter(|e| {
            e.category == cat
                && e.placement == Placement::Device
                && e.lifetime.alive_at(r.predicted_peak_point)
        }) {
            let slot = by_layer.entry(e.layer.as_str()).or_default();
            slot.0 += e.bytes();
            let shape: Vec<String> = e.shape.iter().map(u64::to_string).collect();
            let times = if e.count > 1 {
                format!("{} × ", e.count)
            } else {
                String::new()
            };
            slot.1
                .push(format!("{} {times}[{}]", e.name, shape.join(", ")));
        }
        if cat == Category::AllocatorPadding {
            let pad: u64 = r
                .ledger
                .entries
                .iter()
                .filter(|e| {
                    e.placement == Placement::Device && e.lifetime.alive_at(r.predicted_peak_point)
                })
                .map(|e| e.padding_bytes(a))
                .sum();
            if pad > 0 {
                println!(
                    "  {:<18} {:<12} {:>12}  rounding each allocation to {a} B",
                    cat.name(),
                    "-",
                    human(pad)
                );
            }
            continue;
        }
        for (layer, (bytes, names)) in by_layer {
            let mut list = names.join("; ");
            if list.len() > 90 {
                list.truncate(87);
                list.push_str("...");
            }
            println!(
                "  {:<18} {:<12} {:>12}  {list}",
                cat.name(),
                layer,
                human(bytes)
            );
        }
    }
    println!(
        "  {:<18} {:<12} {:>12}",
        "total",
        "",
        human(r.predicted_peak_bytes)
    );
    println!("\nPoint by point (bytes in use, padding included):");
    println!(
        "  {:<16} {:<13} {:>14} {:>14} {:>8}",
        "point", "phase", "predicted", "measured", "error"
    );
    for p in &r.points {
        println!(
            "  {:<16} {:<13} {:>14} {:>14} {:>8}",
            p.point.name(),
            p.phase.name(),
            p.predicted_bytes,
            match p.measured_bytes {
                Some(m) => m.to_string(),
                None if r.ledger.unsampled.contains(&p.point) => "(unreadable)".into(),
                None => "-".into(),
            },
            p.error_pct.map_or("-".into(), |e| format!("{e:.2}%"))
        );
    }
    println!("\nPer phase (peak of its points):");
    println!(
        "  {:<13} {:>14} {:>14} {:>8}",
        "phase", "predicted", "measured", "error"
    );
    for phase in Phase::ALL {
        if let Some(&(p, m)) = r.phases.get(phase.name()) {
            println!(
                "  {:<13} {:>14} {:>14} {:>8}",
                phase.name(),
                p,
                m.map_or("-".into(), |m| m.to_string()),
                m.map_or("-".into(), |m| format!("{:.2}%", pct(p, m)))
            );
        }
    }
    println!(
        "\nPredicted peak {} ({} B) at {}",
        human(r.predicted_peak_bytes),
        r.predicted_peak_bytes,
        r.predicted_peak_point.name()
    );
    if r.predicted_sampled_peak_bytes != r.predicted_peak_bytes {
        println!(
            "  (inside autodiff's backward, where the allocator cannot be read; at the readable \
             points: {} ({} B))",
            human(r.predicted_sampled_peak_bytes),
            r.predicted_sampled_peak_bytes
        );
    }
    if let (Some(m), Some(e)) = (r.measured_peak_bytes, r.error_pct) {
        println!(
            "Measured peak  {} ({m} B) at {}: error {e:.2}% against the readable points' \
             prediction (bar {BAR_PCT}%)",
            human(m),
            r.measured_peak_point.map_or("-", Point::name)
        );
    }
    let host = r.ledger_host_bytes();
    if host > 0 {
        let (up, down) = r.spec.host_traffic_bytes();
        println!(
            "Host memory    {} (bands placed on the host and host-side state); per step at most \
             {} to the device and {} back",
            human(host),
            human(up),
            human(down)
        );
    }
    print!(
        "Allocator reservation: estimated {}",
        human(r.reserved_estimate_bytes)
    );
    match r.measured_reserved_peak_bytes {
        Some(m) => println!(", read {} (pages held, not part of the bar)", human(m)),
        None => println!(),
    }
}

/// The charts' colours, one per ledger category (and per series elsewhere).
pub const PALETTE: [plotters::style::RGBColor; 9] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(214, 39, 40),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(140, 86, 75),
    plotters::style::RGBColor(227, 119, 194),
    plotters::style::RGBColor(127, 127, 127),
    plotters::style::RGBColor(188, 189, 34),
];

/// Draws a chart's series legend in the charts' shared style (labels at `font_px`).
pub fn legend<'a, DB, CT>(
    chart: &mut plotters::chart::ChartContext<'a, DB, CT>,
    position: plotters::chart::SeriesLabelPosition,
    font_px: u32,
) -> anyhow::Result<()>
where
    DB: plotters::prelude::DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate,
{
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", font_px))
        .position(position)
        .draw()
        .map_err(|e| anyhow::anyhow!("drawing the legend: {e}"))
}

/// Stacked bars per phase: the predicted bytes by category, and the measured total beside them.
pub fn write_svg(path: &Path, r: &Report) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let phases: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| r.phases.contains_key(p.name()))
        .collect();
    // The readable point that sets each phase's predicted peak (the chart compares like with
    // like; predictions inside autodiff's backward are in the table).
    let phase_point = |phase: Phase| -> Point {
        r.points
            .iter()
            .filter(|p| p.phase == phase && !r.ledger.unsampled.contains(&p.point))
            .max_by_key(|p| p.predicted_bytes)
            .map_or(Point::Setup, |p| p.point)
    };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let top = r
        .phases
        .values()
        .map(|&(p, m)| p.max(m.unwrap_or(0)))
        .max()
        .unwrap_or(1);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "{} layout, batch {}: predicted (stacked) vs measured, MiB",
        r.layout.name(),
        r.spec.batch.n_rows
    );
    let n = phases.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(0)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..mib(top) * 1.6)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(phases.len().max(1))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            phases
                .get(i as usize)
                .map_or(String::new(), |p| p.name().to_string())
        })
        .x_label_style(("sans-serif", 15))
        .y_desc("MiB")
        .draw()?;
    let colors = PALETTE;
    for (ci, cat) in Category::ALL.iter().enumerate() {
        let mut bars = Vec::new();
        for (i, &phase) in phases.iter().enumerate() {
            let point = phase_point(phase);
            let cats = r.ledger.categories_at(Placement::Device, point);
            let below: u64 = Category::ALL[..ci]
                .iter()
                .map(|c| cats.get(c).copied().unwrap_or(0))
                .sum();
            let own = cats.get(cat).copied().unwrap_or(0);
            if own > 0 {
                let x = i as f64;
                bars.push(Rectangle::new(
                    [(x - 0.4, mib(below)), (x - 0.02, mib(below + own))],
                    colors[ci].filled(),
                ));
            }
        }
        if !bars.is_empty() {
            let color = colors[ci];
            chart
                .draw_series(bars)?
                .label(cat.name())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
    }
    let measured: Vec<_> = phases
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            r.phases[p.name()].1.map(|m| {
                let x = i as f64;
                Rectangle::new(
                    [(x + 0.02, 0.0), (x + 0.4, mib(m))],
                    BLACK.mix(0.85).filled(),
                )
            })
        })
        .collect();
    if !measured.is_empty() {
        chart
            .draw_series(measured)?
            .label("measured (allocator)")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], BLACK.mix(0.85).filled())
            });
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 12)?;
    root.present()?;
    Ok(())
}

/// The configurations of the accuracy grid, as `--set` overrides over [`grid_base`].
///
/// Every grid crosses both layouts, two widths and batch sizes from 32 to 4096 with the dense
/// optimizers SGD, momentum, Adam and AdamW and the table optimizers SGD and lazy Adam. `small`
/// (the CI grid, 24 points) repeats each shape with three optimizer pairs, because on a CPU Vulkan
/// driver every new shape costs minutes of kernel compilation; `full` (48 points) walks six batch
/// sizes at larger widths.
pub fn grid_points(name: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let (widths, batches, repeats): (&[usize], &[usize], usize) = match name {
        "small" => (&[1_000, 2_000], &[32, 4096], 3),
        "full" => (&[4_000, 8_000], &[32, 128, 512, 1024, 2048, 4096], 2),
        other => anyhow::bail!("unknown grid `{other}`: use `small` (CI) or `full`"),
    };
    let dense = ["sgd", "momentum", "adam", "adamw"];
    let table = ["sgd", "adam"];
    let mut out = Vec::new();
    let mut i = 0usize;
    for layout in ["sparse", "dense"] {
        for &width in widths {
            for &batch in batches {
                for _ in 0..repeats {
                    out.push(vec![
                        format!("model.layout=\"{layout}\""),
                        format!("data.width={width}"),
                        format!("data.n_classes={width}"),
                        format!("train.batch_size={batch}"),
                        format!("optim.dense=\"{}\"", dense[i % 4]),
                        format!("optim.table=\"{}\"", table[(i / 4) % 2]),
                    ]);
                    i += 1;
                }
            }
        }
    }
    Ok(out)
}

/// The base every grid point starts from.
pub fn grid_base() -> Vec<String> {
    [
        "model.dim=32",
        "model.hidden=[64]",
        "data.nnz=20.0",
        "train.seed=7",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// A finished grid point.
#[derive(Clone, Debug, Serialize)]
pub struct GridRow {
    pub layout: String,
    pub width: usize,
    pub batch_size: usize,
    pub dense_optim: String,
    pub table_optim: String,
    pub predicted_peak_bytes: u64,
    /// `None`: refused before running (does not fit the device's buffer limit).
    pub measured_peak_bytes: Option<u64>,
    pub error_pct: Option<f64>,
    pub note: String,
}

/// The grid as a Markdown table.
pub fn grid_markdown(rows: &[GridRow], adapter: &str) -> String {
    let mut s = format!(
        "Measured on {adapter}. Peak bytes in use (allocator counters, padding included) at the \
         step's sample points, after one warm-up step.\n\n| # | layout | width | batch | dense | \
         table | predicted | measured | error |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    for (i, r) in rows.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            i + 1,
            r.layout,
            r.width,
            r.batch_size,
            r.dense_optim,
            if r.layout == "dense" {
                "-"
            } else {
                &r.table_optim
            },
            r.predicted_peak_bytes,
            r.measured_peak_bytes
                .map_or_else(|| r.note.clone(), |m| m.to_string()),
            r.error_pct.map_or("-".into(), |e| format!("{e:.2}%")),
        ));
    }
    s
}

/// The config of one grid point.
pub fn grid_config(overrides: &[String]) -> anyhow::Result<Config> {
    let mut all = grid_base();
    all.extend(overrides.iter().cloned());
    Ok(widebag_config::load(None, &all)?)
}
