//! What each remedy cost on the reference datasets, measured with `widebag frontier`
//! (`bash benches/frontier.sh`, `bash benches/remedy-alone.sh`; the tables in docs/remedies.md):
//! `plan` prints it beside each remedy it takes, named as a reference, not a promise for the
//! user's data.

use crate::remedy::Remedy;

impl Remedy {
    /// The remedy's measured cost on the references, in one line (docs/remedies.md holds it
    /// verbatim).
    pub fn reference(self) -> &'static str {
        match self {
            Remedy::RecomputeLogits => RECOMPUTE_LOGITS,
            Remedy::NarrowChunk => NARROW_CHUNK,
            Remedy::Checkpointing => CHECKPOINTING,
            Remedy::HostTier => HOST_TIER,
            Remedy::HalfTables => HALF_TABLES,
            Remedy::HalfMoments => HALF_MOMENTS,
            Remedy::HeadTailInput => HEAD_TAIL_INPUT,
            Remedy::SampledOutput => SAMPLED_OUTPUT,
            Remedy::AdaptiveOutput => ADAPTIVE_OUTPUT,
        }
    }
}

const RECOMPUTE_LOGITS: &str = "no quality cost: identical losses (Gowalla, 20 steps on flex); time 1.20× on Gowalla on flex (491.1 against 587.6 examples/s with the logits kept, medians of 3)";
const NARROW_CHUNK: &str = "no quality cost: the same losses (within 1.6e-3 after 1,000 steps on flex, summation order); time 1.57× at 8 chunks on lavapipe, 0.73× on flex";
const CHECKPOINTING: &str =
    "no quality cost: identical losses; time 1.03× on the quickstart (flex and lavapipe)";
const HOST_TIER: &str = "no quality cost: the device table's losses within 1e-5 for every table optimizer; time: a batch's rows and state cross each step; not offered on flex";
const HALF_TABLES: &str = "precision: f16 tables with stochastic rounding within 0.2 % of f32's validation loss (GCIDE, Zipf); Gowalla Recall@20 0.1427 with the adaptive softmax against 0.1443 with it alone";
const HALF_MOMENTS: &str = "precision: bf16 moments within 0.41 % of f32's validation loss (GCIDE, Zipf); GCIDE perplexity 2,226.9 with them on f16 tables and the adaptive softmax against 2,259.8 without";
const HEAD_TAIL_INPUT: &str = "accuracy: Gowalla Recall@20 0.1640 against 0.1748 whole (alone at 500 MiB); Brown accuracy 0.497 against 0.533 whole (alone at 20 MiB, mean of 3 seeds)";
const SAMPLED_OUTPUT: &str = "accuracy: Gowalla Recall@20 0.1623 with 1,024 negatives against 0.1748 whole (20 epochs); GCIDE perplexity 5,032.2 against 2,812.7 whole after 200 steps, at 12× the examples/s";
const ADAPTIVE_OUTPUT: &str = "accuracy: Gowalla Recall@20 0.1443 against 0.1748 whole (alone at 500 MiB); GCIDE perplexity 2,460.5 against 2,812.7 whole (alone at 150 MiB: lower after 200 steps)";

#[cfg(test)]
mod tests {
    use super::*;

    /// Each reference is quoted verbatim in docs/remedies.md, where its measurements are.
    #[test]
    fn every_reference_is_the_one_docs_remedies_holds() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/remedies.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        for r in Remedy::ORDER {
            let text = r.reference();
            assert!(
                doc.contains(text),
                "docs/remedies.md lacks {}'s reference: {text}",
                r.name()
            );
        }
    }
}
