//! Turns the `[data]` section into training batches: the synthetic stream, or a data file loaded
//! through the readers, with its vocabulary and statistics saved beside it, and the width and
//! classes of the run taken from the file.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use widebag_data::stats::{self, DataStats};
use widebag_data::{BatchSource, DataError, EpochBatches, SyntheticSpec, SyntheticStream, source};

use crate::Config;

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
    let Some(src) = config.data.source() else {
        let stream = SyntheticStream::new(synthetic_spec(config))?;
        return Ok(Prepared {
            config: config.clone(),
            batches: BatchSource::Synthetic(stream),
            data: None,
            warnings: Vec::new(),
        });
    };
    let loaded = widebag_data::load(&src)?;
    let dataset = loaded.dataset;
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
    let batches = EpochBatches::new(Arc::new(dataset), config.train.seed);
    Ok(Prepared {
        config: resolved,
        batches: BatchSource::Rows(batches),
        data: Some(summary),
        warnings,
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
}
