//! The one seam through which the project touches the file system.
//!
//! The writer and recovery do every file-system effect through `FileSystem`, so the
//! power-loss model can record a run and rebuild the states a crash could leave behind.
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags, RenameFlags, CWD};

use crate::core::digest::Digest;

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else: a symlink (never followed), a device, a socket or a FIFO.
    Other,
}

/// Which half of [`FileSystem::write_new_file_synced`] failed.
#[derive(Debug)]
pub enum SyncedWriteError {
    /// Creating or writing the file (`AlreadyExists` when the name is taken).
    Write(std::io::Error),
    /// Its fsync, after it was written whole.
    Fsync(std::io::Error),
}

/// The file-system operations the store uses. All paths are absolute or relative to the
/// process's working directory.
pub trait FileSystem {
    /// Creates one directory (the parent must exist).
    fn create_dir(&self, path: &Path) -> std::io::Result<()>;
    /// Creates a new file (failing if it exists) and writes all of `bytes`, no fsync.
    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()>;
    /// Makes a file's data durable.
    fn fsync_file(&self, path: &Path) -> std::io::Result<()>;
    /// [`FileSystem::write_new_file`] then [`FileSystem::fsync_file`], with no barrier
    /// between them (the concurrent object install, RFC 0001 §4). The default issues the
    /// two operations, so recording file systems log both; the real one keeps the file
    /// open between them.
    fn write_new_file_synced(
        &self,
        path: &Path,
        bytes: &[u8],
        read_only: bool,
    ) -> Result<(), SyncedWriteError> {
        self.write_new_file(path, bytes, read_only)
            .map_err(SyncedWriteError::Write)?;
        self.fsync_file(path).map_err(SyncedWriteError::Fsync)
    }
    /// Makes a directory's entries durable.
    fn fsync_dir(&self, path: &Path) -> std::io::Result<()>;
    /// Renames, failing with `AlreadyExists` if `to` exists (renameat2 RENAME_NOREPLACE).
    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Renames, atomically replacing `to` if it exists.
    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Removes a file (not a directory).
    fn remove_file(&self, path: &Path) -> std::io::Result<()>;
    /// Reads at most `cap + 1` bytes (so a caller can tell "more than cap").
    fn read_file(&self, path: &Path, cap: u64) -> std::io::Result<Vec<u8>>;
    /// Names in a directory, sorted.
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>>;
    /// The kind of the entry at `path`, or `None` if there is none.
    fn entry_kind(&self, path: &Path) -> std::io::Result<Option<EntryKind>>;
    /// The SHA-256 and length of at most `cap + 1` bytes of a file (so a caller can tell
    /// "more than cap"). The default reads the file whole through [`FileSystem::read_file`];
    /// the real file system streams it through fixed-size buffers.
    fn hash_file(&self, path: &Path, cap: u64) -> std::io::Result<(Digest, u64)> {
        let bytes = self.read_file(path, cap)?;
        Ok((Digest::of(&bytes), bytes.len() as u64))
    }
    /// This file system as one that threads may share, when it is one: the real file
    /// system, and the power-loss recorder built with `allowing_threads` (it logs each
    /// operation under one lock, in the order they happened). Recovery hashes through it
    /// in parallel, and a publish no hook observes installs objects through it
    /// concurrently (RFC 0001 §4). `None`, the default, keeps callers sequential: the
    /// fault-injecting file system sees every operation from one thread, in one order.
    fn shared(&self) -> Option<&(dyn FileSystem + Sync)> {
        None
    }
}

/// Inside an `impl FileSystem for …` block: `read_file`, `list_dir` and `entry_kind` go
/// straight to [`RealFs`]. For wrappers that observe or fault only mutations (the crash
/// lab's recorder and stepper). An explicit opt-in on purpose: the trait has no default
/// reads, so a new seam never reads the real disk by accident.
macro_rules! reads_from_real_disk {
    () => {
        fn read_file(&self, path: &std::path::Path, cap: u64) -> std::io::Result<Vec<u8>> {
            $crate::durable::fs::RealFs.read_file(path, cap)
        }

        fn list_dir(&self, path: &std::path::Path) -> std::io::Result<Vec<String>> {
            $crate::durable::fs::RealFs.list_dir(path)
        }

        fn entry_kind(
            &self,
            path: &std::path::Path,
        ) -> std::io::Result<Option<$crate::durable::fs::EntryKind>> {
            $crate::durable::fs::RealFs.entry_kind(path)
        }
    };
}
pub(crate) use reads_from_real_disk;

/// Buffer size of [`RealFs::hash_file`]: memory per hashing thread, whatever the file size.
pub const HASH_BUFFER_BYTES: usize = 256 << 10;

/// The real file system (std + rustix).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl FileSystem for RealFs {
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir(path)
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if read_only { 0o444 } else { 0o644 })
            .open(path)?;
        file.write_all(bytes)
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn write_new_file_synced(
        &self,
        path: &Path,
        bytes: &[u8],
        read_only: bool,
    ) -> Result<(), SyncedWriteError> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if read_only { 0o444 } else { 0o644 })
            .open(path)
            .map_err(SyncedWriteError::Write)?;
        file.write_all(bytes).map_err(SyncedWriteError::Write)?;
        file.sync_all().map_err(SyncedWriteError::Fsync)
    }

    fn fsync_dir(&self, path: &Path) -> std::io::Result<()> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::fs::fsync(&fd)?;
        Ok(())
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        rustix::fs::renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE)?;
        Ok(())
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }

    fn read_file(&self, path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
        let file = File::open(path)?;
        let mut out = Vec::new();
        file.take(cap.saturating_add(1)).read_to_end(&mut out)?;
        Ok(out)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn entry_kind(&self, path: &Path) -> std::io::Result<Option<EntryKind>> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => Ok(Some(if meta.is_file() {
                EntryKind::File
            } else if meta.is_dir() {
                EntryKind::Dir
            } else {
                EntryKind::Other
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn hash_file(&self, path: &Path, cap: u64) -> std::io::Result<(Digest, u64)> {
        use sha2::Digest as _;
        thread_local! {
            // One buffer per thread, reused for every file it hashes.
            static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let mut file = File::open(path)?.take(cap.saturating_add(1));
        let mut hasher = sha2::Sha256::new();
        let mut length = 0u64;
        BUFFER.with_borrow_mut(|buffer| {
            buffer.resize(HASH_BUFFER_BYTES, 0);
            loop {
                let n = match file.read(buffer) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                hasher.update(&buffer[..n]);
                length += n as u64;
            }
            Ok(())
        })?;
        Ok((Digest(hasher.finalize().into()), length))
    }

    fn shared(&self) -> Option<&(dyn FileSystem + Sync)> {
        Some(self)
    }
}
