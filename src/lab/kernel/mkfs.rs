//! The durable starting image: the file system under test made from the setup command's
//! directory, at the start of a disk whose tail holds the acknowledgement markers.
//!
//! - ext4: `mkfs.ext4 -d` (no fast_commit, whose user-space journal replay is not the
//!   kernel's; no lazy initialisation or discard, which would add background writes to
//!   the log);
//! - xfs: `mkfs.xfs -p` with a prototype file written from the directory (the directory
//!   option is newer than the pinned host's xfsprogs), at the smallest size mkfs.xfs
//!   accepts without its test-only override, so the log is the default one;
//! - btrfs: `mkfs.btrfs --rootdir`.
//!
//! Every option not named here is the tool's default.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lab::kernel::config::FileSystem;
use crate::lab::kernel::error::KernelError;
use crate::lab::kernel::guest::find_on_path;

/// The marker area at the disk's end, in bytes.
pub const MARKER_AREA_BYTES: u64 = 4 << 20;

/// Most entries of a setup directory made into an xfs prototype file.
pub const MAX_PROTO_ENTRIES: usize = 100_000;

impl FileSystem {
    /// The file system's own bytes, at the start of the disk.
    pub fn file_system_bytes(self) -> u64 {
        match self {
            // mkfs.xfs refuses less than 300 MB.
            FileSystem::Xfs => 320 << 20,
            // mkfs.btrfs refuses less than 109 MiB (and grows an image file to that).
            FileSystem::Btrfs => 128 << 20,
            FileSystem::Model | FileSystem::Ext4 => 60 << 20,
        }
    }

    /// The whole disk: the file system, then the marker area.
    pub fn disk_bytes(self) -> u64 {
        self.file_system_bytes() + MARKER_AREA_BYTES
    }

    /// The kernel module, and the name `mount -t` takes.
    pub fn module(self) -> &'static str {
        match self {
            FileSystem::Model | FileSystem::Ext4 => "ext4",
            FileSystem::Xfs => "xfs",
            FileSystem::Btrfs => "btrfs",
        }
    }
}

