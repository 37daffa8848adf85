//! Layered loading: schema defaults, then a TOML file (or the built-in quickstart), then `--set`
//! overrides, each key checked against the schema and remembered with its origin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use widebag_kinds::{Format, TextMode};

use crate::error::{ConfigError, Origin};
use crate::locate;
use crate::quickstart::{QUICKSTART_NAME, QUICKSTART_TOML};
use crate::schema::Config;
use crate::validate::validate;

/// A flattened TOML table: dotted key → value (arrays are leaves).
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push((key, other.clone())),
        }
    }
}

/// Every valid dotted key, from the schema's defaults with optional keys filled in.
pub fn known_keys() -> Vec<String> {
    let mut full = Config::default();
    full.data.n_classes = Some(1);
    full.data.path = Some(PathBuf::from("x"));
    full.data.format = Some(Format::Libsvm);
    full.data.test_path = Some(PathBuf::from("x"));
    full.data.mode = Some(TextMode::Bow);
    full.data.zero_based = Some(true);
    full.optim.table_lr = Some(1.0);
    full.model.last_activation = Some(crate::choices::Activation::Linear);
    full.model.output_precision = crate::choices::Precision::F16;
    full.train.epochs = Some(1);
    full.train.stop_at_metric = Some("recall@20".to_string());
    full.train.stop_at_value = Some(1.0);
    full.plan.budget = Some("1GiB".to_string());
    full.model.input_bands.budget = Some("1GiB".to_string());
    full.model.output_bands.budget = Some("1GiB".to_string());
    let table = toml::Table::try_from(&full).expect("config serialises");
    let mut out = Vec::new();
    flatten("", &table, &mut out);
    out.into_iter().map(|(k, _)| k).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The valid key nearest to `key`, if any is reasonably close.
pub fn nearest_key(key: &str) -> Option<String> {
    known_keys()
        .into_iter()
        .map(|k| (edit_distance(key, &k), k))
        .min()
        .filter(|(d, k)| *d <= k.len().max(4) / 2)
        .map(|(_, k)| k)
}

fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut table = root;
    for p in parts {
        table = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("schema sections are tables");
    }
    table.insert(last.to_string(), value);
}

/// Whether `key` may be absent: a key the schema's defaults leave unset.
fn is_optional(key: &str) -> bool {
    let table = toml::Table::try_from(Config::default()).expect("config serialises");
    let mut leaves = Vec::new();
    flatten("", &table, &mut leaves);
    !leaves.iter().any(|(k, _)| k == key)
}

/// `key` removed from `root`, wherever it is set.
fn remove_path(root: &mut toml::Table, key: &str) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut table = root;
    for p in parts {
        match table.get_mut(p).and_then(toml::Value::as_table_mut) {
            Some(t) => table = t,
            None => return,
        }
    }
    table.remove(last);
}

/// Parses the value of `--set key=value`: TOML if it parses, else a plain string.
pub fn parse_override_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Builds configurations from defaults, a file and overrides, remembering each key's origin.
#[derive(Clone, Debug)]
pub struct ConfigLoader {
    table: toml::Table,
    origins: BTreeMap<String, Origin>,
    known: Vec<String>,
}

impl Default for ConfigLoader {
    fn default() -> Self {
        Self::new()
    }
}

impl ConfigLoader {
    pub fn new() -> Self {
        Self {
            table: toml::Table::try_from(Config::default()).expect("config serialises"),
            origins: BTreeMap::new(),
            known: known_keys(),
        }
    }

    fn check_known(&self, key: &str, origin: &Origin) -> Result<(), ConfigError> {
        if self.known.iter().any(|k| k == key) {
            Ok(())
        } else {
            Err(ConfigError::UnknownKey {
                key: key.to_string(),
                origin: origin.clone(),
                suggestion: nearest_key(key),
            })
        }
    }

    /// Layers a TOML file over what is loaded so far.
    pub fn file(self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.text(path, &text)
    }

