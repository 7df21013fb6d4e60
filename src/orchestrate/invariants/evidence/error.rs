//! Why writing or verifying an artifact failed.

use crate::core::canonical::CanonicalError;
use crate::core::digest::Digest;
use crate::durable::DurableError;

/// Why writing or verifying an artifact failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// Reading or listing a file failed.
    #[error("{file}: {source}")]
    Io {
        /// The file concerned.
        file: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A record is not canonical JSON of its schema and version.
    #[error("{file}: {source}")]
    Record {
        /// The file concerned.
        file: String,
        /// Why it was refused.
        source: CanonicalError,
    },
    /// The manifest lists a file the directory lacks.
    #[error("{file}: listed in the manifest but missing")]
    Missing {
        /// The file concerned.
        file: String,
    },
    /// The directory holds a file the manifest does not list.
    #[error("{file}: present but not listed in the manifest")]
    Unlisted {
        /// The file concerned.
        file: String,
    },
    /// An entry of the directory is not a regular file.
    #[error("{file}: not a plain file (the artifact is a flat directory of files)")]
    NotAFile {
        /// The file concerned.
        file: String,
    },
    /// A file's bytes do not have the digest the manifest lists.
    #[error("{file}: sha256 is {found}, the manifest says {expected}")]
    DigestMismatch {
        /// The file concerned.
        file: String,
        /// The digest the manifest lists.
        expected: Digest,
        /// The digest of the file's bytes.
        found: Digest,
    },
    /// Records disagree with each other or with the registry (a count, a digest, a
    /// verdict that does not follow from its observation).
    #[error("{file}: {reason}")]
    Inconsistent {
        /// The file concerned.
        file: String,
        /// What disagrees.
        reason: String,
    },
    /// The artifact directory to write already exists.
    #[error("{0}: the artifact directory already exists; choose a new one")]
    Exists(String),
    /// A durable write of a file failed.
    #[error("{file}: {source}")]
    Durable {
        /// The file concerned.
        file: String,
        /// The underlying error.
        source: DurableError,
    },
    /// The JUnit report could not be serialised.
    #[error("junit.xml: cannot serialise the report: {0}")]
    Junit(String),
}

pub(super) fn inconsistent(file: &str, reason: impl Into<String>) -> EvidenceError {
    EvidenceError::Inconsistent {
        file: file.to_owned(),
        reason: reason.into(),
    }
}
