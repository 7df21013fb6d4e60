//! Reading a bundle's files as a careful verifier does.
//!
//! The directory is opened once (`O_DIRECTORY | O_NOFOLLOW`) and every member is reached
//! relative to that descriptor, so a renamed or swapped parent path cannot redirect the
//! reads. Each member is checked with `lstat` (a symlink or special file is refused
//! before it is opened), opened with `O_NOFOLLOW | O_NONBLOCK`, and its identity (device,
//! inode, size, modification time) compared at every stage: the `lstat` before opening
//! against the `fstat` of what was opened (the name was not swapped in between), the
//! `fstat` before the read against the one after it (the file did not change while it was
//! read; the byte count must equal the size), and a final `lstat` of the name against the
//! opened file (the name still names it). A member must also be the bundle's own file:
//! once the name is seen to still name the file read, that file's link count must be 1,
//! since a second hard link (in the bundle or anywhere else on the file system) is a name
//! through which its bytes can be changed without touching the bundle directory. Each way
//! of failing has its own error.
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::BundleError;

/// A point in the reading of a member at which tests may interfere (the verifier itself
/// passes a hook that does nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStage {
    /// After the member's `lstat`, before it is opened.
    BeforeOpen,
    /// After it was opened and `fstat`ed, before its bytes are read.
    BeforeRead,
    /// After its bytes were read, before the closing `fstat` and `lstat`.
    AfterRead,
}

/// What a verifier compares to decide that a file is still the one it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    /// `st_dev`.
    pub device: u64,
    /// `st_ino`.
    pub inode: u64,
    /// `st_size`, in bytes.
    pub size: u64,
    /// `st_mtime`: seconds and nanoseconds.
    pub modified: (i64, u64),
}

/// One field of a [`FileIdentity`], named in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentityField {
    /// [`FileIdentity::device`].
    Device,
    /// [`FileIdentity::inode`].
    Inode,
    /// [`FileIdentity::size`].
    Size,
    /// [`FileIdentity::modified`].
    ModificationTime,
}

impl IdentityField {
    /// The field's name in error messages.
    pub fn name(self) -> &'static str {
        match self {
            IdentityField::Device => "device",
            IdentityField::Inode => "inode",
            IdentityField::Size => "size",
            IdentityField::ModificationTime => "modification time",
        }
    }
}

impl std::fmt::Display for IdentityField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

// The widths of `struct stat` fields differ between architectures.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn identity_of(stat: &Stat) -> FileIdentity {
    FileIdentity {
        device: stat.st_dev as u64,
        inode: stat.st_ino as u64,
        size: stat.st_size.max(0) as u64,
        modified: (stat.st_mtime as i64, stat.st_mtime_nsec as u64),
    }
}

impl FileIdentity {
    /// The file-system object: device and inode.
    fn object_differs(&self, other: &FileIdentity) -> Option<IdentityField> {
        if self.device != other.device {
            Some(IdentityField::Device)
        } else if self.inode != other.inode {
            Some(IdentityField::Inode)
        } else {
            None
        }
    }

    /// The content's stamp: size and modification time.
    fn content_differs(&self, other: &FileIdentity) -> Option<IdentityField> {
        if self.size != other.size {
            Some(IdentityField::Size)
        } else if self.modified != other.modified {
            Some(IdentityField::ModificationTime)
        } else {
            None
        }
    }
}

fn io(path: &Path, errno: Errno) -> BundleError {
    BundleError::Io {
        path: path.to_owned(),
        source: errno.into(),
    }
}

/// The bundle directory, opened without following a final symlink.
pub struct BundleDir<'a> {
    path: &'a Path,
    fd: OwnedFd,
}

