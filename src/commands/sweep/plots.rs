//! A sweep's SVG plots: peak memory per run (predicted by category beside measured), the loss
//! curves, and examples/s against the batch size.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;
use widebag_ledger::Category;

use super::results::RunRow;
use crate::chart::{StackedChart, StackedColumn, legend, series_color, write_stacked};

fn svg_error(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("writing {}: {e}", path.display())
}

/// Per run: the predicted peak stacked by category, the measured peak beside it.
pub fn plot_memory(path: &Path, rows: &[RunRow]) -> anyhow::Result<()> {
    let columns = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            StackedColumn::new(
                (i + 1).to_string(),
                |c: Category| r.categories.get(c.name()).copied().unwrap_or(0),
                r.measured_peak_bytes,
            )
        })
        .collect();
    write_stacked(
        path,
        &StackedChart {
            title: "Peak memory per run: predicted by category (stacked), measured (black)",
            x_desc: "run (results.md)",
            columns,
            measured_label: "measured",
            legend_at: SeriesLabelPosition::UpperLeft,
        },
    )
}

/// Loss per step, one line per run.
pub fn plot_losses(path: &Path, rows: &[RunRow]) -> anyhow::Result<()> {
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
            let color = series_color(i);
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
        legend(&mut chart, SeriesLabelPosition::UpperRight, 10)?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| svg_error(path, e))
}

/// Examples/s per batch size, one series per combination of the other swept keys.
fn throughput_series(rows: &[RunRow], keys: &[String]) -> BTreeMap<String, Vec<(f64, f64)>> {
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
    series
}

/// Examples/s against the batch size, one line per combination of the other swept keys.
pub fn plot_throughput(path: &Path, rows: &[RunRow], keys: &[String]) -> anyhow::Result<()> {
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let series = throughput_series(rows, keys);
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
            let color = series_color(i);
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
        legend(&mut chart, SeriesLabelPosition::UpperLeft, 12)?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| svg_error(path, e))
}
