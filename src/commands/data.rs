//! `widebag data`: `stats` describes a data file in the terms that decide memory (a packed
//! dataset's from its header alone), `convert` rewrites it as libsvm or npz, `synth` writes the
//! configured synthetic rows to a file, `pack` writes widebag's packed format.

use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write;
use std::path::Path;

use widebag_data::Source;
use widebag_data::packed::PackMeta;
use widebag_data::stats::DataStats;

use crate::args::{
    ConvertArgs, DataCommand, OutFormat, PackArgs, StatsArgs, SynthArgs, SynthFormat,
};
use crate::failure::{Failure, Outcome};
use crate::request;

pub fn run(command: &DataCommand) -> Outcome {
    match command {
        DataCommand::Stats(args) => stats(args),
        DataCommand::Convert(args) => convert(args),
        DataCommand::Synth(args) => synth(args),
        DataCommand::Pack(args) => pack(args),
    }
}

/// Loads a source and saves a text vocabulary beside `vocab_beside` (when given); data errors are
/// usage errors (exit 2).
fn load_source(
    source: &Source,
    vocab_beside: Option<&Path>,
) -> Result<widebag_data::Loaded, Failure> {
    let loaded = widebag_data::load(source).map_err(Failure::usage)?;
    if let (Some(v), Some(beside)) = (&loaded.vocabulary, vocab_beside) {
        match widebag_data::sidecar::save_sidecar(beside, "vocab.tsv", &v.to_tsv()) {
            Ok(p) => eprintln!(
                "widebag: vocabulary of {} words saved to {}",
                v.len(),
                p.display()
            ),
            Err(e) => eprintln!("widebag: vocabulary not saved: {e}"),
        }
    }
    if loaded.dataset.skipped_lines > 0 {
        eprintln!(
            "widebag: skipped {} bad lines",
            loaded.dataset.skipped_lines
        );
    }
    Ok(loaded)
}

fn stats(args: &StatsArgs) -> Outcome {
    let source = request::source(&args.source)?;
    if widebag_data::packed::is_packed(&source.path) {
        // Everything is in the header: nothing is read beyond it, nothing is saved beside it.
        let meta = widebag_data::packed::read::read_meta(&source.path).map_err(Failure::usage)?;
        return print_stats(&source.path, &meta.stats, args.json);
    }
    let beside = (!args.no_save).then_some(source.path.as_path());
    let dataset = load_source(&source, beside)?.dataset;
    let mut stats = widebag_data::stats::compute(&dataset, args.samples, 0);
    if !args.no_save {
        match widebag_data::stats::save(&source, &mut stats) {
            Ok(p) => eprintln!("widebag: statistics saved to {}", p.display()),
            Err(e) => eprintln!("widebag: statistics not saved: {e}"),
        }
    }
    print_stats(&source.path, &stats, args.json)
}

fn print_stats(path: &Path, stats: &DataStats, json: bool) -> Outcome {
    if json {
        println!("{}", serde_json::to_string(stats).expect("stats serialise"));
    } else {
        print!("{}", render_stats(path, stats));
    }
    Ok(())
}

/// A file's statistics for a terminal.
fn render_stats(path: &Path, stats: &DataStats) -> String {
    let mut out = String::new();
    let mut write = || -> std::fmt::Result {
        writeln!(out, "{}", path.display())?;
        writeln!(
            out,
            "  rows {}  width {}  classes {}  empty rows {}",
            stats.rows, stats.width, stats.n_classes, stats.empty_rows
        )?;
        let n = &stats.nnz_per_row;
        writeln!(
            out,
            "  nnz {} (per row: min {}, mean {:.2}, p50 {}, p99 {}, max {})",
            stats.nnz_total, n.min, n.mean, n.p50, n.p99, n.max
        )?;
        writeln!(out, "  ids used {}", stats.ids_used)?;
        for (k, share) in &stats.top_coverage {
            writeln!(out, "  top {k:>8} ids cover {:6.2}% of nnz", 100.0 * share)?;
        }
        for (b, u) in &stats.unique_ids_per_batch {
            writeln!(out, "  batch {b:>5}: {u:10.1} unique ids")?;
        }
        Ok(())
    };
    write().expect("writing to a String");
    out
}

fn convert(args: &ConvertArgs) -> Outcome {
    let source = request::source(&args.source)?;
    // The ids of a converted text corpus mean nothing without its vocabulary: keep it beside
    // the output.
    let dataset = load_source(&source, Some(&args.out))?.dataset;
    write_dataset(&dataset, args.to, &args.out)?;
    let shape = dataset.shape();
    eprintln!(
        "widebag: wrote {} rows, width {}, {} nnz to {}",
        shape.rows,
        shape.width,
        shape.nnz_total,
        args.out.display()
    );
    Ok(())
}