impl<'a> BundleDir<'a> {
    /// Opens the directory at `path` (`O_DIRECTORY | O_NOFOLLOW`); a symlink or anything
    /// other than a directory is [`BundleError::NotADirectory`].
    pub fn open(path: &'a Path) -> Result<Self, BundleError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(BundleDir { path, fd }),
            // ELOOP: a symlink; ENOTDIR: something else.
            Err(Errno::LOOP | Errno::NOTDIR) => Err(BundleError::NotADirectory(path.to_owned())),
            Err(errno) => Err(io(path, errno)),
        }
    }

    /// The names in the directory (without `.` and `..`).
    pub fn names(&self) -> Result<Vec<String>, BundleError> {
        let mut dir = rustix::fs::Dir::read_from(&self.fd).map_err(|e| io(self.path, e))?;
        let mut names = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| io(self.path, e))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(String::from_utf8_lossy(name).into_owned());
            }
        }
        Ok(names)
    }

    fn lstat(&self, name: &str) -> Result<Stat, BundleError> {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io(&self.path.join(name), e))
    }

    /// Reads member `name` (at most `cap` bytes), revalidating its identity throughout;
    /// `hook` runs at each [`ReadStage`].
    pub fn read_member(
        &self,
        name: &str,
        cap: u64,
        hook: &mut dyn FnMut(ReadStage, &Path),
    ) -> Result<Vec<u8>, BundleError> {
        let path = self.path.join(name);
        let named = |name: &str| name.to_owned();
        let listed = self.listed_member(name, cap)?;
        hook(ReadStage::BeforeOpen, &path);
        let (fd, opened) = self.open_member(name, &path, &listed)?;
        hook(ReadStage::BeforeRead, &path);
        let mut file = std::fs::File::from(fd);
        let mut bytes = Vec::with_capacity(usize::try_from(opened.size).unwrap_or(0));
        (&mut file)
            .take(cap.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|source| BundleError::Io {
                path: path.clone(),
                source,
            })?;
        if bytes.len() as u64 > cap {
            return Err(BundleError::TooLarge {
                name: named(name),
                bytes: bytes.len() as u64,
                cap,
            });
        }
        hook(ReadStage::AfterRead, &path);
        let after_stat = rustix::fs::fstat(&file).map_err(|e| io(&path, e))?;
        let after = identity_of(&after_stat);
        let changed = opened
            .content_differs(&after)
            .or_else(|| (bytes.len() as u64 != after.size).then_some(IdentityField::Size));
        if let Some(field) = changed {
            return Err(BundleError::ChangedWhileRead {
                name: named(name),
                field,
            });
        }
        // The name must still name the file that was read.
        let relisted = match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => identity_of(&stat),
            Err(Errno::NOENT) => return Err(replaced(name)),
            Err(errno) => return Err(io(&path, errno)),
        };
        same_file(name, &after, &relisted)?;
        // Its name's file (checked just above; a replaced one may have no link left): no
        // other name may link to it, made before the verification or during it.
        own_file(name, &after_stat)?;
        Ok(bytes)
    }

    /// The identity of member `name` as its directory lists it: a regular file (not a
    /// symbolic link) of at most `cap` bytes.
    fn listed_member(&self, name: &str, cap: u64) -> Result<FileIdentity, BundleError> {
        let listed = self.lstat(name)?;
        match FileType::from_raw_mode(listed.st_mode) {
            FileType::RegularFile => {}
            FileType::Symlink => {
                return Err(BundleError::Symlink {
                    name: name.to_owned(),
                })
            }
            _ => {
                return Err(BundleError::NotRegularFile {
                    name: name.to_owned(),
                })
            }
        }
        let listed = identity_of(&listed);
        if listed.size > cap {
            return Err(BundleError::TooLarge {
                name: name.to_owned(),
                bytes: listed.size,
                cap,
            });
        }
        Ok(listed)
    }

    /// Opens member `name` without following a link or blocking on a FIFO, and checks
    /// that what opened is the regular file `listed` names.
    fn open_member(
        &self,
        name: &str,
        path: &Path,
        listed: &FileIdentity,
    ) -> Result<(OwnedFd, FileIdentity), BundleError> {
        // O_NONBLOCK: a FIFO swapped in cannot block the open; O_NOFOLLOW: nor can a symlink
        // redirect it.
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => {
                return Err(BundleError::Symlink {
                    name: name.to_owned(),
                })
            }
            Err(Errno::NOENT) => return Err(replaced(name)),
            Err(errno) => return Err(io(path, errno)),
        };
        let opened = rustix::fs::fstat(&fd).map_err(|e| io(path, e))?;
        if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile {
            return Err(BundleError::NotRegularFile {
                name: name.to_owned(),
            });
        }
        let opened = identity_of(&opened);
        same_file(name, listed, &opened)?;
        Ok((fd, opened))
    }
}

/// Member `name` is gone from its directory: it was replaced (or removed) under the reader.
fn replaced(name: &str) -> BundleError {
    BundleError::Replaced {
        name: name.to_owned(),
        field: IdentityField::Inode,
    }
}

/// The member is the bundle's own file: exactly one name links to it (`st_nlink == 1`).
// The width of `st_nlink` differs between architectures.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn own_file(name: &str, stat: &Stat) -> Result<(), BundleError> {
    let links = stat.st_nlink as u64;
    if links != 1 {
        return Err(BundleError::SharedFile {
            name: name.to_owned(),
            links,
        });
    }
    Ok(())
}

/// `after` is still the file `before` saw, unchanged: another object (device or inode)
/// is a replaced file, another size or modification time a file changed while read.
fn same_file(name: &str, before: &FileIdentity, after: &FileIdentity) -> Result<(), BundleError> {
    if let Some(field) = before.object_differs(after) {
        return Err(BundleError::Replaced {
            name: name.to_owned(),
            field,
        });
    }
    if let Some(field) = before.content_differs(after) {
        return Err(BundleError::ChangedWhileRead {
            name: name.to_owned(),
            field,
        });
    }
    Ok(())
}
