//! The on-disk cache of verified IDX payloads: `DIR/fashion-mnist-v1/<name>`.
//!
//! * The cache directory (and its dataset subdirectory) must be directories owned by the
//!   effective uid and not writable by group or others. This is checked before anything
//!   is read or written; missing directories are created with mode 0700.
//! * Files are read through [`durable::read_capped`] (no symlinks, a size cap) and
//!   verified against their pins before anyone sees their bytes.
//! * Installation is all-or-nothing: each payload goes through [`durable::write_file_with`]
//!   (a fresh mode-0600 temporary file, fsynced, renamed over its final name, then a
//!   directory fsync). If any step fails, every file installed by this call and every
//!   directory created by this call is removed again, so the cache is left as it was.
use std::cell::RefCell;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::dataset::error::DatasetError;
use crate::dataset::pins::ResourcePin;
use crate::dataset::verify::verify_payload;
use crate::durable::{
    self, ensure_dir_with, write_file_with, DurableError, EntryKind, FileSystem, RealFs,
    WriteOptions,
};

/// A cache directory whose existing parts passed the ownership and mode checks.
#[derive(Debug)]
pub(crate) struct Cache {
    root: PathBuf,
    data: PathBuf,
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
        let bytes = match read_optional(&path, pin.payload.bytes) {
            Ok(None) => return Ok(None),
            Ok(Some(bytes)) => bytes,
            Err(DurableError::TooLarge { .. }) => {
                return Err(corrupt(format!(
                    "it is larger than the pinned {} bytes",
                    pin.payload.bytes
                )))
            }
            Err(DurableError::NotRegularFile { .. }) => {
                return Err(corrupt("it is not a regular file".to_owned()))
            }
            Err(error) => return Err(cache_error(error)),
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

        for (pin, bytes) in payloads {
            let destination = self.path_of(pin);
            let written = write_file_with(
                &transaction.fs,
                &destination,
                bytes,
                WriteOptions::REPLACEABLE,
            );
            // Only the directory fsync comes after the rename: then the file is in place
            // and must be rolled back with the others.
            let renamed = match &written {
                Ok(_) => true,
                Err(DurableError::Fsync { path, .. }) => path == &self.data,
                Err(_) => false,
            };
            if renamed {
                transaction.installed.push(destination);
            }
            written.map_err(cache_error)?;
        }
        Ok(())
    }
}

/// The real file system, except that what the cache creates is private to its owner
/// (directories 0700, files 0600) and every directory it creates is recorded, so a failed
/// installation can remove it again.
#[derive(Default)]
struct PrivateFs {
    created_directories: RefCell<Vec<PathBuf>>,
}

impl FileSystem for PrivateFs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        DirBuilder::new().mode(0o700).create(path)?;
        self.created_directories.borrow_mut().push(path.to_owned());
        Ok(())
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if read_only { 0o400 } else { 0o600 })
            .open(path)?
            .write_all(bytes)
    }

    fn fsync_file(&self, path: &Path) -> io::Result<()> {
        RealFs.fsync_file(path)
    }

    fn fsync_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.fsync_dir(path)
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename_noreplace(from, to)
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename_replace(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_file(path)
    }

    fn read_file(&self, path: &Path, cap: u64) -> io::Result<Vec<u8>> {
        RealFs.read_file(path, cap)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        RealFs.list_dir(path)
    }

    fn entry_kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        RealFs.entry_kind(path)
    }

    fn regular_file_len(&self, path: &Path) -> io::Result<Option<u64>> {
        RealFs.regular_file_len(path)
    }
}

/// What an installation has changed so far, undone on drop unless committed.
#[derive(Default)]
struct Transaction {
    fs: PrivateFs,
    installed: Vec<PathBuf>,
    committed: bool,
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // Best effort: these files and directories did not exist before this call.
        let created_directories = self.fs.created_directories.take();
        for path in &self.installed {
            let _ = self.fs.remove_file(path);
        }
        for directory in created_directories.iter().rev() {
            let _ = fs::remove_dir(directory);
        }
        for path in self
            .installed
            .iter()
            .chain(&created_directories)
            .filter_map(|p| p.parent())
        {
            let _ = self.fs.fsync_dir(path);
        }
    }
}

/// Creates `path` and any missing ancestors with mode 0700, each made durable in its
/// parent, recording what it created.
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
        ensure_dir_with(&transaction.fs, &directory).map_err(directory_error)?;
    }
    Ok(())
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

/// [`durable::read_capped`], with a missing file as `None` rather than an error.
pub(crate) fn read_optional(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, DurableError> {
    match durable::read_capped(path, cap) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(DurableError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

fn cache_io(path: &Path, source: io::Error) -> DatasetError {
    DatasetError::CacheIo {
        path: path.to_path_buf(),
        source,
    }
}

/// A failed durable write or read in the cache, as the dataset's error.
fn cache_error(error: DurableError) -> DatasetError {
    match error {
        DurableError::Io { path, source } | DurableError::Fsync { path, source } => {
            DatasetError::CacheIo { path, source }
        }
        other => DatasetError::CacheDurable { source: other },
    }
}

/// A failed [`ensure_dir_with`] of a cache directory, as the dataset's error.
fn directory_error(error: DurableError) -> DatasetError {
    match error {
        DurableError::Io { path, source } => DatasetError::CacheDirectoryCreate { path, source },
        DurableError::NotRegularFile { path } => DatasetError::CacheDirectoryNotADirectory { path },
        other => cache_error(other),
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
    fn installed_payloads_are_private_to_their_owner() {
        use crate::dataset::pins::FASHION_MNIST;
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("cache");
        let cache = Cache::open_checked(&root, "data").expect("open");
        let pin = &FASHION_MNIST.resources[0];
        cache
            .install(&[(pin, b"payload".to_vec())])
            .expect("install");
        let mode = |path: &Path| fs::metadata(path).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode(&cache.path_of(pin)).ok(), Some(0o600));
        assert_eq!(mode(&root.join("data")).ok(), Some(0o700));
        assert_eq!(fs::read_dir(root.join("data")).expect("list").count(), 1);
    }

    #[test]
    fn read_capped_refuses_symlinks_and_large_files() {
        let temp = tempfile::tempdir().expect("tempdir");
        let file = temp.path().join("f");
        assert!(fs::write(&file, b"12345").is_ok());
        assert!(matches!(
            read_optional(&file, 4),
            Err(DurableError::TooLarge { .. })
        ));
        assert!(matches!(read_optional(&file, 5), Ok(Some(b)) if b == b"12345"));
        let link = temp.path().join("l");
        assert!(std::os::unix::fs::symlink(&file, &link).is_ok());
        assert!(read_optional(&link, 10).is_err());
        assert!(matches!(
            read_optional(&temp.path().join("none"), 10),
            Ok(None)
        ));
    }
}
