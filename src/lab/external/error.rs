//! Why a crash test of an external writer could not produce a verdict. One variant per
//! reason; a failing *check* is not an error but a result (exit 1 with the report).
use std::path::PathBuf;

/// Why `crash-test` stopped.
#[derive(Debug, thiserror::Error)]
pub enum CrashTestError {
    #[error("the output directory {path} exists and is not empty (choose a new one)")]
    OutputNotEmpty { path: PathBuf },
    #[error("no writer command was given (put it after `--`)")]
    NoWriterCommand,
    #[error("the setup shell for `{command}` could not be started: {source}")]
    SetupSpawn {
        command: String,
        #[source]
        source: crate::supervise::process::ProcessError,
    },
    #[error("the setup command `{command}` failed ({outcome}); see {log}")]
    SetupFailed {
        command: String,
        outcome: String,
        log: PathBuf,
    },
    #[error("the writer exited with {outcome} (it must succeed when nothing crashes); see {log}")]
    WriterFailed { outcome: String, log: PathBuf },
    #[error(
        "the writer ran longer than {timeout_ms} ms and was killed with its whole process tree"
    )]
    WriterTimedOut { timeout_ms: u64 },
    #[error("the writer escaped its scratch directory: {syscall} on {path} (outside the scratch directory, /dev, /proc, its TMPDIR and its own logs); it was killed before the call ran")]
    Escape { syscall: &'static str, path: String },
    #[error("the writer used {syscall} ({detail}), which the recorder does not model; it was killed. Followed: {followed}")]
    Unmodelled {
        syscall: &'static str,
        detail: String,
        followed: &'static str,
    },
    #[error("the writer's trace is over the limits: {what} (limit {limit})")]
    TraceOverLimits { what: &'static str, limit: u64 },
    #[error("the starting image holds {path}, which is neither a regular file nor a directory")]
    UnsupportedInitialEntry { path: String },
    #[error("ptrace failed during {during}: {source}")]
    Ptrace {
        during: &'static str,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("crash states: {0}")]
    Model(#[from] crate::lab::external::model::ModelError),
    #[error("the check command `{command}` could not be started: {source}")]
    CheckSpawn {
        command: String,
        #[source]
        source: crate::supervise::process::ProcessError,
    },
    #[error(
        "waiting for the check command of state {state} failed (the check was killed): {source}"
    )]
    CheckWait {
        state: usize,
        #[source]
        source: crate::supervise::process::ProcessError,
    },
    #[error("crash-test is implemented for x86_64 Linux only")]
    UnsupportedArch,
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl CrashTestError {
    /// A stable kebab-case name of the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            CrashTestError::OutputNotEmpty { .. } => "output-not-empty",
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
