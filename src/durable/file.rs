//! Durable files: every file the project writes goes through [`write_file`].
//!
//! The sequence is fixed: hash the bytes, write them to a temp file beside the target
//! (same directory, so the rename is atomic), fsync the file, rename it into place, fsync
//! the directory. A failure at any step removes the temp file and leaves the target as it
//! was; the target is either the old bytes or the new bytes, never a mix.
//!
//! Reads are capped ([`read_capped`]): a file larger than its cap is refused before it is
//! read whole, and symlinks and special files are refused. Every effect goes through the
//! [`FileSystem`] seam, so tests can inject faults ([`crate::durable::faulty`]) and the
//! power-loss model can record it.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::digest::Digest;
use crate::durable::fs::{
    is_not_regular_file, open_regular_file, read_opened_to_cap, EntryKind, FileSystem, RealFs,
};

/// Largest file [`file_sha256`] streams (1 TiB): a bound, not a limit anyone meets.
pub const MAX_HASHED_FILE_BYTES: u64 = 1 << 40;

/// Why a durable write or a capped read failed. Each names the path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// An I/O operation other than an fsync failed (open, write, rename, read, stat).
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An fsync of a file or directory failed: what the disk holds is then unknown, so the
    /// write is reported failed, never retried.
    #[error("fsync of {} failed: {source}", path.display())]
    Fsync {
        /// The file or directory whose fsync failed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The target exists and the write was [`Replace::Never`].
    #[error("{} already exists and is never replaced", path.display())]
    AlreadyExists {
        /// The existing target.
        path: PathBuf,
    },
    /// A capped read met a file longer than its cap (refused before it is read whole).
    #[error("{}: more than the cap of {cap} bytes", path.display())]
    TooLarge {
        /// The file concerned.
        path: PathBuf,
        /// The cap it exceeds, in bytes.
        cap: u64,
    },
    /// An entry is not of the kind needed: a capped read met a symlink, directory or
    /// special file, or a directory to ensure exists as something else.
    #[error("{}: not a regular file (symlinks and special files are refused)", path.display())]
    NotRegularFile {
        /// The entry concerned.
        path: PathBuf,
    },
    /// The target path has no parent directory or no file name, so no temp file can be
    /// placed beside it.
    #[error("{} has no parent directory or file name", path.display())]
    NoParent {
        /// The path concerned.
        path: PathBuf,
    },
}

impl DurableError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DurableError + '_ {
        move |source| DurableError::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn fsync(path: &Path) -> impl FnOnce(std::io::Error) -> DurableError + '_ {
        move |source| DurableError::Fsync {
            path: path.to_owned(),
            source,
        }
    }
}

/// Whether [`write_file`] may replace an existing target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Fail with [`DurableError::AlreadyExists`] (renameat2 `RENAME_NOREPLACE`).
    Never,
    /// Atomically replace the old file.
    Allowed,
}

/// Options of one durable write.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions {
    /// Whether an existing target may be replaced.
    pub replace: Replace,
    /// Install the file read-only (0444) instead of 0644.
    pub read_only: bool,
}

impl WriteOptions {
    /// A new file that must not exist yet, read-only.
    pub const IMMUTABLE: WriteOptions = WriteOptions {
        replace: Replace::Never,
        read_only: true,
    };
    /// A file that replaces any previous version, 0644.
    pub const REPLACEABLE: WriteOptions = WriteOptions {
        replace: Replace::Allowed,
        read_only: false,
    };
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temp path beside `target`, unique within this process and across processes.
fn temp_path_beside(target: &Path) -> Result<PathBuf, DurableError> {
    let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(DurableError::NoParent {
            path: target.to_owned(),
        });
    };
    let counter = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".tmp-{}-{counter}", std::process::id()));
    Ok(parent.join(temp_name))
}

/// The parent directory of `path` ("." for a bare relative name such as `ckpt` or
/// `ckpt/`): the directory whose fsync makes `path`'s own entry durable.
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to `target` durably on the real file system; returns their SHA-256.
pub fn write_file(
    target: &Path,
    bytes: &[u8],
    options: WriteOptions,
) -> Result<Digest, DurableError> {
    write_file_with(&RealFs, target, bytes, options)
}

/// [`write_file`] through `fs`: hash → temp → fsync → rename → directory fsync.
pub fn write_file_with(
    fs: &dyn FileSystem,
    target: &Path,
    bytes: &[u8],
    options: WriteOptions,
) -> Result<Digest, DurableError> {
    let digest = Digest::of(bytes);
    let temp = temp_path_beside(target)?;
    let result = install_via_temp(fs, &temp, target, bytes, options);
    if result.is_err() {
        // Best effort: the temp file is garbage either way, and never read by anyone.
        let _ = fs.remove_file(&temp);
    }
    result.map(|()| digest)
}

