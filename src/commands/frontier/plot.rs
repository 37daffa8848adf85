//! frontier.svg: the quality each budget reached against its peak memory (measured, else
//! predicted), one point per run that trained, labelled with its budget; a hollow point where a
//! remedy that costs accuracy was taken.

use std::path::Path;

use plotters::prelude::*;

use super::row::FrontierRow;
use crate::chart::{mib, series_color};

/// Writes the plot; a frontier with no trained run gets an empty chart with its title.
pub fn plot_frontier(path: &Path, rows: &[FrontierRow], title: &str) -> anyhow::Result<()> {
    let points: Vec<(f64, f64, &FrontierRow)> = rows
        .iter()
        .filter_map(|r| {
            let peak = r.measured_peak_bytes.unwrap_or(r.predicted_peak_bytes);
            Some((mib(peak).max(1e-3), r.quality.as_ref()?.value, r))
        })
        .collect();
    let label = super::row::quality_label(rows);
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let (x_lo, x_hi) = points
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (y_lo, y_hi) = points
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
        let (x_lo, x_hi) = if x_lo <= x_hi {
            (x_lo, x_hi)
        } else {
            (1.0, 2.0)
        };
        let (y_lo, y_hi) = if y_lo <= y_hi {
            (y_lo, y_hi)
        } else {
            (0.0, 1.0)
        };
        let pad = ((y_hi - y_lo) * 0.1).max(y_hi.abs() * 0.02).max(1e-6);
        let root = SVGBackend::new(path, (1000, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo / 1.5..x_hi * 1.5).log_scale(), y_lo - pad..y_hi + pad)?;
        chart
            .configure_mesh()
            .x_desc("peak memory, MiB (measured; predicted where not measured)")
            .y_desc(label.as_str())
            .draw()?;
        let color = series_color(0);
        chart.draw_series(LineSeries::new(
            points.iter().map(|p| (p.0, p.1)),
            color.stroke_width(2),
        ))?;
        for (x, y, r) in &points {
            let style = match r.costs_accuracy {
                true => color.stroke_width(2),
                false => color.filled(),
            };
            chart.draw_series(std::iter::once(Circle::new((*x, *y), 5, style)))?;
            chart.draw_series(std::iter::once(Text::new(
                r.budget.clone(),
                (*x, *y),
                ("sans-serif", 13).into_font().color(&BLACK),
            )))?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}
