//! Which task a config trains for, and so what its evaluation reads: a ranking (recommenders),
//! log-probabilities of next ids (language models) or of one label (classifiers).

use widebag_kinds::{Format, LabelMode, TargetKind, TextMode};

use crate::schema::{Config, OutputKind};

/// The task a config trains for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// A bag of targets ranked (Recall/NDCG).
    Recommendation,
    /// Next ids (perplexity).
    LanguageModel,
    /// One label per row (accuracy).
    Classification,
}

impl Config {
    /// A bag of targets (LightGCN data, `data.target = "bag"`, the multinomial output, a text
    /// document's own bag) is recommendation; next-id targets (synthetic) and CBOW rows are
    /// language modelling; one label per row is classification.
    pub fn task_kind(&self) -> TaskKind {
        let d = &self.data;
        // A text document's own bag as its target (bow without file-name labels) is a bag too.
        let own_bag = d.format.is_some_and(|f| f.is_text())
            && d.mode != Some(TextMode::Cbow)
            && d.label == LabelMode::Bag;
        if self.model.output == OutputKind::Multinomial
            || d.target == TargetKind::Bag && d.path.is_none()
            || d.format == Some(Format::Lightgcn)
            || own_bag
        {
            TaskKind::Recommendation
        } else if d.path.is_none() || d.mode == Some(TextMode::Cbow) {
            TaskKind::LanguageModel
        } else {
            TaskKind::Classification
        }
    }
}
