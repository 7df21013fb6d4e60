//! Recovering an ext4 crash image as the file system would, without mounting it: `e2fsck
//! -fy` replays the journal in user space (the image has no fast_commit, where its replay
//! is not the kernel's), its repairs are judged (journal recovery, free counts and orphan
//! clean-up are what a crash leaves; anything else is damage), a second `e2fsck -fn` must
//! find nothing, and `debugfs rdump` extracts the tree.
use std::path::Path;
use std::process::Command;

use crate::lab::kernel::error::KernelError;

/// What a crash of a journaling file system is expected to leave for `e2fsck` to fix.
const BENIGN: &[&str] = &[
    "recovering journal",
    "free blocks count wrong",
    "free inodes count wrong",
    "clearing orphaned inode",
    "truncating orphaned inode",
    "orphan file",
    "padding at end of inode bitmap",
    "block bitmap differences",
    "inode bitmap differences",
    "directories count wrong",
];

/// Lines of e2fsck's output that are neither progress nor a benign repair.
fn unexpected_repairs(output: &str) -> Vec<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .filter(|line| {
            let lower = line.to_lowercase();
            !(lower.starts_with("pass ")
                || lower.starts_with("e2fsck ")
                || lower.contains("***** file system was modified *****")
                || lower.contains(" files (")
                || lower.starts_with("fix? yes")
                || lower.starts_with('+')
                || lower.starts_with('-')
                || BENIGN.iter().any(|b| lower.contains(b)))
        })
        .map(str::to_owned)
        .collect()
}

/// Recovers `image` and extracts its tree into `out` (which must not exist). `Ok(Err)`
/// is a state the file system could not recover cleanly (a failing state, with why);
/// `Err` is a tool that could not run.
pub fn recover_ext4(image: &Path, out: &Path) -> Result<Result<(), String>, KernelError> {
    let e2fsck = tool("e2fsck")?;
    let repair = Command::new(&e2fsck)
        .arg("-fy")
        .arg(image)
        .output()
        .map_err(KernelError::io("running e2fsck -fy"))?;
    let text = String::from_utf8_lossy(&repair.stdout).into_owned()
        + &String::from_utf8_lossy(&repair.stderr);
    // 0: clean, 1: errors corrected; more means left uncorrected or failed.
    if repair.status.code().is_none_or(|code| code > 1) {
        return Ok(Err(format!(
            "e2fsck -fy exited {}: {}",
            repair.status,
            last_lines(&text)
        )));
    }
    let unexpected = unexpected_repairs(&text);
    if !unexpected.is_empty() {
        return Ok(Err(format!(
            "e2fsck -fy repaired more than a crash leaves: {}",
            unexpected.join(" | ")
        )));
    }
    let check = Command::new(&e2fsck)
        .arg("-fn")
        .arg(image)
        .output()
        .map_err(KernelError::io("running e2fsck -fn"))?;
    if !check.status.success() {
        return Ok(Err(format!(
            "a second e2fsck -fn exited {}: {}",
            check.status,
            last_lines(&String::from_utf8_lossy(&check.stdout))
        )));
    }
    std::fs::create_dir(out).map_err(KernelError::io("creating a state directory"))?;
    let dump = Command::new(tool("debugfs")?)
        .arg("-R")
        .arg(format!("rdump / {}", out.display()))
        .arg(image)
        .output()
        .map_err(KernelError::io("running debugfs rdump"))?;
    let dump_err = String::from_utf8_lossy(&dump.stderr);
    if !dump.status.success() || dump_err.lines().any(|l| !l.starts_with("debugfs ")) {
        return Ok(Err(format!(
            "debugfs rdump failed: {}",
            last_lines(&dump_err)
        )));
    }
    // The file system's own directory, not the writer's.
    let lost_found = out.join("lost+found");
    if std::fs::read_dir(&lost_found).is_ok_and(|mut d| d.next().is_none()) {
        std::fs::remove_dir(&lost_found).map_err(KernelError::io("removing lost+found"))?;
    }
    Ok(Ok(()))
}

fn tool(name: &'static str) -> Result<std::path::PathBuf, KernelError> {
    crate::lab::kernel::guest::find_on_path(name).ok_or(KernelError::ToolMissing {
        tool: name,
        package: "e2fsprogs",
    })
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_repairs_are_benign_and_others_are_not() {
        let benign = "e2fsck 1.47.0\nimg: recovering journal\nPass 1: Checking inodes\nFree blocks count wrong (1, counted=2).\nFix? yes\n\nimg: ***** FILE SYSTEM WAS MODIFIED *****\nimg: 12/64 files (0.0% non-contiguous), 3/64 blocks\n";
        assert!(unexpected_repairs(benign).is_empty());
        let damage = "Pass 2: Checking directory structure\nEntry 'ckpt' in / (2) has deleted/unused inode 13.  Clear? yes\n";
        assert_eq!(unexpected_repairs(damage).len(), 1);
    }
}
