//! `receipt record`: runs a lane and writes its receipt.
//!
//! The recorder never trusts a result handed to it: it runs the lane command itself,
//! reads the test IDs and outcomes from its output, and takes commit, tree, cleanliness
//! and the narrow manifest from git. The output is either libtest's human format
//! ([`super::libtest`]; a quiet `cargo test -q` names no test, so a direct `cargo test`
//! command runs without its quiet flags) or, with `--junit PATH`, the JUnit report
//! cargo-nextest writes ([`super::junit`]), whatever the console's verbosity: a stale
//! report at PATH is removed before the lane runs, and the report must agree with the
//! summary the runner printed.
//!
//! Concurrent workers never share one receipt: the recorder takes an exclusive lock file
//! `OUT.lock` (written durably, never replaced, removed when done), so a second recorder aimed at
//! the same `--out` is refused; and when the CI runner declares parallel nodes
//! (`CI_NODE_TOTAL`, `CIRCLE_NODE_TOTAL`, `BUILDKITE_PARALLEL_JOB_COUNT` above 1), the lane
//! name must end in `-<node index>` so that each worker records its own shard.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use shardlift::durable;

use super::junit::{self, JunitError};
use super::libtest::{self, LibtestError};
use super::manifest::{self, ManifestError};
use super::schema::{
    self, Counts, ExitStatus, Extension, Manifest, Outcome, Receipt, Scope, Session, Shard,
    TestEntry, TestOutcome, Toolchain,
};
use super::{write_durably, write_signature, IoError};
use crate::git::{GitError, Repo};

