//! Seeded synthetic bag-of-ids data: Zipf-distributed ids, next-id or bag targets, streamed.
//!
//! Each row is a pure function of `(seed, row_index)`: a latent class `t` is drawn from a Zipf law
//! over the classes; the row's ids are, with probability `signal_share`, one of `t`'s eight
//! "context" ids (a fixed hash of `t`), and otherwise Zipf noise over the width. So the task is
//! learnable, the id frequencies follow the Zipf law, and nothing is ever held in memory beyond
//! the batch being built.

use std::sync::Arc;

use rayon::prelude::*;
use widebag_csr::{CsrBatch, RowTarget, SparseRow};
use widebag_kinds::TargetKind;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::order::Relabel;
use crate::rng::{SplitMix64, hash2};

/// Settings of the synthetic generator.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    pub width: usize,
    pub n_classes: usize,
    /// Mean number of ids drawn per row.
    pub nnz_mean: f64,
    /// Half-width of the uniform spread around the mean.
    pub nnz_spread: f64,
    /// Zipf exponent `s`: id `k` has weight `1 / (k + 1)^s`.
    pub zipf_exponent: f64,
    /// Share of ids drawn from the latent class's context (the learnable signal).
    pub signal_share: f64,
    pub target: TargetKind,
    pub seed: u64,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        Self {
            width: 240_000,
            n_classes: 240_000,
            nnz_mean: 20.0,
            nnz_spread: 10.0,
            zipf_exponent: 1.05,
            signal_share: 0.5,
            target: TargetKind::NextId,
            seed: 0,
        }
    }
}

/// Number of context ids tied to each latent class.
const CONTEXT_IDS: u64 = 8;

/// Inverse-CDF sampler for a Zipf law over `0..n`.
#[derive(Clone, Debug)]
pub struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    pub fn new(n: usize, exponent: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 0..n {
            total += 1.0 / libm::pow((k + 1) as f64, exponent);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Self { cdf }
    }
    pub fn len(&self) -> usize {
        self.cdf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }
    /// Probability of id `k`.
    pub fn probability(&self, k: usize) -> f64 {
        self.cdf[k] - if k == 0 { 0.0 } else { self.cdf[k - 1] }
    }
    pub fn sample(&self, rng: &mut SplitMix64) -> u32 {
        let u = rng.next_f64();
        (self.cdf.partition_point(|&c| c <= u)).min(self.cdf.len() - 1) as u32
    }
}

/// A stream of synthetic batches.
#[derive(Clone, Debug)]
pub struct SyntheticStream {
    spec: SyntheticSpec,
    ids: ZipfTable,
    classes: ZipfTable,
    next_row: u64,
    /// Renumbering applied to every generated row (frequency order for head/tail layouts).
    relabel: Option<Arc<Relabel>>,
}

impl SyntheticStream {
    /// Bytes it holds on the heap: the ids' and the classes' Zipf tables and the renumbering.
    pub fn heap_bytes(&self) -> u64 {
        ((self.ids.cdf.capacity() + self.classes.cdf.capacity()) * 8) as u64
            + self.relabel.as_ref().map_or(0, |r| r.heap_bytes())
    }

    pub fn new(spec: SyntheticSpec) -> Result<Self, DataError> {
        let bad = |key, message: &str| {
            Err(DataError::InvalidSpec {
                key,
                message: message.to_string(),
            })
        };
        if spec.width == 0 || spec.width > u32::MAX as usize {
            return bad("data.width", "must be between 1 and 4294967295");
        }
        if spec.n_classes == 0 || spec.n_classes > u32::MAX as usize {
            return bad("data.n_classes", "must be between 1 and 4294967295");
        }
        if !(spec.nnz_mean.is_finite() && spec.nnz_mean >= 1.0) {
            return bad("data.nnz", "must be a finite number >= 1");
        }
        if !(spec.nnz_spread.is_finite() && spec.nnz_spread >= 0.0) {
            return bad("data.nnz_spread", "must be a finite number >= 0");
        }
        if !(spec.zipf_exponent.is_finite() && spec.zipf_exponent >= 0.0) {
            return bad("data.zipf_exponent", "must be a finite number >= 0");
        }
        if !(0.0..=1.0).contains(&spec.signal_share) {
            return bad("data.signal_share", "must be within [0, 1]");
        }
        Ok(Self {
            ids: ZipfTable::new(spec.width, spec.zipf_exponent),
            classes: ZipfTable::new(spec.n_classes, spec.zipf_exponent),
            spec,
            next_row: 0,
            relabel: None,
        })
    }

    pub fn spec(&self) -> &SyntheticSpec {
        &self.spec
    }

    /// The same stream with every row renumbered by `relabel`.
    pub fn with_relabel(mut self, relabel: Relabel) -> Self {
        self.relabel = (!relabel.is_empty()).then(|| Arc::new(relabel));
        self
    }

