//! Corruption injection: damage one file (or add clutter) in a copy of a healthy store and
//! check that recovery falls back to the newest generation that still fully verifies.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// One way to damage a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Flip bit 0 of the byte at `offset` (clamped to the file).
    BitFlip {
        /// The file, relative to the store.
        file: String,
        /// Which byte.
        offset: FileOffset,
    },
    /// Keep only the first `keep_per_mille`/1000 of the file.
    Truncate {
        /// The file, relative to the store.
        file: String,
        /// How much to keep, in thousandths of the file's length.
        keep_per_mille: u64,
    },
    /// Delete the file (a lost write).
    Delete {
        /// The file, relative to the store.
        file: String,
    },
    /// Overwrite `file` with the bytes of `source` (a misdirected write).
    Misdirect {
        /// The file overwritten, relative to the store.
        file: String,
        /// The file whose bytes it receives, relative to the store.
        source: String,
    },
    /// Write a new file with these bytes (clutter, stale/garbage LATEST, junk records).
    Write {
        /// The new file, relative to the store.
        file: String,
        /// Its contents.
        bytes: Vec<u8>,
    },
    /// Create an empty directory.
    Mkdir {
        /// The directory, relative to the store.
        dir: String,
    },
}

/// Which byte of a file a [`Damage::BitFlip`] lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileOffset {
    /// Byte 0 (a header, magic or first JSON byte).
    First,
    /// Byte `len / 2`.
    Middle,
    /// The last byte.
    Last,
}

impl Damage {
    /// The path the damage lands on, relative to the store.
    pub fn target(&self) -> &str {
        match self {
            Damage::BitFlip { file, .. }
            | Damage::Truncate { file, .. }
            | Damage::Delete { file }
            | Damage::Misdirect { file, .. }
            | Damage::Write { file, .. } => file,
            Damage::Mkdir { dir } => dir,
        }
    }

    /// The kind of damage: a bit flip, a torn (truncated) file, a lost write (the file
    /// deleted), a misdirected write, a foreign write, or a foreign directory.
    pub fn label(&self) -> &'static str {
        match self {
            Damage::BitFlip { .. } => "bit_flip",
            Damage::Truncate { .. } => "truncation",
            Damage::Delete { .. } => "lost_write",
            Damage::Misdirect { .. } => "misdirected_write",
            Damage::Write { .. } => "foreign_write",
            Damage::Mkdir { .. } => "foreign_directory",
        }
    }

    /// A one-line human description, e.g. "bit flip (First) in LATEST".
    pub fn describe(&self) -> String {
        match self {
            Damage::BitFlip { file, offset } => format!("bit flip ({offset:?}) in {file}"),
            Damage::Truncate {
                file,
                keep_per_mille,
            } => format!("truncate {file} to {keep_per_mille}/1000"),
            Damage::Delete { file } => format!("delete {file}"),
            Damage::Misdirect { file, source } => format!("overwrite {file} with {source}"),
            Damage::Write { file, .. } => format!("write {file}"),
            Damage::Mkdir { dir } => format!("mkdir {dir}"),
        }
    }

    /// Applies the damage under `root`.
    pub fn apply(&self, root: &Path) -> std::io::Result<()> {
        let writable = |path: &Path| -> std::io::Result<()> {
            if path.exists() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
            }
            Ok(())
        };
        match self {
            Damage::BitFlip { file, offset } => {
                let path = root.join(file);
                let mut bytes = std::fs::read(&path)?;
                if bytes.is_empty() {
                    bytes.push(0);
                } else {
                    let index = match offset {
                        FileOffset::First => 0,
                        FileOffset::Middle => bytes.len() / 2,
                        FileOffset::Last => bytes.len() - 1,
                    };
                    bytes[index] ^= 1;
                }
                writable(&path)?;
                std::fs::write(&path, bytes)
            }
            Damage::Truncate {
                file,
                keep_per_mille,
            } => {
                let path = root.join(file);
                let bytes = std::fs::read(&path)?;
                let keep = (bytes.len() as u64).saturating_mul(*keep_per_mille) / 1000;
                writable(&path)?;
                std::fs::write(&path, &bytes[..keep as usize])
            }
            Damage::Delete { file } => std::fs::remove_file(root.join(file)),
            Damage::Misdirect { file, source } => {
                let bytes = std::fs::read(root.join(source))?;
                let path = root.join(file);
                writable(&path)?;
                std::fs::write(&path, bytes)
            }
            Damage::Write { file, bytes } => {
                let path = root.join(file);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                writable(&path)?;
                std::fs::write(&path, bytes)
            }
            Damage::Mkdir { dir } => std::fs::create_dir_all(root.join(dir)),
        }
    }
}

/// Copies a directory tree (contents and permission bits).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in walkdir::WalkDir::new(from).sort_by_file_name() {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(from)
            .map_err(std::io::Error::other)?;
        let target = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if entry.file_type().is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Every file under `root`, relative, sorted.
pub fn list_files(root: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.map_err(std::io::Error::other)?;
        if entry.file_type().is_file() {
            let rel = entry
                .path()
                .strip_prefix(root)
                .map_err(std::io::Error::other)?;
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(out)
}
