//! Why a run failed.
use std::path::PathBuf;

use crate::dataset::{self};
use crate::evidence::bundle::{self};
use crate::store::StoreError;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The run directory exists already.
    #[error("the run directory {0} already exists; a run never reuses a directory (a failed run's directory is kept for inspection): choose a new one")]
    RunDirectoryExists(PathBuf),
    /// The run directory could not be created.
    #[error("cannot create the run directory {path}: {source}")]
    RunDirectory {
        /// The run directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The barrier is not one of [`DEMO_BARRIERS`](super::DEMO_BARRIERS).
    #[error("barrier {0} is not a killer-demo barrier (use commit-after-file-fsync or commit-after-rename)")]
    UnsupportedBarrier(String),
    /// The Fashion-MNIST payloads could not be loaded.
    #[error(transparent)]
    Dataset(#[from] dataset::DatasetError),
    /// The source checkout could not be bound (not clean, or not at the revision).
    #[error(transparent)]
    Source(#[from] crate::evidence::source::SourceError),
    /// A coordinator session failed.
    #[error("session {session}: {source}")]
    Session {
        /// The session's name (`genesis`, `reference`, `crash`, ...).
        session: &'static str,
        /// The underlying error.
        source: Box<crate::trainer::SessionError>,
    },
    /// A store operation failed.
    #[error("{context}: {source}")]
    Store {
        /// What the run was doing.
        context: &'static str,
        /// The underlying error.
        source: StoreError,
    },
    /// An object-store operation on the crash store failed.
    #[error("{context}: {source}")]
    ObjStore {
        /// What the run was doing.
        context: &'static str,
        /// The underlying error (boxed: it is large).
        source: Box<crate::objstore::ObjStoreError>,
    },
    /// The object-store crash store's prefix holds keys already.
    #[error("the crash store {location} is not empty ({keys} keys, the first {first_key}); a run numbers its generations from 0 and never mixes with another run's records: choose a fresh prefix")]
    CrashStoreNotEmpty {
        /// The store's location.
        location: String,
        /// The first key found (relative to the prefix).
        first_key: String,
        /// How many keys were listed.
        keys: u64,
    },
    /// A publisher or recovery child failed.
    #[error("{context}: {source}")]
    Lab {
        /// What the run was doing.
        context: &'static str,
        /// The underlying error.
        source: crate::lab::LabError,
    },
    /// Evaluating a checkpoint on the test split failed.
    #[error("evaluation: {0}")]
    Evaluation(#[from] crate::engine::EngineError),
    /// Writing or installing the evidence bundle failed.
    #[error(transparent)]
    Bundle(#[from] bundle::BundleError),
    /// A comparison the run makes did not hold (e.g. recovered ≠ reference bytes).
    #[error("the run broke an invariant: {0}")]
    Invariant(String),
}

pub(super) fn store_error(context: &'static str) -> impl FnOnce(StoreError) -> DemoError {
    move |source| DemoError::Store { context, source }
}

pub(super) fn lab_error(context: &'static str) -> impl FnOnce(crate::lab::LabError) -> DemoError {
    move |source| DemoError::Lab { context, source }
}

pub(super) fn invariant(
    condition: bool,
    message: impl FnOnce() -> String,
) -> Result<(), DemoError> {
    if condition {
        Ok(())
    } else {
        Err(DemoError::Invariant(message()))
    }
}
