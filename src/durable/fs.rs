//! The one seam through which the project touches the file system.
//!
//! The writer and recovery do every file-system effect through `FileSystem`, so the
//! power-loss model can record a run and rebuild the states a crash could leave behind.
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, StatxFlags, CWD};

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
    /// The length in bytes of the regular file at `path`, from its metadata (no byte is
    /// read, no symlink followed); `None` if there is no entry or it is not a regular file.
    fn regular_file_len(&self, path: &Path) -> std::io::Result<Option<u64>>;
    /// [`FileSystem::regular_file_len`] of each of `names` in the directory `dir`, in
    /// order (every one `None` when `dir` does not exist). The default asks for each path
    /// in turn; the real file system opens `dir` once and reads each entry's metadata
    /// relative to it, so no path is walked from the root again.
    fn regular_file_lens_in(
        &self,
        dir: &Path,
        names: &[&str],
    ) -> std::io::Result<Vec<Option<u64>>> {
        names
            .iter()
            .map(|name| self.regular_file_len(&dir.join(name)))
            .collect()
    }
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

/// Inside an `impl FileSystem for …` block: `read_file`, `list_dir`, `entry_kind`,
/// `regular_file_len` and `regular_file_lens_in` go straight to [`RealFs`]. For wrappers that observe or fault only mutations (the crash
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

        fn regular_file_len(&self, path: &std::path::Path) -> std::io::Result<Option<u64>> {
            $crate::durable::fs::RealFs.regular_file_len(path)
        }

        fn regular_file_lens_in(
            &self,
            dir: &std::path::Path,
            names: &[&str],
        ) -> std::io::Result<Vec<Option<u64>>> {
            $crate::durable::fs::RealFs.regular_file_lens_in(dir, names)
        }
    };
}
pub(crate) use reads_from_real_disk;

/// The bytes of an opened file to its end, or its first `cap + 1` bytes when it is longer
/// (so a caller can tell "more than cap"). `length` is the opened file's own length (from
/// its metadata): the buffer is sized from it, at most `cap + 1` (a hostile length cannot
/// make us allocate more), and filled by as few reads as the kernel allows: one for a
/// whole object, then one that finds the end. A file that grows or shrinks meanwhile is
/// still read to its end or to `cap + 1`. (`read_to_end` alone would read in chunks that
/// start at 8 KiB: 19 reads for a 2.2 MB manifest.)
pub fn read_opened_to_cap(file: std::fs::File, length: u64, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut reader = file.take(cap.saturating_add(1));
    let expected = usize::try_from(length.min(reader.limit())).unwrap_or(0);
    let mut out = vec![0u8; expected];
    let mut filled = 0;
    while filled < expected {
        match reader.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out.truncate(filled);
    if filled == expected {
        reader.read_to_end(&mut out)?;
    }
    Ok(out)
}

/// Buffer size of [`RealFs::hash_file`]: memory per hashing thread, whatever the file size.
pub const HASH_BUFFER_BYTES: usize = 256 << 10;

/// The reason inside the `std::io::Error` (kind `InvalidInput`) that [`open_regular_file`]
/// returns for an entry that is not a regular file; [`is_not_regular_file`] tells it apart.
#[derive(Debug, thiserror::Error)]
#[error("not a regular file (a symlink is never followed, a special file never read)")]
pub struct NotRegularFile;

/// Whether `error` is [`open_regular_file`]'s refusal of an entry that is not a regular file.
pub fn is_not_regular_file(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<NotRegularFile>())
}

fn not_regular_file() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, NotRegularFile)
}

