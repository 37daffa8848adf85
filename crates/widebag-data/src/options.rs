//! The settings the file readers share: index base, shape and whether bad lines are skipped.

/// Options shared by the file readers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadOptions {
    /// Ids are 0-based (`Some(true)`), 1-based (`Some(false)`), or detected (`None`).
    pub zero_based: Option<bool>,
    /// Input width; taken from the data when unset.
    pub width: Option<usize>,
    /// Number of classes; taken from the data when unset.
    pub n_classes: Option<usize>,
    /// Skip malformed lines (and count them) instead of failing.
    pub skip_bad_lines: bool,
}