    /// Layers TOML text (read from `path`, or named so) over what is loaded so far.
    pub fn text(mut self, path: &Path, text: &str) -> Result<Self, ConfigError> {
        let parsed: toml::Table = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| locate::line_col(text, s.start))
                .unwrap_or((1, 1));
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        let mut leaves = Vec::new();
        flatten("", &parsed, &mut leaves);
        for (key, value) in leaves {
            let origin = Origin::File {
                path: path.to_path_buf(),
                line: locate::key_line(text, &key),
            };
            self.check_known(&key, &origin)?;
            set_path(&mut self.table, &key, value);
            self.origins.insert(key, origin);
        }
        Ok(self)
    }

    /// Applies one `key=value` override; `key=` (nothing after the `=`) unsets an optional key
    /// (`data.test_path=`: no held-out file), as if no layer had set it.
    pub fn set(mut self, arg: &str) -> Result<Self, ConfigError> {
        let (key, raw) = arg
            .split_once('=')
            .ok_or_else(|| ConfigError::BadOverride {
                arg: arg.to_string(),
            })?;
        let key = key.trim();
        let origin = Origin::Set {
            arg: arg.to_string(),
        };
        self.check_known(key, &origin)?;
        if raw.trim().is_empty() {
            if !is_optional(key) {
                return Err(ConfigError::Invalid {
                    key: key.to_string(),
                    origin,
                    message: "only an optional key is unset by `key=`: this one has a default; \
                              give a value"
                        .into(),
                });
            }
            remove_path(&mut self.table, key);
            self.origins.remove(key);
            return Ok(self);
        }
        set_path(&mut self.table, key, parse_override_value(raw.trim()));
        self.origins.insert(key.to_string(), origin);
        Ok(self)
    }

    fn origin_of(&self, key: &str) -> Origin {
        self.origins.get(key).cloned().unwrap_or(Origin::Default)
    }

    /// Deserialises and range-checks the merged configuration.
    pub fn build(self) -> Result<Config, ConfigError> {
        let value = toml::Value::Table(self.table.clone());
        let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            // Paths into arrays read `model.hidden[1]`; the origin is the array's key.
            let base = key.split('[').next().unwrap_or(&key).to_string();
            ConfigError::Invalid {
                origin: self.origin_of(&base),
                key: base,
                message: e.into_inner().message().to_string(),
            }
        })?;
        // The quickstart's class count is for its synthetic data; a data file brings its own.
        let from_quickstart = matches!(
            self.origin_of("data.n_classes"),
            Origin::File { path, .. } if path == Path::new(QUICKSTART_NAME)
        );
        if config.data.path.is_some() && from_quickstart {
            config.data.n_classes = None;
        }
        // `train.epochs` replaces `train.steps`: both given by the user is a contradiction (the
        // quickstart's steps give way).
        let steps_given = match self.origin_of("train.steps") {
            Origin::Default => false,
            Origin::File { path, .. } => path != Path::new(QUICKSTART_NAME),
            _ => true,
        };
        if config.train.epochs.is_some() && steps_given {
            return Err(ConfigError::Invalid {
                origin: self.origin_of("train.epochs"),
                key: "train.epochs".to_string(),
                message: format!(
                    "train.steps is set too ({}, {}): give one of them",
                    config.train.steps,
                    self.origin_of("train.steps")
                ),
            });
        }
        if let Err((key, message)) = validate(&config) {
            return Err(ConfigError::Invalid {
                origin: self.origin_of(key),
                key: key.to_string(),
                message,
            });
        }
        Ok(config)
    }
}

