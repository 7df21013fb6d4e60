//! The guest's initramfs: an uncompressed `newc` cpio (the kernel unpacks it fastest)
//! holding busybox, the modules the disk and the file system need in `modprobe
//! --show-depends` order, the `shardlift` agent and the writer's program, each with the
//! shared libraries `ldd` names at the same paths, and `/init`.
//!
//! Binaries are copied in rather than shared over virtio-9p: the guest then needs no
//! network file-system modules, sees nothing of the host but what was chosen, and the
//! writer cannot reach host files at all.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lab::kernel::error::KernelError;

/// Files of the initramfs, by path inside it, with their mode and bytes.
#[derive(Default)]
pub struct Initramfs {
    files: BTreeMap<String, (u32, Vec<u8>)>,
}

impl Initramfs {
    /// Adds a file at `path` (absolute in the guest).
    pub fn file(&mut self, path: &str, mode: u32, bytes: Vec<u8>) {
        self.files
            .insert(path.trim_start_matches('/').to_owned(), (mode, bytes));
    }

    /// Adds the host program `program` at the same path, with its shared libraries.
    pub fn program(&mut self, program: &Path) -> Result<(), KernelError> {
        let bytes = std::fs::read(program)
            .map_err(KernelError::io(format!("reading {}", program.display())))?;
        self.file(&program.to_string_lossy(), 0o755, bytes);
        for library in shared_libraries(program)? {
            let bytes = std::fs::read(&library)
                .map_err(KernelError::io(format!("reading {}", library.display())))?;
            self.file(&library.to_string_lossy(), 0o755, bytes);
        }
        Ok(())
    }

    /// Bytes of every file, summed (the guest's memory must hold the archive twice).
    pub fn payload_bytes(&self) -> u64 {
        self.files
            .values()
            .map(|(_, bytes)| bytes.len() as u64)
            .sum()
    }

    /// The cpio archive: every parent directory, then the files, then the trailer.
    pub fn to_cpio(&self) -> Vec<u8> {
        let mut dirs: Vec<String> = Vec::new();
        for path in self.files.keys() {
            let mut at = String::new();
            for part in path
                .split('/')
                .collect::<Vec<_>>()
                .split_last()
                .map_or(&[][..], |(_, p)| p)
            {
                at = if at.is_empty() {
                    (*part).to_owned()
                } else {
                    format!("{at}/{part}")
                };
                if !dirs.contains(&at) {
                    dirs.push(at.clone());
                }
            }
        }
        let mut out = Vec::new();
        let mut ino = 1u32;
        for dir in &dirs {
            entry(&mut out, ino, 0o040_755, dir, &[]);
            ino += 1;
        }
        for (path, (mode, bytes)) in &self.files {
            entry(&mut out, ino, 0o100_000 | mode, path, bytes);
            ino += 1;
        }
        entry(&mut out, 0, 0, "TRAILER!!!", &[]);
        out
    }
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn entry(out: &mut Vec<u8>, ino: u32, mode: u32, name: &str, data: &[u8]) {
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        data.len() as u32,
        0,
        0,
        0,
        0,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

/// The absolute library paths `ldd PROGRAM` names (none for a static program).
pub fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>, KernelError> {
    let output =
        Command::new("ldd")
            .arg(program)
            .output()
            .map_err(|_| KernelError::ToolMissing {
                tool: "ldd",
                package: "libc-bin",
            })?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/')
                .then(|| lexically_normal(Path::new(path)))
        })
        .collect())
}

/// `path` with its `.` and `..` parts resolved by name (an rpath such as
/// `$ORIGIN/../../x/lib` gives such paths), symbolic links kept: the dynamic loader in the
/// guest asks for the same names the host's did, `/lib64/ld-linux-x86-64.so.2` among them.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `/init` before the module loads: the kernel's file systems.
pub const INIT_HEAD: &str = "#!/bin/busybox sh\n\
/bin/busybox mkdir -p /proc /sys /dev /mnt /tmp\n\
/bin/busybox mount -t proc proc /proc\n\
/bin/busybox mount -t sysfs sys /sys\n\
/bin/busybox mount -t devtmpfs dev /dev\n\
/bin/busybox --install -s /bin\n";

/// Every guest's base: busybox and the modules for virtio-blk and `fs_module` (from the
/// pinned kernel's install), and the start of `/init` that mounts the kernel's file
/// systems and loads those modules. The caller appends the rest of `/init`.
pub fn base(
    install_root: &Path,
    release: &str,
    fs_module: &str,
) -> Result<(Initramfs, String), KernelError> {
    let mut fs = Initramfs::default();
    let busybox = std::fs::read("/bin/busybox").map_err(|_| KernelError::ToolMissing {
        tool: "busybox",
        package: "busybox-static",
    })?;
    fs.file("/bin/busybox", 0o755, busybox);
    let modules = module_order(
        install_root,
        release,
        &["virtio_pci", "virtio_blk", fs_module],
    )?;
    let mut script = String::from(INIT_HEAD);
    for (i, module) in modules.iter().enumerate() {
        let name = format!("/modules/{i:02}.ko");
        let bytes = std::fs::read(module)
            .map_err(KernelError::io(format!("reading {}", module.display())))?;
        fs.file(&name, 0o644, bytes);
        script.push_str(&format!("/bin/busybox insmod {name} 2>/dev/null\n"));
    }
    Ok((fs, script))
}

/// The modules `names` need, in load order (`modprobe --show-depends` on the install).
pub fn module_order(
    root: &Path,
    release: &str,
    names: &[&str],
) -> Result<Vec<PathBuf>, KernelError> {
    let mut order: Vec<PathBuf> = Vec::new();
    for name in names {
        let output = Command::new("modprobe")
            .arg("-d")
            .arg(root)
            .arg("-S")
            .arg(release)
            .arg("--show-depends")
            .arg(name)
            .output()
            .map_err(|_| KernelError::ToolMissing {
                tool: "modprobe",
                package: "kmod",
            })?;
        if !output.status.success() {
            return Err(KernelError::ToolFailed {
                tool: format!("modprobe --show-depends {name}"),
                outcome: output.status.to_string(),
                output: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(path) = line.strip_prefix("insmod ") {
                let path = PathBuf::from(path.trim());
                if !order.contains(&path) {
                    order.push(path);
                }
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive is the format the kernel reads: parents first, 4-byte alignment.
    #[test]
    fn the_archive_lists_parents_before_files_and_is_aligned() {
        let mut fs = Initramfs::default();
        fs.file("/a/b/c", 0o644, b"hello".to_vec());
        let cpio = fs.to_cpio();
        assert_eq!(cpio.len() % 4, 0);
        let text = String::from_utf8_lossy(&cpio);
        let a = text.find("a\0").expect("a");
        let ab = text.find("a/b\0").expect("a/b");
        let abc = text.find("a/b/c\0").expect("a/b/c");
        assert!(a < ab && ab < abc);
        assert!(text.ends_with("TRAILER!!!\0\0\0\0") || text.contains("TRAILER!!!"));
    }

    #[test]
    fn library_paths_lose_their_dot_dot_parts_by_name() {
        let path = Path::new("/c/torch/lib/../../nvidia/./lib/libcudart.so.13");
        assert_eq!(
            lexically_normal(path),
            Path::new("/c/nvidia/lib/libcudart.so.13")
        );
    }
}
