//! The errors the evaluation accumulators raise for malformed arguments (never for data values).

/// An argument that no metric can be computed from: a cut-off of zero, a score block whose shape
/// does not match its length, or two accumulators that measure different things.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EvalError {
    #[error("no cut-offs given: at least one K is needed")]
    NoCutoffs,
    #[error("a cut-off K of 0 measures nothing")]
    ZeroCutoff,
    #[error("{n_scores} scores do not form a {n_rows} × {n_cols} block")]
    ShapeMismatch {
        n_rows: usize,
        n_cols: usize,
        n_scores: usize,
    },
    #[error("the batch tracks {n_rows_expected} rows but {n_rows_given} were offered")]
    RowCountMismatch {
        n_rows_expected: usize,
        n_rows_given: usize,
    },
    #[error("{n_masks} masks for {n_rows} rows (give one per row, or none)")]
    MaskCountMismatch { n_rows: usize, n_masks: usize },
    #[error("cannot merge accumulators with different settings: {0}")]
    IncompatibleMerge(String),
}