/// Makes `file_system` from `setup_dir` on a new sparse disk image `disk`.
pub fn make(file_system: FileSystem, setup_dir: &Path, disk: &Path) -> Result<(), KernelError> {
    let file = std::fs::File::create(disk).map_err(KernelError::io("creating the disk image"))?;
    file.set_len(file_system.disk_bytes())
        .map_err(KernelError::io("sizing the disk image"))?;
    drop(file);
    let MkfsCommand {
        tool,
        package,
        args,
    } = mkfs_command(file_system, setup_dir, disk)?;
    let program = find_on_path(tool).ok_or(KernelError::ToolMissing { tool, package })?;
    let output = Command::new(program)
        .args(&args)
        .output()
        .map_err(KernelError::io(format!("running {tool}")))?;
    if !output.status.success() {
        return Err(KernelError::ToolFailed {
            tool: tool.to_owned(),
            outcome: output.status.to_string(),
            output: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    // The marker area must stay outside the file system: a tool that grew the image
    // would have put the file system over it.
    let len = std::fs::metadata(disk)
        .map_err(KernelError::io("reading the disk image"))?
        .len();
    if len != file_system.disk_bytes() {
        return Err(KernelError::ToolFailed {
            tool: tool.to_owned(),
            outcome: "resized the disk image".to_owned(),
            output: format!(
                "the image is {len} bytes, not {} (file system, then markers)",
                file_system.disk_bytes()
            ),
        });
    }
    Ok(())
}

/// One mkfs invocation: the tool, the Debian package that has it, and its arguments.
struct MkfsCommand {
    tool: &'static str,
    package: &'static str,
    args: Vec<std::ffi::OsString>,
}

/// The mkfs invocation that makes `file_system` from `setup_dir` on `disk` (for xfs, the
/// prototype file it reads is written beside the disk image first).
fn mkfs_command(
    file_system: FileSystem,
    setup_dir: &Path,
    disk: &Path,
) -> Result<MkfsCommand, KernelError> {
    let bytes = file_system.file_system_bytes();
    let (tool, package, args): (&'static str, &'static str, Vec<std::ffi::OsString>) =
        match file_system {
            FileSystem::Model | FileSystem::Ext4 => (
                "mkfs.ext4",
                "e2fsprogs",
                vec![
                    "-q".into(),
                    "-F".into(),
                    "-b".into(),
                    "4096".into(),
                    "-O".into(),
                    "^fast_commit".into(),
                    "-E".into(),
                    "lazy_itable_init=0,lazy_journal_init=0,nodiscard".into(),
                    "-d".into(),
                    setup_dir.into(),
                    disk.into(),
                    (bytes / 4096).to_string().into(),
                ],
            ),
            FileSystem::Xfs => {
                let proto = disk.with_extension("proto");
                std::fs::write(&proto, prototype(setup_dir)?)
                    .map_err(KernelError::io("writing the xfs prototype file"))?;
                (
                    "mkfs.xfs",
                    "xfsprogs",
                    vec![
                        "-q".into(),
                        "-f".into(),
                        "-K".into(),
                        "-d".into(),
                        format!("size={bytes}").into(),
                        "-p".into(),
                        proto.into(),
                        disk.into(),
                    ],
                )
            }
            FileSystem::Btrfs => (
                "mkfs.btrfs",
                "btrfs-progs",
                vec![
                    "-q".into(),
                    "-f".into(),
                    "--nodiscard".into(),
                    "--byte-count".into(),
                    bytes.to_string().into(),
                    "--rootdir".into(),
                    setup_dir.into(),
                    disk.into(),
                ],
            ),
        };
    Ok(MkfsCommand {
        tool,
        package,
        args,
    })
}

/// An xfs prototype file (`mkfs.xfs -p`) for the tree under `dir`: every directory,
/// regular file and symbolic link, owned by root, with its permission bits. Anything
/// else, and a name the format cannot hold (whitespace, not UTF-8, `$`), is refused.
pub fn prototype(dir: &Path) -> Result<String, KernelError> {
    let mut out = String::from("/dev/null\n0 0\nd--755 0 0\n");
    let mut entries = 0usize;
    write_directory(dir, 1, &mut out, &mut entries)?;
    out.push_str("$\n");
    Ok(out)
}

fn write_directory(
    dir: &Path,
    depth: usize,
    out: &mut String,
    entries: &mut usize,
) -> Result<(), KernelError> {
    use std::os::unix::fs::PermissionsExt;
    let refused = |path: &Path, why: &str| KernelError::SetupUnsupported {
        path: path.to_owned(),
        reason: why.to_owned(),
    };
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(KernelError::io("reading the setup directory"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(KernelError::io("reading the setup directory"))?;
    children.sort();
    let indent = " ".repeat(depth);
    for path in children {
        *entries += 1;
        if *entries > MAX_PROTO_ENTRIES {
            return Err(refused(
                dir,
                "more entries than an xfs prototype file is made for",
            ));
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| refused(&path, "a name that is not UTF-8"))?;
        if name.chars().any(char::is_whitespace) || name.starts_with('$') {
            return Err(refused(
                &path,
                "a name with whitespace or a leading `$` (the xfs prototype format cannot hold it)",
            ));
        }
        let meta = std::fs::symlink_metadata(&path)
            .map_err(KernelError::io("reading the setup directory"))?;
        // The permission bits only: set-id and sticky bits are left out.
        let mode = meta.permissions().mode() & 0o777;
        let kind = meta.file_type();
        if kind.is_dir() {
            out.push_str(&format!("{indent}{name} d--{mode:03o} 0 0\n"));
            write_directory(&path, depth + 1, out, entries)?;
            out.push_str(&format!("{indent}$\n"));
        } else if kind.is_file() {
            let source = path
                .to_str()
                .filter(|p| !p.chars().any(char::is_whitespace))
                .ok_or_else(|| refused(&path, "a path with whitespace or not UTF-8"))?;
            out.push_str(&format!("{indent}{name} ---{mode:03o} 0 0 {source}\n"));
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path)
                .map_err(KernelError::io("reading a symbolic link of the setup"))?;
            let target = target
                .to_str()
                .filter(|t| !t.is_empty() && !t.chars().any(char::is_whitespace))
                .ok_or_else(|| refused(&path, "a link target with whitespace or not UTF-8"))?;
            out.push_str(&format!("{indent}{name} l--777 0 0 {target}\n"));
        } else {
            return Err(refused(
                &path,
                "neither a directory, a regular file nor a symbolic link",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prototype lists the tree depth-first, sorted, with modes, and refuses a name
    /// the format cannot hold.
    #[test]
    fn the_xfs_prototype_lists_the_tree_and_refuses_what_it_cannot_hold() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("sub/b"), b"b").expect("b");
        std::fs::write(dir.path().join("a"), b"a").expect("a");
        std::fs::set_permissions(dir.path().join("a"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        std::os::unix::fs::symlink("a", dir.path().join("link")).expect("symlink");
        std::fs::set_permissions(
            dir.path().join("sub"),
            std::fs::Permissions::from_mode(0o750),
        )
        .expect("chmod");
        let root = dir.path().to_string_lossy().into_owned();
        let proto = prototype(dir.path()).expect("prototype");
        assert_eq!(
            proto,
            format!(
                "/dev/null\n0 0\nd--755 0 0\n a ---600 0 0 {root}/a\n link l--777 0 0 a\n \
                 sub d--750 0 0\n  b ---644 0 0 {root}/sub/b\n $\n$\n"
            )
        );
        std::fs::write(dir.path().join("with space"), b"x").expect("write");
        let error = prototype(dir.path()).expect_err("a name with a space");
        assert_eq!(error.kind(), "setup-unsupported");
    }
}