/// Loads the schema defaults, then `file` (or, without one, the built-in quickstart), then
/// `overrides` in order.
pub fn load(file: Option<&Path>, overrides: &[String]) -> Result<Config, ConfigError> {
    let loader = ConfigLoader::new();
    let mut loader = match file {
        Some(path) => loader.file(path)?,
        None => loader.text(Path::new(QUICKSTART_NAME), QUICKSTART_TOML)?,
    };
    for arg in overrides {
        loader = loader.set(arg)?;
    }
    loader.build()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_empty_override_unsets_an_optional_key_and_is_refused_for_one_with_a_default() {
        let dir = std::env::temp_dir().join(format!("widebag-unset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "[data]\npath = \"t.txt\"\nformat = \"lightgcn\"\ntest_path = \"x.txt\"\n",
        )
        .unwrap();
        let c = load(Some(&file), &["data.test_path=".to_string()]).unwrap();
        assert_eq!(c.data.test_path, None);
        assert_eq!(c.data.path.as_deref(), Some(Path::new("t.txt")));
        let err = load(Some(&file), &["train.batch_size=".to_string()]).unwrap_err();
        assert!(err.to_string().contains("train.batch_size"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn epochs_and_steps_together_are_refused_and_epochs_need_a_file() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let err = load(None, &args(&["train.steps=5", "train.epochs=2"])).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("train.epochs") && msg.contains("train.steps"),
            "{msg}"
        );
        let err = load(None, &args(&["train.epochs=2"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("data.path"), "{err}");
        let ok = load(
            None,
            &args(&[
                "data.path=\"x.svm\"",
                "data.format=\"libsvm\"",
                "train.epochs=2",
            ]),
        )
        .unwrap();
        assert_eq!(ok.train.epochs, Some(2));
        let err = load(None, &args(&["model.input_dropout=1.0"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.input_dropout"), "{err}");
        let err = load(None, &args(&["eval.k=[]"])).unwrap_err().to_string();
        assert!(err.contains("eval.k"), "{err}");
    }

    use super::*;
    use crate::choices::DenseOptim;
    use std::io::Write;
    use widebag_kinds::TokenFormat;

    fn sets(args: &[&str]) -> Result<Config, ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        load(None, &args)
    }

    #[test]
    fn the_last_activation_defaults_to_the_others_and_linear_overrides_it() {
        use crate::choices::Activation::{Linear, Tanh};
        let c = sets(&["model.activation=\"tanh\"", "model.hidden=[600, 112]"]).unwrap();
        assert_eq!(c.model.activations(), [Tanh, Tanh, Tanh]);
        let c = sets(&[
            "model.activation=\"tanh\"",
            "model.hidden=[600, 112]",
            "model.last_activation=\"linear\"",
        ])
        .unwrap();
        assert_eq!(c.model.activations(), [Tanh, Tanh, Linear]);
        let c = sets(&["model.hidden=[]", "model.last_activation=\"linear\""]).unwrap();
        assert_eq!(c.model.activations(), [Linear]);
        let err = sets(&["model.last_activation=\"cube\""]).unwrap_err();
        assert!(err.to_string().contains("model.last_activation"), "{err}");
    }

    #[test]
    fn quickstart_and_schema_defaults() {
        let c = sets(&[]).unwrap();
        assert_eq!(c.data.width, 240_000);
        assert_eq!(c.data.n_classes(), 4096);
        assert_eq!(c.optim.eps, 1e-8);
        let mut expected = Config::default();
        expected.data.n_classes = Some(4096);
        assert_eq!(
            c, expected,
            "the quickstart differs from the schema only in n_classes"
        );
        assert_eq!(Config::default().data.n_classes(), 240_000);
    }

    #[test]
    fn overrides_parse_toml_or_strings() {
        let c = sets(&[
            "model.hidden=[1024,512]",
            "optim.dense=sgd",
            "train.batch_size=7",
            "data.n_classes=16",
        ])
        .unwrap();
        assert_eq!(c.model.hidden, vec![1024, 512]);
        assert_eq!(c.optim.dense, DenseOptim::Sgd);
        assert_eq!(c.train.batch_size, 7);
        assert_eq!(c.data.n_classes(), 16);
    }

    #[test]
    fn unknown_key_suggests_nearest() {
        let e = sets(&["train.batchsize=3"]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("train.batchsize"), "{msg}");
        assert!(msg.contains("did you mean `train.batch_size`"), "{msg}");
    }

    #[test]
    fn range_and_type_errors_name_the_key() {
        for (arg, key) in [
            ("train.batch_size=0", "train.batch_size"),
            ("data.width=0", "data.width"),
            ("train.batch_size=abc", "train.batch_size"),
            ("model.hidden=[4,\"x\"]", "model.hidden"),
            ("optim.dense=rmsprop", "optim.dense"),
        ] {
            let msg = sets(&[arg]).unwrap_err().to_string();
            assert!(msg.contains(key), "{arg}: {msg}");
            assert!(msg.contains(arg), "{arg}: {msg}");
        }
    }

    #[test]
    fn file_errors_name_file_line_and_key() {
        let dir = std::env::temp_dir().join(format!("widebag-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, "[train]\nsteps = 3\n\n[model]\ndim = 0").unwrap();
        let msg = load(Some(&path), &[]).unwrap_err().to_string();
        assert!(msg.contains("bad.toml:5"), "{msg}");
        assert!(msg.contains("model.dim"), "{msg}");

        std::fs::write(&path, "[train]\nstepz = 3\n").unwrap();
        let msg = load(Some(&path), &[]).unwrap_err().to_string();
        assert!(msg.contains("bad.toml:2"), "{msg}");
        assert!(msg.contains("train.stepz"), "{msg}");
        assert!(msg.contains("train.steps"), "{msg}");

        std::fs::write(&path, "[train]\nsteps = = 3\n").unwrap();
        let msg = load(Some(&path), &[]).unwrap_err().to_string();
        assert!(msg.contains("bad.toml:2"), "{msg}");
    }

    #[test]
    fn data_file_keys() {
        let c = sets(&[
            "data.path=corpus.txt",
            "data.format=text",
            "data.mode=cbow",
            "data.window=3",
        ])
        .unwrap();
        assert_eq!(c.data.format, Some(Format::Text));
        assert_eq!(c.data.mode, Some(TextMode::Cbow));
        assert_eq!(c.data.window, 3);
        for (args, key) in [
            (&["data.path=x.svm"][..], "data.format"),
            (&["data.format=npz"][..], "data.path"),
            (
                &["data.path=x", "data.format=libsvm", "data.mode=cbow"][..],
                "data.mode",
            ),
            (&["data.path=x", "data.format=csv"][..], "data.format"),
        ] {
            let msg = sets(args).unwrap_err().to_string();
            assert!(msg.contains(key), "{args:?}: {msg}");
        }
    }

    #[test]
    fn file_name_label_keys() {
        let keys = known_keys();
        for key in ["data.label", "data.label_chars"] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
        }
        let brown = [
            "data.path=~/brown",
            "data.format=text",
            "data.label=file_name",
        ];
        let c = sets(&[&brown[..], &["data.label_chars=[1, 2]"]].concat()).unwrap();
        assert_eq!(
            (c.data.label, c.data.label_chars),
            (widebag_kinds::LabelMode::FileName, [1, 2])
        );
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(
                c.data.resolved_path(),
                Some(PathBuf::from(home).join("brown"))
            );
        }
        let dir = std::env::temp_dir().join(format!("widebag-config-lab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("corpus.txt");
        std::fs::write(&file, "a b\n").unwrap();
        let file_set = format!("data.path={}", file.display());
        for (args, key, why) in [
            (
                &["data.label_chars=[2, 1]"][..],
                "data.label_chars",
                "start must be below",
            ),
            (
                &["data.label_chars=[1, 1]"][..],
                "data.label_chars",
                "start must be below",
            ),
            (
                &["data.label=bag"][..],
                "data.label_chars",
                "applies to label",
            ),
            (
                &["data.format=dictd"][..],
                "data.label",
                "format = \"text\"",
            ),
            (&["data.mode=cbow"][..], "data.label", "bow"),
            (&[file_set.as_str()][..], "data.label", "not a file"),
            (&["data.label=files"][..], "data.label", "unknown variant"),
        ] {
            let all = [&brown[..], &["data.label_chars=[1, 2]"], args].concat();
            let msg = sets(&all).unwrap_err().to_string();
            assert!(msg.contains(key) && msg.contains(why), "{args:?}: {msg}");
        }
        // label_chars is refused without file_name labels, and [0, 0] is the whole name.
        let msg = sets(&["data.label_chars=[1, 2]"]).unwrap_err().to_string();
        assert!(msg.contains("data.label_chars"), "{msg}");
        let whole = sets(&brown).unwrap();
        assert_eq!(whole.data.label_chars, [0, 0]);
    }

    #[test]
    fn brown_config_is_a_file_name_classifier() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/brown.toml");
        let c = load(Some(&path), &[]).unwrap();
        assert_eq!(
            (c.data.label, c.data.label_chars),
            (widebag_kinds::LabelMode::FileName, [1, 2])
        );
        assert_eq!(
            (c.data.format, c.data.tokens),
            (Some(Format::Text), TokenFormat::Tagged)
        );
        assert_eq!((c.train.eval_rows, c.train.epochs), (100, Some(30)));
    }

    #[test]
    fn later_layers_win() {
        let dir = std::env::temp_dir().join(format!("widebag-config-l-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ok.toml");
        std::fs::write(&path, "[train]\nsteps = 3\nbatch_size = 9\n").unwrap();
        let c = load(Some(&path), &["train.steps=5".to_string()]).unwrap();
        assert_eq!((c.train.steps, c.train.batch_size), (5, 9));
    }
}
