//! Writes that are never seen half done: a file is written beside its destination under a
//! temporary name, flushed to disk (`fsync`), renamed over the destination and the directory
//! synced, so a reader finds the old contents or the new, never a truncated file — not after
//! a full disk, not after a kill in mid-write.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary sibling of `path` a write goes through (`.NAME.tmp-PID`).
pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Flushes the directory entry of `dir` (after a rename into it).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` atomically. On any error the temporary file is removed and `path`
/// keeps its previous contents.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// [`write_atomic`] with the contents written by `fill`.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = temp_sibling(path);
    let result = (|| {
        let file = std::fs::File::create(&tmp)?;
        {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
            fill(&mut w)?;
            w.flush()?;
        }
        file.sync_all()?;
        fault_pause();
        std::fs::rename(&tmp, path)?;
        sync_dir(path.parent().unwrap_or(Path::new(".")))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Fault injection for the tests: with `WIDEBAG_FAULT_RENAME_PAUSE_MS` set, every atomic write
/// waits that long between its synced temporary file and the rename, so a test can kill the
/// process in mid-write.
fn fault_pause() {
    if let Some(ms) = std::env::var("WIDEBAG_FAULT_RENAME_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_keeps_the_old_contents_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("widebag-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.json");
        write_atomic(&p, b"old").unwrap();
        let err = write_atomic_with(&p, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!temp_sibling(&p).exists());
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }
}
