//! Every way the store can refuse or fail, one typed variant per reason.
use std::path::PathBuf;

use crate::core::digest::Digest;
use crate::core::logical::LogicalStateError;
use crate::core::topology::TopologyError;

/// Why a store operation failed. Each variant names the file it concerns where there is one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store directory {} does not exist", path.display())]
    NoStore { path: PathBuf },
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("fsync of {} failed; generation {generation} is aborted: {source}", path.display())]
    FsyncFailed {
        path: PathBuf,
        generation: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: more than the cap of {cap} bytes", path.display())]
    TooLarge { path: PathBuf, cap: u64 },
    #[error("{}: not a valid {schema} record: {message}", path.display())]
    Undecodable {
        path: PathBuf,
        schema: &'static str,
        message: String,
    },
    #[error("{}: schema id {found:?}, expected {expected:?}", path.display())]
    WrongSchema {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
    #[error("{}: schema version {found}, this build reads version {expected}", path.display())]
    UnsupportedVersion {
        path: PathBuf,
        expected: u32,
        found: String,
    },
    #[error("{}: bytes are not the canonical (RFC 8785) encoding of the record", path.display())]
    NotCanonical { path: PathBuf },
    #[error("{}: referenced object {digest} is missing", path.display())]
    MissingObject { path: PathBuf, digest: Digest },
    #[error("{}: content digest {actual} does not match its address {expected}", path.display())]
    DigestMismatch {
        path: PathBuf,
        expected: Digest,
        actual: Digest,
    },
    #[error("{}: file name says generation {named}, the record says {recorded}", path.display())]
    GenerationNameMismatch {
        path: PathBuf,
        named: u64,
        recorded: u64,
    },
    #[error("{}: {what} in the commit record does not match its manifest", path.display())]
    BindingMismatch { path: PathBuf, what: &'static str },
    #[error("{}: manifest is malformed: {reason}", path.display())]
    MalformedManifest { path: PathBuf, reason: String },
    #[error("{}: ownership map is not the map for {workers} workers", path.display())]
    OwnershipMismatch { path: PathBuf, workers: u32 },
    #[error("{}: chunk {id} object holds {found} bytes, the manifest says {expected}", path.display())]
    ChunkSize {
        path: PathBuf,
        id: u32,
        expected: u64,
        found: u64,
    },
    #[error("{}: the stored state is malformed: {source}", path.display())]
    MalformedState {
        path: PathBuf,
        #[source]
        source: LogicalStateError,
    },
    #[error("{}: logical-state root {actual} differs from the recorded {expected}", path.display())]
    RootMismatch {
        path: PathBuf,
        expected: Digest,
        actual: Digest,
    },
    #[error("the state to publish is invalid: {0}")]
    InvalidState(#[from] LogicalStateError),
    #[error("invalid topology: {0}")]
    InvalidTopology(#[from] TopologyError),
    #[error("generation {generation} has no commit record ({})", path.display())]
    GenerationNotFound { path: PathBuf, generation: u64 },
    #[error("generation {generation} is already taken ({}); commit records are never replaced", path.display())]
    GenerationTaken { path: PathBuf, generation: u64 },
    #[error("the generation counter would overflow")]
    GenerationOverflow,
    #[error("the publisher was stopped at barrier {barrier}: {reason}")]
    Stopped {
        barrier: &'static str,
        reason: String,
    },
    #[error("{}: not a valid state handoff file: {reason}", path.display())]
    BadHandoff { path: PathBuf, reason: String },
    #[error("cannot encode a {schema} record: {message}")]
    Encode {
        schema: &'static str,
        message: String,
    },
}

impl StoreError {
    /// A stable kebab-case name for the variant (used in JSON reports).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NoStore { .. } => "no-store",
            StoreError::Io { .. } => "io",
            StoreError::FsyncFailed { .. } => "fsync-failed",
            StoreError::TooLarge { .. } => "too-large",
            StoreError::Undecodable { .. } => "undecodable",
            StoreError::WrongSchema { .. } => "wrong-schema",
            StoreError::UnsupportedVersion { .. } => "unsupported-version",
            StoreError::NotCanonical { .. } => "not-canonical",
            StoreError::MissingObject { .. } => "missing-object",
            StoreError::DigestMismatch { .. } => "digest-mismatch",
            StoreError::GenerationNameMismatch { .. } => "generation-name-mismatch",
            StoreError::BindingMismatch { .. } => "binding-mismatch",
            StoreError::MalformedManifest { .. } => "malformed-manifest",
            StoreError::OwnershipMismatch { .. } => "ownership-mismatch",
            StoreError::ChunkSize { .. } => "chunk-size",
            StoreError::MalformedState { .. } => "malformed-state",
            StoreError::RootMismatch { .. } => "root-mismatch",
            StoreError::InvalidState(_) => "invalid-state",
            StoreError::InvalidTopology(_) => "invalid-topology",
            StoreError::GenerationNotFound { .. } => "generation-not-found",
            StoreError::GenerationTaken { .. } => "generation-taken",
            StoreError::GenerationOverflow => "generation-overflow",
            StoreError::Stopped { .. } => "stopped",
            StoreError::BadHandoff { .. } => "bad-handoff",
            StoreError::Encode { .. } => "encode",
        }
    }

    /// The file the error concerns, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            StoreError::NoStore { path }
            | StoreError::Io { path, .. }
            | StoreError::FsyncFailed { path, .. }
            | StoreError::TooLarge { path, .. }
            | StoreError::Undecodable { path, .. }
            | StoreError::WrongSchema { path, .. }
            | StoreError::UnsupportedVersion { path, .. }
            | StoreError::NotCanonical { path }
            | StoreError::MissingObject { path, .. }
            | StoreError::DigestMismatch { path, .. }
            | StoreError::GenerationNameMismatch { path, .. }
            | StoreError::BindingMismatch { path, .. }
            | StoreError::MalformedManifest { path, .. }
            | StoreError::OwnershipMismatch { path, .. }
            | StoreError::ChunkSize { path, .. }
            | StoreError::MalformedState { path, .. }
            | StoreError::RootMismatch { path, .. }
            | StoreError::GenerationNotFound { path, .. }
            | StoreError::GenerationTaken { path, .. }
            | StoreError::BadHandoff { path, .. } => Some(path),
            _ => None,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }
}
