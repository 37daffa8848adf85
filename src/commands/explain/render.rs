//! The explain report for people: the terminal table (entries alive at the peak by category and
//! layer, every point, every phase) and the SVG chart of `--measure`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use plotters::prelude::SeriesLabelPosition;
use widebag_config::units::format_bytes;
use widebag_ledger::{Category, Phase, Placement, Point};

use super::bar::{BAR_PCT, HOST_BAR_PCT};
use super::host::HostReport;
use super::report::Report;
use crate::chart::{StackedChart, StackedColumn, write_stacked};

/// The report as the terminal shows it.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    write_report(&mut s, r).expect("writing to a String");
    s
}

fn write_report(out: &mut String, r: &Report) -> std::fmt::Result {
    let s = &r.spec;
    let table = match r.tied_output {
        true => "tied to the output layer".to_string(),
        false => s.table_optim.name().to_string(),
    };
    writeln!(
        out,
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
        table,
        s.dense_optim.name()
    )?;
    writeln!(
        out,
        "  device: {} (largest buffer {}, alignment {} B)",
        r.adapter,
        format_bytes(s.device.max_buffer_bytes),
        s.device.alignment_bytes
    )?;
    write_peak_entries(out, r)?;
    write_points(out, r)?;
    writeln!(
        out,
        "\nPredicted peak {} ({} B) at {}",
        format_bytes(r.predicted_peak_bytes),
        r.predicted_peak_bytes,
        r.predicted_peak_point.name()
    )?;
    let largest = r.eval.temporaries.iter().max_by_key(|t| t.1);
    writeln!(
        out,
        "  an evaluation pass peaks at {}: the parameters and state ({}) and its temporaries \
         (largest: {}, {})",
        format_bytes(r.eval.peak_bytes),
        format_bytes(r.eval.persistent_bytes),
        largest.map_or("-", |t| t.0.as_str()),
        format_bytes(largest.map_or(0, |t| t.1))
    )?;
    if let Some(c) = &r.checkpointing {
        let signed = |b: i64| match b {
            0 => "unchanged".to_string(),
            b if b > 0 => format!("−{}", format_bytes(b as u64)),
            b => format!("+{}", format_bytes(b.unsigned_abs())),
        };
        writeln!(
            out,
            "  checkpointing \"{}\": the MLP saves {} per example ({:.2}% of a {} logit row); \
             recomputing it (\"mlp\") frees {} inside the output backward; the step's peak: {} \
             ({} against \"none\")",
            r.spec.checkpointing.name(),
            format_bytes(c.saved_bytes_per_example),
            100.0 * c.saved_bytes_per_example as f64 / c.logit_row_bytes.max(1) as f64,
            format_bytes(c.logit_row_bytes),
            format_bytes(c.output_backward_saving_bytes),
            format_bytes(c.peak_mlp_bytes),
            signed(c.peak_none_bytes as i64 - c.peak_mlp_bytes as i64),
        )?;
    }
    if r.predicted_sampled_peak_bytes != r.predicted_peak_bytes {
        writeln!(
            out,
            "  (at a point the allocator cannot be read, inside autodiff's backward or a host \
             kernel; at the readable points: {} ({} B))",
            format_bytes(r.predicted_sampled_peak_bytes),
            r.predicted_sampled_peak_bytes
        )?;
    }
    if let (Some(m), Some(e)) = (r.measured_peak_bytes, r.error_pct) {
        writeln!(
            out,
            "Measured peak  {} ({m} B) at {}: error {e:.2}% against the readable points' \
             prediction (bar {BAR_PCT}%)",
            format_bytes(m),
            r.measured_peak_point.map_or("-", Point::name)
        )?;
    }
    match &r.host {
        Some(h) => write_host(out, r, h)?,
        None => {
            let host = r.ledger_host_bytes();
            if host > 0 {
                let (up, down) = r.spec.host_traffic_bytes();
                writeln!(
                    out,
                    "Host memory    {} (bands placed on the host and host-side state); per step \
                     at most {} to the device and {} back",
                    format_bytes(host),
                    format_bytes(up),
                    format_bytes(down)
                )?;
            }
        }
    }
    write!(
        out,
        "Allocator reservation: estimated {}",
        format_bytes(r.reserved_estimate_bytes)
    )?;
    match r.measured_reserved_peak_bytes {
        Some(m) => writeln!(
            out,
            ", read {} (pages held, not part of the bar)",
            format_bytes(m)
        ),
        None => writeln!(out),
    }
}

