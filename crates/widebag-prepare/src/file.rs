//! A data file opened for a run: read into memory by its format's reader, or, for a packed
//! dataset, read in place through its memory map (nothing in proportion to its size is read
//! before the first batch); then renumbered for head/tail bands, split into training and
//! held-out rows, and walked in shuffled epochs.

use std::collections::BTreeMap;
use std::sync::Arc;

use widebag_config::Config;
use widebag_csr::CsrBatch;
use widebag_data::held_out::{TrainShape, lightgcn_held_out};
use widebag_data::packed::PackedFile;
use widebag_data::packed::read::Part;
use widebag_data::stats::{self, DataStats};
use widebag_data::{
    BatchSource, Dataset, HeldOut, Relabel, Shuffle, Source, TrainRows, Vocabulary, sidecar,
};

use crate::bands::{Frequencies, resolve_bands, wants_class_counts, wants_frequencies};
use crate::error::PrepareError;
use crate::given::{held_batches, renumber, with_users};
use crate::prepared::{DataSummary, PrepareOptions, Prepared, Sidecars, model_bands, stats_for};
use crate::split::held_rows;

/// Where the rows are.
enum Rows {
    Memory(Box<Dataset>),
    Mapped(Box<PackedFile>),
}

impl Rows {
    fn width(&self) -> usize {
        match self {
            Rows::Memory(d) => d.width,
            Rows::Mapped(f) => f.meta.width as usize,
        }
    }

    fn n_classes(&self) -> usize {
        match self {
            Rows::Memory(d) => d.n_classes,
            Rows::Mapped(f) => f.meta.n_classes as usize,
        }
    }

    fn frequencies(&self) -> Result<Frequencies, PrepareError> {
        let (ids, classes) = match self {
            Rows::Memory(d) => widebag_data::frequencies::of_store(&d.rows, d.width, d.n_classes),
            Rows::Mapped(f) => f.frequencies().map_err(PrepareError::data("data.path"))?,
        };
        Ok(Frequencies { ids, classes })
    }

    /// The rows as training reads them, renumbered by `relabel`.
    fn train(self, relabel: &Relabel) -> TrainRows {
        match self {
            Rows::Memory(mut d) => {
                relabel.dataset(&mut d);
                TrainRows::memory(*d)
            }
            Rows::Mapped(f) => TrainRows::mapped(*f, relabel.clone()),
        }
    }
}

/// A file read, before its rows are renumbered and split.
struct Opened {
    rows: Rows,
    held: Option<HeldOut>,
    vocabulary: Option<Vocabulary>,
    labels: Option<Vec<String>>,
    summary: DataSummary,
}

/// A packed dataset is read in place unless a separate held-out file must be read against its
/// rows in memory (one packed without its held-out rows, with `data.test_path` set).
fn reads_in_place(src: &Source) -> bool {
    widebag_data::packed::is_packed(&src.path)
        && (src.test_path.is_none()
            || widebag_data::packed::read::read_meta(&src.path)
                .is_ok_and(|m| m.test_blocks.is_some()))
}

/// Opens the configured data (a file, or the synthetic stream) and prepares the run.
pub fn open_data(config: &Config, options: &PrepareOptions) -> Result<Prepared, PrepareError> {
    let formed = with_packed_settings(config)?;
    let config = formed.as_ref().unwrap_or(config);
    match crate::source::source(&config.data) {
        Some(src) => open_file(config, &src, options),
        None => crate::prepared::open_synthetic(config),
    }
}

