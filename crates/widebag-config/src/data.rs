//! Turns the `[data]` section into training batches: the synthetic stream, or a data file loaded
//! through the readers, with its vocabulary and statistics saved beside it, and the width and
//! classes of the run taken from the file.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use widebag_csr::CsrBatch;
use widebag_data::stats::{self, DataStats};
use widebag_data::{
    BatchSource, DataError, Dataset, EpochBatches, Relabel, Renumbering, RowStore, SyntheticSpec,
    SyntheticStream, source,
};

use crate::bands::{self, Band};
use crate::{Config, Cutoffs, IdOrder, units};

/// First row index of the synthetic validation rows: training would need 2^40 rows to reach it.
pub const SYNTHETIC_EVAL_FIRST_ROW: u64 = 1 << 40;
/// Bands (head and tails) the automatic chooser lays out.
pub const AUTO_BANDS: usize = 3;

/// The bands of one side of the model, as chosen (by hand or `"auto"`), with what they cover.
#[derive(Clone, Debug, Serialize)]
pub struct BandReport {
    /// `input` or `output`.
    pub side: &'static str,
    pub auto: bool,
    /// Whether the ids (classes) were renumbered by frequency before the cut.
    pub renumbered: bool,
    pub cutoffs: Vec<usize>,
    pub bands: Vec<Band>,
    /// Per band, the share of the data's entries (input ids or target weight) it holds.
    pub coverage: Vec<f64>,
    /// Parameters of this side with the bands, and unsplit.
    pub parameters: u64,
    pub unsplit_parameters: u64,
    /// `"auto"`: the byte budget the choice had.
    pub budget_bytes: Option<u64>,
}

impl BandReport {
    /// One line for the run's header.
    pub fn line(&self) -> String {
        let dims: Vec<String> = self.bands.iter().map(|b| b.dim.to_string()).collect();
        let cov: Vec<String> = self
            .coverage
            .iter()
            .map(|c| format!("{:.1}%", 100.0 * c))
            .collect();
        format!(
            "{} bands{}{}: cutoffs {:?}, dims [{}], coverage [{}] (head {:.1}%), {} parameters \
             ({:.1}× fewer than unsplit)",
            self.side,
            if self.auto { " (auto)" } else { "" },
            if self.renumbered {
                " (renumbered by frequency)"
            } else {
                ""
            },
            self.cutoffs,
            dims.join(", "),
            cov.join(", "),
            100.0 * self.coverage.first().copied().unwrap_or(0.0),
            self.parameters,
            self.unsplit_parameters as f64 / self.parameters.max(1) as f64,
        )
    }
}

/// What a run trains on when `data.path` is set.
#[derive(Clone, Debug, Serialize)]
pub struct DataSummary {
    pub path: PathBuf,
    pub format: widebag_data::Format,
    pub rows: usize,
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

/// A run's resolved config (width and classes of the data filled in) and its batches.
pub struct Prepared {
    pub config: Config,
    pub batches: BatchSource,
    pub data: Option<DataSummary>,
    /// Non-fatal problems (e.g. a sidecar file that could not be written).
    pub warnings: Vec<String>,
    /// Held-out validation batches (`train.eval_rows`), at the run's batch size.
    pub eval: Vec<CsrBatch>,
    /// The head/tail bands of each split side, with their coverage.
    pub bands: Vec<BandReport>,
}

/// Entries per id (`input`) and target weight per class (`output`): counted over a data file,
/// the generator's expected figures for synthetic data.
struct Frequencies {
    ids: Vec<f64>,
    classes: Vec<f64>,
}

impl Frequencies {
    /// Renumbers each split side whose `order` is `frequency` (most frequent first), moves the
    /// counts to the new numbering, and returns the renumbering (empty where nothing moves).
    fn renumber(&mut self, config: &Config) -> Relabel {
        let m = &config.model;
        let side = |split: bool, order: IdOrder, counts: &mut Vec<f64>| {
            if !split || order != IdOrder::Frequency {
                return None;
            }
            let r = Renumbering::by_frequency(counts);
            if r.is_identity() {
                return None;
            }
            *counts = r.permute(counts);
            Some(r)
        };
        Relabel {
            ids: side(
                m.input_bands.cutoffs.is_split(),
                m.input_bands.order,
                &mut self.ids,
            ),
            classes: side(
                m.output_bands.cutoffs.is_split(),
                m.output_bands.order,
                &mut self.classes,
            ),
        }
    }