/// The host side: each part at the process's predicted peak, the total, and the process's
/// anonymous memory read beside it when measured on flex.
fn write_host(out: &mut String, r: &Report, h: &HostReport) -> std::fmt::Result {
    let on_heap = match h.side.device_on_host {
        true => ", with the device's tensors on the same heap",
        false => "",
    };
    writeln!(
        out,
        "Host side      {} of the process's own memory; {} of anonymous memory at `{}`{on_heap}:",
        format_bytes(h.predicted_host_bytes),
        format_bytes(h.predicted_anonymous_bytes),
        h.predicted_anonymous_point.name()
    )?;
    for (name, bytes) in &h.parts {
        writeln!(out, "  {:<32} {:>12}", name, format_bytes(*bytes))?;
    }
    let (up, down) = r.spec.host_traffic_bytes();
    if up + down > 0 {
        writeln!(
            out,
            "  host tier: per step at most {} to the device and {} back",
            format_bytes(up),
            format_bytes(down)
        )?;
    }
    if let (Some(m), Some(e)) = (h.measured_anonymous_bytes, h.error_pct) {
        writeln!(
            out,
            "  measured anonymous memory (RssAnon) {} at `{}`: error {e:.2}% (bar {HOST_BAR_PCT}%)",
            format_bytes(m),
            h.measured_anonymous_point.map_or("-", Point::name)
        )?;
    }
    Ok(())
}

/// The entries alive at the predicted peak, grouped by category and layer.
fn write_peak_entries(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(
        out,
        "\nAt the predicted peak ({}, {} phase):",
        r.predicted_peak_point.name(),
        r.predicted_peak_phase.name()
    )?;
    writeln!(
        out,
        "  {:<18} {:<12} {:>12}  tensors",
        "category", "layer", "bytes"
    )?;
    let a = r.ledger.alignment_bytes;
    let alive = |e: &&widebag_ledger::Entry| {
        e.placement == Placement::Device && e.lifetime.alive_at(r.predicted_peak_point)
    };
    for cat in Category::ALL {
        if cat == Category::AllocatorPadding {
            let pad: u64 = r
                .ledger
                .entries
                .iter()
                .filter(alive)
                .map(|e| e.padding_bytes(a))
                .sum();
            if pad > 0 {
                writeln!(
                    out,
                    "  {:<18} {:<12} {:>12}  rounding each allocation to {a} B",
                    cat.name(),
                    "-",
                    format_bytes(pad)
                )?;
            }
            continue;
        }
        let mut by_layer: BTreeMap<&str, (u64, Vec<String>)> = BTreeMap::new();
        for e in r
            .ledger
            .entries
            .iter()
            .filter(alive)
            .filter(|e| e.category == cat)
        {
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
        for (layer, (bytes, names)) in by_layer {
            let mut list = names.join("; ");
            if list.len() > 90 {
                let mut cut = 87;
                while !list.is_char_boundary(cut) {
                    cut -= 1;
                }
                list.truncate(cut);
                list.push_str("...");
            }
            writeln!(
                out,
                "  {:<18} {:<12} {:>12}  {list}",
                cat.name(),
                layer,
                format_bytes(bytes)
            )?;
        }
    }
    writeln!(
        out,
        "  {:<18} {:<12} {:>12}",
        "total",
        "",
        format_bytes(r.predicted_peak_bytes)
    )
}

/// Every point, then every phase, predicted beside measured.
fn write_points(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "\nPoint by point (bytes in use, padding included):")?;
    writeln!(
        out,
        "  {:<16} {:<13} {:>14} {:>14} {:>8}",
        "point", "phase", "predicted", "measured", "error"
    )?;
    for p in &r.points {
        writeln!(
            out,
            "  {:<16} {:<13} {:>14} {:>14} {:>8}",
            p.point.name(),
            p.phase.name(),
            p.predicted_bytes,
            match p.measured_bytes {
                Some(m) => m.to_string(),
                None if !r.is_read(p) => "(unreadable)".into(),
                None => "-".into(),
            },
            p.error_pct.map_or("-".into(), |e| format!("{e:.2}%"))
        )?;
    }
    writeln!(out, "\nPer phase (peak of its points):")?;
    writeln!(
        out,
        "  {:<13} {:>14} {:>14} {:>14} {:>8}",
        "phase", "predicted", "at read points", "measured", "error"
    )?;
    for phase in Phase::ALL {
        if let Some(p) = r.phases.get(phase.name()) {
            let or_dash = |b: Option<u64>| b.map_or("-".into(), |b| b.to_string());
            writeln!(
                out,
                "  {:<13} {:>14} {:>14} {:>14} {:>8}",
                phase.name(),
                p.predicted_bytes,
                or_dash(p.predicted_read_bytes),
                or_dash(p.measured_bytes),
                p.error_pct().map_or("-".into(), |e| format!("{e:.2}%"))
            )?;
        }
    }
    if let Some(p) = &r.profile {
        writeln!(out, "\nStep profile (time by stage of the measured steps):")?;
        for st in &p.stages {
            writeln!(
                out,
                "  {:<16} {:>10.2} ms {:>5.1}%",
                st.stage.name(),
                st.ms_per_step,
                100.0 * st.share
            )?;
        }
        writeln!(
            out,
            "  {:<16} {:>10.2} ms over {} steps",
            "step", p.ms_per_step, p.steps
        )?;
    }
    Ok(())
}

