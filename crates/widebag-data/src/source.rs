//! One entry point for every file format: a [`Source`] (path, format, reader settings) loads into
//! a [`Loaded`] dataset, and the files widebag keeps beside the data (vocabulary, statistics)
//! are written there, or to a cache directory when the data's directory is read-only.

use std::path::{Path, PathBuf};

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::labels::{self, LabelOptions};
use crate::options::ReadOptions;
use crate::text::{TextMode, TextOptions, Vocabulary};
use crate::{dictd, libsvm, lightgcn, npz, text};
use widebag_kinds::{Format, LabelMode};

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

/// A loaded source.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub dataset: Dataset,
    /// Text formats: the vocabulary (id order).
    pub vocabulary: Option<Vocabulary>,
    /// lightgcn: held-out items per user row.
    pub test: Option<RowStore>,
    /// `text` with `data.label = "file_name"`: the class names, class id → label (sorted).
    pub labels: Option<Vec<String>>,
}

impl Loaded {
    /// The class names as the `labels.tsv` sidecar (`label<TAB>documents`, class id order), for
    /// [`save_sidecar`] with [`labels::LABELS_SUFFIX`]; `None` when the rows have no named classes.
    pub fn labels_tsv(&self) -> Option<String> {
        let names = self.labels.as_ref()?;
        Some(labels::labels_tsv(names, &self.dataset))
    }
}

/// Reads `source` into memory with its format's reader (`crate::load` also recognises a
/// packed dataset).
pub fn read(source: &Source) -> Result<Loaded, DataError> {
    let path = &source.path;
    source.label.check(source.format, source.text.mode, path)?;
    let mut loaded = match source.format {
        Format::Libsvm => Loaded {
            dataset: libsvm::read_libsvm(path, &source.read)?,
            vocabulary: None,
            test: None,
            labels: None,
        },
        Format::Npz => Loaded {
            dataset: npz::read_npz(path, &source.read)?,
            vocabulary: None,
            test: None,
            labels: None,
        },
        Format::Lightgcn => {
            let i = lightgcn::read_lightgcn(path, source.test_path.as_deref(), &source.read)?;
            Loaded {
                dataset: i.train,
                vocabulary: None,
                test: i.test,
                labels: None,
            }
        }
        Format::Text if source.label.is_file_name() => {
            let (dataset, vocab, names) = labels::read_labelled(
                &source.path,
                source.format,
                &source.text,
                &source.label,
                source.read.skip_bad_lines,
            )?;
            Loaded {
                dataset,
                vocabulary: Some(vocab),
                test: None,
                labels: Some(names),
            }
        }
        Format::Text => {
            let (dataset, vocab) = text::read_text(path, &source.read, &source.text)?;
            Loaded {
                dataset,
                vocabulary: Some(vocab),
                test: None,
                labels: None,
            }
        }
        Format::Dictd => {
            let (docs, skipped, files) = dictd::dictd_documents(path, source.read.skip_bad_lines)?;
            let (dataset, vocab) = text::build(&files.index, &docs, &source.text, skipped)?;
            Loaded {
                dataset,
                vocabulary: Some(vocab),
                test: None,
                labels: None,
            }
        }
    };
    loaded.dataset.source = path.clone();
    Ok(loaded)
}

/// Where widebag keeps `suffix` for `data`: beside it (`DATA.suffix`) when that directory
/// accepts writes, else `$XDG_CACHE_HOME/widebag/sidecars/` (or `~/.cache/…`) under a name
/// derived from the data's absolute path.
pub fn sidecar_path(data: &Path, suffix: &str) -> PathBuf {
    let mut beside = data.as_os_str().to_owned();
    beside.push(format!(".{suffix}"));
    let beside = PathBuf::from(beside);
    let dir = beside.parent().filter(|p| !p.as_os_str().is_empty());
    if accepts_writes(dir.unwrap_or(Path::new("."))) {
        return beside;
    }
    let abs = std::fs::canonicalize(data).unwrap_or_else(|_| data.to_path_buf());
    let flat: String = abs
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    cache_dir()
        .join("sidecars")
        .join(format!("{flat}.{suffix}"))
}

/// Whether a file can be created in `dir`, found by creating (and removing) one: the mode bits
/// alone are wrong for a read-only mount, for another user's directory, and for root.
fn accepts_writes(dir: &Path) -> bool {
    let probe = dir.join(format!(".widebag-write-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            true
        }
        Err(e) => e.kind() == std::io::ErrorKind::AlreadyExists,
    }
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("widebag")
}

/// Writes `contents` to [`sidecar_path`] and returns where it went.
pub fn save_sidecar(data: &Path, suffix: &str, contents: &str) -> Result<PathBuf, DataError> {
    let path = sidecar_path(data, suffix);
    let io = |source| DataError::Io {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    crate::atomic::write_atomic(&path, contents.as_bytes()).map_err(io)?;
    Ok(path)
}

/// Size and modification time (Unix seconds) of a file, or for a directory the total size and
/// newest modification time of the files under it, to tell whether a saved sidecar still
/// describes the data.
pub fn fingerprint(path: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    if !meta.is_dir() {
        return Some((meta.len(), modified));
    }
    let mut total = (0u64, modified);
    for entry in std::fs::read_dir(path).ok()? {
        let (bytes, newest) = fingerprint(&entry.ok()?.path())?;
        total = (total.0 + bytes, total.1.max(newest));
    }
    Some(total)
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

    #[test]
    fn sidecar_beside_writable_data() {
        let dir = std::env::temp_dir().join(format!("widebag-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("x.svm");
        std::fs::write(&data, "1 1:1\n").unwrap();
        let p = save_sidecar(&data, "stats.json", "{}").unwrap();
        assert_eq!(p, dir.join("x.svm.stats.json"));
    }
}
