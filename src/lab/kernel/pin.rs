//! The pinned guest kernel (the same values as `ci/kernel`, which installs it) and where
//! its per-user install lives. Nothing is booted unless the install's recorded package
//! digest is the pin.
use std::path::{Path, PathBuf};

use crate::lab::kernel::error::KernelError;

/// The kernel release (`uname -r` in the guest).
pub const KERNEL_RELEASE: &str = "6.1.0-57-amd64";
/// The Debian package version of `linux-image-6.1.0-57-amd64`.
pub const KERNEL_PACKAGE_VERSION: &str = "6.1.192-3";
/// SHA-256 of the pinned `.deb`.
pub const KERNEL_PACKAGE_SHA256: &str =
    "14d219d01e1283261817d961dbb3895cb5b4288d0de10e0ba0632a0d993e15bf";

/// A verified install of the pinned kernel.
#[derive(Clone, Debug)]
pub struct KernelInstall {
    /// The install directory (`~/.cache/shardlift/kernel-RELEASE`).
    pub dir: PathBuf,
    /// The uncompressed kernel, booted through its PVH entry.
    pub vmlinux: PathBuf,
    /// `lib/modules/RELEASE` of the unpacked package (with `modules.dep`).
    pub modules: PathBuf,
}

/// The per-user cache directory, as `ci/kernel` computes it.
pub fn default_dir() -> PathBuf {
    let cache = std::env::var_os("SHARDLIFT_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("shardlift")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/shardlift")))
        .unwrap_or_else(|| PathBuf::from("/nonexistent"));
    cache.join(format!("kernel-{KERNEL_RELEASE}"))
}

impl KernelInstall {
    /// The install at `dir`, checked: the recorded package digest is the pin and the
    /// kernel and module index are there.
    pub fn locate(dir: &Path) -> Result<Self, KernelError> {
        let missing = |reason: String| KernelError::KernelMissing {
            release: KERNEL_RELEASE,
            path: dir.to_owned(),
            reason,
        };
        let recorded = std::fs::read_to_string(dir.join("package.sha256"))
            .map_err(|e| missing(format!("no package.sha256 ({e})")))?;
        if recorded.trim() != KERNEL_PACKAGE_SHA256 {
            return Err(missing(format!(
                "its package has SHA-256 {}, the pin is {KERNEL_PACKAGE_SHA256}",
                recorded.trim()
            )));
        }
        let install = KernelInstall {
            dir: dir.to_owned(),
            vmlinux: dir.join("vmlinux"),
            modules: dir.join("root/lib/modules").join(KERNEL_RELEASE),
        };
        for needed in [&install.vmlinux, &install.modules.join("modules.dep")] {
            if !needed.is_file() {
                return Err(missing(format!("{} is absent", needed.display())));
            }
        }
        Ok(install)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty directory and one whose digest is not the pin are both refused by name.
    #[test]
    fn a_missing_or_mismatched_install_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = KernelInstall::locate(dir.path()).expect_err("empty");
        assert_eq!(error.kind(), "kernel-missing");
        std::fs::write(dir.path().join("package.sha256"), "00\n").expect("write");
        let error = KernelInstall::locate(dir.path()).expect_err("mismatched");
        assert!(error.to_string().contains("the pin is"), "{error}");
        std::fs::write(dir.path().join("package.sha256"), KERNEL_PACKAGE_SHA256).expect("write");
        let error = KernelInstall::locate(dir.path()).expect_err("no kernel");
        assert!(error.to_string().contains("vmlinux is absent"), "{error}");
    }
}
