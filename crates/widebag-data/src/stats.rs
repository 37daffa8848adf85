//! Dataset statistics in the terms that decide memory: nnz per row, the id-frequency histogram,
//! head coverage, and unique ids per batch as a function of batch size (row-sparse gradient and
//! optimizer traffic scale with unique ids, not with batch × nnz).

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dataset::{Dataset, RowStore, Shape};
use crate::error::DataError;
use crate::key_sums::KeySums;
use crate::rng::{SplitMix64, hash2};
use crate::sidecar::{fingerprint, save_sidecar, sidecar_path};
use crate::source::Source;

/// Distribution summary of nnz per row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NnzPerRow {
    pub min: usize,
    pub mean: f64,
    pub p50: usize,
    pub p99: usize,
    pub max: usize,
}

/// The statistics `widebag data stats` prints and saves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataStats {
    pub rows: usize,
    pub width: usize,
    pub n_classes: usize,
    pub nnz_total: usize,
    pub empty_rows: usize,
    pub nnz_per_row: NnzPerRow,
    /// Ids that occur at least once.
    pub ids_used: usize,
    /// `k` → share of all nnz covered by the `k` most frequent ids (k on a log grid).
    pub top_coverage: BTreeMap<usize, f64>,
    /// Frequency bin `[2^i, 2^(i+1))` (keyed by its lower bound) → number of ids.
    pub frequency_histogram: BTreeMap<u64, usize>,
    /// Batch size → mean unique ids over sampled batches of that many random rows.
    pub unique_ids_per_batch: BTreeMap<usize, f64>,
    /// Batches sampled per batch size.
    pub batches_sampled: usize,
    /// The file these figures describe (set when saved beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<StatsSource>,
}

/// Identifies the data a saved statistics file describes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSource {
    pub path: String,
    /// Format and row-forming settings ([`Source::variant`]).
    pub variant: String,
    pub bytes: u64,
    pub modified_unix_s: u64,
}

impl StatsSource {
    pub fn of(source: &Source) -> Option<Self> {
        let (bytes, modified_unix_s) = fingerprint(&source.path)?;
        Some(Self {
            path: source.path.to_string_lossy().into_owned(),
            variant: source.variant(),
            bytes,
            modified_unix_s,
        })
    }
}

/// Suffix of the statistics file kept beside the data.
pub const STATS_SUFFIX: &str = "stats.json";

/// Saved statistics of `source`, if a file beside it (or in the cache) still matches it.
pub fn cached(source: &Source) -> Option<DataStats> {
    let want = StatsSource::of(source)?;
    let text = std::fs::read_to_string(sidecar_path(&source.path, STATS_SUFFIX)).ok()?;
    let stats: DataStats = serde_json::from_str(&text).ok()?;
    (stats.source.as_ref() == Some(&want)).then_some(stats)
}

/// Saves `stats` (tagged with `source`) beside the data and returns where.
pub fn save(source: &Source, stats: &mut DataStats) -> Result<std::path::PathBuf, DataError> {
    stats.source = StatsSource::of(source);
    let json = serde_json::to_string_pretty(stats).expect("stats serialise");
    save_sidecar(&source.path, STATS_SUFFIX, &json)
}

/// Batch sizes at which unique ids are sampled.
pub const BATCH_GRID: &[usize] = &[1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192];

/// Mean number of distinct ids in `n_samples` batches of `batch_size` rows drawn without
/// replacement (seeded), or over all rows when the batch covers the dataset.
pub fn mean_unique_ids(data: &Dataset, batch_size: usize, n_samples: usize, seed: u64) -> f64 {
    let n_rows = data.n_rows();
    if n_rows == 0 {
        return 0.0;
    }
    let batch_size = batch_size.min(n_rows);
    let samples = if batch_size == n_rows { 1 } else { n_samples };
    let total: usize = (0..samples)
        .into_par_iter()
        .map(|s| {
            let mut rng = SplitMix64::new(hash2(seed, s as u64));
            // Partial Fisher-Yates over a sparse permutation: batch_size distinct rows.
            let mut swapped: std::collections::HashMap<usize, usize> = Default::default();
            let mut seen = std::collections::HashSet::new();
            for i in 0..batch_size {
                let j = i + rng.below((n_rows - i) as u64) as usize;
                let vj = *swapped.get(&j).unwrap_or(&j);
                let vi = *swapped.get(&i).unwrap_or(&i);
                swapped.insert(j, vi);
                seen.extend(data.rows.row(vj).0.iter().copied());
            }
            seen.len()
        })
        .sum();
    total as f64 / samples as f64
}