fn write_dataset(dataset: &widebag_data::Dataset, to: OutFormat, out: &Path) -> Outcome {
    match to {
        OutFormat::Libsvm => widebag_data::libsvm::write_libsvm(dataset, out, true),
        OutFormat::Npz => widebag_data::npz::write_npz(dataset, out),
    }
    .map_err(Failure::run)
}

fn synth(args: &SynthArgs) -> Outcome {
    let config = request::config(&args.config)?;
    let stream = widebag_data::SyntheticStream::new(widebag_prepare::synthetic_spec(&config))
        .map_err(Failure::usage)?;
    let (to, nnz) = match args.to {
        SynthFormat::Libsvm | SynthFormat::Npz => {
            let dataset = widebag_data::synthetic::to_dataset(&stream, args.rows);
            let to = match args.to {
                SynthFormat::Libsvm => OutFormat::Libsvm,
                _ => OutFormat::Npz,
            };
            write_dataset(&dataset, to, &args.out)?;
            ("", dataset.rows.nnz() as u64)
        }
        SynthFormat::Packed => (" (packed)", synth_packed(&stream, args)?),
    };
    eprintln!(
        "widebag: wrote {} synthetic rows ({nnz} nnz) to {}{to}",
        args.rows,
        args.out.display()
    );
    Ok(())
}

/// Synthetic rows streamed into a packed file, generated in parallel a chunk at a time.
fn synth_packed(stream: &widebag_data::SyntheticStream, args: &SynthArgs) -> Result<u64, Failure> {
    use widebag_data::packed::stream::{Extent, StreamHeader, pack_rows};
    use widebag_data::packed::write::Row;
    const CHUNK_ROWS: usize = 1 << 16;
    let header = StreamHeader {
        variant: "synthetic".into(),
        width: stream.spec().width,
        n_classes: stream.spec().n_classes,
        extent: Extent::Declared,
        notes: vec![format!("synthetic (seed {})", stream.spec().seed)],
        vocabulary: None,
        labels: None,
    };
    let options = widebag_data::packed::PackOptions {
        block_rows: args.block_rows,
        ..Default::default()
    };
    let meta = pack_rows(header, &args.out, options, |sink| {
        for start in (0..args.rows).step_by(CHUNK_ROWS) {
            let end = (start + CHUNK_ROWS).min(args.rows);
            for (row, target) in widebag_data::synthetic::rows_in(stream, start..end) {
                let (targets, weights) = match &target {
                    widebag_csr::RowTarget::Class(c) => (vec![*c], vec![1.0]),
                    widebag_csr::RowTarget::Bag(b) => (b.ids.clone(), b.values.clone()),
                };
                let written = sink.push(Row {
                    ids: &row.ids,
                    values: &row.values,
                    targets: &targets,
                    weights: &weights,
                });
                written.map_err(|source| widebag_data::DataError::Io {
                    path: args.out.clone(),
                    source,
                })?;
            }
        }
        Ok(())
    })
    .map_err(|e| match e {
        widebag_data::DataError::InvalidSpec { .. } => Failure::usage(e),
        e => Failure::run(e),
    })?;
    Ok(meta.nnz)
}

fn pack(args: &PackArgs) -> Outcome {
    let source = request::source(&args.source)?;
    let started = std::time::Instant::now();
    let bar = PackBar::new(args.json);
    let advance = bar.0.clone();
    let options = widebag_data::packed::PackOptions {
        block_rows: args.block_rows,
        stats_samples: args.samples,
        progress: widebag_data::Progress::new(move |n| advance.inc(n)),
    };
    let streamed =
        pack_streamed(&source, &args.out, options.clone(), &bar).map_err(pack_failure)?;
    let how = if streamed.is_some() { ", streamed" } else { "" };
    let meta = match streamed {
        Some(meta) => meta,
        None => pack_whole(&source, &args.out, options, &bar)?,
    };
    drop(bar);
    let bytes = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    let seconds = started.elapsed().as_secs_f64();
    print_packed(args, &meta, (bytes, seconds), how);
    Ok(())
}

/// The bar `pack` draws (only on a terminal): over the source's bytes while a streamed pack reads
/// it (each pass), over the rows while a source read whole is written. Cleared however the pack
/// ends (an error included), so no half-drawn bar stays.
struct PackBar(ProgressBar);

impl PackBar {
    /// A bar that draws nothing when `hidden` (`--json`).
    fn new(hidden: bool) -> Self {
        Self(match hidden {
            true => ProgressBar::hidden(),
            false => ProgressBar::new(0),
        })
    }

    /// Starts the bar again over `len`, its count shown as `unit`.
    fn set(&self, len: u64, unit: &str) {
        self.0.set_position(0);
        self.0.set_length(len);
        let template = format!("{{bar:30}} {unit}  {{msg}}  [{{elapsed}}<{{eta}}]");
        self.0
            .set_style(ProgressStyle::with_template(&template).expect("valid template"));
    }
}

