//! A data file and how to read it: a [`Source`] names the path, the format and the reader's
//! settings, and its variant (the format and row-forming settings) keys what is kept of it.

use std::path::PathBuf;

use crate::labels::LabelOptions;
use crate::options::{ReadOptions, TextOptions};
use widebag_kinds::{Format, LabelMode, TextMode};

/// A data file and how to read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub path: PathBuf,
    pub format: Format,
    /// lightgcn: the held-out interactions, loaded alongside.
    pub test_path: Option<PathBuf>,
    pub read: ReadOptions,
    pub text: TextOptions,
    /// `text` directories in bow mode: a document's target is its own bag, or one class from its
    /// file name ([`crate::labels`]).
    pub label: LabelOptions,
}

impl Source {
    pub fn new(path: impl Into<PathBuf>, format: Format) -> Self {
        Self {
            path: path.into(),
            format,
            test_path: None,
            read: ReadOptions::default(),
            text: TextOptions::default(),
            label: LabelOptions::default(),
        }
    }

    /// A short label of how rows are formed, used to key the saved statistics.
    /// The label mode is part of it (`-label-name1-2`; nothing for bags), so statistics saved
    /// for one mode are not reused for another.
    pub fn variant(&self) -> String {
        self.rows_variant() + &self.label.variant()
    }

    /// The settings [`Self::variant`] names, read back: the format, the text options (the
    /// tokenizer is not part of a variant: the default is kept) and the label options. `None`
    /// for a label no variant has.
    pub fn settings_of(variant: &str) -> Option<(Format, TextOptions, LabelOptions)> {
        let (rows, label) = match variant.split_once("-label-name") {
            Some((rows, range)) => {
                let (start, end) = range.split_once('-')?;
                let label = LabelOptions {
                    mode: LabelMode::FileName,
                    start: start.parse().ok()?,
                    end: end.parse().ok()?,
                };
                (rows, label)
            }
            None => (variant, LabelOptions::default()),
        };
        let mut parts = rows.split('-');
        let format = Format::from_name(parts.next()?)?;
        let mut text = TextOptions::default();
        if format.is_text() {
            let mode = parts.next()?;
            (text.mode, text.window) = match mode.strip_prefix("cbow") {
                Some(w) => (TextMode::Cbow, w.parse().ok()?),
                None if mode == "bow" => (TextMode::Bow, text.window),
                None => return None,
            };
            text.min_count = parts.next()?.strip_prefix("min")?.parse().ok()?;
            text.max_vocab = parts.next()?.strip_prefix("max")?.parse().ok()?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some((format, text, label))
    }

    fn rows_variant(&self) -> String {
        match (self.format.is_text(), self.text.mode) {
            (false, _) => self.format.name().to_string(),
            (true, TextMode::Bow) => format!(
                "{}-bow-min{}-max{}",
                self.format.name(),
                self.text.min_count,
                self.text.max_vocab
            ),
            (true, TextMode::Cbow) => format!(
                "{}-cbow{}-min{}-max{}",
                self.format.name(),
                self.text.window,
                self.text.min_count,
                self.text.max_vocab
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_back_from_the_variant() {
        let mut cases = Vec::new();
        for format in Format::ALL {
            let mut s = Source::new("x", format);
            cases.push(s.clone());
            if format.is_text() {
                s.text.mode = TextMode::Cbow;
                s.text.window = 7;
                s.text.min_count = 3;
                s.text.max_vocab = 5000;
                cases.push(s.clone());
                s.text.mode = TextMode::Bow;
                s.label = LabelOptions {
                    mode: LabelMode::FileName,
                    start: 1,
                    end: 2,
                };
                cases.push(s);
            }
        }
        for s in cases {
            let v = s.variant();
            let (format, text, label) = Source::settings_of(&v).expect(&v);
            let mut back = Source::new("x", format);
            (back.text, back.label) = (text, label);
            assert_eq!(back.variant(), v);
        }
        for bad in [
            "",
            "csv",
            "text",
            "text-skipgram-min1-max0",
            "libsvm-extra",
            "text-bow-min1",
        ] {
            assert!(Source::settings_of(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn names_round_trip() {
        for f in Format::ALL {
            assert_eq!(Format::from_name(f.name()), Some(f));
        }
        assert_eq!(Format::from_name("csv"), None);
    }
}
