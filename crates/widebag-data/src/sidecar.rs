//! The files widebag keeps beside the data (vocabulary, class names, statistics): written there,
//! or to a cache directory when the data's directory is read-only, and the data's fingerprint
//! that tells whether a saved file still describes it.

use std::path::{Path, PathBuf};

use crate::atomic;
use crate::error::DataError;

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
    atomic::write_atomic(&path, contents.as_bytes()).map_err(io)?;
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
    fn sidecar_beside_writable_data() {
        let dir = std::env::temp_dir().join(format!("widebag-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("x.svm");
        std::fs::write(&data, "1 1:1\n").unwrap();
        let p = save_sidecar(&data, "stats.json", "{}").unwrap();
        assert_eq!(p, dir.join("x.svm.stats.json"));
    }
}
