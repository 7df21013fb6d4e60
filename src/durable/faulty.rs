//! The one fault-injecting file system, for tests: the real file system, except that the
//! N-th call (0-based) of one chosen operation fails with `EIO`, and optionally one
//! directory is listed as empty. It proves writers abort, clean up and report a typed
//! error when the disk says no.
use std::cell::Cell;
use std::path::{Path, PathBuf};

use crate::durable::fs::{EntryKind, FileSystem, RealFs};

/// A file-system operation of the [`FileSystem`] seam.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    CreateDir,
    WriteNewFile,
    FsyncFile,
    FsyncDir,
    RenameNoreplace,
    RenameReplace,
    RemoveFile,
    ReadFile,
    ListDir,
    EntryKind,
}

/// The real file system with one injected fault (see the module docs).
#[derive(Debug, Default)]
pub struct FaultyFs {
    fail: Option<(Operation, usize)>,
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

    /// Lists `directory` as empty (e.g. `commits/`, so a writer picks a taken generation).
    pub fn hiding_listing_of(mut self, directory: impl Into<PathBuf>) -> Self {
        self.hide_listing_of = Some(directory.into());
        self
    }

    fn check(&self, operation: Operation) -> std::io::Result<()> {
        let Some((failing, nth)) = self.fail else {
            return Ok(());
        };
        if failing != operation {
            return Ok(());
        }
        let seen = self.seen.get();
        self.seen.set(seen + 1);
        if seen >= nth {
            return Err(std::io::Error::from_raw_os_error(
                rustix::io::Errno::IO.raw_os_error(),
            ));
        }
        Ok(())
    }
}

impl FileSystem for FaultyFs {
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::CreateDir)?;
        RealFs.create_dir(path)
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        self.check(Operation::WriteNewFile)?;
        RealFs.write_new_file(path, bytes, read_only)
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::FsyncFile)?;
        RealFs.fsync_file(path)
    }

    fn fsync_dir(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::FsyncDir)?;
        RealFs.fsync_dir(path)
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.check(Operation::RenameNoreplace)?;
        RealFs.rename_noreplace(from, to)
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.check(Operation::RenameReplace)?;
        RealFs.rename_replace(from, to)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.check(Operation::RemoveFile)?;
        RealFs.remove_file(path)
    }

    fn read_file(&self, path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
        self.check(Operation::ReadFile)?;
        RealFs.read_file(path, cap)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        self.check(Operation::ListDir)?;
        if self.hide_listing_of.as_deref() == Some(path) {
            return Ok(Vec::new());
        }
        RealFs.list_dir(path)
    }

    fn entry_kind(&self, path: &Path) -> std::io::Result<Option<EntryKind>> {
        self.check(Operation::EntryKind)?;
        RealFs.entry_kind(path)
    }
}
