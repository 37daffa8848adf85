//! The charts' shared style: the palette, the legend, and the stacked-category chart (predicted
//! bytes stacked by ledger category, the measured bytes beside them) that `explain --measure`
//! and `sweep` draw.

use std::path::Path;

use plotters::coord::CoordTranslate;
use plotters::prelude::*;
use widebag_ledger::Category;

/// The charts' colours, one per ledger category (and per series elsewhere).
pub const PALETTE: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// The `i`-th series colour (the palette repeats).
pub fn series_color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Bytes on a chart's MiB axis.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Draws a chart's series legend in the charts' shared style (labels at `font_px`).
pub fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
    font_px: u32,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", font_px))
        .position(position)
        .draw()
        .map_err(|e| anyhow::anyhow!("drawing the legend: {e}"))
}

/// One column of a stacked-category chart.
pub struct StackedColumn {
    /// The x axis label under the column.
    pub label: String,
    /// Predicted bytes per ledger category, in [`Category::ALL`] order.
    pub category_bytes: Vec<u64>,
    /// The measured bytes, drawn beside the stack.
    pub measured_bytes: Option<u64>,
}

impl StackedColumn {
    /// A column from a category → bytes lookup.
    pub fn new(
        label: String,
        bytes_of: impl Fn(Category) -> u64,
        measured_bytes: Option<u64>,
    ) -> Self {
        Self {
            label,
            category_bytes: Category::ALL.iter().map(|&c| bytes_of(c)).collect(),
            measured_bytes,
        }
    }
}

/// A stacked-category chart: predicted bytes stacked by category, measured bytes beside.
pub struct StackedChart<'a> {
    pub title: &'a str,
    /// The x axis' description (empty: none).
    pub x_desc: &'a str,
    pub columns: Vec<StackedColumn>,
    /// The legend entry of the measured bars.
    pub measured_label: &'a str,
    pub legend_at: SeriesLabelPosition,
}

/// Writes `chart` as an SVG file at `path`.
pub fn write_stacked(path: &Path, chart: &StackedChart) -> anyhow::Result<()> {
    draw_stacked(path, chart).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}

fn draw_stacked(path: &Path, c: &StackedChart) -> Result<(), Box<dyn std::error::Error>> {
    let columns = &c.columns;
    let top = columns
        .iter()
        .map(|col| {
            col.category_bytes
                .iter()
                .sum::<u64>()
                .max(col.measured_bytes.unwrap_or(0))
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let root = SVGBackend::new(path, (1000, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = columns.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..mib(top) * 1.5)?;
    let label_at = |x: &f64| {
        let i = x.round();
        if (x - i).abs() > 1e-6 || i < 0.0 {
            return String::new();
        }
        columns
            .get(i as usize)
            .map_or(String::new(), |col| col.label.clone())
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .x_labels(columns.len().clamp(1, 40))
        .x_label_formatter(&label_at)
        .x_label_style(("sans-serif", 14))
        .y_desc("MiB");
    if !c.x_desc.is_empty() {
        mesh.x_desc(c.x_desc);
    }
    mesh.draw()?;
    for (ci, cat) in Category::ALL.iter().enumerate() {
        let mut bars = Vec::new();
        for (i, col) in columns.iter().enumerate() {
            let below: u64 = col.category_bytes[..ci].iter().sum();
            let own = col.category_bytes[ci];
            if own > 0 {
                let x = i as f64;
                bars.push(Rectangle::new(
                    [(x - 0.4, mib(below)), (x - 0.02, mib(below + own))],
                    series_color(ci).filled(),
                ));
            }
        }
        if !bars.is_empty() {
            let fill = series_color(ci);
            chart
                .draw_series(bars)?
                .label(cat.name())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], fill.filled()));
        }
    }
    let measured_fill = BLACK.mix(0.85);
    let measured: Vec<_> = columns
        .iter()
        .enumerate()
        .filter_map(|(i, col)| {
            col.measured_bytes.map(|m| {
                let x = i as f64;
                Rectangle::new([(x + 0.02, 0.0), (x + 0.4, mib(m))], measured_fill.filled())
            })
        })
        .collect();
    if !measured.is_empty() {
        chart
            .draw_series(measured)?
            .label(c.measured_label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], measured_fill.filled())
            });
    }
    legend(&mut chart, c.legend_at.clone(), 12)?;
    root.present()?;
    Ok(())
}
