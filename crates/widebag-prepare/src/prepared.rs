//! `open_data`: turns a validated `Config` into a `Prepared` run — its batches (synthetic or a
//! loaded file), held-out rows, renumbered ids, resolved bands and the data's summary.

use std::path::PathBuf;

use serde::Serialize;
use widebag_config::Config;
use widebag_config::bands::ModelBands;
use widebag_csr::CsrBatch;
use widebag_data::stats::{self, DataStats};
use widebag_data::{BatchSource, Relabel, SyntheticStream, sidecar};
use widebag_ledger::host_side::HostFacts;

use crate::bands::{BandReport, Frequencies, resolve_bands, wants_class_counts, wants_frequencies};
use crate::error::PrepareError;
use crate::source::synthetic_spec;

/// First row index of the synthetic validation rows: training would need 2^40 rows to reach it.
pub const SYNTHETIC_EVAL_FIRST_ROW: u64 = 1 << 40;

/// Whether preparing a run may write sidecar files (vocabulary, statistics) beside the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sidecars {
    /// Save the vocabulary and statistics beside the data (or in the cache directory when the
    /// data's directory is read-only): what `train` does.
    Write,
    /// Reuse saved statistics but write nothing: what `plan`, `explain`, `sweep` and `bench` do.
    ReadOnly,
}

/// How `open_data` prepares a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    pub sidecars: Sidecars,
}

impl PrepareOptions {
    /// A training run: sidecars are written.
    pub const TRAIN: Self = Self {
        sidecars: Sidecars::Write,
    };
    /// A run that only reads (planning, explaining): nothing is written beside the data.
    pub const READ_ONLY: Self = Self {
        sidecars: Sidecars::ReadOnly,
    };
}

/// What a run trains on when `data.path` is set.
#[derive(Clone, Debug, Serialize)]
pub struct DataSummary {
    pub path: PathBuf,
    pub format: widebag_data::Format,
    pub rows: usize,
    /// Rows trained on: `rows` less those held out by `train.eval_rows`.
    pub train_rows: usize,
    pub width: usize,
    pub n_classes: usize,
    pub nnz_total: usize,
    pub empty_rows: usize,
    pub skipped_lines: usize,
    /// Where the vocabulary was saved (text formats).
    pub vocabulary_file: Option<PathBuf>,
    /// Where the statistics live, and whether a saved file was reused.
    pub stats_file: Option<PathBuf>,
    pub stats_reused: bool,
    /// Mean unique ids in a batch of the run's size (sampled), which sets the row-sparse
    /// gradient and optimizer traffic.
    pub unique_ids_per_batch: f64,
    pub notes: Vec<String>,
}

/// A run's resolved config (width and classes of the data filled in, `"auto"` cutoffs chosen),
/// its batches and its resolved bands. Cloning shares the loaded data (the batch source holds it
/// behind an `Arc`).
#[derive(Clone)]
pub struct Prepared {
    pub config: Config,
    pub batches: BatchSource,
    pub data: Option<DataSummary>,
    /// Non-fatal problems (e.g. a sidecar file that could not be written).
    pub warnings: Vec<String>,
    /// Held-out validation batches (`train.eval_rows` or `data.test_path`), at the run's batch
    /// size.
    pub eval: Vec<CsrBatch>,
    /// Per held-out batch, each row's seen classes (sorted; a LightGCN user's training items,
    /// masked from its ranking); empty when rows have none.
    pub eval_seen: Vec<Vec<Vec<u32>>>,
    /// LightGCN held-out files: the user id of each held-out row, in order.
    pub eval_users: Option<Vec<u32>>,
    /// The head/tail bands of each split side, with their coverage.
    pub bands: Vec<BandReport>,
    /// Both sides' bands, resolved once here and carried to the trainer, ledger and solver.
    pub model_bands: ModelBands,
    /// How ids and classes were renumbered (by frequency, for head/tail bands): export and
    /// prediction undo it.
    pub relabel: Relabel,
    /// Text formats: the training vocabulary (id → word, in the data's own numbering).
    pub vocabulary: Option<widebag_data::Vocabulary>,
    /// `data.label = "file_name"`: class id → label.
    pub labels: Option<Vec<String>>,
    /// `data.user_vector`: each LightGCN user's own input column, in training and held-out
    /// batches.
    pub user_columns: Option<widebag_data::UserColumns>,
}