/// Mean unique ids in a batch of `batch_size` rows, read from saved statistics: interpolated
/// between the sampled batch sizes on log–log axes (unique ids grow as a power of the batch
/// size between two samples), capped by the ids in use.
pub fn unique_ids_at(stats: &DataStats, batch_size: usize) -> f64 {
    let grid: Vec<(f64, f64)> = stats
        .unique_ids_per_batch
        .iter()
        .filter(|&(_, &u)| u > 0.0)
        .map(|(&b, &u)| (b as f64, u))
        .collect();
    let b = batch_size.max(1) as f64;
    let at = |(b0, u0): (f64, f64), (b1, u1): (f64, f64)| {
        let t = (b / b0).ln() / (b1 / b0).ln();
        (u0.ln() + t * (u1 / u0).ln()).exp()
    };
    let u = match grid.iter().position(|&(g, _)| g >= b) {
        None if grid.len() >= 2 => at(grid[grid.len() - 2], grid[grid.len() - 1]),
        Some(0) if grid.len() >= 2 && grid[0].0 > b => at(grid[0], grid[1]),
        Some(i) if grid[i].0 == b || i == 0 => grid[i].1,
        Some(i) => at(grid[i - 1], grid[i]),
        None => grid.last().map_or(0.0, |g| g.1),
    };
    u.min(stats.ids_used as f64)
}

/// How often each used id occurs, most frequent first (ids that never occur are left out).
/// Counted in a dense array where the width is of the order of the data, and by sorting the ids
/// otherwise, so a header or an id that claims a huge width (`width=2^60`, id 4,294,967,295)
/// costs memory in proportion to the file, not to the claim.
fn id_counts(data: &Dataset) -> Vec<u64> {
    let ids = &data.rows.ids;
    let mut counts = if data.width <= 2 * ids.len() + (1 << 16) {
        let mut dense = vec![0u64; data.width];
        for &id in ids {
            dense[id as usize] += 1;
        }
        dense.retain(|&c| c > 0);
        dense
    } else {
        let mut sorted = ids.clone();
        sorted.par_sort_unstable();
        let mut runs = Vec::new();
        for chunk in sorted.chunk_by(|a, b| a == b) {
            runs.push(chunk.len() as u64);
        }
        runs
    };
    counts.par_sort_unstable_by(|a, b| b.cmp(a));
    counts
}

/// Computes the statistics; `n_samples` batches per batch size for unique ids.
pub fn compute(data: &Dataset, n_samples: usize, seed: u64) -> DataStats {
    let mut nnz = BTreeMap::new();
    for r in 0..data.n_rows() {
        *nnz.entry(data.rows.row_ptr[r + 1] - data.rows.row_ptr[r])
            .or_insert(0u64) += 1;
    }
    let unique_ids_per_batch = BATCH_GRID
        .iter()
        .map(|&b| (b, mean_unique_ids(data, b, n_samples, seed)))
        .collect();
    summarise(
        data.shape(),
        &nnz,
        id_counts(data),
        unique_ids_per_batch,
        n_samples,
    )
}

/// The `p`-th percentile of a histogram (value → rows), as the sorted list's
/// `sorted[ceil(p/100 · n) - 1]`.
fn percentile(hist: &BTreeMap<usize, u64>, p: f64) -> usize {
    let n: u64 = hist.values().sum();
    if n == 0 {
        return 0;
    }
    let rank = ((p / 100.0) * n as f64).ceil().clamp(1.0, n as f64) as u64;
    let mut seen = 0;
    for (&v, &c) in hist {
        seen += c;
        if seen >= rank {
            return v;
        }
    }
    0
}

