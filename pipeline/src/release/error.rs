//! Why release evidence was not produced, or did not verify. Every verification error
//! names the emitted file it concerns.
use std::path::PathBuf;

use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::BundleError;

use crate::sshsig::SshSigError;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    // ---- producing ----
    #[error(transparent)]
    Source(#[from] shardlift::evidence::source::SourceError),
    #[error("git: {0}")]
    Git(String),
    #[error("{path} is not in the HEAD tree; release evidence binds it")]
    NotInTree { path: String },
    #[error("ci/libtorch.lock at HEAD does not match the pipeline's libtorch pins: {0}")]
    LockMismatch(String),
    #[error("the shardlift binary {path}: {message}")]
    Shardlift { path: PathBuf, message: String },
    #[error("{path} already exists; release evidence is never written over")]
    OutExists { path: PathBuf },
    #[error("I/O on {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A durable write, capped read or file hash ([`shardlift::durable`]) failed.
    #[error(transparent)]
    Durable(#[from] shardlift::durable::DurableError),
    #[error("{command} for {barrier} failed ({outcome}); its run directory {kept} is kept for inspection; last stderr lines:\n{stderr_tail}")]
    ChildFailed {
        command: &'static str,
        barrier: String,
        outcome: String,
        kept: PathBuf,
        stderr_tail: String,
    },
    #[error("could not observe the libtorch libraries the killer-demo process loaded: {0}")]
    LoadedLibraries(String),
    #[error("killer-demo for {barrier} printed an unusable record: {message}")]
    DemoOutput { barrier: String, message: String },
    #[error("the checkout changed while the runs were in progress: {0}")]
    CheckoutChanged(String),
    #[error("{name} would carry host-specific text ({what}); refusing to emit it")]
    HostLeak { name: String, what: String },
    #[error("cannot sign SHA256SUMS: {0}")]
    Sign(SshSigError),
    #[error("cannot encode {name}: {message}")]
    Encode { name: String, message: String },

    // ---- verifying (each names the file) ----
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("SHA256SUMS is missing")]
    MissingSums,
    #[error("SHA256SUMS line {line}: {reason}")]
    MalformedSums { line: usize, reason: String },
    #[error("{name} is not listed in SHA256SUMS")]
    Unlisted { name: String },
    #[error("{name} is listed in SHA256SUMS but missing")]
    Missing { name: String },
    #[error("{name} is not a regular file (symlinks and other kinds are refused)")]
    NotRegular { name: String },
    #[error("{name}: SHA-256 is {actual}, but SHA256SUMS records {expected}")]
    DigestMismatch {
        name: String,
        expected: Digest,
        actual: Digest,
    },
    #[error("{name} does not belong in release evidence")]
    UnexpectedFile { name: String },
    #[error("{name} is missing from the release evidence layout")]
    MissingExpected { name: String },
    #[error("SHA256SUMS.sig is missing, but --allowed-signers requires a signature")]
    SignatureMissing,
    #[error("SHA256SUMS.sig rejected: {0}")]
    SignatureRejected(SshSigError),
    #[error("{name} contains an absolute path or host-specific text: {excerpt:?}")]
    PathLeak { name: String, excerpt: String },
    #[error("{name} does not decode under its schema: {message}")]
    Malformed { name: String, message: String },
    #[error("{name} is not canonical JSON (RFC 8785)")]
    NonCanonical { name: String },
    #[error("{name}: {claim}")]
    Inconsistent { name: String, claim: String },
    #[error("{name}: the bundle does not verify: {error}")]
    BundleRejected {
        name: String,
        error: Box<BundleError>,
    },
    #[error("receipts/merged.json does not verify under the release policy: {0}")]
    ReceiptRejected(Box<crate::receipt::verify::VerifyError>),
    #[error("receipts/merged.json records {field} {receipt}, but release-evidence.json binds {statement}")]
    ReceiptSource {
        field: &'static str,
        receipt: String,
        statement: String,
    },

    // ---- verifying against a repository or binaries (each names the file) ----
    #[error("release-evidence.json binds commit {commit}, which the repository {} does not hold", repository.display())]
    CommitNotInRepository { commit: String, repository: PathBuf },
    #[error("release-evidence.json binds tree {recorded} for commit {commit}, but that commit's tree is {actual}")]
    TreeMismatch {
        commit: String,
        recorded: String,
        actual: String,
    },
    #[error("release-evidence.json: the runtime source {path} {claim} at commit {commit}")]
    SourceMismatch {
        path: String,
        commit: String,
        claim: String,
    },
    #[error("release-evidence.json records {binary} SHA-256 {recorded}, but {} has {actual}", path.display())]
    BinaryMismatch {
        binary: &'static str,
        path: PathBuf,
        recorded: String,
        actual: Digest,
    },

    // ---- reproducing ----
    #[error("cannot reproduce evidence of {recorded} from HEAD {head}: its runtime sources differ: {}", differing.join(", "))]
    NotReproducible {
        recorded: String,
        head: String,
        differing: Vec<String>,
    },
    #[error("{name} {claim}")]
    NotReproduced { name: String, claim: String },
}

