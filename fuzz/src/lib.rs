//! What the fuzz targets share: the fuzzer's bytes written as files in a per-process scratch
//! directory (the readers take paths), and the input cut into parts at NUL bytes.

use std::path::{Path, PathBuf};

/// A scratch directory for this process, in memory when `/dev/shm` exists.
pub fn scratch() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("widebag-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Writes `bytes` to `name` in the scratch directory and returns its path.
pub fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, bytes).expect("writing a scratch file");
    p
}

/// `data` cut at its first `n - 1` NUL bytes into `n` parts (missing parts empty).
pub fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |&b| b == 0).collect();
    out.resize(n, &[]);
    out
}