/// Stacked bars per phase: the predicted bytes by category, and the measured total beside them.
pub fn write_svg(path: &Path, r: &Report) -> anyhow::Result<()> {
    // The readable point that sets each phase's predicted peak (the chart compares like with
    // like; predictions inside autodiff's backward are in the table).
    let phase_point = |phase: Phase| -> Point {
        r.points
            .iter()
            .filter(|p| p.phase == phase && r.is_read(p))
            .max_by_key(|p| p.predicted_bytes)
            .map_or(Point::Setup, |p| p.point)
    };
    let columns = Phase::ALL
        .into_iter()
        .filter_map(|phase| {
            let measured = r.phases.get(phase.name())?.measured_bytes;
            let cats = r
                .ledger
                .categories_at(Placement::Device, phase_point(phase));
            Some(StackedColumn::new(
                phase.name().to_string(),
                |c| cats.get(&c).copied().unwrap_or(0),
                measured,
            ))
        })
        .collect();
    let title = format!(
        "{} layout, batch {}: predicted (stacked) vs measured, MiB",
        r.layout.name(),
        r.spec.batch.n_rows
    );
    write_stacked(
        path,
        &StackedChart {
            title: &title,
            x_desc: "",
            columns,
            measured_label: "measured (allocator)",
            legend_at: SeriesLabelPosition::UpperRight,
        },
    )
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use widebag_config::Config;
    use widebag_ledger::step::DeviceFacts;
    use widebag_prepare::{PrepareOptions, open_data};

    use super::*;
    use crate::preflight::predict;

    /// The quickstart predicted for lavapipe's limits: no device, deterministic.
    fn quickstart_report() -> Report {
        let prepared = open_data(&Config::default(), &PrepareOptions::READ_ONLY).unwrap();
        let device = DeviceFacts {
            max_buffer_bytes: 128 << 20,
            alignment_bytes: 32,
            host_threads: 0,
            bf16: false,
            host_memory: false,
        };
        let (spec, ledger) = predict(&prepared, device).unwrap();
        super::super::report::report(spec, ledger, "test adapter", None)
    }

    #[test]
    fn the_chart_has_a_column_per_phase() {
        let path = std::env::temp_dir().join(format!("widebag-explain-{}.svg", std::process::id()));
        write_svg(&path, &quickstart_report()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for label in [
            "forward",
            "backward",
            "table_update",
            "dense_update",
            "optimizer_state",
        ] {
            assert!(svg.contains(label), "{label}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_quickstart_ledger_renders_as_before() {
        expect![[r#"
            widebag explain: sparse layout, 240000 → 32 → [64] → 240000 classes, batch 64 (1009 nnz, 739 unique ids, 64 targets), optimizers table adam / dense adam
              device: test adapter (largest buffer 128.00 MiB, alignment 32 B)

            At the predicted peak (backward.logits, backward phase):
              category           layer               bytes  tensors
              parameters         hidden.0         8.25 KiB  hidden.0.weight [32, 64]; hidden.0.bias [1, 64]
              parameters         input               128 B  bag.bias [1, 32]
              parameters         output.0        59.51 MiB  output.0.weight [64, 240000]; output.0.bias [1, 240000]
              parameters         table           29.30 MiB  table shard [240000, 32]
              dense_gradients    output.0        59.51 MiB  output.0.weight.grad [64, 240000]; output.0.bias.grad [1, 240000]
              optimizer_state    hidden.0        16.50 KiB  hidden.0.weight.adam.m [32, 64]; hidden.0.weight.adam.v [32, 64]; hidden.0.bias.adam.m ...
              optimizer_state    input               256 B  bag.bias.adam.m [1, 32]; bag.bias.adam.v [1, 32]
              optimizer_state    output.0       119.02 MiB  output.0.weight.adam.m [64, 240000]; output.0.weight.adam.v [64, 240000]; output.0.bias...
              optimizer_state    table           58.59 MiB  table shard lazy_adam.m [240000, 32]; table shard lazy_adam.v [240000, 32]
              activations        hidden.0        32.00 KiB  pre-activation (saved by relu) [64, 64]; output (saved by the next matmul) [64, 64]
              activations        input           16.00 KiB  pre-activation (saved by relu) [64, 32]; output (saved by the next matmul) [64, 32]
              activations        output              256 B  log-sum-exp per row [64, 1]
              activations        table           92.38 KiB  gathered unique rows (gradient leaves) [739, 32]
              batch_buffers      batch           12.82 KiB  bag entry positions (i32) [1009]; bag entry rows (i32) [1009]; bag entry values [1009];...
              batch_buffers      output              256 B  target flat indices per class chunk (i32, for the loss) [64]
              logits             output          58.59 MiB  logit gradient of the last chunk [64, 240000]
              temporaries        output          16.00 KiB  dL/dh (accumulated over chunks) [64, 64]
              allocator_padding  -                    84 B  rounding each allocation to 32 B
              total                             384.71 MiB

            Point by point (bytes in use, padding included):
              point            phase              predicted       measured    error
              setup            forward            279385728              -        -
              forward.logits   forward            340982976              -        -
              forward.end      forward            279543200              -        -
              backward.logits  backward           403399584              -        -
              backward.end     backward           342013600              -        -
              table_update     table_update       342078080              -        -
              dense_update     dense_update       341794304              -        -
              step.end         dense_update       279385728              -        -

            Per phase (peak of its points):
              phase              predicted at read points       measured    error
              forward            340982976              -              -        -
              backward           403399584              -              -        -
              table_update       342078080              -              -        -
              dense_update       341794304              -              -        -

            Predicted peak 384.71 MiB (403399584 B) at backward.logits
              an evaluation pass peaks at 383.77 MiB: the parameters and state (266.44 MiB) and its temporaries (largest: masked scores [batch, chunk], 58.59 MiB)
              checkpointing "none": the MLP saves 768 B per example (0.08% of a 937.50 KiB logit row); recomputing it ("mlp") frees 32.00 KiB inside the output backward; the step's peak: 384.68 MiB (−32.00 KiB against "none")
            Host memory    8 B (bands placed on the host and host-side state); per step at most 0 B to the device and 0 B back
            Allocator reservation: estimated 395.89 MiB
        "#]].assert_eq(&render(&quickstart_report()));
    }
}