/// The statistics from the shape, the histogram of nnz per row, each used id's count (most
/// frequent first) and the sampled unique ids per batch.
fn summarise(
    shape: Shape,
    nnz: &BTreeMap<usize, u64>,
    counts: Vec<u64>,
    unique_ids_per_batch: BTreeMap<usize, f64>,
    n_samples: usize,
) -> DataStats {
    let ids_used = counts.len();
    let total = shape.nnz_total.max(1) as f64;
    let width = shape.width;
    let mut top_coverage = BTreeMap::new();
    let mut k = 1;
    let mut covered = 0u64;
    let mut taken = 0;
    loop {
        let k_eff = k.min(width);
        while taken < k_eff.min(ids_used) {
            covered += counts[taken];
            taken += 1;
        }
        top_coverage.insert(k_eff, covered as f64 / total);
        if k_eff == width {
            break;
        }
        k *= 10;
    }
    let mut frequency_histogram = BTreeMap::new();
    for &c in counts.iter().filter(|&&c| c > 0) {
        *frequency_histogram
            .entry(1u64 << (63 - c.leading_zeros()))
            .or_insert(0) += 1;
    }
    DataStats {
        rows: shape.rows,
        width,
        n_classes: shape.n_classes,
        nnz_total: shape.nnz_total,
        empty_rows: shape.empty_rows,
        nnz_per_row: NnzPerRow {
            min: nnz.keys().next().copied().unwrap_or(0),
            mean: shape.nnz_total as f64 / shape.rows.max(1) as f64,
            p50: percentile(nnz, 50.0),
            p99: percentile(nnz, 99.0),
            max: nnz.keys().next_back().copied().unwrap_or(0),
        },
        ids_used,
        top_coverage,
        frequency_histogram,
        unique_ids_per_batch,
        batches_sampled: n_samples,
        source: None,
    }
}

/// Rows kept for the unique-ids samples of rows counted one at a time ([`Tally`]).
pub const SAMPLE_ROWS: usize = 65_536;

/// The statistics of rows seen one at a time, in memory bounded by the width (or the data's
/// size, when an id claims more: [`KeySums`]) and [`SAMPLE_ROWS`]: every count is exact; unique ids per batch are sampled from a uniform
/// reservoir of rows (all of them, in order, when there are at most [`SAMPLE_ROWS`], which gives
/// [`compute`]'s figures).
pub struct Tally {
    rows: usize,
    nnz_total: usize,
    empty_rows: usize,
    /// Rows by their number of ids: below [`SHORT_ROWS`] by index (most rows: no tree walk
    /// per row), the rest in `nnz`.
    short: Vec<u64>,
    nnz: BTreeMap<usize, u64>,
    counts: KeySums<u64>,
    sample: Vec<Vec<u32>>,
    rng: SplitMix64,
}

/// Row lengths [`Tally`] counts by index.
const SHORT_ROWS: usize = 1024;

impl Tally {
    pub fn new(seed: u64) -> Self {
        Self {
            rows: 0,
            nnz_total: 0,
            empty_rows: 0,
            short: vec![0; SHORT_ROWS],
            nnz: BTreeMap::new(),
            counts: KeySums::new(),
            sample: Vec::new(),
            rng: SplitMix64::new(hash2(seed, 0x7a11)),
        }
    }

    /// Rows counted so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Counts one row of input ids.
    pub fn add(&mut self, ids: &[u32]) {
        self.counts.add_each(ids, 1);
        self.add_shape(ids);
    }

    /// Counts every row of `rows` in order, as [`Self::add`] counts each (the ids counted in
    /// one sweep).
    pub fn add_rows(&mut self, rows: &RowStore) {
        self.counts.add_each(&rows.ids, 1);
        for r in 0..rows.n_rows() {
            self.add_shape(rows.row(r).0);
        }
    }

    /// Counts a row but not its ids: its length, and its place in the sample.
    fn add_shape(&mut self, ids: &[u32]) {
        self.rows += 1;
        self.nnz_total += ids.len();
        self.empty_rows += ids.is_empty() as usize;
        match self.short.get_mut(ids.len()) {
            Some(n) => *n += 1,
            None => *self.nnz.entry(ids.len()).or_insert(0) += 1,
        }
        if self.sample.len() < SAMPLE_ROWS {
            self.sample.push(ids.to_vec());
        } else {
            let j = self.rng.below(self.rows as u64) as usize;
            if let Some(kept) = self.sample.get_mut(j) {
                // Replaced in place: the row's buffer is reused, not reallocated.
                kept.clear();
                kept.extend_from_slice(ids);
            }
        }
    }

