//! The settings a source's reader is given: those every file reader shares (index base, shape,
//! whether bad lines are skipped) and the text readers' own (mode, window, vocabulary cut, tokens).

use widebag_kinds::{TextMode, TokenFormat};

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

/// Settings of the text readers.
#[derive(Clone, Debug, PartialEq)]
pub struct TextOptions {
    pub mode: TextMode,
    /// CBOW context words on each side of the centre word.
    pub window: usize,
    /// Words seen fewer times are left out of the vocabulary.
    pub min_count: u64,
    /// Most words kept (the most frequent); 0 keeps all.
    pub max_vocab: usize,
    pub tokens: TokenFormat,
}

impl Default for TextOptions {
    fn default() -> Self {
        Self {
            mode: TextMode::Bow,
            window: 2,
            min_count: 1,
            max_vocab: 0,
            tokens: TokenFormat::Plain,
        }
    }
}
