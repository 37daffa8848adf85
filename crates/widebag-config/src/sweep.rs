//! Sweep files (`configs/sweeps/*.toml`): a base config, overrides, a grid over any config keys
//! (a cartesian product) and excludes; expanded into named runs whose configs are all checked
//! before the first one starts.
//!
//! ```toml
//! base = "../quickstart.toml"          # optional, relative to this file
//! set = ["data.width=8000"]            # optional overrides of the base
//! [grid]
//! "train.batch_size" = [64, 256, 1024]
//! "optim.dense" = ["sgd", "adam"]
//! [[exclude]]                          # optional: points matching every key here are skipped
//! "train.batch_size" = 1024
//! "optim.dense" = "sgd"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{ConfigError, Origin};
use crate::loader::{ConfigLoader, known_keys, nearest_key};
use crate::quickstart::{QUICKSTART_NAME, QUICKSTART_TOML};
use crate::schema::Config;

/// A parsed sweep file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// The base config, relative to the sweep file (default: the built-in quickstart).
    #[serde(default)]
    pub base: Option<PathBuf>,
    /// `key=value` overrides of the base, as `--set` takes them.
    #[serde(default)]
    pub set: Vec<String>,
    /// Key → the values it takes.
    pub grid: BTreeMap<String, Vec<toml::Value>>,
    /// Points whose values match every key of one entry are skipped.
    #[serde(default)]
    pub exclude: Vec<BTreeMap<String, toml::Value>>,
}

/// One run of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPoint {
    /// A directory name made of the swept values (`batch_size=64__dense=sgd`).
    pub name: String,
    /// Swept key → its value (strings without quotes).
    pub values: BTreeMap<String, String>,
    /// The run's config: base, the sweep's `set`, the point's values, then the command line's.
    pub config: Config,
}

/// A loaded sweep: its file, spec and points.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub path: PathBuf,
    pub spec: SweepSpec,
    pub points: Vec<SweepPoint>,
    /// Points left out by `exclude`.
    pub excluded: usize,
}

fn invalid(path: &Path, key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin: Origin::File {
            path: path.to_path_buf(),
            line: None,
        },
        key: key.to_string(),
        message: message.into(),
    }
}

/// Reads a sweep file, expands its grid and checks every point's config (`extra` are the
/// command line's `--set` overrides, applied last).
pub fn load_sweep(path: &Path, extra: &[String]) -> Result<Sweep, ConfigError> {
    let spec = read_spec(path)?;
    check_spec(path, &spec)?;
    let base_dir = path.parent().unwrap_or(Path::new("."));
    let base = spec.base.as_ref().map(|b| base_dir.join(b));
    let keys: Vec<&String> = spec.grid.keys().collect();
    let short = short_names(&keys);
    let mut points = Vec::new();
    let mut excluded = 0;
    let n: usize = spec.grid.values().map(Vec::len).product();
    for index in 0..n {
        let chosen = grid_point(&spec.grid, &keys, index);
        if is_excluded(&spec.exclude, &keys, &chosen) {
            excluded += 1;
            continue;
        }
        let values: BTreeMap<String, String> = keys
            .iter()
            .zip(&chosen)
            .map(|(k, v)| (k.to_string(), plain(v)))
            .collect();
        let config = point_config(path, base.as_deref(), &spec, &keys, &chosen, extra)?;
        points.push(SweepPoint {
            name: point_name(&short, &chosen),
            values,
            config,
        });
    }
    Ok(Sweep {
        path: path.to_path_buf(),
        spec,
        points,
        excluded,
    })
}

/// The sweep file parsed, a syntax error named by its line and column.
fn read_spec(path: &Path) -> Result<SweepSpec, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| {
        let start = e.span().map_or(0, |s| s.start).min(text.len());
        let before = &text[..start];
        ConfigError::Syntax {
            path: path.to_path_buf(),
            line: before.bytes().filter(|&b| b == b'\n').count() + 1,
            column: start - before.rfind('\n').map_or(0, |i| i + 1) + 1,
            message: e.message().to_string(),
        }
    })
}

/// The grid's keys are config keys with values, and every exclude names keys of the grid.
fn check_spec(path: &Path, spec: &SweepSpec) -> Result<(), ConfigError> {
    if spec.grid.is_empty() {
        return Err(invalid(path, "grid", "needs at least one key"));
    }
    for (key, values) in &spec.grid {
        if !known_keys().contains(key) {
            let hint = nearest_key(key)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(invalid(
                path,
                &format!("grid.{key}"),
                format!("not a config key{hint}"),
            ));
        }
        if values.is_empty() {
            return Err(invalid(path, &format!("grid.{key}"), "has no values"));
        }
    }
    for (i, ex) in spec.exclude.iter().enumerate() {
        for key in ex.keys() {
            if !spec.grid.contains_key(key) {
                return Err(invalid(
                    path,
                    &format!("exclude[{i}].{key}"),
                    "is not a key of the grid",
                ));
            }
        }
    }
    Ok(())
}

/// Each key as a point's name shows it: its last part, or the whole key where two keys share
/// the last part.
fn short_names(keys: &[&String]) -> Vec<String> {
    keys.iter()
        .map(|k| {
            let last = k.rsplit('.').next().unwrap_or(k);
            if keys
                .iter()
                .filter(|o| o.rsplit('.').next() == Some(last))
                .count()
                > 1
            {
                k.to_string()
            } else {
                last.to_string()
            }
        })
        .collect()
}

