//! Crash-testing someone else's checkpoint writer (`shardlift crash-test`): record a real
//! process tree's file-system operations with ptrace ([`recorder`]), build the crash
//! states of that trace under the one crash-state model ([`crate::lab::crash_model`]),
//! materialise each one and run the user's check command on it ([`check`]).
//!
//! Phases, each a function returning a typed value: prepare the output directory → run
//! the setup command untraced (its result is the durable starting image) → record the
//! writer (it must exit 0) → place its acknowledgements ([`ack`]) → enumerate distinct crash states → check them (bounded:
//! states, time per check, output kept) → one report, written once, complete.
//!
//! Output directory layout: `scratch/` (the writer's directory; after the run it holds
//! what the writer left), `tmp/` (the writer's TMPDIR, not modelled), `setup.log`,
//! `writer.stdout`, `writer.stderr`, `trace.json`, `states/N/` and `states/N.log` for
//! each failing state (passing ones are removed unless asked to keep them), and
//! `report.json` (canonical JSON, path-free, the same record `--json` prints).
pub mod ack;
pub mod check;
pub mod error;
pub mod recorder;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::core::digest::Digest;
use crate::durable::file::{write_file, WriteOptions};
use crate::lab::crash_model::{self as model, trace};
use crate::supervise::process::{ChildSpec, ExitOutcome, Role, SupervisedChild};

pub use crate::lab::crash_model::trace::{Trace, TraceOp};
pub use crate::lab::crash_model::{
    CrashState, FileData, ModelLimits, StateEntry, SubsetCoverage, Unread,
};
pub use ack::{AckPattern, Acknowledgement, ACKED_ENV};
pub use check::{CheckLimits, CheckOutcome, Failure, FailureClass};
pub use error::CrashTestError;
pub use recorder::{RecordLimits, FOLLOWED};

/// The persistence model, in words, as the report states it.
pub const MODEL: &str = "un-fsynced file data may be whole, lost (as last fsynced), short (cut at a 512- or 4096-byte boundary), zeroed (from the first unsynced byte or in the last 4 KiB sector) or torn (only the first unsynced writes); a create, link, mkdir, rename, unlink or rmdir is durable only once the directory holding the new entry is fsynced, before that any subset of the pending ones happened, in program order; a rename is atomic; sync makes everything durable; an entry whose parent directory is absent is lost; a file with unsynced writes or truncations is at risk even when its bytes equal the durable ones; an fsync or sync covers only the operations completed before it was entered: another thread's operation that completed while it ran stays pending";

/// Everything one crash test needs.
#[derive(Clone, Debug)]
pub struct CrashTestConfig {
    /// The `shardlift` binary (its hidden `crash-test-exec` starts the writer traced).
    pub stub_exe: PathBuf,
    /// The output directory (new or empty): `scratch/`, `states/`, logs, the trace and
    /// `report.json`.
    pub out: PathBuf,
    /// The writer's argv (run directly, no shell), in `scratch/`.
    pub writer: Vec<OsString>,
    /// Shell command run on each state (`sh -c`), with the state as its working directory.
    pub check: String,
    /// Shell command run untraced in `scratch/` first.
    pub setup: Option<String>,
    /// A regular expression: each stdout line of the writer that matches it is an
    /// acknowledgement (the writer's exit always is one).
    pub ack: Option<String>,
    /// Paths the check never reads (see [`model::Unread`]).
    pub unread: Vec<String>,
    /// Bounds of the recording phase.
    pub record: RecordLimits,
    /// Bounds of the crash-state enumeration.
    pub model: ModelLimits,
    /// Bounds of the checking phase.
    pub checks: CheckLimits,
}

/// What the writer did when nothing crashed.
#[derive(Clone, Debug, Serialize)]
pub struct WriterSummary {
    /// How the writer exited (always success in a report: a failing writer is an error).
    pub exit: ExitOutcome,
    /// System calls traced across every thread and process.
    pub syscalls: u64,
    /// Threads and processes traced.
    pub tasks: u64,
}