    /// Expected entries per id and target weight per class of one row, in the stream's own
    /// numbering: exact figures of the generator (Zipf noise plus each latent class's context
    /// ids and target bag), where counting a sample would rank the rare ones by chance.
    pub fn expected_frequencies(&self) -> (Vec<f64>, Vec<f64>) {
        let spec = &self.spec;
        let lo = (spec.nnz_mean - spec.nnz_spread).max(1.0);
        let nnz = ((lo + spec.nnz_mean + spec.nnz_spread) / 2.0).min(spec.width as f64);
        let signal = spec.signal_share * nnz / CONTEXT_IDS as f64;
        let mut ids: Vec<f64> = (0..spec.width)
            .map(|i| (1.0 - spec.signal_share) * nnz * self.ids.probability(i))
            .collect();
        let mut classes = vec![0.0; spec.n_classes];
        // A bag holds 1..=8 draws (4.5 on average) from the class's eight target classes.
        let bag_draw = (1 + CONTEXT_IDS) as f64 / 2.0 / CONTEXT_IDS as f64;
        for t in 0..spec.n_classes {
            let p = self.classes.probability(t);
            for j in 0..CONTEXT_IDS {
                ids[(hash2(t as u64, j) % spec.width as u64) as usize] += signal * p;
                if spec.target == TargetKind::Bag {
                    classes[(hash2(t as u64, 1_000 + j) % spec.n_classes as u64) as usize] +=
                        bag_draw * p;
                }
            }
            if spec.target == TargetKind::NextId {
                classes[t] += p;
            }
        }
        (ids, classes)
    }

    /// Row `index` of the stream: a pure function of the seed and the index.
    pub fn row(&self, index: u64) -> (SparseRow, RowTarget) {
        let spec = &self.spec;
        let mut rng = SplitMix64::new(hash2(spec.seed, index));
        let latent = self.classes.sample(&mut rng) as u64;
        let lo = (spec.nnz_mean - spec.nnz_spread).max(1.0);
        let hi = spec.nnz_mean + spec.nnz_spread;
        let nnz =
            libm::round(lo + (hi - lo) * rng.next_f64()).clamp(1.0, spec.width as f64) as usize;
        let mut ids = Vec::with_capacity(nnz);
        for _ in 0..nnz {
            let id = if rng.next_f64() < spec.signal_share {
                (hash2(latent, rng.below(CONTEXT_IDS)) % spec.width as u64) as u32
            } else {
                self.ids.sample(&mut rng)
            };
            ids.push(id);
        }
        let target = match spec.target {
            TargetKind::NextId => RowTarget::Class(latent as u32),
            TargetKind::Bag => {
                let k = 1 + rng.below(CONTEXT_IDS);
                let bag = (0..k)
                    .map(|_| {
                        (hash2(latent, 1_000 + rng.below(CONTEXT_IDS)) % spec.n_classes as u64)
                            as u32
                    })
                    .collect();
                RowTarget::Bag(SparseRow::bag(bag))
            }
        };
        match &self.relabel {
            Some(r) => r.row(SparseRow::bag(ids), target),
            None => (SparseRow::bag(ids), target),
        }
    }

    /// Rows `first_row .. first_row + n_rows` as a batch, generated in parallel.
    pub fn batch_at(&self, first_row: u64, n_rows: usize) -> Result<CsrBatch, DataError> {
        let (rows, targets): (Vec<SparseRow>, Vec<RowTarget>) = (0..n_rows as u64)
            .into_par_iter()
            .map(|i| self.row(first_row + i))
            .unzip();
        Ok(CsrBatch::from_rows(
            &rows,
            &targets,
            self.spec.width,
            self.spec.n_classes,
        )?)
    }

    /// The next `n_rows` rows of the stream.
    /// The index of the next row [`Self::next_batch`] draws.
    pub fn next_row(&self) -> u64 {
        self.next_row
    }

    /// Continues the stream at row `next_row`.
    pub fn seek(&mut self, next_row: u64) {
        self.next_row = next_row;
    }

    pub fn next_batch(&mut self, n_rows: usize) -> Result<CsrBatch, DataError> {
        let batch = self.batch_at(self.next_row, n_rows)?;
        self.next_row += n_rows as u64;
        Ok(batch)
    }
}

/// Rows `rows` of the stream (generated in parallel), in canonical form (ids sorted, repeats
/// summed), as a file written from them holds them.
pub fn rows_in(
    stream: &SyntheticStream,
    rows: std::ops::Range<usize>,
) -> Vec<(SparseRow, RowTarget)> {
    (rows.start as u64..rows.end as u64)
        .into_par_iter()
        .map(|i| {
            let (row, target) = stream.row(i);
            let target = match target {
                RowTarget::Bag(b) => RowTarget::Bag(b.canonical()),
                t => t,
            };
            (row.canonical(), target)
        })
        .collect()
}

