//! A training run's summary for a terminal (`widebag train`'s closing report): the model, the
//! optimizers, throughput, loss, memory, evaluations and the step's profile, and across ranks
//! what rank 0 owns and sent.

use std::fmt::Write;

use widebag_config::units::format_bytes;
use widebag_model::RunSummary;

/// The run's summary for a terminal.
pub fn render_summary(s: &RunSummary) -> String {
    let mut out = String::new();
    write_summary(&mut out, s).expect("writing to a String");
    out
}

fn write_summary(out: &mut String, s: &RunSummary) -> std::fmt::Result {
    match &s.across {
        None => writeln!(out, "widebag train: done")?,
        Some(a) => writeln!(out, "widebag train: done across {} ranks", a.ranks)?,
    }
    writeln!(out, "  adapter            {} [{:?}]", s.adapter, s.backend)?;
    if let Some(compiler) = &s.compiler {
        writeln!(out, "  compiler           {compiler}")?;
    }
    writeln!(
        out,
        "  model              {} → {} → {:?} → {} classes ({} table shards, {} class chunks)",
        s.width, s.dim, s.hidden, s.n_classes, s.table_shards, s.class_chunks
    )?;
    match s.tied_output {
        true => writeln!(
            out,
            "  optimizers         dense {:?} (the table is the output layer's weight)",
            s.dense_optimizer
        )?,
        false => writeln!(
            out,
            "  optimizers         table {:?}, dense {:?}",
            s.table_optimizer, s.dense_optimizer
        )?,
    }
    writeln!(
        out,
        "  steps × batch      {} × {}  ({:.1} examples/s after the first step)",
        s.steps, s.batch_size, s.examples_per_s
    )?;
    writeln!(
        out,
        "  loss               {:.4} → {:.4} (mean of last 10: {:.4})",
        s.first_loss, s.final_loss, s.final_loss_mean10
    )?;
    writeln!(
        out,
        "  table / parameters {} / {} ({} input-side and {} output values)",
        format_bytes(s.table_bytes),
        format_bytes(s.parameter_bytes),
        s.table_parameters,
        s.output_parameters
    )?;
    writeln!(out, "  output             {}", s.output.name())?;
    for b in &s.bands {
        writeln!(out, "  {}", b.line())?;
    }
    if s.host_bytes > 0 {
        writeln!(
            out,
            "  host bands         {} in host memory; per step {} to the device, {} back",
            format_bytes(s.host_bytes),
            format_bytes(s.host_to_device_bytes_per_step.round() as u64),
            format_bytes(s.device_to_host_bytes_per_step.round() as u64)
        )?;
    }
    if let Some(l) = s.eval_loss {
        writeln!(
            out,
            "  validation loss    {l:.4} over {} held-out rows",
            s.eval_rows
        )?;
    }
    if let Some(e) = s.evaluations.last() {
        writeln!(
            out,
            "  evaluation         {} (after step {})",
            e.line, e.step
        )?;
    }
    if let Some(d) = &s.data {
        writeln!(
            out,
            "  data               {} ({}, {} rows, {} epochs started, {:.1} unique ids per batch)",
            d.path.display(),
            d.format.name(),
            d.rows,
            s.epochs.unwrap_or(0),
            d.unique_ids_per_batch
        )?;
        if let Some(v) = &d.vocabulary_file {
            writeln!(out, "  vocabulary         {}", v.display())?;
        }
        if let Some(f) = &d.stats_file {
            let how = if d.stats_reused { "reused" } else { "saved" };
            writeln!(out, "  statistics         {} ({how})", f.display())?;
        }
    }
    match (s.peak_in_use_bytes, s.peak_reserved_bytes) {
        // flex's tensors live on the heap: its peak is the heap's, read at the step's points.
        (Some(u), _) if s.backend == widebag_model::BackendKind::Flex => writeln!(
            out,
            "  peak memory        {} in use (the heap above its start: flex's tensors and the \
             step's host buffers)",
            format_bytes(u)
        )?,
        (Some(u), Some(r)) => writeln!(
            out,
            "  peak device memory {} in use, {} reserved (burn allocator)",
            format_bytes(u),
            format_bytes(r)
        )?,
        _ => writeln!(out, "  peak device memory not reported by this backend")?,
    }
    if let Some(rss) = s.peak_rss_bytes {
        writeln!(
            out,
            "  peak process RSS   {} (host memory, data included)",
            format_bytes(rss)
        )?;
    }
    writeln!(out, "  step profile       {}", profile_line(&s.profile))?;
    if let Some(a) = &s.across {
        write_ranks(out, a)?;
    }
    Ok(())
}

/// What rank 0 owns and sent, and what the pooled exchange would have sent instead.
fn write_ranks(out: &mut String, a: &widebag_model::AcrossRanks) -> std::fmt::Result {
    writeln!(
        out,
        "  rank 0 owns        rows {:?} per band, {} classes",
        a.owned_rows, a.owned_classes
    )?;
    let rows_exchange: f64 = a
        .sent_bytes_per_step
        .iter()
        .filter(|(k, _)| k.ends_with("(all-to-all)"))
        .map(|(_, v)| v)
        .sum();
    writeln!(
        out,
        "  row exchange       {} per step as rows; pooled partial sums would send {} ({:.2}×)",
        format_bytes(rows_exchange as u64),
        format_bytes(a.pooled_alternative_bytes_per_step as u64),
        a.pooled_alternative_bytes_per_step / rows_exchange.max(1.0)
    )?;
    for (what, bytes) in &a.sent_bytes_per_step {
        writeln!(
            out,
            "  rank 0 sent        {} per step: {what}",
            format_bytes(*bytes as u64)
        )?;
    }
    Ok(())
}

/// `ms per step` and the largest stages with their shares, e.g.
/// `41.2 ms/step: output_backward 48% · output_forward 30% · …`.
pub fn profile_line(p: &widebag_model::ProfileReport) -> String {
    let stages: Vec<String> = p
        .top()
        .iter()
        .filter(|s| s.share >= 0.01)
        .map(|s| format!("{} {:.0}%", s.stage.name(), 100.0 * s.share))
        .collect();
    format!(
        "{:.1} ms/step over {} steps{}: {}",
        p.ms_per_step,
        p.steps,
        if p.synced { " (synced)" } else { "" },
        stages.join(" · ")
    )
}
