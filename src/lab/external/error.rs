//! Why a crash test of an external writer could not produce a verdict. One variant per
//! reason; a failing *check* is not an error but a result (exit 1 with the report).
use std::path::PathBuf;

/// Why `crash-test` stopped.
#[derive(Debug, thiserror::Error)]
pub enum CrashTestError {
    /// The output directory already holds something.
    #[error("the output directory {path} exists and is not empty (choose a new one)")]
    OutputNotEmpty {
        /// The output directory.
        path: PathBuf,
    },
    /// The output path exists and is not a directory.
    #[error("the output directory {path} is a file, not a directory (choose a new path)")]
    OutputNotADirectory {
        /// The output path.
        path: PathBuf,
    },
    /// `--ack` is not a valid regular expression.
    #[error("the --ack pattern `{pattern}` is not a valid regular expression: {reason}")]
    BadAckPattern {
        /// The pattern.
        pattern: String,
        /// Why it does not compile.
        reason: String,
    },
    /// Nothing followed `--`.
    #[error("no writer command was given (put it after `--`)")]
    NoWriterCommand,
    /// The shell for the setup command could not be started.
    #[error("the setup shell for `{command}` could not be started: {source}")]
    SetupSpawn {
        /// The setup command.
        command: String,
        /// The underlying error.
        #[source]
        source: crate::supervise::process::ProcessError,
    },
    /// The setup command exited unsuccessfully (or timed out).
    #[error("the setup command `{command}` failed ({outcome}); see {log}")]
    SetupFailed {
        /// The setup command.
        command: String,
        /// How it ended, in words.
        outcome: String,
        /// Its output log.
        log: PathBuf,
    },
    /// The writer failed with nothing crashed, so no crash state could be judged.
    #[error("the writer exited with {outcome} (it must succeed when nothing crashes); see {log}")]
    WriterFailed {
        /// How it ended, in words.
        outcome: String,
        /// Its stderr log.
        log: PathBuf,
    },
    /// The traced writer ran past the recording deadline.
    #[error(
        "the writer ran longer than {timeout_ms} ms and was killed with its whole process tree"
    )]
    WriterTimedOut {
        /// The deadline, in milliseconds.
        timeout_ms: u64,
    },
    /// The writer touched a path outside what it may write.
    #[error("the writer escaped its scratch directory: {syscall} on {path} (outside the scratch directory, /dev, /proc, its TMPDIR and its own logs); it was killed before the call ran")]
    Escape {
        /// The system call.
        syscall: &'static str,
        /// The path it named.
        path: String,
    },
    /// The writer made a call the crash model cannot account for.
    #[error("the writer used {syscall} ({detail}), which the recorder does not model; it was killed. Followed: {followed}")]
    Unmodelled {
        /// The system call.
        syscall: &'static str,
        /// What about it is not modelled (e.g. a flag).
        detail: String,
        /// The calls that are followed ([`super::FOLLOWED`]).
        followed: &'static str,
    },
    /// The trace outgrew a recording limit.
    #[error("the writer's trace is over the limits: {what} (limit {limit})")]
    TraceOverLimits {
        /// Which limit.
        what: &'static str,
        /// Its value.
        limit: u64,
    },
    /// The starting image holds a symlink or special file.
    #[error("the starting image holds {path}, which is neither a regular file nor a directory")]
    UnsupportedInitialEntry {
        /// The entry's path.
        path: String,
    },
    /// A ptrace request on the writer failed.
    #[error("ptrace failed during {during}: {source}")]
    Ptrace {
        /// What the recorder was doing.
        during: &'static str,
        /// The errno.
        #[source]
        source: nix::errno::Errno,
    },
    /// Building the crash states failed.
    #[error("crash states: {0}")]
    Model(#[from] crate::lab::crash_model::ModelError),
    /// The shell for a check could not be started.
    #[error("the check command `{command}` could not be started: {source}")]
    CheckSpawn {
        /// The check command.
        command: String,
        /// The underlying error.
        #[source]
        source: crate::supervise::process::ProcessError,
    },
    /// Waiting for a check failed; the check was killed.
    #[error(
        "waiting for the check command of state {state} failed (the check was killed): {source}"
    )]
    CheckWait {
        /// The state's index.
        state: usize,
        /// The underlying error.
        #[source]
        source: crate::supervise::process::ProcessError,
    },
    /// Recording needs x86_64 Linux (its system-call table and registers).
    #[error("crash-test is implemented for x86_64 Linux only")]
    UnsupportedArch,
    /// I/O on the output directory or the crash states failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl CrashTestError {
    /// A stable kebab-case name of the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            CrashTestError::OutputNotEmpty { .. } => "output-not-empty",
            CrashTestError::OutputNotADirectory { .. } => "output-not-a-directory",
            CrashTestError::BadAckPattern { .. } => "bad-ack-pattern",
            CrashTestError::NoWriterCommand => "no-writer-command",
            CrashTestError::SetupSpawn { .. } => "setup-spawn",
            CrashTestError::SetupFailed { .. } => "setup-failed",
            CrashTestError::WriterFailed { .. } => "writer-failed",
            CrashTestError::WriterTimedOut { .. } => "writer-timed-out",
            CrashTestError::Escape { .. } => "escape",
            CrashTestError::Unmodelled { .. } => "unmodelled-syscall",
            CrashTestError::TraceOverLimits { .. } => "trace-over-limits",
            CrashTestError::UnsupportedInitialEntry { .. } => "unsupported-initial-entry",
            CrashTestError::Ptrace { .. } => "ptrace",
            CrashTestError::Model(_) => "model",
            CrashTestError::CheckSpawn { .. } => "check-spawn",
            CrashTestError::CheckWait { .. } => "check-wait",
            CrashTestError::UnsupportedArch => "unsupported-arch",
            CrashTestError::Io { .. } => "io",
        }
    }

    /// An I/O error, saying what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> CrashTestError {
        let context = context.into();
        move |source| CrashTestError::Io { context, source }
    }
}