/// The first `n_rows` rows of `stream` as an in-memory dataset (e.g. to write them to a file),
/// each row canonical: ids sorted, repeats summed into counts.
pub fn to_dataset(stream: &SyntheticStream, n_rows: usize) -> Dataset {
    let mut store = RowStore::new();
    for (row, target) in rows_in(stream, 0..n_rows) {
        match target {
            RowTarget::Class(c) => store.push(&row.ids, &row.values, &[c], &[1.0]),
            RowTarget::Bag(b) => store.push(&row.ids, &row.values, &b.ids, &b.values),
        }
    }
    Dataset {
        source: format!("synthetic (seed {})", stream.spec.seed).into(),
        width: stream.spec.width,
        n_classes: stream.spec.n_classes,
        rows: store,
        skipped_lines: 0,
        notes: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(target: TargetKind) -> SyntheticSpec {
        SyntheticSpec {
            width: 1000,
            n_classes: 50,
            target,
            seed: 7,
            ..SyntheticSpec::default()
        }
    }

    #[test]
    fn expected_frequencies_match_a_large_sample() {
        for target in [TargetKind::NextId, TargetKind::Bag] {
            let s = SyntheticStream::new(small(target)).unwrap();
            let (ids, classes) = s.expected_frequencies();
            let rows = 40_000;
            let b = s.batch_at(0, rows).unwrap();
            let mut seen_ids = vec![0.0; ids.len()];
            for (&id, &v) in b.ids().iter().zip(b.values()) {
                seen_ids[id as usize] += v as f64 / rows as f64;
            }
            let mut seen_classes = vec![0.0; classes.len()];
            let t = b.targets();
            for (&c, &w) in t.classes.iter().zip(&t.weights) {
                seen_classes[c as usize] += w as f64 / rows as f64;
            }
            let total_ids: f64 = ids.iter().sum();
            let total_seen: f64 = seen_ids.iter().sum();
            assert!(
                (total_ids / total_seen - 1.0).abs() < 0.02,
                "{total_ids} {total_seen}"
            );
            // The ten most frequent ids and classes carry the expected share, within sampling noise.
            for (want, got) in [(&ids, &seen_ids), (&classes, &seen_classes)] {
                let mut order: Vec<usize> = (0..want.len()).collect();
                order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
                for &i in &order[..10] {
                    assert!(
                        (want[i] - got[i]).abs() < 0.05 * want[i] + 0.01,
                        "{i}: {} {}",
                        want[i],
                        got[i]
                    );
                }
            }
        }
    }

    #[test]
    fn same_seed_same_batch_and_fixed_values() {
        let a = SyntheticStream::new(small(TargetKind::NextId)).unwrap();
        let b = SyntheticStream::new(small(TargetKind::NextId)).unwrap();
        let (ba, bb) = (a.batch_at(0, 64).unwrap(), b.batch_at(0, 64).unwrap());
        assert_eq!(ba.ids(), bb.ids());
        assert_eq!(ba.values(), bb.values());
        assert_eq!(ba.targets(), bb.targets());
        // Streaming in two halves gives the same rows as one batch.
        let mut s = SyntheticStream::new(small(TargetKind::NextId)).unwrap();
        let h1 = s.next_batch(32).unwrap();
        let h2 = s.next_batch(32).unwrap();
        assert_eq!(h1.ids(), &ba.ids()[..ba.row_ptr()[32]]);
        assert_eq!(h2.ids(), &ba.ids()[ba.row_ptr()[32]..]);
    }

    #[test]
    fn nnz_and_ids_follow_the_spec() {
        let s = SyntheticStream::new(small(TargetKind::Bag)).unwrap();
        let b = s.batch_at(100, 500).unwrap();
        let total: f32 = b.values().iter().sum();
        let mean = total / 500.0;
        assert!((mean - 20.0).abs() < 1.5, "mean nnz {mean}");
        assert!(b.ids().iter().all(|&id| (id as usize) < 1000));
        assert!(!b.targets().single_class);
    }

    #[test]
    fn zipf_head_is_heavier() {
        let z = ZipfTable::new(1000, 1.0);
        assert!(z.probability(0) > 2.0 * z.probability(1) - 1e-12);
        let mut rng = SplitMix64::new(3);
        let zeros = (0..20_000).filter(|_| z.sample(&mut rng) == 0).count();
        let expected = 20_000.0 * z.probability(0);
        assert!((zeros as f64 - expected).abs() < 5.0 * expected.sqrt());
    }

    #[test]
    fn bad_spec_names_the_key() {
        let err = SyntheticStream::new(SyntheticSpec {
            width: 0,
            ..SyntheticSpec::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("data.width"));
    }
}
