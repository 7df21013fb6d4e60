//! Why a session failed.
use std::path::PathBuf;

use crate::core::topology::TopologyError;
use crate::supervise::ipc::IpcError;
use crate::supervise::process::{ExitRecord, ProcessError};

use crate::core::step::StepError;
use crate::trainer::protocol::ProtocolError;

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The worker count is not a valid topology.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The private directory for the session's socket could not be created.
    #[error("cannot prepare the socket directory {path}: {source}")]
    SocketDirectory {
        /// The directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Starting, signalling or reaping a worker failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Binding the socket or accepting a worker's connection failed.
    #[error("worker connection: {0}")]
    Accept(IpcError),
    /// Talking to a connected worker failed; `exit` says how it ended, once reaped.
    #[error("worker rank {rank}: {source}{exit}")]
    Ipc {
        /// The worker's rank.
        rank: u32,
        /// The underlying error.
        source: IpcError,
        /// The worker's exit, when the group has been reaped.
        exit: ExitNote,
    },
    /// A worker's frame is not a well-formed message.
    #[error("worker rank {rank} sent an undecodable message: {source}")]
    Protocol {
        /// The worker's rank.
        rank: u32,
        /// Why it could not be decoded.
        source: ProtocolError,
    },
    /// A worker sent a well-formed message of the wrong kind for this point of the step.
    #[error("worker rank {rank} sent {got} where {expected} was expected")]
    UnexpectedMessage {
        /// The worker's rank.
        rank: u32,
        /// The kind of message expected.
        expected: &'static str,
        /// The kind received.
        got: &'static str,
    },
    /// A worker reported that it failed.
    #[error("worker rank {rank} reported a failure: {message}")]
    WorkerFailure {
        /// The worker's rank.
        rank: u32,
        /// Its message.
        message: String,
    },
    /// A worker's reply is well-formed but inconsistent with what it was sent (wrong
    /// micro-batches, chunks or sizes, or a rank claimed from the wrong pid).
    #[error("worker rank {rank} replied inconsistently: {reason}")]
    BadReply {
        /// The worker's rank.
        rank: u32,
        /// What is inconsistent.
        reason: String,
    },
    /// A worker exited before the session finished.
    #[error("a worker exited before the session finished: {role} rank {rank:?} ({outcome})", role = .0.role, rank = .0.rank, outcome = .0.outcome)]
    WorkerExited(ExitRecord),
    /// At shutdown a worker ended other than with exit code 0.
    #[error("worker rank {rank} ended with {outcome} at shutdown", outcome = .record.outcome)]
    UncleanExit {
        /// The worker's rank (`u32::MAX` if its record has none).
        rank: u32,
        /// Its exit record.
        record: ExitRecord,
    },
    /// The step arithmetic refused the gathered gradients or the update.
    #[error(transparent)]
    Step(#[from] StepError),
}

/// How a failed worker ended, appended to IPC errors once the group is reaped.
#[derive(Debug, Default)]
pub struct ExitNote(pub Option<ExitRecord>);

impl std::fmt::Display for ExitNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(record) => write!(f, " (the worker ended with {})", record.outcome),
            None => Ok(()),
        }
    }
}
