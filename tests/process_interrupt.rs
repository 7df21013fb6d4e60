//! Ctrl-C on a long command stops it: its children are stopped and reaped, its scratch
//! directories removed, what it promised to keep is kept, and it exits 130 (128 +
//! SIGINT). Each test starts the command in its own process group and sends SIGINT to
//! that group, as a terminal does to its foreground job; the children, which run in
//! process groups of their own, see nothing unless the command stops them.
mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};

const EXIT_INTERRUPTED: i32 = 130;
const STOP_BOUND: Duration = Duration::from_secs(60);

/// A running command, its stderr lines arriving on a channel.
struct Running {
    child: Child,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

/// Starts `shardlift ARGS` in its own process group, marked by `mark` in its
/// environment (children inherit it, so any survivor can be found in `/proc`).
fn start(args: &[&str], cwd: &Path, mark: &str, tmpdir: &Path) -> Running {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(common::shardlift_exe())
        .args(args)
        .current_dir(cwd)
        .env("SHARDLIFT_INTERRUPT_TEST_MARK", mark)
        .env("TMPDIR", tmpdir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shardlift");
    let stderr = child.stderr.take().expect("stderr");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    Running {
        child,
        stderr: receiver,
        seen: Vec::new(),
    }
}

impl Running {
    /// Waits (bounded) for a stderr line containing `text`.
    fn wait_for_stderr(&mut self, text: &str, bound: Duration) {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!("no stderr line with {text:?}; seen: {:#?}", self.seen);
    }

    /// Sends SIGINT to the command's process group and waits (bounded) for its exit.
    fn interrupt(mut self) -> (i32, Vec<String>) {
        let pid = i32::try_from(self.child.id()).expect("pid fits");
        let group = Pid::from_raw(pid).expect("a positive pid");
        kill_process_group(group, Signal::INT).expect("SIGINT the group");
        let deadline = Instant::now() + STOP_BOUND;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("not stopped within {STOP_BOUND:?} of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(line);
        }
        let code = status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {status:?}"));
        (code, self.seen)
    }
}

/// Processes (other than zombies of others) whose environment carries `mark`.
fn survivors(mark: &str) -> Vec<String> {
    let needle = format!("SHARDLIFT_INTERRUPT_TEST_MARK={mark}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
    {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|variable| variable == needle.as_bytes())
        {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn assert_stopped(code: i32, stderr: &[String], mark: &str) {
    assert_eq!(code, EXIT_INTERRUPTED, "exit status; stderr: {stderr:#?}");
    assert!(
        stderr.iter().any(|l| l.contains("interrupted by signal 2")),
        "says it was interrupted: {stderr:#?}"
    );
    assert!(
        !stderr.iter().any(|l| l.contains("panicked")),
        "{stderr:#?}"
    );
    assert_eq!(
        survivors(mark),
        Vec::<String>::new(),
        "processes left running"
    );
}

#[test]
fn an_interrupted_crash_test_stops_its_check_and_keeps_its_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("check-started");
    let check = format!("touch {}; exec sleep 300", started.display());
    let mark = "crash-test";
    let mut running = start(
        &[
            "crash-test",
            "--out",
            "ct",
            "--check",
            &check,
            "--json",
            "--",
            "/bin/sh",
            "-c",
            "echo 1 > state",
        ],
        dir.path(),
        mark,
        tmp.path(),
    );
    running.wait_for_stderr("crash states", Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(started.exists(), "the check never started");
    let (code, stderr) = running.interrupt();
    assert_stopped(code, &stderr, mark);
    assert!(
        dir.path().join("ct/trace.json").is_file(),
        "the trace is kept"
    );
}

#[test]
fn an_interrupted_crash_matrix_leaves_no_process_and_no_scratch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mark = "crash-matrix";
    let mut running = start(&["crash-matrix", "--json"], dir.path(), mark, tmp.path());
    running.wait_for_stderr("kills before every operation", Duration::from_secs(120));
    let (code, stderr) = running.interrupt();
    assert_stopped(code, &stderr, mark);
    assert_eq!(
        entries(tmp.path()),
        Vec::<String>::new(),
        "scratch left in TMPDIR"
    );
}

#[test]
fn an_interrupted_store_bench_removes_its_scratch_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let bench = dir.path().join("bench");
    std::fs::create_dir(&bench).expect("bench dir");
    let bench_arg = bench.to_str().expect("utf-8 path");
    let mark = "store-bench";
    let mut running = start(
        &[
            "store",
            "bench",
            "--state-bytes",
            "67108864",
            "--skip-small",
            "--dir",
            bench_arg,
            "--json",
        ],
        dir.path(),
        mark,
        tmp.path(),
    );
    running.wait_for_stderr("store bench", Duration::from_secs(60));
    let (code, stderr) = running.interrupt();
    assert_stopped(code, &stderr, mark);
    assert_eq!(entries(&bench), Vec::<String>::new(), "bench scratch left");
}

#[cfg(feature = "torch")]
#[test]
fn an_interrupted_killer_demo_keeps_its_run_directory_and_stops_every_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = common::cache_directory();
    let cache = cache.to_str().expect("utf-8 path");
    let mark = "killer-demo";
    let mut running = start(
        &[
            "killer-demo",
            "--barrier",
            "commit-after-rename",
            "--run-directory",
            "run",
            "--cache-directory",
            cache,
        ],
        dir.path(),
        mark,
        tmp.path(),
    );
    // Mid-run: the reference session's workers are live between its steps.
    running.wait_for_stderr("session reference (W4) step 2", Duration::from_secs(120));
    let (code, stderr) = running.interrupt();
    assert_stopped(code, &stderr, mark);
    assert!(dir.path().join("run").is_dir(), "the run directory is kept");
}

#[test]
fn an_interrupted_bench_checkpoint_kills_its_peer_and_removes_its_scratch_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let bench = dir.path().join("bench");
    std::fs::create_dir(&bench).expect("bench dir");
    // A forged peer that answers the handshake, then hangs in the first save with SIGINT
    // ignored: only the bench's own teardown can stop it.
    let bin = dir.path().join("venv/bin");
    std::fs::create_dir_all(&bin).expect("venv");
    let python = bin.join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\ntrap '' INT\nread line; echo '{\"ok\": true, \"torch\": \"forged\", \"safetensors\": \"forged\"}'\nread line; echo '{\"ok\": true}'\nexec sleep 600\n",
    )
    .expect("write the forged peer");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let torchrun = bin.join("torchrun");
    let mark = "bench-checkpoint";
    let mut running = start(
        &[
            "bench",
            "checkpoint",
            "--state-bytes",
            "16777216",
            "--repetitions",
            "1",
            "--dir",
            bench.to_str().expect("utf-8 path"),
            "--torchrun",
            torchrun.to_str().expect("utf-8 path"),
            "--json",
        ],
        dir.path(),
        mark,
        tmp.path(),
    );
    running.wait_for_stderr("bench checkpoint: repetition 1/1", Duration::from_secs(60));
    // The disk and ShardLift sides take well under a second on 16 MiB; then the save hangs.
    std::thread::sleep(Duration::from_secs(2));
    let (code, stderr) = running.interrupt();
    assert_stopped(code, &stderr, mark);
    assert_eq!(entries(&bench), Vec::<String>::new(), "bench scratch left");
}
