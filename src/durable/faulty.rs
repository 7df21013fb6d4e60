//! The one fault-injecting file system, for tests: the real file system, except that the
//! N-th call (0-based) of one chosen operation fails with `EIO` (or every call of it on
//! files with a chosen name prefix), and optionally one directory is listed as empty. It
//! proves writers abort, clean up and report a typed error when the disk says no.
use std::cell::Cell;
use std::path::{Path, PathBuf};

use crate::durable::fs::{EntryKind, FileSystem, RealFs};

/// A file-system operation of the [`FileSystem`] seam.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// [`FileSystem::create_dir`].
    CreateDir,
    /// [`FileSystem::write_new_file`].
    WriteNewFile,
    /// [`FileSystem::fsync_file`].
    FsyncFile,
    /// [`FileSystem::fsync_dir`].
    FsyncDir,
    /// [`FileSystem::rename_noreplace`].
    RenameNoreplace,
    /// [`FileSystem::rename_replace`].
    RenameReplace,
    /// [`FileSystem::remove_file`].
    RemoveFile,
    /// [`FileSystem::read_file`].
    ReadFile,
    /// [`FileSystem::list_dir`].
    ListDir,
    /// [`FileSystem::entry_kind`] and [`FileSystem::regular_file_len`] (metadata reads).
    EntryKind,
}

/// The real file system with one injected fault (see the module docs).
#[derive(Debug, Default)]
pub struct FaultyFs {
    fail: Option<(Operation, usize)>,
    fail_named: Option<(Operation, String)>,
    hide_listing_of: Option<PathBuf>,
    seen: Cell<usize>,
}

impl FaultyFs {
    /// Fails the `nth` (0-based) call of `operation`, and every later one.
    pub fn failing(operation: Operation, nth: usize) -> Self {
        FaultyFs {
            fail: Some((operation, nth)),
            ..FaultyFs::default()
        }
    }

    /// Fails every call of `operation` on a path whose file name starts with `prefix`
    /// (for a rename, the path renamed from), e.g. the fsync of the store writer's
    /// `commit-…` temp file, wherever it falls in the sequence.
    pub fn failing_named(operation: Operation, prefix: impl Into<String>) -> Self {
        FaultyFs {
            fail_named: Some((operation, prefix.into())),
            ..FaultyFs::default()
        }
    }

    /// Lists `directory` as empty (e.g. `commits/`, so a writer picks a taken generation).
    pub fn hiding_listing_of(mut self, directory: impl Into<PathBuf>) -> Self {
        self.hide_listing_of = Some(directory.into());
        self
    }

    fn check(&self, operation: Operation, path: &Path) -> std::io::Result<()> {
        if self.fails_by_name(operation, path) || self.fails_by_count(operation) {
            return Err(std::io::Error::from_raw_os_error(
                rustix::io::Errno::IO.raw_os_error(),
            ));
        }
        Ok(())
    }

    fn fails_by_name(&self, operation: Operation, path: &Path) -> bool {
        let Some((failing, prefix)) = &self.fail_named else {
            return false;
        };
        *failing == operation
            && path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(prefix.as_str()))
    }

    fn fails_by_count(&self, operation: Operation) -> bool {
        let Some((failing, nth)) = self.fail else {
            return false;
        };
        if failing != operation {
            return false;
        }
        let seen = self.seen.get();
        self.seen.set(seen + 1);
        seen >= nth
    }
}

impl FileSystem for FaultyFs {
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::CreateDir, path)?;
        RealFs.create_dir(path)
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        self.check(Operation::WriteNewFile, path)?;
        RealFs.write_new_file(path, bytes, read_only)
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::FsyncFile, path)?;
        RealFs.fsync_file(path)
    }

    fn fsync_dir(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::FsyncDir, path)?;
        RealFs.fsync_dir(path)
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.check(Operation::RenameNoreplace, from)?;
        RealFs.rename_noreplace(from, to)
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.check(Operation::RenameReplace, from)?;
        RealFs.rename_replace(from, to)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::RemoveFile, path)?;
        RealFs.remove_file(path)
    }

    fn read_file(&self, path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
        self.check(Operation::ReadFile, path)?;
        RealFs.read_file(path, cap)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        self.check(Operation::ListDir, path)?;
        if self.hide_listing_of.as_deref() == Some(path) {
            return Ok(Vec::new());
        }
        RealFs.list_dir(path)
    }

    fn entry_kind(&self, path: &Path) -> std::io::Result<Option<EntryKind>> {
        self.check(Operation::EntryKind, path)?;
        RealFs.entry_kind(path)
    }

    fn regular_file_len(&self, path: &Path) -> std::io::Result<Option<u64>> {
        self.check(Operation::EntryKind, path)?;
        RealFs.regular_file_len(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::file::{write_file_with, DurableError, WriteOptions};

    #[test]
    fn a_named_fault_hits_only_files_with_that_prefix() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The durable writer's temp file for `commit.json` is `.commit.json.tmp-…`.
        let faulty = FaultyFs::failing_named(Operation::FsyncFile, ".commit");
        let other = dir.path().join("other.json");
        write_file_with(&faulty, &other, b"fine", WriteOptions::REPLACEABLE).expect("no fault");
        let target = dir.path().join("commit.json");
        for _ in 0..2 {
            let error = write_file_with(&faulty, &target, b"x", WriteOptions::REPLACEABLE)
                .expect_err("injected, every time");
            assert!(matches!(error, DurableError::Fsync { .. }));
        }
        assert!(!target.exists());
    }
}
