//! Head/tail band arithmetic shared by the trainer, the ledger and the automatic cutoff chooser:
//! which ids (or classes) each band holds, its row width, and what a band layout costs in bytes.

use serde::{Deserialize, Serialize};

use crate::band_keys::InputBands;
use crate::choices::{DenseOptim, Precision, TableOptim};
use crate::schema::{Config, OptimConfig};

/// Ids `start..end` of one band, stored `dim` wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Band {
    pub start: usize,
    pub end: usize,
    pub dim: usize,
}

impl Band {
    pub fn n_rows(&self) -> usize {
        self.end - self.start
    }
}

/// Row width of band `k`: `dim / factor^k`, at least 1.
pub fn band_dim(dim: usize, factor: usize, k: usize) -> usize {
    let mut d = dim;
    for _ in 0..k {
        d /= factor.max(1);
    }
    d.max(1)
}

/// The bands of `n` frequency-sorted ids cut at `cutoffs` (ascending, each in `1..n`); band 0
/// is `dim` wide, band `k` `band_dim(dim, factor, k)`. No cutoffs: one band.
pub fn bands(n: usize, dim: usize, factor: usize, cutoffs: &[usize]) -> Result<Vec<Band>, String> {
    if let Some(&c) = cutoffs.iter().find(|&&c| c == 0 || c >= n) {
        return Err(format!(
            "cutoff {c} is outside 1..{n} (there are {n} ids or classes)"
        ));
    }
    if cutoffs.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("cutoffs must ascend strictly, got {cutoffs:?}"));
    }
    let edges: Vec<usize> = std::iter::once(0)
        .chain(cutoffs.iter().copied())
        .chain(std::iter::once(n))
        .collect();
    Ok(edges
        .windows(2)
        .enumerate()
        .map(|(k, w)| Band {
            start: w[0],
            end: w[1],
            dim: band_dim(dim, factor, k),
        })
        .collect())
}

/// Values (f32) of the input bands' tables, projections and table-optimizer state.
pub fn input_values(bands: &[Band], dim: usize, table: TableOptim, dense: DenseOptim) -> u64 {
    bands
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let rows = b.n_rows() as u64;
            let table_values = rows * (b.dim as u64 + table.state_per_row(b.dim as u64));
            let projection = if k == 0 {
                0
            } else {
                (b.dim * dim) as u64 * (1 + dense.state_per_weight())
            };
            table_values + projection
        })
        .sum()
}

/// Bytes of the input bands' tables (at each band's `dtype`), their table-optimizer state (at
/// `optim.state_dtype`; row-wise Adagrad's accumulator in f32), and the f32 projections with
/// their dense-optimizer state: what `input_values` counts, at each element's size.
pub fn input_bytes(bands: &[Band], dim: usize, ib: &InputBands, optim: &OptimConfig) -> u64 {
    let state_bytes = match optim.table {
        TableOptim::RowwiseAdagrad => Precision::F32.bytes(),
        _ => optim.state_dtype.bytes(),
    };
    bands
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let (rows, d) = (b.n_rows() as u64, b.dim as u64);
            let table = rows * d * ib.dtype_of(k).bytes();
            let state = rows * optim.table.state_per_row(d) * state_bytes;
            let projection = if k == 0 {
                0
            } else {
                (b.dim * dim) as u64 * (1 + optim.dense.state_per_weight()) * 4
            };
            table + state + projection
        })
        .sum()
}

/// Parameters (f32 values, no optimizer state) of the input bands: tables and projections.
pub fn input_parameters(bands: &[Band], dim: usize) -> u64 {
    input_values(bands, dim, TableOptim::Sgd, DenseOptim::Sgd)
}

/// Parameters of the output layer over `bands` of classes on a `hidden`-wide input: the head's
/// weight and bias over its classes plus one token per tail cluster, and per tail cluster its
/// `[hidden, dim_k]` projection, `[dim_k, n_k]` weight and `[n_k]` bias. One band: the full
/// softmax's `[hidden, n] + [n]`.
pub fn output_parameters(bands: &[Band], hidden: usize) -> u64 {
    let head = &bands[0];
    let n_tail = bands.len() - 1;
    let mut total = ((hidden + 1) * (head.n_rows() + n_tail)) as u64;
    for b in &bands[1..] {
        total += (hidden * b.dim + (b.dim + 1) * b.n_rows()) as u64;
    }
    total
}

/// Bands (head and tails) the automatic chooser lays out.
pub const AUTO_BANDS: usize = 3;

