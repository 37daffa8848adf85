//! Permissions and missing files: a missing file, a file that cannot be read and a directory that
//! cannot be written each give one clear error naming the path (and the key that set it); a
//! read-only data directory keeps its sidecars in the cache directory instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::disk::SmallDisk;
use crate::common::{Facility, is_root, require, widebag};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-access-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_missing_data_file_is_named_once_with_its_key() {
    let missing = "/nonexistent/widebag/d.svm";
    let out = widebag(&[
        "train",
        "--set",
        &format!("data.path={missing}"),
        "--set",
        "data.format=libsvm",
    ]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.matches(missing).count(), 1, "{e}");
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    assert!(e.contains("data.path"), "{e}");
    let out = widebag(&["data", "stats", missing]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    assert!(e.contains(missing), "{e}");
    let out = widebag(&["train", "--config", "/nonexistent/widebag.toml"]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("/nonexistent/widebag.toml"), "{e}");
}

#[test]
fn a_read_only_data_directory_keeps_its_sidecars_in_the_cache() {
    let test = "a_read_only_data_directory_keeps_its_sidecars_in_the_cache";
    let Some(disk) = SmallDisk::mount(test, 1024) else {
        return;
    };
    let data = disk.0.join("d.svm");
    std::fs::write(&data, "1 1:1 3:2\n0 2:1\n").unwrap();
    if !disk.read_only(test) {
        return;
    }
    let cache = scratch("ro-cache");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_widebag"))
            .args(args)
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap()
    };
    let out = run(&["data", "stats", data.to_str().unwrap()]);
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    let saved: Vec<_> = std::fs::read_dir(cache.join("widebag/sidecars"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert!(e.contains(&*saved[0].to_string_lossy()), "says where: {e}");
    assert!(!disk.0.join("d.svm.stats.json").exists());
    // Training finds them there.
    let path = format!("data.path={}", data.display());
    let set = |kv: &'static str| ["--set", kv];
    let mut args = vec!["train", "--device", "cpu", "--set", &path];
    args.extend(set("data.format=libsvm"));
    args.extend(set("model.dim=4"));
    args.extend(set("train.steps=2"));
    args.extend(set("train.batch_size=2"));
    let out = run(&args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "{text}");
    let reused = format!("{} (reused)", saved[0].display());
    assert!(text.contains(&reused), "{text}");
    // A run directory on the read-only disk is refused naming it.
    let target = disk.0.join("run");
    let out = run(&[
        "train",
        "--device",
        "cpu",
        "--out",
        target.to_str().unwrap(),
    ]);
    let e = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{e}");
    assert!(e.contains(&*target.to_string_lossy()), "{e}");
    assert!(e.contains("Read-only file system"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    let _ = std::fs::remove_dir_all(cache);
}

/// `setpriv`, to run the binary as an unprivileged user (root reads any file), or `None` where
/// this process is not root or `setpriv` is missing ([`Facility::Root`], [`Facility::Setpriv`]:
/// a skip notice, or a failure under `WIDEBAG_REQUIRE_ROOT=1` / `WIDEBAG_REQUIRE_SETPRIV=1`).
fn as_nobody(test: &str) -> Option<Command> {
    if !require(
        test,
        Facility::Root,
        is_root(),
        "only root can become another user (and reads any file anyway)",
    ) {
        return None;
    }
    let setpriv = Command::new("setpriv").arg("--version").output();
    let why = match &setpriv {
        Ok(o) => format!("`setpriv --version` failed ({})", o.status),
        Err(e) => format!("`setpriv` did not run ({e}): it is in util-linux"),
    };
    let found = setpriv.is_ok_and(|o| o.status.success());
    if !require(test, Facility::Setpriv, found, why) {
        return None;
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    Some(c)
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn permission_denied_names_the_path() {
    let Some(mut cmd) = as_nobody("permission_denied_names_the_path") else {
        return;
    };
    // The binary, the data and the run directory where the other user can reach them.
    let dir = scratch("denied");
    chmod(&dir, 0o755);
    let bin = dir.join("widebag");
    std::fs::copy(env!("CARGO_BIN_EXE_widebag"), &bin).unwrap();
    chmod(&bin, 0o755);
    let data = dir.join("secret.svm");
    std::fs::write(&data, "1 1:1\n").unwrap();
    chmod(&data, 0o600);
    let out = cmd
        .arg(&bin)
        .args(["data", "stats", data.to_str().unwrap(), "--no-save"])
        .env("HOME", &dir)
        .output()
        .unwrap();
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains(data.to_str().unwrap()), "{e}");
    assert_eq!(e.matches("Permission denied").count(), 1, "{e}");
    let _ = std::fs::remove_dir_all(dir);
}
