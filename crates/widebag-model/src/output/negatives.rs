//! The negatives a sampled output loss draws each step ([`NegativeStream`]): distinct classes
//! from the proposal, a pure function of the seed and the step (a resumed run draws the same
//! ones), with each class's log-probability of being in a step's sample (the log-Q correction);
//! on wgpu a step's candidates are filled up to a fixed length with more classes
//! drawn uniformly from those not yet in ([`NegativeStream::fill`]), and each class's
//! probability of being in the filled sample corrects its score ([`Fill::log_inclusion`]).

use widebag_config::Proposal;
use widebag_data::rng::{SplitMix64, hash2};

use crate::error::ModelError;

/// Draws a step's negatives.
#[derive(Clone, Debug)]
pub struct NegativeStream {
    seed: u64,
    n_classes: usize,
    negatives: usize,
    /// The unigram proposal's cumulative probabilities (empty: uniform).
    cumulative: Vec<f64>,
    /// Each class's log-probability of being in a step's sample.
    log_inclusion: Vec<f32>,
    /// A unigram proposal built without the class counts (a run read back for evaluation):
    /// it refuses to draw.
    without_counts: bool,
}

/// Mixed into the seed so the negatives' stream is not the data's or dropout's.
const STREAM: u64 = 0x6e65_6761_7469_7665;
/// Mixed into the seed for the classes that fill a step's candidates up.
const FILL_STREAM: u64 = 0x6669_6c6c_2d75_7021;

/// A step's fill: `classes` more distinct classes drawn uniformly from the `left` classes that
/// were in neither the batch's targets nor the step's draw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fill {
    pub classes: Vec<u32>,
    pub left: usize,
}

impl Fill {
    /// The fraction of the classes left that the fill took (0 without a fill).
    pub fn fraction(&self) -> f64 {
        match self.left {
            0 => 0.0,
            left => self.classes.len() as f64 / left as f64,
        }
    }

    /// Log-probability that a class the step's draw would include with log-probability
    /// `drawn` is among the drawn or the filled classes: `ln(p + (1 − p) · f)`, `f` the
    /// fraction the fill took (a uniform pick among the classes the draw left).
    pub fn log_inclusion(&self, drawn: f32) -> f32 {
        let f = self.fraction();
        if f == 0.0 {
            return drawn;
        }
        let p = f64::from(drawn).exp();
        (p + (1.0 - p) * f).max(f64::MIN_POSITIVE).ln() as f32
    }
}

impl NegativeStream {
    /// `negatives` distinct classes a step of `n_classes` by `proposal`; `counts` are the
    /// training targets' class counts (read by the unigram proposal only).
    pub fn new(
        seed: u64,
        n_classes: usize,
        negatives: usize,
        proposal: Proposal,
        alpha: f64,
        counts: &[f64],
    ) -> Self {
        let negatives = negatives.min(n_classes);
        let (cumulative, log_inclusion) = match proposal {
            Proposal::Uniform => {
                let p = negatives as f64 / n_classes.max(1) as f64;
                (Vec::new(), vec![p.ln() as f32; n_classes])
            }
            Proposal::Unigram => unigram(n_classes, negatives, alpha, counts),
        };
        Self {
            seed,
            n_classes,
            negatives,
            cumulative,
            log_inclusion,
            without_counts: proposal == Proposal::Unigram && counts.is_empty(),
        }
    }

    /// Step `step`'s negatives, sorted and distinct; an error for a unigram proposal that has
    /// no class counts.
    pub fn draw(&self, step: u64) -> Result<Vec<u32>, ModelError> {
        if self.without_counts {
            return Err(ModelError::Unsupported {
                key: "model.sampling.proposal",
                message: "\"unigram\" draws by the training targets' class counts, which this model was built without".into(),
            });
        }
        Ok(self.draw_unchecked(step))
    }

