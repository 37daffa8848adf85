//! `CsrError`: what is wrong with a row or a batch, naming the row (0-based, within the batch)
//! and the offending id or value.

/// Errors raised while validating or assembling a batch. Each names the row (0-based, within the
/// batch) and the offending id or value.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CsrError {
    #[error("row {row}: id {id} is not below the width {width}")]
    IdOutOfRange { row: usize, id: u64, width: usize },
    #[error("row {row}: value {value} for id {id} is not finite")]
    NonFiniteValue { row: usize, id: u32, value: f32 },
    #[error("row {row}: {n_ids} ids but {n_values} values")]
    LengthMismatch {
        row: usize,
        n_ids: usize,
        n_values: usize,
    },
    #[error("row {row}: target class {class} is not below the number of classes {n_classes}")]
    TargetOutOfRange {
        row: usize,
        class: u64,
        n_classes: usize,
    },
    #[error("row {row}: target weight {weight} for class {class} is not finite and non-negative")]
    BadTargetWeight { row: usize, class: u32, weight: f32 },
    #[error("{n_rows} rows but {n_targets} targets")]
    TargetCountMismatch { n_rows: usize, n_targets: usize },
    #[error("width {width} does not fit in 32-bit ids")]
    WidthTooLarge { width: usize },
    #[error("invalid CSR structure: {0}")]
    Structure(String),
}