impl Prepared {
    /// What the run's data holds in host memory, for the ledger's host side: the rows, the
    /// evaluation's rows and seen items, the epoch's order, the maps and vocabulary.
    /// `baseline_bytes` and `batches_in_flight` are the caller's (measured; the run's mode), as
    /// is `retained_bytes` (measured, left 0 here).
    pub fn host_facts(&self, baseline_bytes: u64, batches_in_flight: u64) -> HostFacts {
        let resident = self.batches.resident();
        let seen: u64 = (self.eval_seen.iter().flatten())
            .map(|items| items.len() as u64 * 4 + 24)
            .sum();
        let eval_bytes = self.eval.iter().map(CsrBatch::heap_bytes).sum::<u64>()
            + seen
            + self.eval_users.as_ref().map_or(0, |u| u.len() as u64 * 4);
        let labels: u64 = self
            .labels
            .iter()
            .flatten()
            .map(|l| l.len() as u64 + 24)
            .sum();
        HostFacts {
            baseline_bytes,
            rows_bytes: resident.rows_bytes,
            eval_bytes,
            order_bytes: resident.order_bytes,
            maps_bytes: resident.maps_bytes
                + self.relabel.heap_bytes()
                + self.vocabulary.as_ref().map_or(0, |v| v.heap_bytes())
                + labels,
            retained_bytes: 0,
            batches_in_flight,
        }
    }
}

/// Statistics of `source`: a packed dataset's header, or the saved file when it still matches
/// the data, else computed (and saved with `Sidecars::Write`). Returns the figures, where they
/// live (if saved) and whether they were reused.
pub fn stats_for(
    source: &widebag_data::Source,
    dataset: &widebag_data::Dataset,
    sidecars: Sidecars,
    warnings: &mut Vec<String>,
) -> (DataStats, Option<PathBuf>, bool) {
    if widebag_data::packed::is_packed(&source.path)
        && let Ok(meta) = widebag_data::packed::read::read_meta(&source.path)
    {
        return (meta.stats, None, true);
    }
    if let Some(s) = stats::cached(source) {
        let at = sidecar::sidecar_path(&source.path, stats::STATS_SUFFIX);
        return (s, Some(at), true);
    }
    let mut s = stats::compute(dataset, 20, 0);
    if sidecars == Sidecars::ReadOnly {
        return (s, None, false);
    }
    match stats::save(source, &mut s) {
        Ok(p) => (s, Some(p), false),
        Err(e) => {
            warnings.push(format!("statistics not saved: {e}"));
            (s, None, false)
        }
    }
}

pub(crate) fn model_bands(config: &Config) -> Result<ModelBands, PrepareError> {
    ModelBands::resolve(config).map_err(|(key, message)| PrepareError::setting(key, message))
}

