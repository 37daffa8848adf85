//! The configuration's `[data]` section as the data crate reads it: the file `Source` (path,
//! format, reader, text and label options) and the synthetic generator's `SyntheticSpec`. Kept
//! here, where run preparation meets both crates, so the config crate stays schema, loading,
//! validation and units.

use widebag_config::{Config, DataConfig};
use widebag_data::{LabelOptions, Source, SyntheticSpec, TextOptions};

/// The data file to read, when the run trains on one (validated: `format` is set).
pub fn source(data: &DataConfig) -> Option<Source> {
    let (path, format) = (data.resolved_path()?, data.format?);
    let mut s = Source::new(path, format);
    s.test_path = data.resolved_test_path();
    s.read.zero_based = data.zero_based;
    s.read.skip_bad_lines = data.skip_bad_lines;
    s.text = TextOptions {
        mode: data.mode.unwrap_or_default(),
        window: data.window,
        min_count: data.min_count,
        max_vocab: data.max_vocab,
        tokens: data.tokens,
    };
    s.label = LabelOptions {
        mode: data.label,
        start: data.label_chars[0],
        end: data.label_chars[1],
    };
    Some(s)
}

/// Synthetic data settings from the config.
pub fn synthetic_spec(config: &Config) -> SyntheticSpec {
    SyntheticSpec {
        width: config.data.width,
        n_classes: config.data.n_classes(),
        nnz_mean: config.data.nnz,
        nnz_spread: config.data.nnz_spread,
        zipf_exponent: config.data.zipf_exponent,
        signal_share: config.data.signal_share,
        target: config.data.target,
        seed: config.train.seed,
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use widebag_config::{Format, TextMode, TokenFormat, load};

    use super::*;

    fn sets(args: &[&str]) -> Config {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        load(None, &args).expect("a valid configuration")
    }

    #[test]
    fn text_keys_become_the_text_readers_options() {
        let c = sets(&[
            "data.path=corpus.txt",
            "data.format=text",
            "data.mode=cbow",
            "data.window=3",
        ]);
        let s = source(&c.data).unwrap();
        assert_eq!(s.format, Format::Text);
        assert_eq!(s.text.mode, TextMode::Cbow);
        assert_eq!(s.text.window, 3);
        assert!(
            source(&sets(&[]).data).is_none(),
            "synthetic data has no source"
        );
    }

    #[test]
    fn file_name_labels_become_label_options() {
        let brown = [
            "data.path=~/brown",
            "data.format=text",
            "data.label=file_name",
        ];
        let c = sets(&[&brown[..], &["data.label_chars=[1, 2]"]].concat());
        let s = source(&c.data).unwrap();
        assert_eq!(s.label, LabelOptions::file_name(1, 2));
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(s.path, PathBuf::from(home).join("brown"));
        }
        let bag = sets(&["data.path=x", "data.format=text"]);
        assert_ne!(source(&bag.data).unwrap().variant(), s.variant());
        let whole = source(&sets(&brown).data).unwrap().label;
        assert_eq!((whole.start, whole.end), (0, 0));
    }

    #[test]
    fn brown_config_reads_tagged_text_with_file_name_labels() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/brown.toml");
        let c = load(Some(&path), &[]).unwrap();
        let s = source(&c.data).unwrap();
        assert_eq!(s.label, LabelOptions::file_name(1, 2));
        assert_eq!(
            (s.format, s.text.tokens),
            (Format::Text, TokenFormat::Tagged)
        );
    }

    #[test]
    fn the_synthetic_spec_takes_the_data_section_and_the_seed() {
        let c = sets(&["data.width=1000", "train.seed=7"]);
        let spec = synthetic_spec(&c);
        assert_eq!((spec.width, spec.seed), (1000, 7));
        assert_eq!(spec.n_classes, c.data.n_classes());
    }
}
