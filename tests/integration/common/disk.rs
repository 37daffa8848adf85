//! A small tmpfs for fault tests: mounted for one test (skipped with a notice where mounting is
//! not allowed, or a failure under `WIDEBAG_REQUIRE_TMPFS=1`: [`super::require`]), filled to a
//! chosen level, made read-only, unmounted when dropped.

use std::path::PathBuf;
use std::process::Command;

use super::{Facility, require};

/// A tmpfs of `kib` KiB, unmounted when dropped.
pub struct SmallDisk(pub PathBuf);

impl SmallDisk {
    /// Mounts a tmpfs of `kib` KiB for the test `name`, or `None` where it cannot be mounted
    /// ([`Facility::Tmpfs`]).
    pub fn mount(name: &str, kib: u64) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!("widebag-disk-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .output();
        let why = match &out {
            Ok(o) if o.status.success() => return Some(Self(dir)),
            Ok(o) => format!(
                "`mount -t tmpfs` failed ({}; it needs root): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("`mount` did not run: {e}"),
        };
        let _ = std::fs::remove_dir(&dir);
        require(name, Facility::Tmpfs, false, why);
        None
    }

    /// Fills the disk with a file until writing fails.
    pub fn fill(&self) {
        let chunk = vec![0u8; 4096];
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        use std::io::Write;
        while f.write_all(&chunk).is_ok() {}
        let _ = f.flush();
    }

    /// Makes the mount read-only (writes then fail with EROFS, whoever the user); `false` where
    /// the remount is refused ([`Facility::Tmpfs`]: a skip notice, or a failure under
    /// `WIDEBAG_REQUIRE_TMPFS=1`).
    pub fn read_only(&self, test: &str) -> bool {
        let out = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .output();
        let why = match &out {
            Ok(o) if o.status.success() => return true,
            Ok(o) => format!(
                "`mount -o remount,ro` failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("`mount` did not run: {e}"),
        };
        require(test, Facility::Tmpfs, false, why)
    }

    /// Bytes free on the mount.
    pub fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&self.0)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Fills the disk with a file until `keep_bytes` are left (about: tmpfs counts pages).
    pub fn fill_leaving(&self, keep_bytes: u64) {
        let free = self.free_bytes();
        std::fs::write(
            self.0.join("filler"),
            vec![0u8; free.saturating_sub(keep_bytes) as usize],
        )
        .unwrap();
    }

    /// Frees what [`Self::fill`] or [`Self::fill_leaving`] took.
    pub fn unfill(&self) {
        let _ = std::fs::remove_file(self.0.join("filler"));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