    /// The statistics, for rows of `width` ids and `n_classes` classes.
    pub fn finish(self, width: usize, n_classes: usize, n_samples: usize, seed: u64) -> DataStats {
        let mut rows = RowStore::new();
        for ids in &self.sample {
            rows.push(ids, &vec![1.0; ids.len()], &[], &[]);
        }
        let sample = Dataset {
            source: "sample".into(),
            width,
            n_classes,
            rows,
            skipped_lines: 0,
            notes: Vec::new(),
        };
        let unique_ids_per_batch = BATCH_GRID
            .iter()
            .map(|&b| (b, mean_unique_ids(&sample, b, n_samples, seed)))
            .collect();
        let mut counts = self.counts.into_nonzero();
        counts.par_sort_unstable_by(|a, b| b.cmp(a));
        let shape = Shape {
            rows: self.rows,
            width,
            n_classes,
            nnz_total: self.nnz_total,
            empty_rows: self.empty_rows,
        };
        let mut nnz = self.nnz;
        for (len, &n) in self.short.iter().enumerate().filter(|(_, n)| **n > 0) {
            nnz.insert(len, n);
        }
        summarise(shape, &nnz, counts, unique_ids_per_batch, n_samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_between_samples_follow_a_power_law() {
        let mut s = compute(&toy(), 2, 0);
        s.unique_ids_per_batch = [(1, 2.0), (8, 16.0), (32, 32.0)].into_iter().collect();
        s.ids_used = 100;
        assert_eq!(unique_ids_at(&s, 8), 16.0);
        assert!((unique_ids_at(&s, 16) - 16.0 * 2f64.sqrt()).abs() < 1e-9);
        assert!((unique_ids_at(&s, 4) - 2.0 * 4f64.powf(1.0)).abs() < 1e-9);
        assert!((unique_ids_at(&s, 64) - 45.254833995939045).abs() < 1e-9);
        s.ids_used = 40;
        assert_eq!(unique_ids_at(&s, 1000), 40.0);
    }

    #[test]
    fn rows_counted_one_at_a_time_give_the_statistics_of_the_rows_in_memory() {
        let d = toy();
        let mut t = Tally::new(0);
        for r in 0..d.n_rows() {
            t.add(d.rows.row(r).0);
        }
        assert_eq!(t.finish(d.width, d.n_classes, 3, 0), compute(&d, 3, 0));
    }

    fn toy() -> Dataset {
        let mut rows = RowStore::new();
        rows.push(&[0, 1], &[1.0, 1.0], &[0], &[1.0]);
        rows.push(&[0], &[1.0], &[0], &[1.0]);
        rows.push(&[], &[], &[0], &[1.0]);
        rows.push(&[0, 2, 3], &[1.0; 3], &[0], &[1.0]);
        Dataset {
            source: "toy".into(),
            width: 5,
            n_classes: 1,
            rows,
            skipped_lines: 0,
            notes: vec![],
        }
    }

    #[test]
    fn hand_computed_figures() {
        let s = compute(&toy(), 8, 1);
        assert_eq!(
            (s.rows, s.nnz_total, s.empty_rows, s.ids_used),
            (4, 6, 1, 4)
        );
        assert_eq!(s.nnz_per_row.min, 0);
        assert_eq!(s.nnz_per_row.max, 3);
        assert_eq!(s.nnz_per_row.p50, 1);
        assert!((s.top_coverage[&1] - 0.5).abs() < 1e-12); // id 0: 3 of 6
        assert!((s.top_coverage[&5] - 1.0).abs() < 1e-12);
        // All rows together touch 4 distinct ids.
        assert_eq!(s.unique_ids_per_batch[&4096], 4.0);
        assert_eq!(s.frequency_histogram[&2], 1); // id 0 occurs 3 times: bin [2, 4)
        assert_eq!(s.frequency_histogram[&1], 3);
    }

    #[test]
    fn unique_ids_grow_with_batch_size() {
        let s = compute(&toy(), 16, 2);
        let v: Vec<f64> = s.unique_ids_per_batch.values().copied().collect();
        assert!(v.windows(2).all(|w| w[0] <= w[1] + 1e-9));
    }
}
