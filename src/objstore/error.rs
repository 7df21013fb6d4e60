//! Every way the object-store backend can refuse or fail, one typed variant per reason.
use crate::core::digest::Digest;
use crate::store::error::StoreError;
use crate::store::rejection::RejectionKind;

/// Why an object-store operation failed. Each variant names the key it concerns where
/// there is one (`s3://bucket/prefix/…`).
#[derive(Debug, thiserror::Error)]
pub enum ObjStoreError {
    /// The location is not `s3://bucket[/prefix]`.
    #[error("{url:?} is not an s3://bucket[/prefix] location: {reason}")]
    BadLocation {
        /// The location as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The S3 client could not be configured (endpoint, region, credentials).
    #[error("cannot configure the S3 client for {location}: {message}")]
    Config {
        /// The store location.
        location: String,
        /// The client's message.
        message: String,
    },
    /// The small I/O runtime the synchronous API runs on could not start.
    #[error("cannot start the object-store I/O runtime: {source}")]
    Runtime {
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A request did not finish within the operation timeout (retries included).
    #[error("{op} {key}: no answer within {timeout_ms} ms (retries included)")]
    Timeout {
        /// The operation (`PUT`, `GET`, `LIST`, `DELETE`).
        op: &'static str,
        /// The key or prefix concerned.
        key: String,
        /// The operation timeout, in milliseconds.
        timeout_ms: u64,
    },
    /// A request failed after the bounded retries (e.g. 503 "Could not reach quorum").
    #[error("{op} {key} failed (at most {max_retries} retries): {message}")]
    Request {
        /// The operation (`PUT`, `GET`, `LIST`, `DELETE`).
        op: &'static str,
        /// The key or prefix concerned.
        key: String,
        /// The retry bound the client ran under.
        max_retries: usize,
        /// The client's message.
        message: String,
    },
    /// An object a record references (or a record LIST named) is missing.
    #[error("{key}: object is missing")]
    MissingObject {
        /// The missing key.
        key: String,
    },
    /// An object is larger than the cap for what it should be.
    #[error("{key}: {size_bytes} bytes, more than the cap of {cap_bytes} bytes")]
    TooLarge {
        /// The key concerned.
        key: String,
        /// Its size (as reported or as read so far), in bytes.
        size_bytes: u64,
        /// The cap, in bytes.
        cap_bytes: u64,
    },
    /// An object's (or a commit record's) content digest is not the one its key carries.
    #[error("{key}: content digest {actual} does not match the digest {expected} its key carries")]
    DigestMismatch {
        /// The key concerned.
        key: String,
        /// The digest the key carries.
        expected: Digest,
        /// The digest of the bytes read.
        actual: Digest,
    },
    /// A record, manifest or payload failed one of the store's checks (decode, bindings,
    /// structure, sizes, root); `source` names the key as its path.
    #[error("{key}: {source}")]
    Invalid {
        /// The key of the record or object that failed.
        key: String,
        /// The store check that failed.
        #[source]
        source: StoreError,
    },
    /// Two different valid commit records exist for the highest valid generation: two
    /// publishers raced. Recovery reports it and does not choose.
    #[error("split brain: generation {generation} has {} different valid commit records ({}); recovery does not choose between them", records.len(), records.join(", "))]
    SplitBrain {
        /// The contested generation.
        generation: u64,
        /// The keys of its valid commit records.
        records: Vec<String>,
    },
    /// No valid commit record for the generation asked for.
    #[error("generation {generation} has no valid commit record under {location}")]
    GenerationNotFound {
        /// The store location.
        location: String,
        /// The generation asked for.
        generation: u64,
    },
    /// Another writer claimed the candidate generation first (the conditional-create
    /// fence of RFC 0001 §9.8 refused this writer's claim); nothing was committed.
    #[error("generation {generation} is taken: another writer claimed it first ({key})")]
    GenerationTaken {
        /// The candidate generation.
        generation: u64,
        /// The claim key that already existed.
        key: String,
    },
    /// The next generation number would overflow.
    #[error("the generation counter would overflow")]
    GenerationOverflow,
    /// The state or topology to publish is invalid, or a record could not be encoded.
    #[error("cannot publish: {0}")]
    Publish(#[source] StoreError),
    /// The publisher was stopped at a barrier (a test harness's pause).
    #[error("the publisher was stopped at barrier {barrier}: {reason}")]
    Stopped {
        /// The barrier.
        barrier: crate::core::barrier::Barrier,
        /// Why it stopped.
        reason: String,
    },
    /// The conditional-create probe gave an answer that is neither "honoured" nor
    /// "ignored" (the first create of a fresh key was refused).
    #[error("conditional-create probe on {key}: {reason}")]
    Probe {
        /// The probe key.
        key: String,
        /// What happened.
        reason: String,
    },
}

impl ObjStoreError {
    /// A stable kebab-case name for the variant (used in JSON reports).
    pub fn kind(&self) -> &'static str {
        // A content failure is named by its rejection kind: one spelling for both stores.
        match self {
            ObjStoreError::BadLocation { .. } => "bad-location",
            ObjStoreError::Config { .. } => "config",
            ObjStoreError::Runtime { .. } => "runtime",
            ObjStoreError::Timeout { .. } => "timeout",
            ObjStoreError::Request { .. } => "request",
            ObjStoreError::MissingObject { .. } => RejectionKind::MissingObject.name(),
            ObjStoreError::TooLarge { .. } => RejectionKind::TooLarge.name(),
            ObjStoreError::DigestMismatch { .. } => RejectionKind::DigestMismatch.name(),
            ObjStoreError::Invalid { source, .. } => source.kind(),
            ObjStoreError::SplitBrain { .. } => "split-brain",
            ObjStoreError::GenerationNotFound { .. } => RejectionKind::GenerationNotFound.name(),
            ObjStoreError::GenerationTaken { .. } => "generation-taken",
            ObjStoreError::GenerationOverflow => "generation-overflow",
            ObjStoreError::Publish(_) => "publish",
            ObjStoreError::Stopped { .. } => "stopped",
            ObjStoreError::Probe { .. } => "probe",
        }
    }

    /// The failure of stored content this is, which rejects a commit record: a missing,
    /// oversized or wrongly hashed object, or a record or object that does not verify.
    /// `None` for a failed request and everything else that says nothing about the content.
    pub fn rejection_kind(&self) -> Option<RejectionKind> {
        match self {
            ObjStoreError::MissingObject { .. } => Some(RejectionKind::MissingObject),
            ObjStoreError::TooLarge { .. } => Some(RejectionKind::TooLarge),
            ObjStoreError::DigestMismatch { .. } => Some(RejectionKind::DigestMismatch),
            ObjStoreError::GenerationNotFound { .. } => Some(RejectionKind::GenerationNotFound),
            ObjStoreError::Invalid { source, .. } => source.rejection_kind(),
            ObjStoreError::BadLocation { .. }
            | ObjStoreError::Config { .. }
            | ObjStoreError::Runtime { .. }
            | ObjStoreError::Timeout { .. }
            | ObjStoreError::Request { .. }
            | ObjStoreError::SplitBrain { .. }
            | ObjStoreError::GenerationTaken { .. }
            | ObjStoreError::GenerationOverflow
            | ObjStoreError::Publish(_)
            | ObjStoreError::Stopped { .. }
            | ObjStoreError::Probe { .. } => None,
        }
    }

    /// The key the error concerns, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ObjStoreError::Timeout { key, .. }
            | ObjStoreError::Request { key, .. }
            | ObjStoreError::MissingObject { key }
            | ObjStoreError::TooLarge { key, .. }
            | ObjStoreError::DigestMismatch { key, .. }
            | ObjStoreError::Invalid { key, .. }
            | ObjStoreError::Probe { key, .. }
            | ObjStoreError::GenerationTaken { key, .. } => Some(key),
            _ => None,
        }
    }
}

impl From<crate::store::location::LocationError> for ObjStoreError {
    fn from(error: crate::store::location::LocationError) -> Self {
        ObjStoreError::BadLocation {
            url: error.url,
            reason: error.reason,
        }
    }
}
