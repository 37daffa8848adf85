//! What each remedy cost on the reference datasets, measured with `widebag frontier`
//! (`bash benches/frontier.sh`, `bash benches/remedy-alone.sh`; the tables in docs/remedies.md):
//! `plan` prints it beside each remedy it takes, named as a reference, not a promise for the
//! user's data.

use crate::Remedy;

impl Remedy {
    /// The remedy's measured cost on the references, in one line (docs/remedies.md holds it
    /// verbatim).
    pub fn reference(self) -> &'static str {
        match self {
            Remedy::NarrowChunk => NARROW_CHUNK,
            Remedy::Checkpointing => CHECKPOINTING,
            Remedy::HostTier => HOST_TIER,
            Remedy::HalfTables => HALF_TABLES,
            Remedy::HalfMoments => HALF_MOMENTS,
            Remedy::HeadTailInput => HEAD_TAIL_INPUT,
            Remedy::AdaptiveOutput => ADAPTIVE_OUTPUT,
        }
    }
}

const NARROW_CHUNK: &str = "no quality cost: the same losses (within 1.6e-3 after 1,000 steps on flex, summation order); time 1.57× at 8 chunks on lavapipe, 0.73× on flex";
const CHECKPOINTING: &str =
    "no quality cost: identical losses; time 1.03× on the quickstart (flex and lavapipe)";
const HOST_TIER: &str = "no quality cost: the device table's losses within 1e-5 for every table optimizer; time: a batch's rows and state cross each step; not offered on flex";
const HALF_TABLES: &str = "precision: f16 tables with stochastic rounding within 0.2 % of f32's validation loss (GCIDE, Zipf)";
const HALF_MOMENTS: &str =
    "precision: bf16 moments within 0.41 % of f32's validation loss (GCIDE, Zipf)";
const HEAD_TAIL_INPUT: &str = "accuracy: Brown 0.53 against 0.61 whole (alone at 20 MiB, one seed); Gowalla Recall@20 0.1330 against 0.1748 with the adaptive softmax (200 MiB)";
const ADAPTIVE_OUTPUT: &str = "accuracy: GCIDE perplexity 2,461 against 2,813 whole (alone at 150 MiB: better after 200 steps); Gowalla Recall@20 0.1330 against 0.1748 with head/tail input (200 MiB)";

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