/// The values of point `index` of the grid, one per key: a mixed radix over the keys in order,
/// the last key varying fastest.
fn grid_point<'a>(
    grid: &'a BTreeMap<String, Vec<toml::Value>>,
    keys: &[&String],
    index: usize,
) -> Vec<&'a toml::Value> {
    let mut rest = index;
    let mut chosen: Vec<&toml::Value> = vec![&grid[keys[0]][0]; keys.len()];
    for (k, key) in keys.iter().enumerate().rev() {
        let values = &grid[*key];
        chosen[k] = &values[rest % values.len()];
        rest /= values.len();
    }
    chosen
}

/// Whether the point's values match every key of one exclude.
fn is_excluded(
    exclude: &[BTreeMap<String, toml::Value>],
    keys: &[&String],
    chosen: &[&toml::Value],
) -> bool {
    let matches = |ex: &BTreeMap<String, toml::Value>| {
        ex.iter().all(|(key, v)| {
            let k = keys.iter().position(|x| *x == key).expect("checked");
            chosen[k] == v
        })
    };
    exclude.iter().any(matches)
}

/// A point's config: the base (else the quickstart), the sweep's `set`, the point's values, then
/// `extra`; an invalid value is named with the point.
fn point_config(
    path: &Path,
    base: Option<&Path>,
    spec: &SweepSpec,
    keys: &[&String],
    chosen: &[&toml::Value],
    extra: &[String],
) -> Result<Config, ConfigError> {
    let mut loader = ConfigLoader::new();
    loader = match base {
        Some(b) => loader.file(b)?,
        None => loader.text(Path::new(QUICKSTART_NAME), QUICKSTART_TOML)?,
    };
    for s in &spec.set {
        loader = loader.set(s)?;
    }
    for (k, v) in keys.iter().zip(chosen) {
        loader = loader
            .set(&format!("{k}={v}"))
            .map_err(|e| invalid(path, &format!("grid.{k}"), format!("value {v}: {e}")))?;
    }
    for s in extra {
        loader = loader.set(s)?;
    }
    loader.build().map_err(|e| match e {
        ConfigError::Invalid { key, message, .. } => invalid(
            path,
            &key,
            format!("{message} (at the point {})", point_label(keys, chosen)),
        ),
        other => other,
    })
}

/// A point's directory name, made of its swept values (`batch_size=64__dense=sgd`).
fn point_name(short: &[String], chosen: &[&toml::Value]) -> String {
    short
        .iter()
        .zip(chosen)
        .map(|(k, v)| sanitize(&format!("{k}={}", plain(v))))
        .collect::<Vec<_>>()
        .join("__")
}

fn point_label(keys: &[&String], chosen: &[&toml::Value]) -> String {
    keys.iter()
        .zip(chosen)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value as it reads in a name: strings without quotes.
fn plain(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("widebag-sweep-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn grid_is_a_cartesian_product_minus_excludes() {
        let d = tmp("grid");
        let p = write(
            &d,
            "s.toml",
            r#"
set = ["data.width=1000"]
[grid]
"train.batch_size" = [32, 64, 128]
"optim.dense" = ["sgd", "adam"]
"model.layout" = ["sparse", "dense"]
[[exclude]]
"model.layout" = "dense"
"optim.dense" = "adam"
"#,
        );
        let s = load_sweep(&p, &["train.steps=3".to_string()]).unwrap();
        assert_eq!(s.points.len(), 12 - 3);
        assert_eq!(s.excluded, 3);
        let first = &s.points[0];
        assert_eq!(first.name, "layout=sparse__dense=sgd__batch_size=32");
        assert_eq!(first.config.data.width, 1000);
        assert_eq!(first.config.train.steps, 3);
        assert_eq!(first.config.train.batch_size, 32);
        let names: std::collections::HashSet<_> = s.points.iter().map(|p| &p.name).collect();
        assert_eq!(names.len(), s.points.len(), "names are unique");
        assert!(
            s.points
                .iter()
                .all(|p| !(p.config.model.layout == crate::choices::Layout::Dense
                    && p.config.optim.dense == crate::choices::DenseOptim::Adam))
        );
    }

    #[test]
    fn bad_sweeps_name_the_file_and_key() {
        let d = tmp("bad");
        let p = write(&d, "a.toml", "[grid]\n\"train.batch_sise\" = [1]\n");
        let e = load_sweep(&p, &[]).unwrap_err().to_string();
        assert!(
            e.contains("a.toml") && e.contains("train.batch_size"),
            "{e}"
        );
        let p = write(&d, "b.toml", "[grid]\n\"train.batch_size\" = [0]\n");
        let e = load_sweep(&p, &[]).unwrap_err().to_string();
        assert!(
            e.contains("b.toml") && e.contains("train.batch_size"),
            "{e}"
        );
        let p = write(
            &d,
            "c.toml",
            "[grid]\n\"train.batch_size\" = [1]\n[[exclude]]\n\"optim.dense\" = \"sgd\"\n",
        );
        let e = load_sweep(&p, &[]).unwrap_err().to_string();
        assert!(e.contains("exclude[0].optim.dense"), "{e}");
        let p = write(&d, "d.toml", "grid = 3\n");
        let e = load_sweep(&p, &[]).unwrap_err().to_string();
        assert!(e.contains("d.toml:1:"), "{e}");
    }
}