/// The result of one crash test (`report.json`, and stdout with `--json`).
#[derive(Clone, Debug, Serialize)]
pub struct CrashTestReport {
    /// [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// The schema's version (1).
    pub version: u32,
    /// The crash model the states were built under ([`MODEL`]), in words.
    pub model: &'static str,
    /// The system calls the recorder follows and refuses ([`recorder::FOLLOWED`]).
    pub followed_syscalls: &'static str,
    /// What the writer did.
    pub writer: WriterSummary,
    /// File-system operations in the trace.
    pub trace_operations: usize,
    /// The writer's acknowledgements in order (the exit last), each placed in the trace;
    /// every check ran with `SHARDLIFT_ACKED` = how many of them its crash follows.
    pub acknowledgements: Vec<Acknowledgement>,
    /// Digest of the trace's operations and written bytes.
    pub trace_digest: Digest,
    /// Distinct crash states of the trace.
    pub states_total: usize,
    /// Distinct crash states checked (all of them unless over `--max-states`).
    pub states: usize,
    /// Whether the subsets of pending entry operations were sampled: at some crash
    /// point more were pending than are enumerated in full, so some subsets (and the
    /// crash states only they lead to) were never built.
    pub sampled: bool,
    /// Distinct subsets of pending entry operations whose crash states were built,
    /// summed over the crash points.
    pub subsets_checked: u64,
    /// Every subset there is (2 to the number of pending entry operations, summed over
    /// the crash points); `null` when that exceeds 2^64 - 1.
    pub subsets_total: Option<u64>,
    /// Whether nothing was left out: no subset was sampled and every distinct state was
    /// checked.
    pub exhaustive: bool,
    /// States whose check exited 0.
    pub passing_states: usize,
    /// States whose check failed or timed out.
    pub failing_states: usize,
    /// Failures grouped by the last line the check printed.
    pub failure_classes: Vec<FailureClass>,
    /// Every failing state, by state index.
    pub failures: Vec<Failure>,
}

/// Schema name of [`CrashTestReport`].
pub const REPORT_SCHEMA: &str = "shardlift-crash-test-report";