    /// Share of `counts` held by each band.
    fn coverage(counts: &[f64], bands: &[Band]) -> Vec<f64> {
        let total: f64 = counts.iter().sum::<f64>().max(f64::MIN_POSITIVE);
        bands
            .iter()
            .map(|b| counts[b.start..b.end].iter().sum::<f64>() / total)
            .collect()
    }
}

fn spec_error(key: &'static str, message: String) -> DataError {
    DataError::InvalidSpec { key, message }
}

/// Resolves `"auto"` cutoffs against the byte budgets and reports both sides' bands.
fn resolve_bands(
    config: &mut Config,
    freq: &Frequencies,
    relabel: &Relabel,
) -> Result<Vec<BandReport>, DataError> {
    let mut reports = Vec::new();
    let (table, dense) = (config.optim.table, config.optim.dense);
    // Input side.
    let ib = config.model.input_bands.clone();
    let (width, dim) = (config.data.width, config.model.dim);
    let unsplit = bands::bands(width, dim, ib.factor, &[]).expect("one band");
    let input_bytes = |cuts: &[usize]| {
        bands::bands(width, dim, ib.factor, cuts)
            .map(|b| 4 * bands::input_values(&b, dim, table, dense))
            .unwrap_or(u64::MAX)
    };
    let mut budget_bytes = None;
    if ib.cutoffs == Cutoffs::Auto {
        let budget = match &ib.budget {
            Some(b) => {
                units::parse_bytes(b).map_err(|e| spec_error("model.input_bands.budget", e))?
            }
            None => input_bytes(&[]) / 5,
        };
        budget_bytes = Some(budget);
        let cuts = bands::auto_cutoffs(width, ib.factor, AUTO_BANDS, |c| input_bytes(c) <= budget)
            .ok_or_else(|| {
                spec_error(
                    "model.input_bands.budget",
                    format!(
                        "{} is below the smallest band layout ({})",
                        units::format_bytes(budget),
                        units::format_bytes(input_bytes(&[1, ib.factor.max(2)]))
                    ),
                )
            })?;
        config.model.input_bands.cutoffs = if cuts.is_empty() {
            Cutoffs::None
        } else {
            Cutoffs::Ids(cuts)
        };
    }
    if config.model.input_bands.cutoffs.is_split() {
        let b =
            bands::input_bands(config).map_err(|e| spec_error("model.input_bands.cutoffs", e))?;
        reports.push(BandReport {
            side: "input",
            auto: ib.cutoffs == Cutoffs::Auto,
            renumbered: relabel.ids.is_some(),
            cutoffs: config.model.input_bands.cutoffs.ids().to_vec(),
            coverage: Frequencies::coverage(&freq.ids, &b),
            parameters: bands::input_parameters(&b, dim),
            unsplit_parameters: bands::input_parameters(&unsplit, dim),
            bands: b,
            budget_bytes,
        });
    }
    // Output side.
    let ob = config.model.output_bands.clone();
    let n = config.data.n_classes();
    let last = config.model.last_hidden();
    let per_value = 4 * (1 + dense.state_per_weight());
    let output_bytes = |cuts: &[usize]| {
        bands::bands(n, last, ob.factor, cuts)
            .map(|b| per_value * bands::output_parameters(&b, last))
            .unwrap_or(u64::MAX)
    };
    let mut budget_bytes = None;
    if ob.cutoffs == Cutoffs::Auto {
        let budget = match &ob.budget {
            Some(b) => {
                units::parse_bytes(b).map_err(|e| spec_error("model.output_bands.budget", e))?
            }
            None => output_bytes(&[]) / 5,
        };
        budget_bytes = Some(budget);
        let cuts = bands::auto_cutoffs(n, ob.factor, AUTO_BANDS, |c| output_bytes(c) <= budget)
            .ok_or_else(|| {
                spec_error(
                    "model.output_bands.budget",
                    format!(
                        "{} is below the smallest cluster layout ({})",
                        units::format_bytes(budget),
                        units::format_bytes(output_bytes(&[1, ob.factor.max(2)]))
                    ),
                )
            })?;
        config.model.output_bands.cutoffs = if cuts.is_empty() {
            Cutoffs::None
        } else {
            Cutoffs::Ids(cuts)
        };
    }
    if config.model.output_bands.cutoffs.is_split() {
        let b =
            bands::output_bands(config).map_err(|e| spec_error("model.output_bands.cutoffs", e))?;
        let unsplit = bands::bands(n, last, ob.factor, &[]).expect("one band");
        reports.push(BandReport {
            side: "output",
            auto: ob.cutoffs == Cutoffs::Auto,
            renumbered: relabel.classes.is_some(),
            cutoffs: config.model.output_bands.cutoffs.ids().to_vec(),
            coverage: Frequencies::coverage(&freq.classes, &b),
            parameters: bands::output_parameters(&b, last),
            unsplit_parameters: bands::output_parameters(&unsplit, last),
            bands: b,
            budget_bytes,
        });
    }
    Ok(reports)
}

fn wants_frequencies(config: &Config) -> bool {
    config.model.input_bands.cutoffs.is_split() || config.model.output_bands.cutoffs.is_split()
}

/// Splits off `n_eval` rows chosen by a seeded hash: `(train, held_out)`.
fn split_rows(data: &Dataset, n_eval: usize, seed: u64) -> (Dataset, Dataset) {
    let n = data.n_rows();
    let mut keys: Vec<(u64, usize)> = (0..n)
        .map(|r| (widebag_data::rng::hash2(seed ^ 0x0e7a_15e7, r as u64), r))
        .collect();
    if n_eval < n {
        keys.select_nth_unstable(n_eval);
    }
    let mut held = vec![false; n];
    for &(_, r) in &keys[..n_eval.min(n)] {
        held[r] = true;
    }
    let (mut train, mut eval) = (RowStore::new(), RowStore::new());
    for (r, &h) in held.iter().enumerate() {
        let (ids, values) = data.rows.row(r);
        let (t, w) = data.rows.row_targets(r);
        if h { &mut eval } else { &mut train }.push(ids, values, t, w);
    }
    let with = |rows| Dataset {
        rows,
        ..Dataset {
            source: data.source.clone(),
            width: data.width,
            n_classes: data.n_classes,
            rows: RowStore::new(),
            skipped_lines: data.skipped_lines,
            notes: data.notes.clone(),
        }
    };
    (with(train), with(eval))
}

/// Synthetic data settings from the config.
pub fn synthetic_spec(config: &Config) -> SyntheticSpec {
    SyntheticSpec {
        width: config.data.width,
        n_classes: config.data.n_classes(),
        nnz_mean: config.data.nnz,
        nnz_spread: config.data.nnz_spread,
        zipf_exponent: config.data.zipf_exponent,
        signal_share: config.data.signal_share,
        target: config.data.target,
        seed: config.train.seed,
    }
}

/// Statistics of `source`: the saved file when it still matches the data, else computed and
/// saved. Returns the figures, where they live (if saved) and whether they were reused.
pub fn stats_for(
    source: &widebag_data::Source,
    dataset: &widebag_data::Dataset,
    warnings: &mut Vec<String>,
) -> (DataStats, Option<PathBuf>, bool) {
    if let Some(s) = stats::cached(source) {
        let at = source::sidecar_path(&source.path, stats::STATS_SUFFIX);
        return (s, Some(at), true);
    }
    let mut s = stats::compute(dataset, 20, 0);
    match stats::save(source, &mut s) {
        Ok(p) => (s, Some(p), false),
        Err(e) => {
            warnings.push(format!("statistics not saved: {e}"));
            (s, None, false)
        }
    }
}

/// Opens the configured data.
pub fn open_data(config: &Config) -> Result<Prepared, DataError> {
    let bs = config.train.batch_size;
    let Some(src) = config.data.source() else {
        let mut stream = SyntheticStream::new(synthetic_spec(config))?;
        let mut resolved = config.clone();
        let mut bands = Vec::new();
        if wants_frequencies(config) {
            let (ids, classes) = stream.expected_frequencies();
            let mut freq = Frequencies { ids, classes };
            let relabel = freq.renumber(config);
            bands = resolve_bands(&mut resolved, &freq, &relabel)?;
            stream = stream.with_relabel(relabel);
        }
        let mut eval = Vec::new();
        let mut done = 0;
        while done < config.train.eval_rows {
            let n = bs.min(config.train.eval_rows - done);
            eval.push(stream.batch_at(SYNTHETIC_EVAL_FIRST_ROW + done as u64, n)?);
            done += n;
        }
        return Ok(Prepared {
            config: resolved,
            batches: BatchSource::Synthetic(stream),
            data: None,
            warnings: Vec::new(),
            eval,
            bands,
        });
    };
    let loaded = widebag_data::load(&src)?;
    let mut dataset = loaded.dataset;
    if let Some(n) = config.data.n_classes
        && n != dataset.n_classes
    {
        return Err(DataError::InvalidSpec {
            key: "data.n_classes",
            message: format!(
                "{} has {} classes; leave data.n_classes unset when training on a file",
                src.path.display(),
                dataset.n_classes
            ),
        });
    }
    if dataset.n_classes < 2 {
        return Err(DataError::InvalidSpec {
            key: "data.path",
            message: format!(
                "{} has {} class(es); training needs at least 2",
                src.path.display(),
                dataset.n_classes
            ),
        });
    }
    let mut warnings = Vec::new();
    let vocabulary_file = match &loaded.vocabulary {
        Some(v) => match source::save_sidecar(&src.path, "vocab.tsv", &v.to_tsv()) {
            Ok(p) => Some(p),
            Err(e) => {
                warnings.push(format!("vocabulary not saved: {e}"));
                None
            }
        },
        None => None,
    };
    let (_, stats_file, stats_reused) = stats_for(&src, &dataset, &mut warnings);
    let unique_ids_per_batch =
        stats::mean_unique_ids(&dataset, config.train.batch_size, 20, config.train.seed);
    let shape = dataset.shape();
    let mut resolved = config.clone();
    resolved.data.width = dataset.width;
    resolved.data.n_classes = Some(dataset.n_classes);
    let summary = DataSummary {
        path: src.path.clone(),
        format: src.format,
        rows: shape.rows,
        width: shape.width,
        n_classes: shape.n_classes,
        nnz_total: shape.nnz_total,
        empty_rows: shape.empty_rows,
        skipped_lines: dataset.skipped_lines,
        vocabulary_file,
        stats_file,
        stats_reused,
        unique_ids_per_batch,
        notes: dataset.notes.clone(),
    };
    let mut bands = Vec::new();
    if wants_frequencies(config) {
        let mut freq = Frequencies {
            ids: vec![0.0; dataset.width],
            classes: vec![0.0; dataset.n_classes],
        };
        let rows = &dataset.rows;
        for (&id, &v) in rows.ids.iter().zip(&rows.values) {
            freq.ids[id as usize] += v.abs() as f64;
        }
        for (&c, &w) in rows.targets.iter().zip(&rows.target_weights) {
            freq.classes[c as usize] += w.abs() as f64;
        }
        let relabel = freq.renumber(config);
        bands = resolve_bands(&mut resolved, &freq, &relabel)?;
        relabel.dataset(&mut dataset);
    }
    let mut eval = Vec::new();
    let n_eval = config.train.eval_rows;
    if n_eval > 0 {
        if n_eval >= dataset.n_rows() {
            return Err(spec_error(
                "train.eval_rows",
                format!(
                    "{n_eval} held-out rows leave none of {}'s {} rows to train on",
                    src.path.display(),
                    dataset.n_rows()
                ),
            ));
        }
        let (train, held) = split_rows(&dataset, n_eval, config.train.seed);
        let all: Vec<usize> = (0..held.n_rows()).collect();
        for rows in all.chunks(bs.max(1)) {
            eval.push(held.batch(rows)?);
        }
        dataset = train;
    }
    let batches = EpochBatches::new(Arc::new(dataset), config.train.seed);
    Ok(Prepared {
        config: resolved,
        batches: BatchSource::Rows(batches),
        data: Some(summary),
        warnings,
        eval,
        bands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_libsvm_file_sets_width_and_classes_and_saves_stats() {
        let dir = std::env::temp_dir().join(format!("widebag-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.svm");
        std::fs::write(&p, "0 1:1 5:2\n2 3:1\n1 0:1 9:1\n").unwrap();
        let config = crate::load(
            None,
            &[
                format!("data.path={}", p.display()),
                "data.format=libsvm".into(),
                "train.batch_size=2".into(),
            ],
        )
        .unwrap();
        let mut prepared = open_data(&config).unwrap();
        assert_eq!(prepared.config.data.n_classes(), 3);
        let d = prepared.data.as_ref().unwrap();
        assert_eq!((d.rows, d.nnz_total), (3, 5));
        assert!(!d.stats_reused);
        assert!(dir.join("d.svm.stats.json").exists());
        assert_eq!(prepared.batches.next_batch(2).unwrap().n_rows(), 2);
        assert_eq!(prepared.batches.next_batch(2).unwrap().n_rows(), 1);
        let again = open_data(&config).unwrap();
        assert!(again.data.unwrap().stats_reused);
    }

    #[test]
    fn head_bands_hold_the_most_frequent_ids_after_renumbering() {
        // Id 9 and class 2 are the most frequent; the data numbers them last.
        let dir = std::env::temp_dir().join(format!("widebag-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.svm");
        std::fs::write(&p, "2 9:1 1:1\n2 9:1\n2 9:2 3:1\n1 9:1 1:1\n0 5:1\n").unwrap();
        let load = |order: &str| {
            let config = crate::load(
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
            open_data(&config).unwrap()
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