    fn draw_unchecked(&self, step: u64) -> Vec<u32> {
        let mut rng = SplitMix64::new(hash2(self.seed ^ STREAM, step));
        let mut out = match self.cumulative.is_empty() {
            true => floyd(&mut rng, self.n_classes, self.negatives),
            false => (0..self.negatives)
                .map(|_| {
                    let u = rng.next_f64() * self.cumulative[self.n_classes - 1];
                    self.cumulative
                        .partition_point(|&c| c <= u)
                        .min(self.n_classes - 1) as u32
                })
                .collect(),
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `count` distinct classes of those not in `taken` (sorted, distinct), drawn uniformly:
    /// a pure function of the seed, the step and `taken`. Fewer where fewer are left.
    pub fn fill(&self, step: u64, taken: &[u32], count: usize) -> Fill {
        let mut left: Vec<u32> = Vec::with_capacity(self.n_classes.saturating_sub(taken.len()));
        let mut t = taken.iter().peekable();
        for c in 0..self.n_classes as u32 {
            match t.peek() {
                Some(&&x) if x == c => {
                    t.next();
                }
                _ => left.push(c),
            }
        }
        let n_left = left.len();
        let count = count.min(n_left);
        let mut rng = SplitMix64::new(hash2(self.seed ^ FILL_STREAM, step));
        // A partial Fisher-Yates shuffle: the first `count` of `left` are a uniform pick.
        for i in 0..count {
            let j = i + rng.below((n_left - i) as u64) as usize;
            left.swap(i, j);
        }
        left.truncate(count);
        left.sort_unstable();
        Fill {
            classes: left,
            left: n_left,
        }
    }

    /// Log-probability that class `c` is in a step's sample.
    pub fn log_inclusion(&self, c: u32) -> f32 {
        self.log_inclusion[c as usize]
    }

    /// The classes drawn from.
    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    /// Distinct classes drawn a step (at most).
    pub fn negatives(&self) -> usize {
        self.negatives
    }
}

/// `k` distinct classes of `0..n`, uniformly (Floyd's algorithm: `k` draws whatever `n`).
fn floyd(rng: &mut SplitMix64, n: usize, k: usize) -> Vec<u32> {
    if k >= n {
        return (0..n as u32).collect();
    }
    let mut chosen = std::collections::HashSet::with_capacity(k);
    let mut out = Vec::with_capacity(k);
    for j in (n - k)..n {
        let t = rng.below(j as u64 + 1) as usize;
        let pick = if chosen.contains(&t) { j } else { t };
        chosen.insert(pick);
        out.push(pick as u32);
    }
    out
}

/// The unigram^alpha proposal's cumulative probabilities, and each class's log-probability of
/// being among `k` draws with replacement: `ln(1 − (1 − q)^k)`.
fn unigram(n: usize, k: usize, alpha: f64, counts: &[f64]) -> (Vec<f64>, Vec<f32>) {
    let weights: Vec<f64> = (0..n)
        .map(|c| counts.get(c).copied().unwrap_or(0.0).max(0.0).powf(alpha))
        .collect();
    let total: f64 = weights.iter().sum();
    let weights = match total > 0.0 {
        true => weights,
        false => vec![1.0; n],
    };
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(n);
    let mut acc = 0.0;
    for w in &weights {
        acc += w;
        cumulative.push(acc);
    }
    let log_inclusion = weights
        .iter()
        .map(|w| {
            let q = w / total;
            // 1 − (1 − q)^k, without cancellation for small q.
            let p = -((k as f64) * (-q).ln_1p()).exp_m1();
            p.max(f64::MIN_POSITIVE).ln() as f32
        })
        .collect();
    (cumulative, log_inclusion)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_draws_the_same_distinct_negatives_whenever_it_is_drawn() {
        let s = NegativeStream::new(7, 1000, 50, Proposal::Uniform, 0.75, &[]);
        let a = s.draw_unchecked(12);
        assert_eq!(a.len(), 50);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a, s.draw_unchecked(12));
        assert_ne!(a, s.draw_unchecked(13));
        let again = NegativeStream::new(7, 1000, 50, Proposal::Uniform, 0.75, &[]);
        assert_eq!(a, again.draw_unchecked(12));
    }

    #[test]
    fn a_fill_takes_distinct_classes_outside_the_taken_ones_uniformly() {
        let s = NegativeStream::new(9, 100, 10, Proposal::Uniform, 0.75, &[]);
        let taken: Vec<u32> = (0..100).step_by(3).collect();
        let f = s.fill(4, &taken, 20);
        assert_eq!(f.classes.len(), 20);
        assert_eq!(f.left, 100 - taken.len());
        assert!(f.classes.windows(2).all(|w| w[0] < w[1]));
        assert!(f.classes.iter().all(|c| c % 3 != 0));
        assert_eq!(f, s.fill(4, &taken, 20));
        assert_ne!(f, s.fill(5, &taken, 20));
        // Asked for more than is left: every class left.
        assert_eq!(s.fill(4, &taken, 1000).classes.len(), 100 - taken.len());
        // Each class left is taken about count / left of the time.
        let mut seen = [0u32; 100];
        for step in 0..4000 {
            for c in s.fill(step, &taken, 20).classes {
                seen[c as usize] += 1;
            }
        }
        let expected = 4000.0 * 20.0 / 66.0;
        for c in (0..100).filter(|c| c % 3 != 0) {
            let n = f64::from(seen[c]);
            assert!((n - expected).abs() < 5.0 * expected.sqrt(), "{c}: {n}");
        }
    }

    #[test]
    fn a_filled_sample_includes_a_class_by_its_draw_or_the_fill() {
        let none = Fill::default();
        assert_eq!(none.log_inclusion(-2.0), -2.0);
        let half = Fill {
            classes: vec![1; 5],
            left: 10,
        };
        let p = (-2.0f64).exp();
        let want = (p + (1.0 - p) * 0.5).ln() as f32;
        assert!((half.log_inclusion(-2.0) - want).abs() < 1e-6);
        let all = Fill {
            classes: vec![1; 10],
            left: 10,
        };
        assert!(all.log_inclusion(-30.0).abs() < 1e-6);
    }

    #[test]
    fn every_class_is_drawn_when_negatives_equal_classes() {
        let s = NegativeStream::new(1, 37, 37, Proposal::Uniform, 0.75, &[]);
        assert_eq!(s.draw_unchecked(3), (0..37).collect::<Vec<u32>>());
        assert!((0..37).all(|c| s.log_inclusion(c) == 0.0));
    }

    #[test]
    fn uniform_draws_each_class_about_as_often_as_its_inclusion_probability_says() {
        let s = NegativeStream::new(3, 200, 20, Proposal::Uniform, 0.75, &[]);
        let mut seen = [0u32; 200];
        for step in 0..5000 {
            for c in s.draw_unchecked(step) {
                seen[c as usize] += 1;
            }
        }
        for (c, &n) in seen.iter().enumerate() {
            let expected = 5000.0 * s.log_inclusion(c as u32).exp() as f64;
            assert!(
                (n as f64 - expected).abs() < 5.0 * expected.sqrt(),
                "{c}: {n}"
            );
        }
    }

    #[test]
    fn unigram_draws_by_count_to_the_alpha_with_its_inclusion_probability() {
        let counts: Vec<f64> = (0..50).map(|c| (50 - c) as f64 * 10.0).collect();
        let s = NegativeStream::new(5, 50, 10, Proposal::Unigram, 0.75, &counts);
        let mut seen = [0u32; 50];
        for step in 0..20_000 {
            for c in s.draw_unchecked(step) {
                seen[c as usize] += 1;
            }
        }
        for (c, &n) in seen.iter().enumerate() {
            let expected = 20_000.0 * s.log_inclusion(c as u32).exp() as f64;
            assert!(
                (n as f64 - expected).abs() < 5.0 * expected.sqrt() + 5.0,
                "{c}: {n} vs {expected}"
            );
        }
        assert!(seen[0] > seen[49]);
    }
}
