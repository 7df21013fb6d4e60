//! Running a child command (`shardlift killer-demo`, `shardlift verify-bundle`) through
//! duct: stdin closed, stdout and stderr into log files read back capped, a deadline after
//! which it is killed, and, for killer-demo, the libtorch libraries it maps.
use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use shardlift::durable;

use crate::release::error::{io, ReleaseError};

/// The most of a child's stdout or stderr read back into a transcript.
const OUTPUT_CAP: u64 = 64 << 20;
/// How often the maps are read until libtorch_cpu.so and libc10.so appear.
const FIRST_MAPS_INTERVAL: Duration = Duration::from_millis(5);
/// How often they are read afterwards (libraries mapped later are seen too).
const LATER_MAPS_INTERVAL: Duration = Duration::from_millis(100);

/// One finished child process.
pub(super) struct ChildRun {
    /// The command as run (program path and arguments), for the transcript.
    pub command_line: String,
    /// `exit code N` or `signal N`.
    pub outcome: String,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
    /// Mapped libtorch libraries (absolute paths), when observed.
    pub libraries: BTreeSet<PathBuf>,
}

/// What to run and how long it may take.
pub(super) struct ChildCommand<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    /// Names the log files `<logs>/<label>.stdout|stderr`.
    pub label: String,
    pub deadline: Duration,
    /// Whether to record the libtorch libraries the process maps.
    pub observe_libraries: bool,
}

/// Runs `command` to completion (or its deadline) with its output in `logs`.
pub(super) fn run_child(command: &ChildCommand<'_>, logs: &Path) -> Result<ChildRun, ReleaseError> {
    let stdout_path = logs.join(format!("{}.stdout", command.label));
    let stderr_path = logs.join(format!("{}.stderr", command.label));
    let stdout = File::create(&stdout_path).map_err(io(&stdout_path))?;
    let stderr = File::create(&stderr_path).map_err(io(&stderr_path))?;
    // Log files, not pipes: a grandchild that inherits them cannot hold up the wait.
    let handle = duct::cmd(command.program, command.args)
        .stdin_null()
        .stdout_file(stdout)
        .stderr_file(stderr)
        .unchecked()
        .start()
        .map_err(|e| ReleaseError::Shardlift {
            path: command.program.to_owned(),
            message: format!("cannot start it: {e}"),
        })?;
    let (status, libraries) = wait_observing(&handle, command.deadline, command.observe_libraries)
        .map_err(io(command.program))?;
    Ok(ChildRun {
        command_line: format!("{} {}", command.program.display(), command.args.join(" ")),
        outcome: describe(status),
        success: status.success(),
        stdout: read_log(&stdout_path)?,
        stderr: read_log(&stderr_path)?,
        libraries,
    })
}

/// Waits for `handle` until `deadline` (then kills it), reading its libtorch mappings
/// meanwhile when `observe` is set: their union over the run.
fn wait_observing(
    handle: &duct::Handle,
    deadline: Duration,
    observe: bool,
) -> std::io::Result<(ExitStatus, BTreeSet<PathBuf>)> {
    let started = Instant::now();
    let pid = handle.pids().first().copied();
    let mut libraries = BTreeSet::new();
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        let interval = match (observe, libraries.is_empty()) {
            (false, _) => left,
            (true, true) => FIRST_MAPS_INTERVAL.min(left),
            (true, false) => LATER_MAPS_INTERVAL.min(left),
        };
        if let Some(output) = handle.wait_timeout(interval)? {
            return Ok((output.status, libraries));
        }
        if started.elapsed() >= deadline {
            // The child is ours and unreaped, so its pid cannot have been reused.
            let _ = handle.kill();
            return Ok((handle.wait()?.status, libraries));
        }
        if let (true, Some(pid)) = (observe, pid) {
            if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                libraries.extend(libtorch_mappings(&maps).unwrap_or_default());
            }
        }
    }
}

fn describe(status: ExitStatus) -> String {
    match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "unknown exit".to_owned(),
    }
}

fn read_log(path: &Path) -> Result<String, ReleaseError> {
    let bytes = durable::read_capped(path, OUTPUT_CAP)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The libraries of the libtorch install `maps` shows mapped: every mapped file in the
/// directory of `libtorch_cpu.so` or below its wheel prefix (`<prefix>/torch/lib`).
/// `None` until both `libtorch_cpu.so` and `libc10.so` are mapped.
pub(super) fn libtorch_mappings(maps: &str) -> Option<Vec<PathBuf>> {
    let mut mapped: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| {
            let path = line.split_whitespace().nth(5)?;
            path.starts_with('/')
                .then(|| PathBuf::from(path.trim_end_matches(" (deleted)")))
        })
        .collect();
    mapped.sort();
    mapped.dedup();
    let named = |name: &str| {
        mapped
            .iter()
            .find(|p| p.file_name().is_some_and(|f| f == name))
    };
    let torch_cpu = named("libtorch_cpu.so")?.clone();
    named("libc10.so")?;
    let lib_dir = torch_cpu.parent()?.to_owned();
    let prefix = if lib_dir.ends_with("torch/lib") {
        lib_dir.parent().and_then(Path::parent).map(Path::to_owned)
    } else {
        None
    };
    Some(
        mapped
            .into_iter()
            .filter(|p| {
                p.parent() == Some(lib_dir.as_path())
                    || prefix
                        .as_deref()
                        .is_some_and(|prefix| p.starts_with(prefix))
            })
            .collect(),
    )
}

/// The wheel-relative name of a mapped library (`torch/lib/libc10.so`), or its file name.
pub(super) fn library_name(path: &Path, libtorch_cpu: &Path) -> String {
    let prefix = libtorch_cpu
        .parent()
        .filter(|dir| dir.ends_with("torch/lib"))
        .and_then(Path::parent)
        .and_then(Path::parent);
    if let Some(relative) = prefix.and_then(|prefix| path.strip_prefix(prefix).ok()) {
        return relative.to_string_lossy().into_owned();
    }
    path.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parsing_finds_the_libtorch_prefix() {
        let maps = "\
7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f01-7f02 r-xp 00000000 08:01 2 /cache/lt/torch/lib/libtorch_cpu.so
7f02-7f03 r--p 00000000 08:01 3 /cache/lt/torch/lib/libc10.so
7f03-7f04 r--p 00000000 08:01 4 /cache/lt/torch/lib/libgomp-a34b3233.so.1
7f04-7f05 r--p 00000000 08:01 5 /cache/lt/nvidia/cu13/lib/libcudart.so.13
7f05-7f06 rw-p 00000000 00:00 0 [heap]
";
        let found = libtorch_mappings(maps).expect("both mapped");
        assert_eq!(found.len(), 4);
        let cpu = PathBuf::from("/cache/lt/torch/lib/libtorch_cpu.so");
        let names: Vec<String> = found.iter().map(|p| library_name(p, &cpu)).collect();
        assert!(names.contains(&"torch/lib/libc10.so".to_owned()));
        assert!(names.contains(&"nvidia/cu13/lib/libcudart.so.13".to_owned()));
        assert_eq!(
            libtorch_mappings("7f01-7f02 r-xp 0 08:01 2 /x/torch/lib/libtorch_cpu.so\n"),
            None
        );
    }
}