impl Drop for PackBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A pack's data errors: a bad setting or line is a usage error (exit 2), any other a run error.
fn pack_failure(e: widebag_data::DataError) -> Failure {
    match e {
        widebag_data::DataError::InvalidSpec { .. } | widebag_data::DataError::Parse { .. } => {
            Failure::usage(e)
        }
        e => Failure::run(e),
    }
}

/// The size of the file at `p` in bytes (0 when it cannot be read).
fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Packs `source` into `out` as it is read, `bar` set over the source bytes of every pass.
/// Every format is packed so, in a pass or two more for what the rows need first (libsvm's shape
/// when undeclared, the users, the vocabulary and the classes). LightGCN lists whose users are
/// not one line each in ascending order are not (`None`): they are read whole.
fn pack_streamed(
    source: &Source,
    out: &Path,
    options: widebag_data::packed::PackOptions,
    bar: &PackBar,
) -> Result<Option<PackMeta>, widebag_data::DataError> {
    match source.format {
        widebag_data::Format::Libsvm => {
            let passes = widebag_data::libsvm::passes(&source.path, &source.read);
            bar.set(
                passes * file_size(&source.path),
                "{bytes}/{total_bytes} read",
            );
            widebag_data::libsvm::pack_libsvm(
                &source.path,
                &source.read,
                &source.variant(),
                out,
                options,
            )
            .map(Some)
        }
        widebag_data::Format::Lightgcn => {
            // The held-out file is read twice, the training file once.
            let test = source.test_path.as_deref();
            let passes = file_size(&source.path) + 2 * test.map_or(0, file_size);
            bar.set(passes, "{bytes}/{total_bytes} read");
            widebag_data::lightgcn::pack_lightgcn(
                &source.path,
                test,
                &source.read,
                &source.variant(),
                out,
                options,
            )
        }
        widebag_data::Format::Npz => {
            bar.set(file_size(&source.path), "{bytes}/{total_bytes} read");
            widebag_data::npz::pack_npz(&source.path, &source.read, &source.variant(), out, options)
                .map(Some)
        }
        widebag_data::Format::Text => {
            let bytes = widebag_data::text::corpus_bytes(&source.path);
            bar.set(2 * bytes, "{bytes}/{total_bytes} read");
            widebag_data::text::pack_text(
                &source.path,
                &source.read,
                (&source.text, &source.label),
                &source.variant(),
                out,
                options,
            )
            .map(Some)
        }
        widebag_data::Format::Dictd => {
            let dict = widebag_data::dictd::locate(&source.path).map(|f| file_size(&f.dict));
            bar.set(2 * dict.unwrap_or(0), "{bytes}/{total_bytes} read");
            widebag_data::dictd::pack_dictd(
                &source.path,
                &source.read,
                &source.text,
                &source.variant(),
                out,
                options,
            )
            .map(Some)
        }
    }
}

/// Reads `source` whole (a spinner on `bar` meanwhile) and packs it into `out`, `bar` set over
/// the rows written.
fn pack_whole(
    source: &Source,
    out: &Path,
    options: widebag_data::packed::PackOptions,
    bar: &PackBar,
) -> Result<PackMeta, Failure> {
    let spinner = ProgressStyle::with_template("{spinner} {msg}  [{elapsed}]");
    bar.0.set_style(spinner.expect("valid template"));
    bar.0
        .set_message(format!("reading {}", source.path.display()));
    bar.0
        .enable_steady_tick(std::time::Duration::from_millis(200));
    let loaded = load_source(source, None)?;
    bar.0.disable_steady_tick();
    let rows = loaded.dataset.n_rows() * (1 + usize::from(loaded.test.is_some()));
    bar.0.set_message("");
    bar.set(rows as u64, "{pos}/{len} rows written");
    widebag_data::packed::pack(&loaded, &source.variant(), out, options).map_err(pack_failure)
}

/// Tells what `pack` wrote (`bytes` in `seconds`; `how`: ", streamed" or nothing): a JSON object
/// on stdout with `--json`, else a line on stderr.
fn print_packed(args: &PackArgs, meta: &PackMeta, (bytes, seconds): (u64, f64), how: &str) {
    if args.json {
        let out = serde_json::json!({
            "out": args.out,
            "rows": meta.n_rows,
            "width": meta.width,
            "n_classes": meta.n_classes,
            "nnz": meta.nnz,
            "blocks": meta.blocks.len(),
            "bytes": bytes,
            "seconds": seconds,
            "streamed": !how.is_empty(),
        });
        println!("{out}");
    } else {
        eprintln!(
            "widebag: packed {} rows, width {}, {} nnz into {} blocks, {} bytes, in {seconds:.2} s{how}: {}",
            meta.n_rows,
            meta.width,
            meta.nnz,
            meta.blocks.len(),
            bytes,
            args.out.display()
        );
    }
}