/// Why a lane could not be recorded, or why its recorded run failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The lane name is not 1-64 characters of `[A-Za-z0-9._-]`.
    #[error("the lane name {0:?} must be 1-64 characters of [A-Za-z0-9._-]")]
    BadLaneName(String),
    /// No lane command was given.
    #[error("no lane command given after `--`")]
    NoCommand,
    /// The scope names no tracked path.
    #[error("--fingerprint-paths names no path")]
    NoScope,
    /// Another recorder holds the lock file `OUT.lock` (its path).
    #[error("another recorder holds {0} (concurrent workers must not share one receipt)")]
    OutLocked(PathBuf),
    /// The CI runner declares parallel nodes and the lane name does not end in this
    /// node's `-<index>`.
    #[error("the runner declares {total} parallel nodes ({variable}); lane {lane:?} must end in -{index} so each worker records its own receipt")]
    SharedAcrossNodes {
        /// The variable that declares them, e.g. `CI_NODE_TOTAL`.
        variable: &'static str,
        /// How many nodes it declares.
        total: u64,
        /// This node's index, as its variable states it (empty when unset).
        index: String,
        /// The lane name.
        lane: String,
    },
    /// Reading HEAD or the working tree failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The narrow manifest could not be computed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The lane command could not be started or waited for.
    #[error("cannot run the lane command {command:?}: {message}")]
    Spawn {
        /// The command, joined with spaces.
        command: String,
        /// The I/O error's message.
        message: String,
    },
    /// The lane's libtest output was not understood.
    #[error("the lane's output was not understood: {0}")]
    Output(#[from] LibtestError),
    /// The lane's JUnit report was not understood.
    #[error("the lane's JUnit report was not understood: {0}")]
    Junit(JunitError),
    /// A JUnit report left at the `--junit` path could not be removed before the run.
    #[error("cannot remove the stale JUnit report {path} before the lane runs: {message}")]
    StaleJunit {
        /// The report path.
        path: PathBuf,
        /// The I/O error's message.
        message: String,
    },
    /// The lane ran no test.
    #[error("the lane ran no test (no libtest output or JUnit test case was seen)")]
    NoTests,
    /// Writing the receipt failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The receipt could not be encoded.
    #[error("cannot encode the receipt: {0}")]
    Encode(#[from] shardlift::core::canonical::CanonicalError),
    /// The receipt could not be signed.
    #[error(transparent)]
    Sign(#[from] super::SignError),
    /// The lane failed; its receipt was still written (and signed when asked to).
    #[error("lane {lane} failed ({status}); its receipt is at {out}")]
    LaneFailed {
        /// The lane name.
        lane: String,
        /// How its command ended, e.g. `exit code 101`.
        status: String,
        /// Where its receipt is.
        out: PathBuf,
    },
}

/// What `receipt record` is asked to do.
pub struct RecordOptions {
    /// The lane name, which becomes the shard name.
    pub lane: String,
    /// A path inside the repository's working tree.
    pub repo: PathBuf,
    /// The receipt's mode; `None`: `ci` when `CI` is set, else `local`.
    pub mode: Option<String>,
    /// The declared scope of the shard.
    pub scope: Scope,
    /// Where the receipt is written (locked through `OUT.lock` meanwhile).
    pub out: PathBuf,
    /// The OpenSSH private key to sign the receipt with, if any.
    pub sign_key: Option<PathBuf>,
    /// The JUnit report the lane writes (cargo-nextest); `None`: read libtest's output.
    pub junit: Option<PathBuf>,
    /// The lane command, argument by argument.
    pub command: Vec<String>,
}

/// Removes the lock file when dropped.
struct OutLock(PathBuf);

impl Drop for OutLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn lock_out(out: &Path) -> Result<OutLock, RecordError> {
    let mut name = out.as_os_str().to_owned();
    name.push(".lock");
    let lock = PathBuf::from(name);
    // Never replaced: a second recorder finds the lock and is refused.
    let options = durable::WriteOptions {
        replace: durable::Replace::Never,
        read_only: false,
    };
    let pid = format!("{}\n", std::process::id());
    match durable::write_file(&lock, pid.as_bytes(), options) {
        Ok(_) => Ok(OutLock(lock)),
        Err(durable::DurableError::AlreadyExists { .. }) => Err(RecordError::OutLocked(lock)),
        Err(error) => Err(IoError::from(error).into()),
    }
}

const PARALLEL_NODES: [(&str, &str); 3] = [
    ("CI_NODE_TOTAL", "CI_NODE_INDEX"),
    ("CIRCLE_NODE_TOTAL", "CIRCLE_NODE_INDEX"),
    ("BUILDKITE_PARALLEL_JOB_COUNT", "BUILDKITE_PARALLEL_JOB"),
];

fn check_runner(lane: &str) -> Result<(), RecordError> {
    for (total_var, index_var) in PARALLEL_NODES {
        let total = std::env::var(total_var)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(1);
        if total > 1 {
            let index = std::env::var(index_var).unwrap_or_default();
            if index.is_empty() || !lane.ends_with(&format!("-{index}")) {
                return Err(RecordError::SharedAcrossNodes {
                    variable: total_var,
                    total,
                    index,
                    lane: lane.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// Whether `lane` is 1-64 characters of `[A-Za-z0-9._-]`.
pub fn valid_lane_name(lane: &str) -> bool {
    (1..=64).contains(&lane.len())
        && lane
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Runs the lane and writes its receipt; a failed lane still gets its receipt, then an error.
pub fn record(options: RecordOptions) -> Result<Receipt, RecordError> {
    check_request(&options)?;
    let _lock = lock_out(&options.out)?;
    let repo = Repo::discover(&options.repo)?;
    let before = repo.head()?;
    let manifest = manifest::manifest(&repo, &before.commit, &options.scope, true)?;
    let host = Host::observe(options.mode.clone());
    let command = lane_command(&options)?;
    let lane = run_lane(&command)?;
    let after = repo.head()?;
    let parsed = match &options.junit {
        Some(report) => {
            let parsed = junit::read(report, &lane.stderr).map_err(RecordError::Junit)?;
            if parsed.tests.is_empty() {
                return Err(RecordError::NoTests);
            }
            parsed
        }
        None => {
            let parsed = libtest::parse(&lane.stdout, &lane.stderr)?;
            if parsed.tests.is_empty()
                && parsed.summary.total() == 0
                && !lane.stdout.contains("running ")
            {
                return Err(RecordError::NoTests);
            }
            parsed
        }
    };
    let dirty = !before.dirty_files.is_empty() || !after.dirty_files.is_empty();
    let shard = build_shard(
        &options,
        &command,
        &before.commit,
        dirty,
        manifest,
        &lane,
        &parsed,
    );
    let outcome = shard.outcome;
    let receipt = Receipt::assemble(Extension {
        commit: before.commit,
        tree: before.tree,
        mode: host.mode,
        toolchain: host.toolchain,
        platform: host.platform,
        tool: tool(),
        dirty,
        session: Session {
            started: lane.started.clone(),
            finished: lane.finished.clone(),
            outcome,
        },
        tests: test_table(&options.lane, &parsed),
        shards: vec![shard],
        inputs: Vec::new(),
    });
    let bytes = receipt.encode()?;
    write_durably(&options.out, &bytes)?;
    if let Some(key) = &options.sign_key {
        write_signature(&options.out, key, &bytes)?;
    }
    if outcome == Outcome::Failed {
        return Err(RecordError::LaneFailed {
            lane: options.lane,
            status: describe(&lane.status),
            out: options.out,
        });
    }
    Ok(receipt)
}

/// The command to run: a direct `cargo test` loses its quiet flags when libtest's output
/// is read (it would name no test); with a JUnit report, a stale one is removed first.
fn lane_command(options: &RecordOptions) -> Result<Vec<String>, RecordError> {
    if let Some(report) = &options.junit {
        match std::fs::remove_file(report) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(RecordError::StaleJunit {
                    path: report.clone(),
                    message: e.to_string(),
                })
            }
        }
        return Ok(options.command.clone());
    }
    match libtest::without_quiet(&options.command) {
        Some(command) => {
            eprintln!(
                "pipeline: receipt: running the lane without -q/--quiet (libtest's quiet output names no test): {}",
                command.join(" ")
            );
            Ok(command)
        }
        None => Ok(options.command.clone()),
    }
}

/// Refusals before anything runs: the lane name, the command, the scope, the runner.
fn check_request(options: &RecordOptions) -> Result<(), RecordError> {
    if !valid_lane_name(&options.lane) {
        return Err(RecordError::BadLaneName(options.lane.clone()));
    }
    if options.command.is_empty() {
        return Err(RecordError::NoCommand);
    }
    if options.scope.paths.is_empty() {
        return Err(RecordError::NoScope);
    }
    check_runner(&options.lane)
}

/// The recording host: its toolchain, platform and the run's mode.
struct Host {
    toolchain: Toolchain,
    platform: String,
    mode: String,
}

impl Host {
    fn observe(mode: Option<String>) -> Host {
        let toolchain = toolchain();
        let platform = platform();
        let mode = mode.unwrap_or_else(|| {
            if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") {
                "ci".to_owned()
            } else {
                "local".to_owned()
            }
        });
        Host {
            toolchain,
            platform,
            mode,
        }
    }
}

/// One run of the lane command.
struct LaneRun {
    started: String,
    finished: String,
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs the lane command with its output streamed to ours (the lane's log) and kept.
///
/// Why a plain `Command` and not `shardlift::supervise`'s `SupervisedChild`: a supervised
/// child gets its own process group, which takes it out of the terminal's foreground
/// group, so Ctrl-C would stop the recorder and leave a 20-minute test lane running. The
/// lane stays in our group: an interrupt reaches both, and no receipt is written.
fn run_lane(command: &[String]) -> Result<LaneRun, RecordError> {
    let Some((program, args)) = command.split_first() else {
        return Err(RecordError::NoCommand);
    };
    let spawn_error = |e: std::io::Error| RecordError::Spawn {
        command: command.join(" "),
        message: e.to_string(),
    };
    let started = schema::now_rfc3339();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    let stdout = child.stdout.take().map(|out| tee(out, false));
    let stderr = child.stderr.take().map(|err| tee(err, true));
    let status = child.wait().map_err(spawn_error)?;
    let stdout = stdout.map(join).unwrap_or_default();
    let stderr = stderr.map(join).unwrap_or_default();
    Ok(LaneRun {
        started,
        finished: schema::now_rfc3339(),
        status,
        stdout,
        stderr,
    })
}

/// Every test the lane ran, with its outcome and this shard.
fn test_table(lane: &str, parsed: &libtest::Parsed) -> BTreeMap<String, TestEntry> {
    parsed
        .tests
        .iter()
        .map(|(id, outcome)| {
            let entry = TestEntry {
                shard: lane.to_owned(),
                outcome: *outcome,
            };
            (id.clone(), entry)
        })
        .collect()
}

/// The lane's shard: what ran, at which commit, over which manifest, with what result.
fn build_shard(
    options: &RecordOptions,
    command: &[String],
    commit: &str,
    dirty: bool,
    manifest: Manifest,
    lane: &LaneRun,
    parsed: &libtest::Parsed,
) -> Shard {
    let any_failed = parsed.tests.iter().any(|(_, o)| *o == TestOutcome::Failed);
    let outcome = if lane.status.success() && !any_failed && parsed.incomplete_blocks == 0 {
        Outcome::Passed
    } else {
        Outcome::Failed
    };
    let mut counts = Counts::default();
    for (_, test_outcome) in &parsed.tests {
        counts.add(*test_outcome);
    }
    let mut test_ids: Vec<String> = parsed.tests.iter().map(|(id, _)| id.clone()).collect();
    test_ids.sort();
    Shard {
        name: options.lane.clone(),
        commit: commit.to_owned(),
        dirty,
        scope_fingerprint: options.scope.fingerprint(),
        manifest_digest: manifest.digest(),
        scope: options.scope.clone(),
        manifest,
        command: command.to_vec(),
        environment: environment(),
        started: lane.started.clone(),
        finished: lane.finished.clone(),
        exit: exit_status(&lane.status),
        outcome,
        test_ids,
        counts,
        carried: None,
    }
}

/// Copies a child stream to ours line by line while keeping it.
fn tee<R: std::io::Read + Send + 'static>(
    stream: R,
    to_stderr: bool,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept = String::new();
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if to_stderr {
                        let _ = std::io::stderr().write_all(&line);
                    } else {
                        let _ = std::io::stdout().write_all(&line);
                    }
                    kept.push_str(&String::from_utf8_lossy(&line));
                }
            }
        }
        kept
    })
}

fn join(handle: std::thread::JoinHandle<String>) -> String {
    handle.join().unwrap_or_default()
}

fn exit_status(status: &std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus {
        code: status.code(),
        signal: status.signal(),
    }
}

fn describe(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "unknown status".to_owned(),
    }
}

/// The stdout of a quick probe command (`rustc -vV`), or `None` when it cannot run or
/// fails.
fn probe(program: &str, args: &[&str]) -> Option<String> {
    let output = duct::cmd(program, args)
        .stdin_null()
        .stderr_null()
        .stdout_capture()
        .unchecked()
        .run()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn first_line(program: &str, args: &[&str]) -> Option<String> {
    probe(program, args)?
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
}

fn toolchain() -> Toolchain {
    let absent = || "absent".to_owned();
    Toolchain {
        rustc: first_line("rustc", &["--version"]).unwrap_or_else(absent),
        cargo: first_line("cargo", &["--version"]).unwrap_or_else(absent),
        nextest: first_line("cargo", &["nextest", "--version"]).unwrap_or_else(absent),
    }
}

/// The rustc host triple (`rustc -vV`), else this binary's arch and OS.
fn platform() -> String {
    let host = duct::cmd("rustc", ["-vV"])
        .stdin_null()
        .stderr_null()
        .stdout_capture()
        .unchecked()
        .run()
        .ok()
        .and_then(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        });
    host.unwrap_or_else(|| format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS))
}

/// The recording tool and its version, e.g. `pipeline 0.1.0`.
pub fn tool() -> String {
    format!("pipeline {}", env!("CARGO_PKG_VERSION"))
}

/// The variables that steer a cargo test run (values as set; nothing else is recorded).
fn environment() -> BTreeMap<String, String> {
    const NAMES: [&str; 3] = ["CI", "RUST_TEST_THREADS", "RUST_BACKTRACE"];
    const PREFIXES: [&str; 4] = [
        "SHARDLIFT_",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_",
        "RUSTFLAGS",
    ];
    std::env::vars()
        .filter(|(name, _)| {
            NAMES.contains(&name.as_str()) || PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .collect()
}
