//! Why `bench checkpoint` refused to start or failed: one variant per reason.
use std::path::PathBuf;

use crate::store::StoreError;

/// Why the checkpoint bench failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointBenchError {
    /// `--state-bytes` is outside the range the bench measures.
    #[error("--state-bytes {requested} is out of range: the bench measures {min} to {max} bytes")]
    StateBytesOutOfRange {
        /// What was asked.
        requested: u64,
        /// The smallest state (it must hold the model's three chunk objects and more).
        min: u64,
        /// The largest state (the bench holds it in memory twice, the peers twice more).
        max: u64,
    },
    /// `--repetitions` is outside the range the bench runs.
    #[error("--repetitions {requested} is out of range: 1 to {max}")]
    RepetitionsOutOfRange {
        /// What was asked.
        requested: u32,
        /// The most repetitions.
        max: u32,
    },
    /// `--dir` is not an existing directory.
    #[error("--dir {path} is not a directory")]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The file system under the work directory has too little free space.
    #[error("{dir} has {available_bytes} bytes free; the bench needs {needed_bytes}")]
    InsufficientSpace {
        /// The directory the bench would write under.
        dir: PathBuf,
        /// What the bench needs at its peak.
        needed_bytes: u64,
        /// What is free.
        available_bytes: u64,
    },
    /// The hash-locked Python torch the peers run in was not found.
    #[error(
        "the PyTorch peers need the hash-locked Python torch ({reason}): pass --torchrun \
         \"$(ci/python-torch)\" (or set SHARDLIFT_TORCHRUN), or --without-python-peers to \
         measure the disk and ShardLift only"
    )]
    PythonTorchMissing {
        /// What was looked for and not found.
        reason: String,
    },
    /// The Python peer process failed, answered out of protocol or did not answer in time.
    #[error("the Python peer ({op}): {message}")]
    Peer {
        /// The request it was answering.
        op: String,
        /// What went wrong.
        message: String,
    },
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store did not verify after the bench published it.
    #[error("the bench store did not verify: {0}")]
    NotVerified(String),
    /// I/O on the bench's scratch files failed.
    #[error("{context}: {source}")]
    Io {
        /// What the bench was doing.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Asked to stop (Ctrl-C, SIGTERM) between two phases; the scratch is removed.
    #[error("interrupted by signal {signal}")]
    Interrupted {
        /// The signal.
        signal: i32,
    },
}

impl CheckpointBenchError {
    /// A stable name for the error's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            CheckpointBenchError::StateBytesOutOfRange { .. } => "state-bytes-out-of-range",
            CheckpointBenchError::RepetitionsOutOfRange { .. } => "repetitions-out-of-range",
            CheckpointBenchError::NotADirectory { .. } => "not-a-directory",
            CheckpointBenchError::InsufficientSpace { .. } => "insufficient-space",
            CheckpointBenchError::PythonTorchMissing { .. } => "python-torch-missing",
            CheckpointBenchError::Peer { .. } => "peer",
            CheckpointBenchError::Store(_) => "store",
            CheckpointBenchError::NotVerified(_) => "not-verified",
            CheckpointBenchError::Io { .. } => "io",
            CheckpointBenchError::Interrupted { .. } => "interrupted",
        }
    }
}

/// Wraps an I/O error with what the bench was doing.
pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> CheckpointBenchError {
    let context = context.into();
    move |source| CheckpointBenchError::Io { context, source }
}

/// Stops between phases when this process was asked to.
pub fn stop_if_interrupted() -> Result<(), CheckpointBenchError> {
    match crate::core::interrupt::requested() {
        Some(signal) => Err(CheckpointBenchError::Interrupted { signal }),
        None => Ok(()),
    }
}
