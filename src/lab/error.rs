//! Why a crash-lab run failed: the store's own errors, plus what can go wrong with the
//! children the lab drives (a publisher that breaks the line protocol, a recovery child
//! that fails) and with the scratch files it builds. One variant per reason.
use crate::store::StoreError;
use crate::supervise::process::ProcessError;

/// Why a harness, matrix or bench step failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error("child protocol violation: {0}")]
    ChildProtocol(String),
    #[error("child process failed: {0}")]
    ChildFailed(String),
    #[error("the publisher finished without reaching barrier {barrier} (occurrence {occurrence})")]
    TargetNotReached {
        barrier: &'static str,
        occurrence: u32,
    },
    #[error("crash-lab scratch I/O: {0}")]
    Scratch(#[from] std::io::Error),
    #[error("{context}: {source}")]
    During {
        context: String,
        #[source]
        source: Box<LabError>,
    },
    #[error("the model cannot run: {0}")]
    Model(String),
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
            LabError::Scratch(_) => "io",
            LabError::During { source, .. } => source.kind(),
            LabError::Model(_) => "model",
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
