//! The on-disk cache of verified IDX payloads: `DIR/fashion-mnist-v1/<name>`.
//!
//! * The cache directory (and its dataset subdirectory) must be directories owned by the
//!   effective uid and not writable by group or others. This is checked before anything
//!   is read or written; missing directories are created with mode 0700.
//! * Files are read with `O_NOFOLLOW`, with a size cap, and verified against their pins
//!   before anyone sees their bytes.
//! * Installation is all-or-nothing: each payload goes to a fresh temporary file
//!   (`create_new`, mode 0600) that is fsynced, then renamed over its final name, then the
//!   directory is fsynced. If any step fails, every temporary file, every file installed
//!   by this call and every directory created by this call is removed again, so the cache
//!   is left as it was.
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dataset::error::DatasetError;
use crate::dataset::pins::ResourcePin;
use crate::dataset::verify::verify_payload;

/// A cache directory whose existing parts passed the ownership and mode checks.
#[derive(Debug)]
pub(crate) struct Cache {
    root: PathBuf,
    data: PathBuf,
}

/// What reading a file with a cap found.
pub(crate) enum Capped {
    Missing,
    TooLarge,
    Bytes(Vec<u8>),
}

impl Cache {
    /// Checks whatever part of `root/dataset` already exists. Writes nothing.
    pub(crate) fn open_checked(root: &Path, dataset: &str) -> Result<Cache, DatasetError> {
        let data = root.join(dataset);
        match fs::metadata(root) {
            Ok(metadata) => {
                check_directory(root, &metadata)?;
                match fs::symlink_metadata(&data) {
                    Ok(metadata) => check_directory(&data, &metadata)?,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(source) => return Err(cache_io(&data, source)),
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(cache_io(root, source)),
        }
        Ok(Cache {
            root: root.to_path_buf(),
            data,
        })
    }

    /// The final path of a resource's payload.
    pub(crate) fn path_of(&self, pin: &ResourcePin) -> PathBuf {
        self.data.join(pin.name)
    }

    /// Reads and verifies a cached payload. `Ok(None)` when it is absent; a present file
    /// that fails verification is reported (never removed).
    pub(crate) fn read_verified(&self, pin: &ResourcePin) -> Result<Option<Vec<u8>>, DatasetError> {
        let path = self.path_of(pin);
        let corrupt = |detail: String| DatasetError::CachedFileCorrupt {
            name: pin.name.to_owned(),
            path: path.clone(),
            detail,
        };
        match fs::symlink_metadata(&path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(cache_io(&path, source)),
            Ok(metadata) if !metadata.file_type().is_file() => {
                return Err(corrupt("it is not a regular file".to_owned()))
            }
            Ok(_) => {}
        }
        let bytes = match read_capped(&path, pin.payload.bytes) {
            Ok(Capped::Missing) => return Ok(None),
            Ok(Capped::TooLarge) => {
                return Err(corrupt(format!(
                    "it is larger than the pinned {} bytes",
                    pin.payload.bytes
                )))
            }
            Ok(Capped::Bytes(bytes)) => bytes,
            Err(source) => return Err(cache_io(&path, source)),
        };
        let origin = path.display().to_string();
        verify_payload(pin, &origin, &bytes).map_err(|error| corrupt(error.to_string()))?;
        Ok(Some(bytes))
    }

    /// Installs verified payloads atomically (all or nothing).
    pub(crate) fn install(&self, payloads: &[(&ResourcePin, Vec<u8>)]) -> Result<(), DatasetError> {
        if payloads.is_empty() {
            return Ok(());
        }
        let mut transaction = Transaction::default();
        self.install_in(&mut transaction, payloads)?;
        transaction.committed = true;
        Ok(())
    }

    fn install_in(
        &self,
        transaction: &mut Transaction,
        payloads: &[(&ResourcePin, Vec<u8>)],
    ) -> Result<(), DatasetError> {
        create_directories(&self.data, transaction)?;
        // Re-check what now exists (covers directories created concurrently by others).
        let metadata = fs::metadata(&self.root).map_err(|e| cache_io(&self.root, e))?;
        check_directory(&self.root, &metadata)?;
        let metadata = fs::symlink_metadata(&self.data).map_err(|e| cache_io(&self.data, e))?;
        check_directory(&self.data, &metadata)?;

        let mut staged = Vec::with_capacity(payloads.len());
        for (pin, bytes) in payloads {
            let temporary = write_temporary(&self.data, pin.name, bytes, transaction)?;
            staged.push((temporary, self.path_of(pin)));
        }
        for (temporary, destination) in staged {
            fs::rename(&temporary, &destination).map_err(|e| cache_io(&destination, e))?;
            transaction.temporaries.retain(|t| t != &temporary);
            transaction.installed.push(destination);
        }
        sync_directory(&self.data)?;
        for directory in &transaction.created_directories {
            if let Some(parent) = directory.parent() {
                sync_directory(parent)?;
            }
        }
        Ok(())
    }
}

/// What an installation has changed so far, undone on drop unless committed.
#[derive(Default)]
struct Transaction {
    temporaries: Vec<PathBuf>,
    installed: Vec<PathBuf>,
    created_directories: Vec<PathBuf>,
    committed: bool,
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // Best effort: these files and directories did not exist before this call.
        for path in self.temporaries.iter().chain(&self.installed) {
            let _ = fs::remove_file(path);
        }
        for directory in self.created_directories.iter().rev() {
            let _ = fs::remove_dir(directory);
        }
        for path in self
            .installed
            .iter()
            .chain(&self.created_directories)
            .filter_map(|p| p.parent())
        {
            let _ = File::open(path).and_then(|d| d.sync_all());
        }
    }
}

/// Creates `path` and any missing ancestors with mode 0700, recording what it created.
fn create_directories(path: &Path, transaction: &mut Transaction) -> Result<(), DatasetError> {
    let mut missing = Vec::new();
    let mut cursor = Some(path);
    while let Some(candidate) = cursor {
        if candidate.as_os_str().is_empty() {
            break;
        }
        match fs::symlink_metadata(candidate) {
            Ok(_) => break,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                missing.push(candidate.to_path_buf());
                cursor = candidate.parent();
            }
            Err(source) => {
                return Err(DatasetError::CacheDirectoryCreate {
                    path: candidate.to_path_buf(),
                    source,
                })
            }
        }
    }
    for directory in missing.into_iter().rev() {
        match DirBuilder::new().mode(0o700).create(&directory) {
            Ok(()) => transaction.created_directories.push(directory),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(DatasetError::CacheDirectoryCreate {
                    path: directory,
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Writes `bytes` to a fresh temporary file beside the final name and fsyncs it.
fn write_temporary(
    directory: &Path,
    name: &str,
    bytes: &[u8],
    transaction: &mut Transaction,
) -> Result<PathBuf, DatasetError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut attempts = 0;
    let (path, mut file) = loop {
        let serial = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = directory.join(format!(".{name}.partial.{}.{serial}", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(no_follow())
            .open(&path)
        {
            Ok(file) => break (path, file),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => {
                attempts += 1;
            }
            Err(source) => return Err(cache_io(&path, source)),
        }
    };
    transaction.temporaries.push(path.clone());
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|source| cache_io(&path, source))?;
    Ok(path)
}

fn sync_directory(path: &Path) -> Result<(), DatasetError> {
    File::open(path)
        .and_then(|directory| directory.sync_all())
        .map_err(|source| cache_io(path, source))
}

/// The ownership and mode rules for the cache directory and its subdirectory.
fn check_directory(path: &Path, metadata: &fs::Metadata) -> Result<(), DatasetError> {
    if !metadata.is_dir() {
        return Err(DatasetError::CacheDirectoryNotADirectory {
            path: path.to_path_buf(),
        });
    }
    let expected = rustix::process::geteuid().as_raw();
    if metadata.uid() != expected {
        return Err(DatasetError::CacheDirectoryOwner {
            path: path.to_path_buf(),
            owner: metadata.uid(),
            expected,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(DatasetError::CacheDirectoryMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Reads a regular file without following a final symlink, refusing more than `limit`
/// bytes.
pub(crate) fn read_capped(path: &Path, limit: u64) -> io::Result<Capped> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Capped::Missing),
        Err(error) => return Err(error),
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if metadata.len() > limit {
        return Ok(Capped::TooLarge);
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Ok(Capped::TooLarge);
    }
    Ok(Capped::Bytes(bytes))
}

fn no_follow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

fn cache_io(path: &Path, source: io::Error) -> DatasetError {
    DatasetError::CacheIo {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn checks_happen_before_writes_and_rollback_removes_everything() {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("a/b/cache");
        let cache = Cache::open_checked(&root, "data");
        assert!(cache.is_ok());
        assert!(!temp.path().join("a").exists());

        // A failing installation (the data path is occupied by a file after creation)
        // removes the directories it created.
        let mut transaction = Transaction::default();
        assert!(create_directories(&root.join("data"), &mut transaction).is_ok());
        assert!(root.join("data").is_dir());
        let mode = fs::metadata(&root).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o700));
        drop(transaction);
        assert!(!temp.path().join("a").exists());
    }

    #[test]
    fn failed_rename_rolls_back_every_installed_file_and_temporary() {
        use crate::dataset::pins::{Resource, FASHION_MNIST};
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("cache");
        let cache = Cache::open_checked(&root, "data").expect("open");
        // The last resource's final name is occupied by a non-empty directory, so its
        // rename fails after the first three were renamed into place.
        let blocker = root.join("data").join(Resource::TestLabels.file_name());
        fs::create_dir_all(blocker.join("inside")).expect("mkdir");
        let before: Vec<_> = fs::read_dir(root.join("data"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        let payloads: Vec<_> = FASHION_MNIST
            .resources
            .iter()
            .map(|pin| (pin, pin.name.as_bytes().to_vec()))
            .collect();
        assert!(matches!(
            cache.install(&payloads),
            Err(DatasetError::CacheIo { .. })
        ));
        let after: Vec<_> = fs::read_dir(root.join("data"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(before, after);
        assert!(blocker.join("inside").is_dir());
    }

    #[test]
    fn read_capped_refuses_symlinks_and_large_files() {
        let temp = tempfile::tempdir().expect("tempdir");
        let file = temp.path().join("f");
        assert!(fs::write(&file, b"12345").is_ok());
        assert!(matches!(read_capped(&file, 4), Ok(Capped::TooLarge)));
        assert!(matches!(read_capped(&file, 5), Ok(Capped::Bytes(b)) if b == b"12345"));
        let link = temp.path().join("l");
        assert!(std::os::unix::fs::symlink(&file, &link).is_ok());
        assert!(read_capped(&link, 10).is_err());
        assert!(matches!(
            read_capped(&temp.path().join("none"), 10),
            Ok(Capped::Missing)
        ));
    }
}
