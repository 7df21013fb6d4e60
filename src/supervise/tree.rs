//! Killing a child together with every process it started. A process group is not
//! enough: launchers such as `torchrun` start each worker in a session of its own, so
//! killing the launcher's group would orphan them. The tree is found through `/proc`
//! (each process's parent), stopped from the top down so nothing can fork past the
//! walk, then killed through pidfds, which cannot reach a recycled pid.
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

use super::process::{ProcessError, SupervisedChild};

/// Walks of `/proc` before giving up on a tree that keeps growing.
const MAX_WALKS: usize = 32;

/// Each live process's parent pid, from `/proc/<pid>/stat` (the field after the
/// parenthesised command name, which may itself contain spaces and parentheses).
fn parent_map() -> BTreeMap<u32, u32> {
    let mut parents = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return parents;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after_name) = stat.rfind(')').map(|end| &stat[end + 1..]) else {
            continue;
        };
        // After the name: state, then the parent pid.
        if let Some(ppid) = after_name
            .split_whitespace()
            .nth(1)
            .and_then(|f| f.parse().ok())
        {
            parents.insert(pid, ppid);
        }
    }
    parents
}

/// Every live descendant of `root` (not `root` itself). Empty for pid 0 or 1, whose
/// "descendants" are the whole machine, and never this process itself.
pub fn descendants(root: u32) -> BTreeSet<u32> {
    if root <= 1 {
        return BTreeSet::new();
    }
    let parents = parent_map();
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (&pid, &ppid) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut found = BTreeSet::new();
    let mut frontier = vec![root];
    let this_process = std::process::id();
    while let Some(pid) = frontier.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if child != this_process && found.insert(child) {
                frontier.push(child);
            }
        }
    }
    found
}

/// A pidfd for `pid`, if it still lives.
fn open_pidfd(pid: u32) -> Option<OwnedFd> {
    let raw = Pid::from_raw(i32::try_from(pid).ok()?)?;
    pidfd_open(raw, PidfdFlags::empty()).ok()
}

/// Waits until the process behind `pidfd` has exited, at most until `deadline`.
fn wait_exited(pidfd: &OwnedFd, deadline: Instant) -> bool {
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timespec = Timespec {
            tv_sec: remaining.as_secs() as i64,
            tv_nsec: i64::from(remaining.subsec_nanos()),
        };
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&timespec)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// What [`kill_tree`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeKill {
    /// Descendants found and sent SIGKILL (besides the child's own group).
    pub descendants_killed: usize,
    /// Descendants still alive when the wait ended (0 unless the kernel is wedged).
    pub descendants_alive: usize,
}

/// SIGSTOPs `child` and every descendant (repeating the walk until it finds no new
/// process), SIGKILLs the child's process group and each descendant, reaps the child and
/// waits up to `timeout_ms` for every descendant to be gone.
pub fn kill_tree(child: &mut SupervisedChild, timeout_ms: u64) -> Result<TreeKill, ProcessError> {
    let mut held: Vec<OwnedFd> = Vec::new();
    if child.exit_record().is_none() {
        child.signal(Signal::STOP)?;
        let mut seen = BTreeSet::new();
        for _ in 0..MAX_WALKS {
            let fresh: Vec<u32> = descendants(child.pid())
                .difference(&seen)
                .copied()
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                seen.insert(pid);
                if let Some(pidfd) = open_pidfd(pid) {
                    let _ = pidfd_send_signal(pidfd.as_fd(), Signal::STOP);
                    held.push(pidfd);
                }
            }
        }
    }
    child.signal_group(Signal::KILL)?;
    for pidfd in &held {
        // ESRCH: it is already gone.
        let _ = pidfd_send_signal(pidfd.as_fd(), Signal::KILL);
    }
    child.kill_and_reap()?;
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let alive = held
        .iter()
        .filter(|pidfd| !wait_exited(pidfd, deadline))
        .count();
    Ok(TreeKill {
        descendants_killed: held.len(),
        descendants_alive: alive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_machine_and_this_process_are_never_a_tree_to_kill() {
        assert!(descendants(0).is_empty());
        assert!(descendants(1).is_empty());
        let parent = std::os::unix::process::parent_id();
        assert!(!descendants(parent).contains(&std::process::id()));
    }
}
