//! `explain --grid`: the ledger's accuracy grid — each point predicted, measured on the device and
//! compared against the 3% bar — and its Markdown table.

use serde::Serialize;

use super::bar::BAR_PCT;
use super::report::report;
use crate::failure::{Failure, Outcome};
use crate::measure::measure;
use crate::output::emit_rows;
use crate::preflight::{check_fits, device_facts, open_measurable, predict};
use crate::request::{ExplainGrid, grid_point};

/// The configurations of the accuracy grid, as `--set` overrides over [`grid_base`].
///
/// Every grid crosses both layouts, two widths and batch sizes from 32 to 4096 with the dense
/// optimizers SGD, momentum, Adam and AdamW and the table optimizers SGD and lazy Adam; sparse
/// points cycle the table's storage through f32, f16, and f16 with f16 moments. `small`
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
                    let mut point = vec![
                        format!("model.layout=\"{layout}\""),
                        format!("data.width={width}"),
                        format!("data.n_classes={width}"),
                        format!("train.batch_size={batch}"),
                        format!("optim.dense=\"{}\"", dense[i % 4]),
                        format!("optim.table=\"{}\"", table[(i / 4) % 2]),
                    ];
                    if layout == "sparse" {
                        let (dtype, state) =
                            [("f32", "f32"), ("f16", "f32"), ("f16", "f16")][i % 3];
                        point.push(format!("model.input_bands.dtype=[\"{dtype}\"]"));
                        point.push(format!("optim.state_dtype=\"{state}\""));
                    }
                    out.push(point);
                    i += 1;
                }
            }
        }
    }
    Ok(out)
}

/// The base every grid point starts from (the explain and plan grids, and `plan --calibrate`).
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
    /// The table's storage and its optimizer moments' (`f32`, `f16`, `bf16`).
    pub table_dtype: String,
    pub state_dtype: String,
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
         table | storage | predicted | measured | error |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for (i, r) in rows.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
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
            if r.layout == "dense" {
                "-".to_string()
            } else {
                format!("{} / {}", r.table_dtype, r.state_dtype)
            },
            r.predicted_peak_bytes,
            r.measured_peak_bytes
                .map_or_else(|| r.note.clone(), |m| m.to_string()),
            r.error_pct.map_or("-".into(), |e| format!("{e:.2}%")),
        ));
    }
    s
}

/// Runs the grid: every point predicted, then measured unless over the buffer limit; fails when
/// a measured point misses the bar.
pub fn run_grid(req: &ExplainGrid) -> Outcome {
    let points = grid_points(&req.name).map_err(Failure::usage)?;
    let mut rows = Vec::new();
    let mut adapter = String::new();
    for (i, overrides) in points.iter().enumerate() {
        let mut all = grid_base();
        all.extend(overrides.iter().cloned());
        let config = grid_point(&all, &req.device)?;
        let prepared =
            widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::READ_ONLY)
                .map_err(Failure::usage)?;
        let compute = open_measurable(config.train.device)?;
        adapter = compute.adapter.clone();
        let (spec, ledger) = predict(&prepared, device_facts(&compute)).map_err(Failure::usage)?;
        let mut row = GridRow {
            layout: config.model.layout.name().to_string(),
            width: config.data.width,
            batch_size: config.train.batch_size,
            dense_optim: config.optim.dense.name().to_string(),
            table_optim: config.optim.table.name().to_string(),
            table_dtype: config.model.input_bands.dtype_of(0).name().to_string(),
            state_dtype: config.optim.state_dtype.name().to_string(),
            predicted_peak_bytes: ledger.sampled_peak(widebag_ledger::Placement::Device).bytes,
            measured_peak_bytes: None,
            error_pct: None,
            note: String::new(),
        };
        if let Err(e) = check_fits(&ledger, &spec) {
            row.note = "predicted only (over the buffer limit)".into();
            eprintln!(
                "[{}/{}] {}: {e:#}",
                i + 1,
                points.len(),
                overrides.join(" ")
            );
        } else {
            let summary = measure(prepared, &compute, req.steps).map_err(Failure::run)?;
            let r = report(spec, ledger, &compute.adapter, Some(&summary));
            row.predicted_peak_bytes = r.predicted_sampled_peak_bytes;
            row.measured_peak_bytes = r.measured_peak_bytes;
            row.error_pct = r.error_pct;
            eprintln!(
                "[{}/{}] {}: predicted {} measured {} error {:.2}%",
                i + 1,
                points.len(),
                overrides.join(" "),
                row.predicted_peak_bytes,
                row.measured_peak_bytes.unwrap_or(0),
                row.error_pct.unwrap_or(f64::NAN)
            );
        }
        rows.push(row);
    }
    let md = grid_markdown(&rows, &adapter);
    emit_rows(&rows, &md, req.json, req.out.as_deref(), "grid")?;
    let over: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.error_pct.is_some_and(|e| e > BAR_PCT))
        .map(|(i, r)| format!("#{} ({:.2}%)", i + 1, r.error_pct.unwrap_or(0.0)))
        .collect();
    let measured: Vec<f64> = rows.iter().filter_map(|r| r.error_pct).collect();
    let worst = measured.iter().copied().fold(0.0f64, f64::max);
    eprintln!(
        "widebag: {} points measured, worst error {worst:.2}% (bar {BAR_PCT}%)",
        measured.len()
    );
    if !over.is_empty() {
        let f = Failure::run(anyhow::anyhow!(
            "points over the {BAR_PCT}% bar: {}",
            over.join(", ")
        ));
        // With --json the rows printed above are the one JSON value; their errors show the misses.
        return Err(if req.json { f.reported() } else { f });
    }
    Ok(())
}
