//! The sampled output losses' keys (`model.output = "sampled_softmax" | "negative_sampling" |
//! "cosine_contrastive"`, `[model.sampling]`), how the output scores a class (`model.score`,
//! `model.temperature`) and how the input bag is pooled (`model.pooling`), with their checks.

use serde::{Deserialize, Serialize};

/// `[model.sampling]`: the negatives a sampled output loss scores besides the batch's own
/// positives, and the loss's constants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    /// Distinct classes drawn per step, shared by every row of the batch (the batch's own
    /// positives join them). As many as there are classes: every class, the full loss.
    pub negatives: usize,
    /// The distribution negatives are drawn from.
    pub proposal: Proposal,
    /// The unigram proposal's exponent: `q_c ∝ count_c^alpha` (word2vec's 0.75).
    pub alpha: f64,
    /// `cosine_contrastive`: a negative costs `max(0, cos − margin)`.
    pub margin: f64,
    /// `cosine_contrastive`: the weight of a row's mean negative cost beside each positive's
    /// `1 − cos`.
    pub negative_weight: f64,
    /// Whether the batch's other rows' positives are a row's negatives too (in-batch
    /// negatives, drawn by popularity and not corrected for it); the drawn ones always are.
    pub batch_negatives: bool,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            negatives: 1024,
            proposal: Proposal::Uniform,
            alpha: 0.75,
            margin: 0.5,
            negative_weight: 1.0,
            batch_negatives: true,
        }
    }
}

/// Where a sampled loss's negatives come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proposal {
    /// Every class alike, drawn without replacement: each is in a step's sample with
    /// probability `negatives / n_classes`.
    #[default]
    Uniform,
    /// By the training targets' class counts to the power `alpha`, drawn with replacement
    /// (duplicates kept once): a class is in a step's sample with probability
    /// `1 − (1 − q_c)^negatives`.
    Unigram,
}

/// How the output layer scores a class for a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Score {
    /// `h · w_c + b_c`.
    #[default]
    Dot,
    /// `cos(h, w_c) / temperature` (no bias).
    Cosine,
}

/// How the input bag's rows are pooled into the first layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// `Σ value · row` (after `data.normalize` and input dropout).
    #[default]
    Sum,
    /// The same divided by the row's summed `|value|`: the mean of the rows a bag holds.
    Mean,
}

impl Score {
    pub fn name(self) -> &'static str {
        match self {
            Score::Dot => "dot",
            Score::Cosine => "cosine",
        }
    }
}

/// The sampled losses' keys, on their own and against `output`'s kind (`sampled`: one of the
/// sampled losses; `contrastive`: the cosine contrastive loss).
pub(crate) fn check(
    s: &SamplingConfig,
    score: Score,
    temperature: f64,
    kind: (bool, bool),
) -> Result<(), (&'static str, String)> {
    let (sampled, contrastive) = kind;
    let err = |key, msg: &str| Err((key, msg.to_string()));
    if !(temperature.is_finite() && temperature > 0.0) {
        return err("model.temperature", "must be a positive number");
    }
    if score == Score::Dot && temperature != 1.0 {
        return err(
            "model.temperature",
            "divides cosine scores; with model.score = \"dot\" leave it at 1",
        );
    }
    if !sampled {
        return Ok(());
    }
    if s.negatives == 0 {
        return err("model.sampling.negatives", "must be at least 1");
    }
    if !(s.alpha.is_finite() && s.alpha >= 0.0) {
        return err("model.sampling.alpha", "must be a number >= 0");
    }
    if !(s.margin.is_finite() && (-1.0..1.0).contains(&s.margin)) {
        return err("model.sampling.margin", "must be in [-1, 1) (a cosine)");
    }
    if !(s.negative_weight.is_finite() && s.negative_weight >= 0.0) {
        return err("model.sampling.negative_weight", "must be a number >= 0");
    }
    if contrastive && score != Score::Cosine {
        return err(
            "model.score",
            "output = \"cosine_contrastive\" scores by cosine: set model.score = \"cosine\"",
        );
    }
    if contrastive && temperature != 1.0 {
        return err(
            "model.temperature",
            "the cosine contrastive loss's margin is on the cosine itself: leave it at 1",
        );
    }
    Ok(())
}

/// An error unless `negatives` leaves a class to draw for `n_classes` classes.
pub fn check_negatives(negatives: usize, n_classes: usize) -> Result<(), (&'static str, String)> {
    if negatives > n_classes {
        return Err((
            "model.sampling.negatives",
            format!("{negatives} negatives of {n_classes} classes: at most {n_classes}"),
        ));
    }
    Ok(())
}
