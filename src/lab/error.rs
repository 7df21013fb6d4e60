//! Why a crash-lab run failed: the store's own errors, plus what can go wrong with the
//! children the lab drives (a publisher that breaks the line protocol, a recovery child
//! that fails) and with the scratch files it builds. One variant per reason.
use crate::store::StoreError;
use crate::supervise::process::ProcessError;

/// Why a harness, matrix or bench step failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A store operation the lab ran itself failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Starting, signalling or reaping a child failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A child broke the line protocol (an unknown, malformed or out-of-order line).
    #[error("child protocol violation: {0}")]
    ChildProtocol(String),
    /// A child exited unsuccessfully where it should have succeeded.
    #[error("child process failed: {0}")]
    ChildFailed(String),
    /// The publisher finished without reaching the barrier a kill was aimed at.
    #[error("the publisher finished without reaching barrier {barrier} (occurrence {occurrence})")]
    TargetNotReached {
        /// The barrier.
        barrier: crate::core::barrier::Barrier,
        /// Which occurrence of it (1-based).
        occurrence: u32,
    },
    /// This process was asked to stop (Ctrl-C, SIGTERM) between two phases of long work;
    /// the scratch directories are removed as the error unwinds.
    #[error("interrupted by signal {signal}")]
    Interrupted {
        /// The signal that asked this process to stop.
        signal: i32,
    },
    /// I/O on the lab's scratch copies and directories failed.
    #[error("crash-lab scratch I/O: {0}")]
    Scratch(#[from] std::io::Error),
    /// An error with what the lab was doing when it happened.
    #[error("{context}: {source}")]
    During {
        /// What the lab was doing.
        context: String,
        /// The error.
        #[source]
        source: Box<LabError>,
    },
    /// The parent could not observe an object-store child store (list its commit records,
    /// find the next generation); a local store's failures are [`LabError::Store`].
    #[error("observing the store {store}: {message}")]
    StoreObservation {
        /// The store's location.
        store: String,
        /// What failed.
        message: String,
    },
    /// A precondition of the model or bench does not hold (e.g. the traced publish was
    /// killed, or a bench store did not verify).
    #[error("the model cannot run: {0}")]
    Model(String),
    /// The bench's directory lacks the free space its run needs (checked before anything
    /// is written).
    #[error(
        "{}: {available_bytes} bytes free, the bench needs {needed_bytes} (every copy of the \
         state it keeps until the end); choose a smaller --state-bytes or another --dir",
        dir.display()
    )]
    InsufficientSpace {
        /// The directory the bench would write under.
        dir: std::path::PathBuf,
        /// Bytes the run would write and keep.
        needed_bytes: u64,
        /// Bytes free for an unprivileged writer there.
        available_bytes: u64,
    },
}

impl LabError {
    /// A stable kebab-case name for the variant (used in JSON reports).
    pub fn kind(&self) -> &'static str {
        match self {
            LabError::Store(error) => error.kind(),
            LabError::Process(_) => "process",
            LabError::ChildProtocol(_) => "child-protocol",
            LabError::ChildFailed(_) => "child-failed",
            LabError::TargetNotReached { .. } => "target-not-reached",
            LabError::Interrupted { .. } => "interrupted",
            LabError::Scratch(_) => "io",
            LabError::During { source, .. } => source.kind(),
            LabError::StoreObservation { .. } => "store-observation",
            LabError::Model(_) => "model",
            LabError::InsufficientSpace { .. } => "insufficient-space",
        }
    }

    /// The same error, saying what the lab was doing when it happened.
    pub fn during(context: impl Into<String>) -> impl FnOnce(LabError) -> LabError {
        let context = context.into();
        move |source| LabError::During {
            context,
            source: Box::new(source),
        }
    }
}

impl From<crate::core::topology::TopologyError> for LabError {
    fn from(error: crate::core::topology::TopologyError) -> Self {
        LabError::Store(StoreError::from(error))
    }
}

/// `Err(Interrupted)` once this process has been asked to stop: long CPU- or disk-bound
/// work calls it between phases, where no child wait would notice the request.
pub fn stop_if_interrupted() -> Result<(), LabError> {
    match crate::core::interrupt::requested() {
        Some(signal) => Err(LabError::Interrupted { signal }),
        None => Ok(()),
    }
}
