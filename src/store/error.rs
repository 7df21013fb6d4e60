//! Every way the store can refuse or fail, one typed variant per reason.
use std::path::PathBuf;

use crate::core::digest::Digest;
use crate::core::logical::LogicalStateError;
use crate::core::topology::TopologyError;
use crate::durable::fs::EntryKind;
use crate::store::rejection::RejectionKind;

/// Why a store operation failed. Each variant names the file it concerns where there is one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store root does not exist or is not a directory (a symlink is never followed).
    #[error("store directory {}: {}", path.display(), explain_store_root(*found))]
    NoStore {
        /// The file or directory concerned.
        path: PathBuf,
        /// What is at that path instead of a directory (`None`: nothing).
        found: Option<EntryKind>,
    },
    /// An I/O operation on a file or directory failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An fsync failed; the generation being published is aborted, never retried.
    #[error("fsync of {} failed; generation {generation} is aborted: {source}", path.display())]
    FsyncFailed {
        /// The file or directory whose fsync failed.
        path: PathBuf,
        /// The generation that is aborted.
        generation: u64,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A record or object path holds a symlink, directory, FIFO, socket or device where a
    /// regular file belongs: never followed, never opened in a way that waits.
    #[error("{}: not a regular file (a symlink is never followed, a special file never read)", path.display())]
    NotRegularFile {
        /// The entry concerned.
        path: PathBuf,
    },
    /// A record file is larger than its cap.
    #[error("{}: more than the cap of {cap} bytes", path.display())]
    TooLarge {
        /// The file or directory concerned.
        path: PathBuf,
        /// The cap, in bytes.
        cap: u64,
    },
    /// A record file is not a valid record of its schema.
    #[error("{}: not a valid {schema} record: {message}", path.display())]
    Undecodable {
        /// The file or directory concerned.
        path: PathBuf,
        /// The record's schema id.
        schema: &'static str,
        /// The underlying message.
        message: String,
    },
    /// A record names another schema.
    #[error("{}: schema id {found:?}, expected {expected:?}", path.display())]
    WrongSchema {
        /// The file or directory concerned.
        path: PathBuf,
        /// The schema id expected.
        expected: &'static str,
        /// The schema id found.
        found: String,
    },
    /// A record has a schema version this build does not read.
    #[error("{}: schema version {found}, this build reads version {expected}", path.display())]
    UnsupportedVersion {
        /// The file or directory concerned.
        path: PathBuf,
        /// The one version this build reads.
        expected: u32,
        /// The version found, as text.
        found: String,
    },
    /// A record's bytes are not its canonical (RFC 8785) encoding.
    #[error("{}: bytes are not the canonical (RFC 8785) encoding of the record", path.display())]
    NotCanonical {
        /// The file or directory concerned.
        path: PathBuf,
    },
    /// An object a record references is missing.
    #[error("{}: referenced object {digest} is missing", path.display())]
    MissingObject {
        /// Where the object should be.
        path: PathBuf,
        /// The object's digest.
        digest: Digest,
    },
    /// An object's content digest is not its address.
    #[error("{}: content digest {actual} does not match its address {expected}", path.display())]
    DigestMismatch {
        /// The file or directory concerned.
        path: PathBuf,
        /// The digest the object is addressed by.
        expected: Digest,
        /// The digest of its content.
        actual: Digest,
    },
    /// A commit record's file name and content name different generations.
    #[error("{}: file name says generation {named}, the record says {recorded}", path.display())]
    GenerationNameMismatch {
        /// The commit record.
        path: PathBuf,
        /// The generation in the file name.
        named: u64,
        /// The generation in the record.
        recorded: u64,
    },
    /// A commit record disagrees with its manifest.
    #[error("{}: {what} in the commit record does not match its manifest", path.display())]
    BindingMismatch {
        /// The commit record.
        path: PathBuf,
        /// The field that disagrees.
        what: &'static str,
    },
    /// A manifest is malformed.
    #[error("{}: manifest is malformed: {reason}", path.display())]
    MalformedManifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A manifest's ownership map is not the map for its worker count.
    #[error("{}: ownership map is not the map for {workers} workers", path.display())]
    OwnershipMismatch {
        /// The manifest.
        path: PathBuf,
        /// The worker count the manifest records.
        workers: u32,
    },
    /// A chunk object's size is not the one its manifest records.
    #[error("{}: chunk {id} object holds {found} bytes, the manifest says {expected}", path.display())]
    ChunkSize {
        /// The manifest that records the chunk.
        path: PathBuf,
        /// The chunk's id.
        id: u32,
        /// The size the manifest records, in bytes.
        expected: u64,
        /// The object's size, in bytes.
        found: u64,
    },
    /// A synthetic state was asked for with impossible sizes.
    #[error("synthetic objects of {object_bytes} bytes for {total_bytes} bytes in all: objects must hold 1 to one chunk slot's bytes and the total must be positive")]
    InvalidSynthetic {
        /// The requested object size.
        object_bytes: u32,
        /// The requested total.
        total_bytes: u64,
    },
    /// A synthetic object's size is not the one its manifest records.
    #[error("{}: synthetic object {index} holds {found} bytes, the manifest says {expected}", path.display())]
    SyntheticObjectSize {
        /// The manifest that records the object.
        path: PathBuf,
        /// The object's position in the manifest's synthetic objects.
        index: u64,
        /// The size the manifest records, in bytes.
        expected: u64,
        /// The object's size, in bytes (at most one more than expected is read).
        found: u64,
    },
    /// The state loaded from the store is malformed.
    #[error("{}: the stored state is malformed: {source}", path.display())]
    MalformedState {
        /// The manifest the state was loaded from.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: LogicalStateError,
    },
    /// The logical-state root recomputed from the loaded chunks is not the recorded one.
    #[error("{}: logical-state root {actual} differs from the recorded {expected}", path.display())]
    RootMismatch {
        /// The manifest the state was loaded from.
        path: PathBuf,
        /// The recorded root.
        expected: Digest,
        /// The recomputed root.
        actual: Digest,
    },
    /// The topology is invalid.
    #[error("invalid topology: {0}")]
    InvalidTopology(#[from] TopologyError),
    /// The generation asked for has no commit record.
    #[error("generation {generation} has no commit record ({})", path.display())]
    GenerationNotFound {
        /// Where its commit record would be.
        path: PathBuf,
        /// The generation concerned.
        generation: u64,
    },
    /// The generation already has a commit record (records are never replaced).
    #[error("generation {generation} is already taken ({}); commit records are never replaced", path.display())]
    GenerationTaken {
        /// The existing commit record.
        path: PathBuf,
        /// The generation that is taken.
        generation: u64,
    },
    /// The next generation number would overflow.
    #[error("the generation counter would overflow")]
    GenerationOverflow,
    /// The publisher was stopped at a barrier (the crash harness's pause).
    #[error("the publisher was stopped at barrier {barrier}: {reason}")]
    Stopped {
        /// The barrier.
        barrier: crate::core::barrier::Barrier,
        /// Why it stopped.
        reason: String,
    },
    /// A state handoff file is invalid.
    #[error("{}: not a valid state handoff file: {reason}", path.display())]
    BadHandoff {
        /// The handoff file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Recovery could not read a generation's commit record or one of its objects (an
    /// I/O error, not bad content): it fails rather than answer from the generations below.
    #[error("recovery could not read generation {generation}, so it selects nothing: {source}")]
    RecoveryReadFailed {
        /// The generation whose check could not read its files.
        generation: u64,
        /// The I/O error, naming the file.
        #[source]
        source: Box<StoreError>,
    },
    /// The generation was committed (its commit record is durable), but LATEST could not be
    /// advanced to it. Recovery selects the generation all the same; only the hint is behind.
    #[error("generation {generation} is committed, but LATEST was not advanced: {source}")]
    CommittedLatestNotAdvanced {
        /// The committed generation.
        generation: u64,
        /// Why LATEST was not advanced.
        #[source]
        source: Box<StoreError>,
    },
    /// A record could not be encoded.
    #[error("cannot encode a {schema} record: {message}")]
    Encode {
        /// The record's schema id.
        schema: &'static str,
        /// The underlying message.
        message: String,
    },
}

impl StoreError {
    /// A stable kebab-case name for the variant (used in JSON reports).
    pub fn kind(&self) -> &'static str {
        if let Some(rejection) = self.rejection_kind() {
            return rejection.name();
        }
        match self {
            StoreError::NoStore { .. } => "no-store",
            StoreError::Io { .. } => "io",
            StoreError::FsyncFailed { .. } => "fsync-failed",
            StoreError::GenerationTaken { .. } => "generation-taken",
            StoreError::GenerationOverflow => "generation-overflow",
            StoreError::Stopped { .. } => "stopped",
            StoreError::BadHandoff { .. } => "bad-handoff",
            StoreError::Encode { .. } => "encode",
            StoreError::RecoveryReadFailed { .. } => "recovery-read-failed",
            StoreError::CommittedLatestNotAdvanced { .. } => "committed-latest-not-advanced",
            StoreError::InvalidSynthetic { .. } => "invalid-synthetic",
            StoreError::NotRegularFile { .. }
            | StoreError::TooLarge { .. }
            | StoreError::Undecodable { .. }
            | StoreError::WrongSchema { .. }
            | StoreError::UnsupportedVersion { .. }
            | StoreError::NotCanonical { .. }
            | StoreError::MissingObject { .. }
            | StoreError::DigestMismatch { .. }
            | StoreError::GenerationNameMismatch { .. }
            | StoreError::BindingMismatch { .. }
            | StoreError::MalformedManifest { .. }
            | StoreError::OwnershipMismatch { .. }
            | StoreError::ChunkSize { .. }
            | StoreError::SyntheticObjectSize { .. }
            | StoreError::MalformedState { .. }
            | StoreError::RootMismatch { .. }
            | StoreError::InvalidTopology(_)
            | StoreError::GenerationNotFound { .. } => {
                unreachable!("a content failure is named by its rejection kind")
            }
        }
    }

    /// The failure of stored content this is (a record or object that is missing, not a
    /// regular file, too large, undecodable, of the wrong digest, size or binding): the
    /// only failures that may make recovery reject a generation. `None` for an I/O error,
    /// a failed fsync, an aborted run or anything else that says nothing about the content.
    pub fn rejection_kind(&self) -> Option<RejectionKind> {
        Some(match self {
            StoreError::NotRegularFile { .. } => RejectionKind::NotRegularFile,
            StoreError::TooLarge { .. } => RejectionKind::TooLarge,
            StoreError::Undecodable { .. } => RejectionKind::Undecodable,
            StoreError::WrongSchema { .. } => RejectionKind::WrongSchema,
            StoreError::UnsupportedVersion { .. } => RejectionKind::UnsupportedVersion,
            StoreError::NotCanonical { .. } => RejectionKind::NotCanonical,
            StoreError::MissingObject { .. } => RejectionKind::MissingObject,
            StoreError::DigestMismatch { .. } => RejectionKind::DigestMismatch,
            StoreError::GenerationNameMismatch { .. } => RejectionKind::GenerationNameMismatch,
            StoreError::BindingMismatch { .. } => RejectionKind::BindingMismatch,
            StoreError::MalformedManifest { .. } => RejectionKind::MalformedManifest,
            StoreError::OwnershipMismatch { .. } => RejectionKind::OwnershipMismatch,
            StoreError::ChunkSize { .. } => RejectionKind::ChunkSize,
            StoreError::SyntheticObjectSize { .. } => RejectionKind::SyntheticObjectSize,
            StoreError::MalformedState { .. } => RejectionKind::MalformedState,
            StoreError::RootMismatch { .. } => RejectionKind::RootMismatch,
            StoreError::InvalidTopology(_) => RejectionKind::InvalidTopology,
            StoreError::GenerationNotFound { .. } => RejectionKind::GenerationNotFound,
            StoreError::NoStore { .. }
            | StoreError::Io { .. }
            | StoreError::FsyncFailed { .. }
            | StoreError::Stopped { .. }
            | StoreError::Encode { .. }
            | StoreError::RecoveryReadFailed { .. }
            | StoreError::CommittedLatestNotAdvanced { .. }
            | StoreError::GenerationOverflow
            | StoreError::GenerationTaken { .. }
            | StoreError::InvalidSynthetic { .. }
            | StoreError::BadHandoff { .. } => return None,
        })
    }

    /// Whether this is a failure of stored content ([`StoreError::rejection_kind`]).
    pub fn is_content_failure(&self) -> bool {
        self.rejection_kind().is_some()
    }

    /// The file the error concerns, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            StoreError::NoStore { path, .. }
            | StoreError::Io { path, .. }
            | StoreError::FsyncFailed { path, .. }
            | StoreError::NotRegularFile { path }
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
            | StoreError::SyntheticObjectSize { path, .. }
            | StoreError::MalformedState { path, .. }
            | StoreError::RootMismatch { path, .. }
            | StoreError::GenerationNotFound { path, .. }
            | StoreError::GenerationTaken { path, .. }
            | StoreError::BadHandoff { path, .. } => Some(path),
            StoreError::RecoveryReadFailed { source, .. }
            | StoreError::CommittedLatestNotAdvanced { source, .. } => source.path(),
            _ => None,
        }
    }

    /// An I/O failure on `path`; the file system's refusal of an entry that is not a
    /// regular file becomes [`StoreError::NotRegularFile`].
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if crate::durable::fs::is_not_regular_file(&source) {
            return StoreError::NotRegularFile { path: path.into() };
        }
        StoreError::Io {
            path: path.into(),
            source,
        }
    }
}

/// What is wrong with a store root that is not a directory, and what to do about it.
fn explain_store_root(found: Option<EntryKind>) -> &'static str {
    match found {
        None => "does not exist (check the path; a first publish creates it)",
        Some(EntryKind::File) => "is a file, not a store directory",
        Some(EntryKind::Other) => {
            "is a symbolic link or a special file; a store root is never followed through a \
             link (pass the directory itself)"
        }
        Some(EntryKind::Dir) => "is a directory but could not be used as a store",
    }
}