fn install_via_temp(
    fs: &dyn FileSystem,
    temp: &Path,
    target: &Path,
    bytes: &[u8],
    options: WriteOptions,
) -> Result<(), DurableError> {
    fs.write_new_file(temp, bytes, options.read_only)
        .map_err(DurableError::io(temp))?;
    fs.fsync_file(temp).map_err(DurableError::fsync(temp))?;
    match options.replace {
        Replace::Never => fs.rename_noreplace(temp, target).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                DurableError::AlreadyExists {
                    path: target.to_owned(),
                }
            } else {
                DurableError::io(target)(source)
            }
        })?,
        Replace::Allowed => fs
            .rename_replace(temp, target)
            .map_err(DurableError::io(target))?,
    }
    let directory = parent_of(target);
    fs.fsync_dir(directory)
        .map_err(DurableError::fsync(directory))
}

/// Makes `directory` exist durably: creates it if missing, then fsyncs its parent —
/// always, whoever created it, so a directory left un-fsynced by a killed writer becomes
/// durable before anything in it is relied on.
pub fn ensure_dir_with(fs: &dyn FileSystem, directory: &Path) -> Result<(), DurableError> {
    match fs
        .entry_kind(directory)
        .map_err(DurableError::io(directory))?
    {
        Some(EntryKind::Dir) => {}
        Some(_) => {
            return Err(DurableError::NotRegularFile {
                path: directory.to_owned(),
            })
        }
        None => match fs.create_dir(directory) {
            Ok(()) => {}
            // A concurrent creator won the race; the fsync below covers its entry too.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(DurableError::io(directory)(e)),
        },
    }
    let parent = parent_of(directory);
    fs.fsync_dir(parent).map_err(DurableError::fsync(parent))
}

/// [`ensure_dir_with`] on the real file system, creating missing ancestors first (each
/// made durable in its parent). `directory` itself is made durable in its parent even
/// when it already exists, as [`ensure_dir_with`] promises: a killed writer may have left
/// it created but not yet fsynced.
pub fn ensure_dir_all(directory: &Path) -> Result<(), DurableError> {
    ensure_dir_all_with(&RealFs, directory)
}

/// [`ensure_dir_all`] through `fs`.
pub fn ensure_dir_all_with(fs: &dyn FileSystem, directory: &Path) -> Result<(), DurableError> {
    let mut missing = Vec::new();
    let mut cursor = directory.parent();
    while let Some(path) = cursor {
        // An existing ancestor may be a symlink to a directory (`/tmp` on some systems):
        // followed here, as the kernel follows it when resolving `directory`.
        if path.as_os_str().is_empty() || path.is_dir() {
            break;
        }
        missing.push(path);
        cursor = path.parent();
    }
    for path in missing.into_iter().rev() {
        ensure_dir_with(fs, path)?;
    }
    ensure_dir_with(fs, directory)
}

/// Opens `path` for reading as a regular file ([`open_regular_file`]: no final symlink
/// followed, no wait on a FIFO).
fn open_regular(path: &Path) -> Result<(std::fs::File, u64), DurableError> {
    open_regular_file(path).map_err(|source| {
        if is_not_regular_file(&source) {
            DurableError::NotRegularFile {
                path: path.to_owned(),
            }
        } else {
            DurableError::io(path)(source)
        }
    })
}

/// Reads a regular file of at most `cap` bytes; larger files, symlinks and special files
/// are refused (the size is checked before and while reading).
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, DurableError> {
    let (file, length) = open_regular(path)?;
    if length > cap {
        return Err(DurableError::TooLarge {
            path: path.to_owned(),
            cap,
        });
    }
    let bytes = read_opened_to_cap(file, length, cap).map_err(DurableError::io(path))?;
    if bytes.len() as u64 > cap {
        return Err(DurableError::TooLarge {
            path: path.to_owned(),
            cap,
        });
    }
    Ok(bytes)
}