/// A packed dataset named by `data.path` alone (no `data.format`): the config with the format
/// and row-forming settings its header records (`Source::settings_of` its variant), so the run
/// is prepared, evaluated and saved as one on the source it was packed from. `None` when
/// `data.format` is set or there is no file.
pub fn with_packed_settings(config: &Config) -> Result<Option<Config>, PrepareError> {
    let d = &config.data;
    let Some(path) = d.resolved_path().filter(|_| d.format.is_none()) else {
        return Ok(None);
    };
    let meta =
        widebag_data::packed::read::read_meta(&path).map_err(PrepareError::data("data.path"))?;
    let Some((format, text, label)) = Source::settings_of(&meta.variant) else {
        return Err(PrepareError::setting(
            "data.format",
            format!(
                "{} records its rows as `{}`, which this widebag does not know: set data.format",
                path.display(),
                meta.variant
            ),
        ));
    };
    let mut c = config.clone();
    c.data.format = Some(format);
    if format.is_text() {
        c.data.mode = Some(text.mode);
        (c.data.window, c.data.min_count, c.data.max_vocab) =
            (text.window, text.min_count, text.max_vocab);
    }
    c.data.label = label.mode;
    c.data.label_chars = [label.start, label.end];
    Ok(Some(c))
}

/// Opens `src` for `config` and prepares the run.
fn open_file(
    config: &Config,
    src: &Source,
    options: &PrepareOptions,
) -> Result<Prepared, PrepareError> {
    let mut warnings = Vec::new();
    let opened = match reads_in_place(src) {
        true => open_mapped(config, src, &mut warnings)?,
        false => open_memory(config, src, options, &mut warnings)?,
    };
    let Opened {
        rows,
        mut held,
        vocabulary,
        labels,
        mut summary,
    } = opened;
    let (width, n_classes) = (rows.width(), rows.n_classes());
    check_classes(config, src, n_classes)?;
    let mut resolved = config.clone();
    resolved.data.width = width;
    resolved.data.n_classes = Some(n_classes);
    let (mut bands, mut relabel) = (Vec::new(), Relabel::default());
    let mut class_counts = Vec::new();
    if wants_frequencies(config) {
        let mut freq = rows.frequencies()?;
        relabel = freq.renumber(config);
        bands = resolve_bands(&mut resolved, &freq, &relabel)?;
        if wants_class_counts(config) {
            class_counts = freq.classes;
        }
        if let Some(h) = &mut held {
            renumber(&relabel, h);
        }
    }
    let mut train = rows.train(&relabel);
    let mut user_columns = None;
    if config.data.user_vector > 0.0 {
        let (rows, users) = train.with_user_columns(config.data.user_vector);
        (train, user_columns) = (rows, Some(users));
        resolved.data.width = users.width();
    }
    let bs = config.train.batch_size.max(1);
    let (mut eval, mut eval_seen, mut eval_users) = (Vec::new(), Vec::new(), None);
    let n_eval = config.train.eval_rows;
    if let Some(h) = held {
        eval_users = h.users.clone();
        for n in &h.notes {
            warnings.push(format!("{}: {n}", h.dataset.source.display()));
        }
        (eval, eval_seen) = held_batches(&h, bs)?;
        if let Some(u) = &user_columns {
            eval = with_users(u, eval, eval_users.as_deref())?;
        }
    } else if n_eval > 0 {
        let n = train.n_all();
        if n_eval >= n {
            return Err(PrepareError::setting(
                "train.eval_rows",
                format!(
                    "{n_eval} held-out rows leave none of {}'s {n} rows to train on",
                    src.path.display(),
                ),
            ));
        }
        train = train.hold_out(held_rows(n, n_eval, config.train.seed));
        eval = held_rows_batches(&train, bs)?;
    }
    summary.train_rows = train.n_rows();
    if let Some(epochs) = config.train.epochs {
        resolved.train.steps = epochs * train.n_rows().div_ceil(bs);
    }
    let shuffle = Shuffle {
        mode: config.data.shuffle,
        block_rows: config.data.shuffle_block_rows,
        window_rows: config.data.shuffle_rows,
        streams: config.data.shuffle_streams,
    };
    let batches = BatchSource::rows(Arc::new(train), config.train.seed, shuffle)
        .map_err(PrepareError::data("data.shuffle_streams"))?;
    let mut model_bands = model_bands(&resolved)?;
    model_bands.class_counts = class_counts;
    Ok(Prepared {
        config: resolved,
        batches,
        data: Some(summary),
        warnings,
        eval,
        eval_seen,
        eval_users,
        bands,
        model_bands,
        relabel,
        vocabulary,
        labels,
        user_columns,
    })
}

