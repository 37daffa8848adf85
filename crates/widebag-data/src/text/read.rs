//! A text corpus read whole: its documents, the vocabulary counted from them, their rows.

use std::path::Path;

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::options::{ReadOptions, TextOptions};
use crate::text::corpus::corpus_documents;
use crate::text::rows::{count_vocabulary, form_rows};
use crate::vocabulary::Vocabulary;

/// Builds the vocabulary of `docs` ([`count_vocabulary`]) and their rows ([`form_rows`]).
pub fn build(
    source: &Path,
    docs: &[String],
    options: &TextOptions,
    skipped_lines: usize,
) -> Result<(Dataset, Vocabulary), DataError> {
    let vocab = count_vocabulary(source, docs, options)?;
    let formed = form_rows(source, docs, options, skipped_lines, &vocab, false);
    Ok((formed.dataset, vocab))
}

/// Reads a text corpus: one document per line of a file, or one per file when `path` is a
/// directory.
pub fn read_text(
    path: &Path,
    read: &ReadOptions,
    options: &TextOptions,
) -> Result<(Dataset, Vocabulary), DataError> {
    let (docs, skipped) = corpus_documents(path, read.skip_bad_lines)?;
    build(path, &docs, options, skipped)
}

#[cfg(test)]
mod tests {
    use widebag_kinds::TextMode;

    use super::*;

    #[test]
    fn cbow_windows_and_bow_rows() {
        let dir = std::env::temp_dir().join(format!("widebag-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("docs.txt");
        std::fs::write(&p, "a b c\nb a\n").unwrap();
        let cbow = TextOptions {
            mode: TextMode::Cbow,
            window: 1,
            ..TextOptions::default()
        };
        let (d, v) = read_text(&p, &ReadOptions::default(), &cbow).unwrap();
        // a:2, b:2, c:1 → a=0, b=1, c=2.
        assert_eq!(v.id("c"), Some(2));
        assert_eq!(d.n_rows(), 5);
        assert_eq!(d.rows.row(1).0, &[0, 2]); // context of "b" in "a b c"
        assert_eq!(d.rows.row_targets(1).0, &[1]);
        let (d, _) = read_text(&p, &ReadOptions::default(), &TextOptions::default()).unwrap();
        assert_eq!(d.n_rows(), 2);
        std::fs::write(&p, b"ok\nfine\nx \xff\n").unwrap();
        let e = read_text(&p, &ReadOptions::default(), &TextOptions::default()).unwrap_err();
        assert!(e.to_string().contains("docs.txt:3:3"), "{e}");
        // A directory: one document per file; a non-UTF-8 file names its line and column.
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("a.txt"), "b b\nc").unwrap();
        std::fs::write(tree.join("sub/b.txt"), "b a").unwrap();
        std::fs::write(tree.join(".hidden"), "zzz").unwrap();
        let (d, v) = read_text(&tree, &ReadOptions::default(), &TextOptions::default()).unwrap();
        assert_eq!(d.n_rows(), 2);
        assert_eq!(v.id("b"), Some(0));
        // "b b c": distinct words with counts, as input and as target weights.
        assert_eq!(d.rows.row(0), (&[0, 2][..], &[2.0, 1.0][..]));
        assert_eq!(d.rows.row_targets(0), d.rows.row(0));
        assert_eq!(v.id("zzz"), None);
        std::fs::write(tree.join("sub/c.txt"), b"ok\nab\xffc").unwrap();
        let e = read_text(&tree, &ReadOptions::default(), &TextOptions::default()).unwrap_err();
        assert!(e.to_string().contains("c.txt:2:3"), "{e}");
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        let (d, _) = read_text(&tree, &skip, &TextOptions::default()).unwrap();
        assert_eq!((d.n_rows(), d.skipped_lines), (2, 1));
    }
}