impl ReleaseError {
    /// A stable name for the error's kind (printed in JSON by `verify-release`).
    pub fn kind(&self) -> &'static str {
        match self {
            ReleaseError::Source(_) => "source",
            ReleaseError::Git(_) => "git",
            ReleaseError::NotInTree { .. } => "not-in-tree",
            ReleaseError::LockMismatch(_) => "lock-mismatch",
            ReleaseError::Shardlift { .. } => "shardlift",
            ReleaseError::OutExists { .. } => "out-exists",
            ReleaseError::Io { .. } | ReleaseError::Durable(_) => "io",
            ReleaseError::ChildFailed { .. } => "child-failed",
            ReleaseError::LoadedLibraries(_) => "loaded-libraries",
            ReleaseError::DemoOutput { .. } => "demo-output",
            ReleaseError::CheckoutChanged(_) => "checkout-changed",
            ReleaseError::HostLeak { .. } => "host-leak",
            ReleaseError::Sign(_) => "sign",
            ReleaseError::Encode { .. } => "encode",
            ReleaseError::NotADirectory(_) => "not-a-directory",
            ReleaseError::MissingSums => "missing-sums",
            ReleaseError::MalformedSums { .. } => "malformed-sums",
            ReleaseError::Unlisted { .. } => "unlisted",
            ReleaseError::Missing { .. } => "missing",
            ReleaseError::NotRegular { .. } => "not-regular-file",
            ReleaseError::DigestMismatch { .. } => "digest-mismatch",
            ReleaseError::UnexpectedFile { .. } => "unexpected-file",
            ReleaseError::MissingExpected { .. } => "missing-expected",
            ReleaseError::SignatureMissing => "signature-missing",
            ReleaseError::SignatureRejected(_) => "signature-rejected",
            ReleaseError::PathLeak { .. } => "path-leak",
            ReleaseError::Malformed { .. } => "malformed",
            ReleaseError::NonCanonical { .. } => "non-canonical",
            ReleaseError::Inconsistent { .. } => "inconsistent",
            ReleaseError::BundleRejected { .. } => "bundle-rejected",
            ReleaseError::ReceiptRejected(_) => "receipt-rejected",
            ReleaseError::ReceiptSource { .. } => "receipt-source",
            ReleaseError::CommitNotInRepository { .. } => "commit-not-in-repository",
            ReleaseError::TreeMismatch { .. } => "tree-mismatch",
            ReleaseError::SourceMismatch { .. } => "source-mismatch",
            ReleaseError::BinaryMismatch { .. } => "binary-mismatch",
            ReleaseError::NotReproducible { .. } => "not-reproducible",
            ReleaseError::NotReproduced { .. } => "not-reproduced",
        }
    }

    /// The emitted file this error is about, when there is one.
    pub fn file(&self) -> Option<String> {
        match self {
            ReleaseError::MissingSums | ReleaseError::MalformedSums { .. } => {
                Some(super::pins::SHA256SUMS.to_owned())
            }
            ReleaseError::SignatureMissing | ReleaseError::SignatureRejected(_) => {
                Some(super::pins::SIGNATURE.to_owned())
            }
            ReleaseError::ReceiptRejected(_) | ReleaseError::ReceiptSource { .. } => {
                Some(super::pins::RECEIPT.to_owned())
            }
            ReleaseError::CommitNotInRepository { .. }
            | ReleaseError::TreeMismatch { .. }
            | ReleaseError::SourceMismatch { .. }
            | ReleaseError::BinaryMismatch { .. } => Some(super::pins::STATEMENT.to_owned()),
            ReleaseError::Unlisted { name }
            | ReleaseError::Missing { name }
            | ReleaseError::NotRegular { name }
            | ReleaseError::DigestMismatch { name, .. }
            | ReleaseError::UnexpectedFile { name }
            | ReleaseError::MissingExpected { name }
            | ReleaseError::PathLeak { name, .. }
            | ReleaseError::Malformed { name, .. }
            | ReleaseError::NonCanonical { name }
            | ReleaseError::Inconsistent { name, .. }
            | ReleaseError::BundleRejected { name, .. }
            | ReleaseError::NotReproduced { name, .. } => Some(name.clone()),
            _ => None,
        }
    }
}

/// `map_err` helper for I/O on a path.
pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ReleaseError + '_ {
    move |error| ReleaseError::Io {
        path: path.to_owned(),
        error,
    }
}