/// Runs a whole crash test; `progress` receives one line per phase and check batch.
pub fn run(
    config: &CrashTestConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<CrashTestReport, CrashTestError> {
    if config.writer.is_empty() {
        return Err(CrashTestError::NoWriterCommand);
    }
    let ack_pattern = config.ack.as_deref().map(AckPattern::new).transpose()?;
    let dirs = prepare_output(&config.out)?;
    if let Some(setup) = &config.setup {
        progress("running the setup command (untraced)");
        run_setup(setup, &dirs, config.record.timeout_ms)?;
    }
    let (run, acknowledgements) = record_writer(config, &dirs, ack_pattern.as_ref(), progress)?;
    progress(&format!(
        "recorded {} operations ({} system calls, {} tasks); building crash states",
        run.trace.ops.len(),
        run.syscalls,
        run.tasks
    ));
    let model::CrashStates {
        states, subsets, ..
    } = model::crash_states(
        &run.trace,
        config.model,
        &model::Unread::new(&config.unread),
    )?;
    let checked = check::check_states(
        &run.trace,
        &states,
        &config.check,
        &dirs.states,
        config.checks,
        progress,
    )?;
    let report = CrashTestReport {
        schema: REPORT_SCHEMA,
        version: 2,
        model: MODEL,
        followed_syscalls: FOLLOWED,
        writer: WriterSummary {
            exit: run.exit,
            syscalls: run.syscalls,
            tasks: run.tasks,
        },
        trace_operations: run.trace.ops.len(),
        acknowledgements,
        trace_digest: run.trace.digest(),
        states_total: states.len(),
        states: checked.checked,
        sampled: subsets.sampled(),
        subsets_checked: subsets.enumerated,
        subsets_total: subsets.total,
        exhaustive: !subsets.sampled() && checked.checked == states.len(),
        passing_states: checked.checked - checked.failures.len(),
        failing_states: checked.failures.len(),
        failure_classes: check::classes(&checked.failures),
        failures: checked.failures,
    };
    write_report(&config.out, &report)?;
    Ok(report)
}

/// Records the writer under ptrace, refuses a run that did not succeed, places its
/// acknowledgements in the trace and writes the trace to the output directory.
fn record_writer(
    config: &CrashTestConfig,
    dirs: &OutputDirs,
    ack_pattern: Option<&AckPattern>,
    progress: &mut dyn FnMut(&str),
) -> Result<(recorder::WriterRun, Vec<Acknowledgement>), CrashTestError> {
    progress("recording the writer");
    let mut run = recorder::record(
        &recorder::WriterSetup {
            stub_exe: &config.stub_exe,
            scratch: &dirs.scratch,
            tmpdir: &dirs.tmp,
            argv: &config.writer,
            stdout_log: &config.out.join("writer.stdout"),
            stderr_log: &config.out.join("writer.stderr"),
        },
        config.record,
    )?;
    if !run.exit.success() {
        return Err(CrashTestError::WriterFailed {
            outcome: run.exit.to_string(),
            log: config.out.join("writer.stderr"),
        });
    }
    let acknowledgements = place_acknowledgements(
        &mut run.trace,
        &config.out.join("writer.stdout"),
        ack_pattern,
    )?;
    write_trace(&config.out, &run.trace)?;
    Ok((run, acknowledgements))
}

/// Writes `report.json` (canonical JSON) into `out`.
fn write_report(out: &Path, report: &CrashTestReport) -> Result<(), CrashTestError> {
    let bytes = serde_json_canonicalizer::to_vec(report).map_err(|e| CrashTestError::Io {
        context: "encoding the report".to_owned(),
        source: std::io::Error::other(e.to_string()),
    })?;
    write_file(&out.join("report.json"), &bytes, WriteOptions::REPLACEABLE).map_err(|e| {
        CrashTestError::Io {
            context: "writing report.json".to_owned(),
            source: std::io::Error::other(e.to_string()),
        }
    })?;
    Ok(())
}

/// Longest writer stdout read for acknowledgements, in bytes.
const MAX_STDOUT_BYTES: u64 = 16 << 20;

/// Reads the writer's stdout, finds its acknowledgements and places them in `trace`.
pub(crate) fn place_acknowledgements(
    trace: &mut Trace,
    stdout_log: &Path,
    pattern: Option<&AckPattern>,
) -> Result<Vec<Acknowledgement>, CrashTestError> {
    let len = std::fs::metadata(stdout_log)
        .map_err(CrashTestError::io("reading the writer's stdout"))?
        .len();
    if len > MAX_STDOUT_BYTES {
        return Err(CrashTestError::TraceOverLimits {
            what: "bytes the writer printed on stdout",
            limit: MAX_STDOUT_BYTES,
        });
    }
    let stdout =
        std::fs::read(stdout_log).map_err(CrashTestError::io("reading the writer's stdout"))?;
    let acks = ack::acknowledgements(&stdout, &trace.stdout_writes, pattern, trace.ops.len());
    trace.acknowledged_at = acks.iter().map(|a| a.after_operations).collect();
    Ok(acks)
}

struct OutputDirs {
    scratch: PathBuf,
    tmp: PathBuf,
    states: PathBuf,
    setup_log: PathBuf,
}

fn prepare_output(out: &Path) -> Result<OutputDirs, CrashTestError> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CrashTestError::OutputNotEmpty {
                    path: out.to_owned(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(out)
            .map_err(CrashTestError::io("creating the output directory"))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(CrashTestError::OutputNotADirectory {
                path: out.to_owned(),
            })
        }
        Err(e) => return Err(CrashTestError::io("reading the output directory")(e)),
    }
    let dirs = OutputDirs {
        scratch: out.join("scratch"),
        tmp: out.join("tmp"),
        states: out.join("states"),
        setup_log: out.join("setup.log"),
    };
    for dir in [&dirs.scratch, &dirs.tmp, &dirs.states] {
        std::fs::create_dir(dir).map_err(CrashTestError::io("creating the output layout"))?;
    }
    Ok(dirs)
}