/// SHA-256 of a regular file's bytes, streamed (symlinks and special files refused).
pub fn file_sha256(path: &Path) -> Result<Digest, DurableError> {
    use sha2::Digest as _;
    let (file, length) = open_regular(path)?;
    if length > MAX_HASHED_FILE_BYTES {
        return Err(DurableError::TooLarge {
            path: path.to_owned(),
            cap: MAX_HASHED_FILE_BYTES,
        });
    }
    let mut hasher = sha2::Sha256::new();
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    std::io::copy(&mut reader, &mut hasher).map_err(DurableError::io(path))?;
    Ok(Digest(hasher.finalize().into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::faulty::{FaultyFs, Operation};

    #[test]
    fn write_replaces_atomically_and_returns_the_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("record.json");
        let first = write_file(&target, b"one", WriteOptions::REPLACEABLE).expect("write");
        assert_eq!(first, Digest::of(b"one"));
        write_file(&target, b"two", WriteOptions::REPLACEABLE).expect("replace");
        assert_eq!(std::fs::read(&target).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert_eq!(names.len(), 1, "no temp file is left behind");
    }

    #[test]
    fn immutable_write_never_replaces() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("object");
        write_file(&target, b"first", WriteOptions::IMMUTABLE).expect("write");
        let error = write_file(&target, b"second", WriteOptions::IMMUTABLE).expect_err("exists");
        assert!(matches!(error, DurableError::AlreadyExists { .. }));
        assert_eq!(std::fs::read(&target).expect("read"), b"first");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1);
    }

    #[test]
    fn a_failed_fsync_leaves_the_old_bytes_and_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("record.json");
        write_file(&target, b"old", WriteOptions::REPLACEABLE).expect("write");
        for operation in [Operation::FsyncFile, Operation::WriteNewFile] {
            let faulty = FaultyFs::failing(operation, 0);
            let error = write_file_with(&faulty, &target, b"new", WriteOptions::REPLACEABLE)
                .expect_err("injected");
            assert!(matches!(
                error,
                DurableError::Fsync { .. } | DurableError::Io { .. }
            ));
            assert_eq!(std::fs::read(&target).expect("read"), b"old");
            assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1);
        }
    }

    #[test]
    fn a_failed_directory_fsync_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("record.json");
        let faulty = FaultyFs::failing(Operation::FsyncDir, 0);
        let error = write_file_with(&faulty, &target, b"new", WriteOptions::REPLACEABLE)
            .expect_err("injected");
        assert!(matches!(error, DurableError::Fsync { .. }));
    }

    #[test]
    fn ensure_dir_fsyncs_the_parent_even_when_the_directory_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = dir.path().join("objects");
        std::fs::create_dir(&child).expect("pre-existing, never fsynced");
        let faulty = FaultyFs::failing(Operation::FsyncDir, 0);
        let error =
            ensure_dir_with(&faulty, &child).expect_err("the parent fsync must be attempted");
        assert!(matches!(error, DurableError::Fsync { .. }));
        ensure_dir_with(&RealFs, &child).expect("exists, made durable");
    }

    #[test]
    fn ensure_dir_all_fsyncs_the_parent_even_when_the_directory_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = dir.path().join("runs");
        std::fs::create_dir(&child).expect("pre-existing, never fsynced");
        let faulty = FaultyFs::failing(Operation::FsyncDir, 0);
        let error =
            ensure_dir_all_with(&faulty, &child).expect_err("the parent fsync must be attempted");
        assert!(
            matches!(&error, DurableError::Fsync { path, .. } if path == dir.path()),
            "{error}"
        );
    }

    #[test]
    fn ensure_dir_all_makes_every_missing_ancestor_durable_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let deep = dir.path().join("a/b/c");
        // The second directory fsync is the one that makes `a/b` durable in `a`.
        let faulty = FaultyFs::failing(Operation::FsyncDir, 1);
        let error = ensure_dir_all_with(&faulty, &deep).expect_err("injected");
        assert!(
            matches!(&error, DurableError::Fsync { path, .. } if path == &dir.path().join("a")),
            "{error}"
        );
        ensure_dir_all(&deep).expect("created");
        assert!(deep.is_dir());
    }

    #[test]
    fn capped_reads_refuse_large_files_symlinks_and_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").expect("write");
        assert_eq!(read_capped(&file, 5).expect("fits"), b"12345");
        assert!(matches!(
            read_capped(&file, 4),
            Err(DurableError::TooLarge { cap: 4, .. })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(matches!(
            read_capped(&link, 100),
            Err(DurableError::NotRegularFile { .. })
        ));
        assert!(matches!(
            file_sha256(&link),
            Err(DurableError::NotRegularFile { .. })
        ));
        assert!(matches!(
            read_capped(dir.path(), 100),
            Err(DurableError::NotRegularFile { .. })
        ));
        assert_eq!(file_sha256(&file).expect("hash"), Digest::of(b"12345"));
    }

    /// Through the shared pre-sized read: every size up to the cap comes back whole, and
    /// every larger one is `TooLarge`, including one just over the cap and one far over.
    #[test]
    fn capped_reads_return_every_size_up_to_the_cap_and_refuse_every_larger_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = 100u64;
        for size in [0usize, 1, 99, 100, 101, 102, 5000] {
            let path = dir.path().join(format!("f{size}"));
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).expect("write");
            let read = read_capped(&path, cap);
            if size as u64 <= cap {
                assert_eq!(read.expect("fits"), bytes, "{size}");
            } else {
                assert!(
                    matches!(read, Err(DurableError::TooLarge { cap: 100, .. })),
                    "{size}: {read:?}"
                );
            }
        }
    }
}