/// Opens `path` for reading only if it is a regular file, and returns it with its length.
///
/// A final symlink is not followed (`O_NOFOLLOW`), and the open never waits
/// (`O_NONBLOCK`): without it, opening a FIFO that no process writes blocks the reader
/// forever, so a FIFO planted where a record or object belongs would hang recovery.
/// Symlinks, directories, FIFOs, sockets and devices are refused with [`NotRegularFile`]
/// after the open, from the opened file's own metadata (no race with the name).
/// `O_NONBLOCK` does not change reads of a regular file; `O_NOCTTY` keeps a terminal
/// device from becoming the controlling terminal. (The bundle reader opens the same way.)
pub fn open_regular_file(path: &Path) -> std::io::Result<(File, u64)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)
        .map_err(|error| {
            // ELOOP is how O_NOFOLLOW reports a final symlink.
            if error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                not_regular_file()
            } else {
                error
            }
        })?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(not_regular_file());
    }
    Ok((file, metadata.len()))
}

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
        let (file, length) = open_regular_file(path)?;
        read_opened_to_cap(file, length, cap)
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

    fn regular_file_len(&self, path: &Path) -> std::io::Result<Option<u64>> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_file() => Ok(Some(meta.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn regular_file_lens_in(
        &self,
        dir: &Path,
        names: &[&str],
    ) -> std::io::Result<Vec<Option<u64>>> {
        let fd = match rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(vec![None; names.len()]),
            Err(e) => return Err(e.into()),
        };
        names
            .iter()
            .map(|name| {
                match rustix::fs::statx(
                    &fd,
                    *name,
                    AtFlags::SYMLINK_NOFOLLOW,
                    StatxFlags::TYPE | StatxFlags::SIZE,
                ) {
                    Ok(stat)
                        if FileType::from_raw_mode(stat.stx_mode.into())
                            == FileType::RegularFile =>
                    {
                        Ok(Some(stat.stx_size))
                    }
                    Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            })
            .collect()
    }

    fn hash_file(&self, path: &Path, cap: u64) -> std::io::Result<(Digest, u64)> {
        use sha2::Digest as _;
        thread_local! {
            // One buffer per thread, reused for every file it hashes.
            static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let mut file = open_regular_file(path)?.0.take(cap.saturating_add(1));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `read` on another thread and fails if it has not returned within ten seconds
    /// (a blocked open would otherwise hang the test run instead of failing it).
    fn returns_promptly<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(read()));
        receiver
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the read blocked")
    }

    #[test]
    fn reads_refuse_symlinks_and_special_files_without_blocking_on_a_fifo() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_owned();
        std::fs::write(root.join("file"), b"bytes").expect("write");
        std::os::unix::fs::symlink(root.join("file"), root.join("link")).expect("symlink");
        rustix::fs::mknodat(
            CWD,
            root.join("fifo"),
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .expect("mkfifo");
        std::fs::create_dir(root.join("subdir")).expect("mkdir");
        for name in ["link", "fifo", "subdir"] {
            let path = root.join(name);
            let read = returns_promptly({
                let path = path.clone();
                move || RealFs.read_file(&path, 100)
            });
            assert!(
                read.as_ref().is_err_and(is_not_regular_file),
                "read_file {name}: {read:?}"
            );
            let hashed = returns_promptly({
                let path = path.clone();
                move || RealFs.hash_file(&path, 100)
            });
            assert!(
                hashed.as_ref().is_err_and(is_not_regular_file),
                "hash_file {name}: {hashed:?}"
            );
            let capped = returns_promptly(move || crate::durable::file::read_capped(&path, 100));
            assert!(
                matches!(
                    capped,
                    Err(crate::durable::file::DurableError::NotRegularFile { .. })
                ),
                "read_capped {name}: {capped:?}"
            );
        }
        // A missing file stays NotFound (recovery's missing-object), not a refusal.
        let missing = RealFs.read_file(&root.join("missing"), 100);
        assert!(missing
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound && !is_not_regular_file(e)));
        assert_eq!(
            RealFs.read_file(&root.join("file"), 100).expect("read"),
            b"bytes"
        );
        assert_eq!(
            RealFs.hash_file(&root.join("file"), 100).expect("hash"),
            (Digest::of(b"bytes"), 5)
        );
    }

    /// `read_file` returns the whole file up to `cap`, and `cap + 1` bytes of a longer
    /// one (so "more than cap" is visible), whatever the file's size against its buffer;
    /// the same for `hash_file`.
    #[test]
    fn read_file_returns_the_file_or_cap_plus_one_bytes_at_every_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = 100u64;
        for size in [0usize, 1, 99, 100, 101, 102, 5000] {
            let path = dir.path().join(format!("f{size}"));
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).expect("write");
            let expected = &bytes[..size.min(cap as usize + 1)];
            assert_eq!(
                RealFs.read_file(&path, cap).expect("read"),
                expected,
                "{size}"
            );
            assert_eq!(
                RealFs.hash_file(&path, cap).expect("hash"),
                (Digest::of(expected), expected.len() as u64),
                "{size}"
            );
        }
    }

    #[test]
    fn lengths_in_a_directory_count_regular_files_only_and_agree_with_the_path_form() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::write(root.join("file"), [7u8; 13]).expect("write");
        std::fs::write(root.join("empty"), []).expect("write");
        std::fs::create_dir(root.join("subdir")).expect("mkdir");
        std::os::unix::fs::symlink(root.join("file"), root.join("link")).expect("symlink");
        let names = ["file", "missing", "empty", "subdir", "link"];
        let expected = vec![Some(13), None, Some(0), None, None];
        assert_eq!(
            RealFs.regular_file_lens_in(root, &names).expect("lengths"),
            expected
        );
        let one_by_one: Vec<Option<u64>> = names
            .iter()
            .map(|name| RealFs.regular_file_len(&root.join(name)).expect("length"))
            .collect();
        assert_eq!(one_by_one, expected);
        // The trait's default (for seams that observe reads) agrees too.
        assert_eq!(
            crate::durable::faulty::FaultyFs::default()
                .regular_file_lens_in(root, &names)
                .expect("lengths"),
            expected
        );
        // A missing directory holds none of them; a file in its place is an error.
        assert_eq!(
            RealFs
                .regular_file_lens_in(&root.join("nowhere"), &names)
                .expect("lengths"),
            vec![None; 5]
        );
        assert!(RealFs
            .regular_file_lens_in(&root.join("file"), &names)
            .is_err());
    }
}