/// Bytes of `config`'s output side cut at `cuts`: its parameters with the dense optimizer's
/// state, in f32 (what `model.output_bands.budget` bounds). `u64::MAX` for invalid cutoffs.
pub fn output_side_bytes(config: &Config, cuts: &[usize]) -> u64 {
    let (n, last) = (config.data.n_classes(), config.model.last_hidden());
    let per_value = 4 * (1 + config.optim.dense.state_per_weight());
    bands(n, last, config.model.output_bands.factor, cuts)
        .map(|b| per_value * output_parameters(&b, last))
        .unwrap_or(u64::MAX)
}

/// Bytes of `config`'s input side cut at `cuts` ([`input_bytes`]: tables, their state and the
/// projections; what `model.input_bands.budget` bounds). `u64::MAX` for invalid cutoffs.
pub fn input_side_bytes(config: &Config, cuts: &[usize]) -> u64 {
    let (ib, dim) = (&config.model.input_bands, config.model.dim);
    bands(config.data.width, dim, ib.factor, cuts)
        .map(|b| input_bytes(&b, dim, ib, &config.optim))
        .unwrap_or(u64::MAX)
}

/// The input cutoffs `"auto"` chooses within `budget_bytes` ([`input_side_bytes`]).
pub fn auto_input_cutoffs(config: &Config, budget_bytes: u64) -> Option<Vec<usize>> {
    let (width, factor) = (config.data.width, config.model.input_bands.factor);
    auto_cutoffs(width, factor, AUTO_BANDS, |c| {
        input_side_bytes(config, c) <= budget_bytes
    })
}

/// The output cutoffs `"auto"` chooses within `budget_bytes` ([`output_side_bytes`]): `None`
/// when even a one-class head does not fit, none when the full softmax does.
pub fn auto_output_cutoffs(config: &Config, budget_bytes: u64) -> Option<Vec<usize>> {
    let n = config.data.n_classes();
    let factor = config.model.output_bands.factor;
    auto_cutoffs(n, factor, AUTO_BANDS, |c| {
        output_side_bytes(config, c) <= budget_bytes
    })
}

/// Bands chosen automatically: the first `n_bands` bands (head and tails) follow a geometric
/// layout, tail band `k` holding `factor` times the ids of band `k − 1` at `1/factor` of its
/// width, so every band but the last costs about as much as the head; the head is the largest
/// (searched by bisection) whose layout `fits`. `None` when even a one-id head does not fit;
/// no cutoffs when the unsplit layout fits.
pub fn auto_cutoffs(
    n: usize,
    factor: usize,
    n_bands: usize,
    fits: impl Fn(&[usize]) -> bool,
) -> Option<Vec<usize>> {
    let layout = |head: usize| -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut c = head;
        for _ in 1..n_bands.max(1) {
            if c >= n {
                break;
            }
            cuts.push(c);
            c = c.saturating_mul(factor.max(2));
        }
        cuts
    };
    if fits(&[]) {
        return Some(Vec::new());
    }
    if n < 2 || !fits(&layout(1)) {
        return None;
    }
    let (mut lo, mut hi) = (1usize, n);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(&layout(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(layout(lo))
}

/// Both sides' bands of a prepared run, resolved once by run preparation (`widebag-prepare`) and
/// carried to the trainer, the ledger and the solver. One band on a side: that side is unsplit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelBands {
    /// Input ids `0..width` (frequency-sorted when split).
    pub input: Vec<Band>,
    /// Output classes `0..n_classes` on the last hidden size.
    pub output: Vec<Band>,
    /// Each class's summed target weight in the training rows, where the run needs it (a
    /// sampled loss's unigram proposal); empty otherwise.
    #[serde(skip)]
    pub class_counts: Vec<f64>,
}

impl ModelBands {
    /// The bands of a config whose cutoffs are explicit. `"auto"` cutoffs are resolved from the
    /// data by run preparation; a config that still holds them is an error naming the key.
    pub fn resolve(config: &Config) -> Result<Self, (&'static str, String)> {
        use crate::band_keys::Cutoffs;
        let m = &config.model;
        for (key, cutoffs) in [
            ("model.input_bands.cutoffs", &m.input_bands.cutoffs),
            ("model.output_bands.cutoffs", &m.output_bands.cutoffs),
        ] {
            if *cutoffs == Cutoffs::Auto {
                return Err((
                    key,
                    "\"auto\" cutoffs are chosen from the data by run preparation \
                     (widebag_prepare::open_data); this config skipped it"
                        .into(),
                ));
            }
        }
        Ok(Self {
            input: input_bands(config).map_err(|e| ("model.input_bands.cutoffs", e))?,
            output: output_bands(config).map_err(|e| ("model.output_bands.cutoffs", e))?,
            class_counts: Vec::new(),
        })
    }