fn run_setup(command: &str, dirs: &OutputDirs, timeout_ms: u64) -> Result<(), CrashTestError> {
    run_setup_in(
        Path::new("/bin/sh"),
        command,
        &dirs.scratch,
        &dirs.tmp,
        &dirs.setup_log,
        timeout_ms,
    )
}

/// Runs the setup command (`shell -c`) in `dir` with `TMPDIR=tmp`, its output in `log`,
/// killed with its process group at the deadline; anything but exit 0 is an error.
pub fn run_setup_in(
    shell: &Path,
    command: &str,
    dir: &Path,
    tmp: &Path,
    log: &Path,
    timeout_ms: u64,
) -> Result<(), CrashTestError> {
    let spec = ChildSpec::new(shell, Role::Setup, "crash-test")
        .arg("-c")
        .arg(command)
        .env("TMPDIR", tmp)
        .current_dir(dir)
        .output_to(log);
    let mut child = SupervisedChild::spawn(spec).map_err(|source| CrashTestError::SetupSpawn {
        command: command.to_owned(),
        source,
    })?;
    let outcome = match child.wait_timeout(timeout_ms) {
        Ok(Some(record)) => record.outcome.to_string(),
        Ok(None) => {
            let _ = child.signal_group(crate::supervise::process::Signal::KILL);
            let _ = child.kill_and_reap();
            format!("timed out after {timeout_ms} ms")
        }
        Err(e) => e.to_string(),
    };
    match child.exit_record() {
        Some(record) if record.outcome.success() => Ok(()),
        _ => Err(CrashTestError::SetupFailed {
            command: command.to_owned(),
            outcome,
            log: log.to_owned(),
        }),
    }
}

/// `trace.json`: the recorded operations in order (path-relative, canonical).
#[derive(Serialize)]
struct TraceFile<'a> {
    schema: &'static str,
    version: u32,
    initial: Vec<(&'a str, &'static str)>,
    operations: Vec<TraceLine<'a>>,
    /// Operations completed at each acknowledgement, in order.
    acknowledged_at: &'a [usize],
}

#[derive(Serialize)]
struct TraceLine<'a> {
    seq: usize,
    #[serde(flatten)]
    op: &'a TraceOp,
}

fn write_trace(out: &Path, trace: &Trace) -> Result<(), CrashTestError> {
    let file = TraceFile {
        schema: "shardlift-crash-test-trace",
        version: 2,
        initial: trace
            .initial
            .iter()
            .map(|(path, entry)| {
                let kind = match entry {
                    trace::InitialEntry::Dir => "dir",
                    trace::InitialEntry::File(_) => "file",
                };
                (path.as_str(), kind)
            })
            .collect(),
        operations: trace
            .ops
            .iter()
            .enumerate()
            .map(|(seq, op)| TraceLine { seq, op })
            .collect(),
        acknowledged_at: &trace.acknowledged_at,
    };
    let bytes = serde_json_canonicalizer::to_vec(&file).map_err(|e| CrashTestError::Io {
        context: "encoding trace.json".to_owned(),
        source: std::io::Error::other(e.to_string()),
    })?;
    write_file(&out.join("trace.json"), &bytes, WriteOptions::REPLACEABLE).map_err(|e| {
        CrashTestError::Io {
            context: "writing trace.json".to_owned(),
            source: std::io::Error::other(e.to_string()),
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setup shell that cannot be started is its own error, not a check's.
    #[test]
    fn setup_shell_that_cannot_start_is_setup_spawn() {
        let out = tempfile::tempdir().expect("tempdir");
        let dirs = prepare_output(&out.path().join("run")).expect("layout");
        let missing_shell = out.path().join("no-such-shell");
        let error = run_setup_in(
            &missing_shell,
            "true",
            &dirs.scratch,
            &dirs.tmp,
            &dirs.setup_log,
            5_000,
        )
        .expect_err("a missing shell cannot run the setup");
        assert_eq!(error.kind(), "setup-spawn", "{error}");
        assert!(error.to_string().contains("`true`"), "{error}");
    }
}