/// The synthetic stream of `[data]` (ids renumbered by the generator's exact frequencies when a
/// side is split), with held-out rows far beyond any training row.
pub(crate) fn open_synthetic(config: &Config) -> Result<Prepared, PrepareError> {
    let bs = config.train.batch_size;
    let mut stream =
        SyntheticStream::new(synthetic_spec(config)).map_err(PrepareError::data("data"))?;
    let mut resolved = config.clone();
    let mut bands = Vec::new();
    let mut relabel_used = Relabel::default();
    let mut class_counts = Vec::new();
    if wants_frequencies(config) {
        let (ids, classes) = stream.expected_frequencies();
        let mut freq = Frequencies { ids, classes };
        let relabel = freq.renumber(config);
        bands = resolve_bands(&mut resolved, &freq, &relabel)?;
        if wants_class_counts(config) {
            class_counts = freq.classes;
        }
        stream = stream.with_relabel(relabel.clone());
        relabel_used = relabel;
    }
    let mut eval = Vec::new();
    let mut done = 0;
    while done < config.train.eval_rows {
        let n = bs.min(config.train.eval_rows - done);
        eval.push(
            stream
                .batch_at(SYNTHETIC_EVAL_FIRST_ROW + done as u64, n)
                .map_err(PrepareError::data("train.eval_rows"))?,
        );
        done += n;
    }
    let mut model_bands = model_bands(&resolved)?;
    model_bands.class_counts = class_counts;
    Ok(Prepared {
        config: resolved,
        batches: BatchSource::Synthetic(stream),
        data: None,
        warnings: Vec::new(),
        eval,
        eval_seen: Vec::new(),
        eval_users: None,
        bands,
        model_bands,
        relabel: relabel_used,
        vocabulary: None,
        labels: None,
        user_columns: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::open_data;

    #[test]
    fn a_libsvm_file_sets_width_and_classes_and_saves_stats() {
        let dir = std::env::temp_dir().join(format!("widebag-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.svm");
        std::fs::write(&p, "0 1:1 5:2\n2 3:1\n1 0:1 9:1\n").unwrap();
        let config = widebag_config::load(
            None,
            &[
                format!("data.path={}", p.display()),
                "data.format=libsvm".into(),
                "train.batch_size=2".into(),
            ],
        )
        .unwrap();
        let mut prepared = open_data(&config, &PrepareOptions::TRAIN).unwrap();
        assert_eq!(prepared.config.data.n_classes(), 3);
        let d = prepared.data.as_ref().unwrap();
        assert_eq!((d.rows, d.nnz_total), (3, 5));
        assert!(!d.stats_reused);
        assert!(dir.join("d.svm.stats.json").exists());
        assert_eq!(prepared.batches.next_batch(2).unwrap().n_rows(), 2);
        assert_eq!(prepared.batches.next_batch(2).unwrap().n_rows(), 1);
        let again = open_data(&config, &PrepareOptions::TRAIN).unwrap();
        assert!(again.data.unwrap().stats_reused);
    }

    #[test]
    fn reading_for_a_plan_writes_nothing_beside_the_data() {
        let dir = std::env::temp_dir().join(format!("widebag-ro-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.txt");
        std::fs::write(&p, "the cat sat\nthe dog sat\na cat ran\n").unwrap();
        let config = widebag_config::load(
            None,
            &[
                format!("data.path={}", p.display()),
                "data.format=text".into(),
                "train.batch_size=2".into(),
            ],
        )
        .unwrap();
        let prepared = open_data(&config, &PrepareOptions::READ_ONLY).unwrap();
        let d = prepared.data.as_ref().unwrap();
        assert_eq!(
            (d.stats_file.as_ref(), d.vocabulary_file.as_ref()),
            (None, None)
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("d.txt")]);
        // Training writes both.
        let trained = open_data(&config, &PrepareOptions::TRAIN).unwrap();
        let d = trained.data.as_ref().unwrap();
        assert!(d.stats_file.as_ref().is_some_and(|f| f.exists()));
        assert!(d.vocabulary_file.as_ref().is_some_and(|f| f.exists()));
    }

    #[test]
    fn a_config_that_skipped_preparation_is_an_error_not_the_unsplit_model() {
        let config =
            widebag_config::load(None, &["model.input_bands.cutoffs=\"auto\"".into()]).unwrap();
        let err = ModelBands::resolve(&config).unwrap_err();
        assert_eq!(err.0, "model.input_bands.cutoffs");
        let prepared = open_data(&config, &PrepareOptions::READ_ONLY).unwrap();
        assert!(prepared.model_bands.input_split());
    }

    #[test]
    fn head_bands_hold_the_most_frequent_ids_after_renumbering() {
        // Id 9 and class 2 are the most frequent; the data numbers them last.
        let dir = std::env::temp_dir().join(format!("widebag-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.svm");
        std::fs::write(&p, "2 9:1 1:1\n2 9:1\n2 9:2 3:1\n1 9:1 1:1\n0 5:1\n").unwrap();
        let load = |order: &str| {
            let config = widebag_config::load(
                None,
                &[
                    format!("data.path={}", p.display()),
                    "data.format=libsvm".into(),
                    "data.zero_based=true".into(),
                    "train.batch_size=5".into(),
                    "model.output=adaptive".into(),
                    "model.input_bands.cutoffs=[2]".into(),
                    "model.output_bands.cutoffs=[1]".into(),
                    format!("model.input_bands.order=\"{order}\""),
                    format!("model.output_bands.order=\"{order}\""),
                ],
            )
            .unwrap();
            open_data(&config, &PrepareOptions::TRAIN).unwrap()
        };
        let mut by_freq = load("frequency");
        let input = &by_freq.bands[0];
        assert!(input.renumbered);
        // Id 9 (5 entries) and id 1 (2) are the head: 7 of 9 entries.
        assert!(
            (input.coverage[0] - 7.0 / 9.0).abs() < 1e-9,
            "{:?}",
            input.coverage
        );
        assert!((by_freq.bands[1].coverage[0] - 0.6).abs() < 1e-9);
        let b = by_freq.batches.next_batch(5).unwrap();
        let mut ids = b.unique_ids().to_vec();
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1, 2, 3]);
        let mut classes = b.targets().classes.clone();
        classes.sort_unstable();
        assert_eq!(classes, vec![0, 0, 0, 1, 2]);
        let by_data = load("data");
        assert!(!by_data.bands[0].renumbered);
        // Ids 0 and 1 in the data's numbering: 2 of 9 entries.
        assert!((by_data.bands[0].coverage[0] - 2.0 / 9.0).abs() < 1e-9);
    }
}