    /// Whether the input side is cut into head and tail bands.
    pub fn input_split(&self) -> bool {
        self.input.len() > 1
    }

    /// Whether the output is an adaptive softmax (head and tail clusters).
    pub fn output_split(&self) -> bool {
        self.output.len() > 1
    }
}

/// Bands of the input side of `config` (after `open_data` resolved `"auto"` and the width).
pub fn input_bands(config: &Config) -> Result<Vec<Band>, String> {
    let b = &config.model.input_bands;
    bands(
        config.data.width,
        config.model.dim,
        b.factor,
        b.cutoffs.ids(),
    )
}

/// Output clusters of `config` on the last hidden size (one band: the full softmax).
pub fn output_bands(config: &Config) -> Result<Vec<Band>, String> {
    let b = &config.model.output_bands;
    bands(
        config.data.n_classes(),
        config.model.last_hidden(),
        b.factor,
        b.cutoffs.ids(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_follow_cutoffs_and_factor() {
        let b = bands(100, 64, 4, &[10, 40]).unwrap();
        assert_eq!(
            b,
            vec![
                Band {
                    start: 0,
                    end: 10,
                    dim: 64
                },
                Band {
                    start: 10,
                    end: 40,
                    dim: 16
                },
                Band {
                    start: 40,
                    end: 100,
                    dim: 4
                },
            ]
        );
        assert_eq!(bands(100, 2, 4, &[10, 40]).unwrap()[2].dim, 1);
        assert!(bands(100, 64, 4, &[100]).is_err());
        assert!(bands(100, 64, 4, &[40, 10]).is_err());
        assert_eq!(bands(5, 8, 4, &[]).unwrap().len(), 1);
    }

    #[test]
    fn parameters_count_every_tensor() {
        let b = bands(100, 64, 4, &[10, 40]).unwrap();
        // Tables 10·64 + 30·16 + 60·4, projections 16·64 + 4·64.
        assert_eq!(input_parameters(&b, 64), 640 + 480 + 240 + 1024 + 256);
        // Adam on both: tables and projections three times over.
        assert_eq!(
            input_values(&b, 64, TableOptim::Adam, DenseOptim::Adam),
            3 * (640 + 480 + 240 + 1024 + 256)
        );
        let optim = OptimConfig::default(); // Adam and Adam
        let mut ib = InputBands::default();
        let all = 3 * (640 + 480 + 240 + 1024 + 256);
        assert_eq!(input_bytes(&b, 64, &ib, &optim), 4 * all);
        // f16 tails and f16 moments: the tail tables and all table state at 2 bytes.
        ib.dtype = vec![Precision::F32, Precision::F16];
        let optim = OptimConfig {
            state_dtype: Precision::Bf16,
            ..optim
        };
        let tables = 640 * 4 + (480 + 240) * 2;
        let state = 2 * (640 + 480 + 240) * 2;
        assert_eq!(
            input_bytes(&b, 64, &ib, &optim),
            tables + state + 3 * 4 * (1024 + 256)
        );
        let o = bands(100, 8, 2, &[10]).unwrap();
        // Head [8+1, 10 + 1]; tail: proj 8·4, weight and bias (4+1)·90.
        assert_eq!(output_parameters(&o, 8), 9 * 11 + 32 + 5 * 90);
        assert_eq!(
            output_parameters(&bands(100, 8, 2, &[]).unwrap(), 8),
            9 * 100
        );
    }

    #[test]
    fn auto_cutoffs_take_the_largest_head_that_fits() {
        let cost = |cuts: &[usize]| input_parameters(&bands(10_000, 64, 4, cuts).unwrap(), 64);
        let budget = cost(&[]) / 5;
        let cuts = auto_cutoffs(10_000, 4, 3, |c| cost(c) <= budget).unwrap();
        assert_eq!(cuts.len(), 2);
        assert_eq!(cuts[1], cuts[0] * 4);
        assert!(cost(&cuts) <= budget);
        let bigger = [cuts[0] + 1, (cuts[0] + 1) * 4];
        assert!(cost(&bigger) > budget);
        assert_eq!(auto_cutoffs(10_000, 4, 3, |_| true), Some(vec![]));
        assert_eq!(auto_cutoffs(10_000, 4, 3, |_| false), None);
    }
}