/// An error unless the file's `n_classes` is the config's (where it names one) and at least 2.
fn check_classes(config: &Config, src: &Source, n_classes: usize) -> Result<(), PrepareError> {
    if let Some(n) = config.data.n_classes
        && n != n_classes
    {
        return Err(PrepareError::setting(
            "data.n_classes",
            format!(
                "{} has {n_classes} classes; leave data.n_classes unset when training on a file",
                src.path.display(),
            ),
        ));
    }
    if config.model.output.sampled() {
        widebag_config::check_negatives(config.model.sampling.negatives, n_classes).map_err(
            |(key, msg)| PrepareError::setting(key, format!("{msg} ({})", src.path.display())),
        )?;
    }
    if n_classes < 2 {
        return Err(PrepareError::setting(
            "data.path",
            format!(
                "{} has {n_classes} class(es); training needs at least 2",
                src.path.display(),
            ),
        ));
    }
    Ok(())
}

/// The held-out rows of `train` as batches of `bs`, in file order.
fn held_rows_batches(train: &TrainRows, bs: usize) -> Result<Vec<CsrBatch>, PrepareError> {
    let held = train.held().to_vec();
    held.chunks(bs)
        .map(|rows| {
            train
                .batch(rows)
                .map_err(PrepareError::data("train.eval_rows"))
        })
        .collect()
}

/// The summary of a file of `stats`' shape.
fn summary(
    src: &Source,
    stats: &DataStats,
    skipped_lines: usize,
    notes: Vec<String>,
) -> DataSummary {
    DataSummary {
        path: src.path.clone(),
        format: src.format,
        rows: stats.rows,
        train_rows: stats.rows,
        width: stats.width,
        n_classes: stats.n_classes,
        nnz_total: stats.nnz_total,
        empty_rows: stats.empty_rows,
        skipped_lines,
        vocabulary_file: None,
        stats_file: None,
        stats_reused: true,
        unique_ids_per_batch: 0.0,
        notes,
    }
}

/// A packed dataset, read in place: its header gives the shape, statistics, vocabulary and
/// class names; LightGCN held-out rows come from its held-out blocks.
fn open_mapped(
    config: &Config,
    src: &Source,
    warnings: &mut Vec<String>,
) -> Result<Opened, PrepareError> {
    let file = PackedFile::open(&src.path).map_err(PrepareError::data("data.path"))?;
    widebag_data::open::check_variant(&file, src).map_err(PrepareError::data("data.path"))?;
    let m = &file.meta;
    let mut summary = summary(src, &m.stats, m.skipped_lines as usize, m.notes.clone());
    summary.unique_ids_per_batch = stats::unique_ids_at(&m.stats, config.train.batch_size);
    let held = match m.test_blocks.is_some() {
        true => {
            if let Some(p) = &src.test_path {
                warnings.push(format!(
                    "{} holds its held-out rows: data.test_path {} is not read",
                    src.path.display(),
                    p.display()
                ));
            }
            Some(packed_held_out(&file)?)
        }
        false => None,
    };
    Ok(Opened {
        vocabulary: m.vocabulary.clone().map(Vocabulary::from_words),
        labels: m.labels.clone(),
        rows: Rows::Mapped(Box::new(file)),
        held,
        summary,
    })
}

