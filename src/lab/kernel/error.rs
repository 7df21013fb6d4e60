//! Why a crash test on a real kernel could not give a verdict. A failing check is a
//! result, not an error; a guest that was refused, failed or ran past its deadline is an
//! error, never a pass.
use std::path::PathBuf;

/// Why `crash-test --file-system ...` stopped.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// `--file-system` names something that is not a supported file system.
    #[error("unknown file system `{name}` (supported: model, ext4, xfs, btrfs)")]
    UnknownFileSystem {
        /// What was given.
        name: String,
    },
    /// A known file system asked of a part that does not handle it.
    #[error("the file system {name} cannot be used here: {reason}")]
    UnsupportedFileSystem {
        /// The file system.
        name: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// The setup command left something the file system cannot be made from.
    #[error("the setup left {path}, which cannot go into the file system under test: {reason}")]
    SetupUnsupported {
        /// The path, on the host.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The pinned kernel is not installed, or not as pinned.
    #[error("the pinned guest kernel {release} is not installed at {path}: {reason} (run: ci/kernel install)")]
    KernelMissing {
        /// The pinned release.
        release: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// A host tool the kernel mode needs is not installed.
    #[error("{tool} is not installed ({package}; run: ci/kernel install)")]
    ToolMissing {
        /// The program.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// The writer's program and libraries are too large to boot under emulation (a
    /// `shardlift` built with the torch feature brings libtorch, about 450 MB).
    #[error("the guest's initramfs would hold {bytes} bytes, over the cap of {limit_bytes} (a program linked against libtorch? use a torch-free build: --no-default-features; a large writer such as Python with torch: record it on the host and replay it in the guest with --replay)")]
    InitramfsTooLarge {
        /// Bytes it would hold.
        bytes: u64,
        /// The cap.
        limit_bytes: u64,
    },
    /// A host tool failed.
    #[error("{tool} failed ({outcome}): {output}")]
    ToolFailed {
        /// The program and what it was doing.
        tool: String,
        /// How it ended.
        outcome: String,
        /// The end of its output.
        output: String,
    },
    /// The guest did not power off before its deadline; QEMU was killed with its group.
    #[error("the guest did not power off within {timeout_ms} ms; QEMU was killed with its process group (console: {console})")]
    GuestTimedOut {
        /// The deadline, in milliseconds.
        timeout_ms: u64,
        /// The guest's console log.
        console: PathBuf,
    },
    /// The guest ended without reporting the writer's result.
    #[error(
        "the guest ended ({outcome}) without reporting the writer's result (console: {console})"
    )]
    GuestFailed {
        /// How QEMU ended.
        outcome: String,
        /// The guest's console log.
        console: PathBuf,
    },
    /// The writer failed inside the guest, with nothing crashed.
    #[error("the writer exited with {outcome} in the guest (it must succeed when nothing crashes); console: {console}")]
    WriterFailed {
        /// Its exit status, as the agent reported it.
        outcome: String,
        /// The guest's console log.
        console: PathBuf,
    },
    /// A part shared with the model mode failed (the output directory, the setup
    /// command, `--ack`, a check that could not run).
    #[error(transparent)]
    CrashTest(#[from] crate::lab::external::CrashTestError),
    /// The writer changed files outside the guest's file system under test.
    #[error(
        "the writer escaped the file system under test: it changed {paths} in the guest's root"
    )]
    Escape {
        /// The changed paths, in the guest (a new file's directory too).
        paths: String,
    },
    /// The block log is not in the dm-log-writes format.
    #[error("the block log is malformed: {reason}")]
    BadLog {
        /// What is wrong.
        reason: String,
    },
    /// The block log outgrew its cap.
    #[error("the block log is over its cap of {limit_bytes} bytes")]
    LogOverLimit {
        /// The cap, in bytes.
        limit_bytes: u64,
    },
    /// `crash-matrix --file-system` was given a mutant name that is no writer mutant.
    #[error("no writer mutant {name:?}; the writer mutants are: {known}")]
    UnknownMutant {
        /// What was given.
        name: String,
        /// The writer mutants' names.
        known: String,
    },
    /// `crash-matrix --file-system` was given an unknown kernel scenario.
    #[error("no kernel scenario {name:?}; the scenarios are: {known}")]
    UnknownScenario {
        /// What was given.
        name: String,
        /// The scenarios' names.
        known: String,
    },
    /// The recorded writer cannot be made into a replay script, or a script cannot be
    /// read or replayed.
    #[error("replaying the recorded writer: {0}")]
    Replay(#[from] crate::lab::kernel::replay::ReplayError),
    /// The store's writer or its expectations failed on the host.
    #[error("the store's writer or its expectations: {0}")]
    Store(#[from] crate::lab::error::LabError),
    /// I/O on the host failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl KernelError {
    /// A stable kebab-case name of the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            KernelError::UnknownFileSystem { .. } => "unknown-file-system",
            KernelError::UnsupportedFileSystem { .. } => "unsupported-file-system",
            KernelError::SetupUnsupported { .. } => "setup-unsupported",
            KernelError::KernelMissing { .. } => "kernel-missing",
            KernelError::ToolMissing { .. } => "tool-missing",
            KernelError::ToolFailed { .. } => "tool-failed",
            KernelError::InitramfsTooLarge { .. } => "initramfs-too-large",
            KernelError::GuestTimedOut { .. } => "guest-timed-out",
            KernelError::GuestFailed { .. } => "guest-failed",
            KernelError::WriterFailed { .. } => "writer-failed",
            KernelError::CrashTest(inner) => inner.kind(),
            KernelError::Escape { .. } => "escape",
            KernelError::BadLog { .. } => "bad-log",
            KernelError::LogOverLimit { .. } => "log-over-limit",
            KernelError::UnknownMutant { .. } => "unknown-mutant",
            KernelError::UnknownScenario { .. } => "unknown-scenario",
            KernelError::Replay(_) => "replay",
            KernelError::Store(_) => "store",
            KernelError::Io { .. } => "io",
        }
    }

    /// An I/O error, saying what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> KernelError {
        let context = context.into();
        move |source| KernelError::Io { context, source }
    }
}
