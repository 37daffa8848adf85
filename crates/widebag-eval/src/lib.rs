//! Evaluation metrics for widebag's tasks, in plain Rust (no burn, no GPU): running top-K over
//! chunked class scores, full-ranking recommendation metrics, classification metrics and
//! language-model perplexity, each reported as a serialisable [`EvalReport`].
//!
//! - [`RowTopK`] / [`TopKBatch`]: the best K classes of a row, offered chunk by chunk, with
//!   training items masked; ties go to the lower class id, NaN scores are never taken.
//! - [`RankingMetrics`]: Recall, NDCG, Precision and Hit at several K, averaged over users
//!   (LightGCN's definitions; recall's denominator per [`RecallConvention`]).
//! - [`ClassMetrics`]: top-1 and top-5 accuracy and log-loss.
//! - [`PerplexityMetrics`]: mean NLL, perplexity and bits per token from pooled sums.

mod classify;
mod error;
mod line;
mod perplexity;
mod ranking;
mod report;
mod topk;

pub use classify::ClassMetrics;
pub use error::EvalError;
pub use perplexity::PerplexityMetrics;
pub use ranking::{RankingMetrics, RecallConvention};
pub use report::{EvalReport, Metric, Task};
pub use topk::{RowTopK, TopKBatch};