/// LightGCN held-out rows from a packed file's held-out blocks (row `u`: user `u`'s held-out
/// items), against the users' training rows read from the map.
fn packed_held_out(file: &PackedFile) -> Result<HeldOut, PrepareError> {
    let n_test = file
        .blocks(Part::Test)
        .iter()
        .map(|b| b.rows as usize)
        .sum();
    let all: Vec<usize> = (0..n_test).collect();
    let test = file
        .gather(Part::Test, &all)
        .map_err(PrepareError::data("data.path"))?;
    let by_user: BTreeMap<u32, Vec<u32>> = (0..n_test)
        .filter(|&u| !test.row(u).0.is_empty())
        .map(|u| (u as u32, test.row(u).0.to_vec()))
        .collect();
    let shape = TrainShape {
        users: file.meta.n_rows as usize,
        width: file.meta.width as usize,
        n_classes: file.meta.n_classes as usize,
    };
    let users: Vec<usize> = by_user
        .keys()
        .map(|&u| u as usize)
        .filter(|&u| u < shape.users)
        .collect();
    let train = file
        .gather(Part::Rows, &users)
        .map_err(PrepareError::data("data.path"))?;
    let at: BTreeMap<usize, usize> = users.iter().enumerate().map(|(k, &u)| (u, k)).collect();
    let items = |u: usize| train.row(at[&u]).0.to_vec();
    let (held, _) = lightgcn_held_out(file.path(), by_user, shape, items, 0);
    Ok(held)
}

/// A file read into memory by its format's reader (or a packed one loaded whole), with its
/// held-out file, sidecars and statistics.
fn open_memory(
    config: &Config,
    src: &Source,
    options: &PrepareOptions,
    warnings: &mut Vec<String>,
) -> Result<Opened, PrepareError> {
    let loaded = widebag_data::load(&Source {
        test_path: None,
        ..src.clone()
    })
    .map_err(PrepareError::data("data.path"))?;
    let held = match &src.test_path {
        Some(p) => Some(
            widebag_data::load_held_out(src, p, &loaded)
                .map_err(PrepareError::data("data.test_path"))?,
        ),
        None => None,
    };
    let labels_tsv = loaded.labels_tsv();
    // A packed dataset holds its vocabulary and class names: nothing is written beside it.
    let sidecars = match widebag_data::packed::is_packed(&src.path) {
        true => Sidecars::ReadOnly,
        false => options.sidecars,
    };
    let vocabulary_file = match (&loaded.vocabulary, sidecars) {
        (Some(v), Sidecars::Write) => {
            match sidecar::save_sidecar(&src.path, "vocab.tsv", &v.to_tsv()) {
                Ok(p) => Some(p),
                Err(e) => {
                    warnings.push(format!("vocabulary not saved: {e}"));
                    None
                }
            }
        }
        _ => None,
    };
    if let (Some(tsv), Sidecars::Write) = (labels_tsv, sidecars)
        && let Err(e) = sidecar::save_sidecar(&src.path, widebag_data::LABELS_SUFFIX, &tsv)
    {
        warnings.push(format!("class labels not saved: {e}"));
    }
    let dataset = loaded.dataset;
    let (stats, stats_file, stats_reused) = stats_for(src, &dataset, sidecars, warnings);
    let mut summary = summary(src, &stats, dataset.skipped_lines, dataset.notes.clone());
    let shape = dataset.shape();
    (summary.rows, summary.train_rows, summary.nnz_total) =
        (shape.rows, shape.rows, shape.nnz_total);
    (summary.width, summary.n_classes, summary.empty_rows) =
        (shape.width, shape.n_classes, shape.empty_rows);
    (
        summary.vocabulary_file,
        summary.stats_file,
        summary.stats_reused,
    ) = (vocabulary_file, stats_file, stats_reused);
    summary.unique_ids_per_batch =
        stats::mean_unique_ids(&dataset, config.train.batch_size, 20, config.train.seed);
    Ok(Opened {
        rows: Rows::Memory(Box::new(dataset)),
        held,
        vocabulary: loaded.vocabulary,
        labels: loaded.labels,
        summary,
    })
}
