//! Why release evidence was not produced, or did not verify. Every verification error
//! names the emitted file it concerns.
use std::path::PathBuf;

use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::BundleError;

use crate::sshsig::SshSigError;

/// Why release evidence was not produced, did not verify, or was not reproduced.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    // ---- producing ----
    /// The checkout is not a clean one at an exact commit.
    #[error(transparent)]
    Source(#[from] shardlift::evidence::source::SourceError),
    /// A git operation failed; its message.
    #[error("git: {0}")]
    Git(String),
    /// A file release evidence binds is not in the HEAD tree.
    #[error("{path} is not in the HEAD tree; release evidence binds it")]
    NotInTree {
        /// Its path in the tree.
        path: String,
    },
    /// `ci/libtorch.lock` at HEAD disagrees with the pipeline's libtorch pins; what differs.
    #[error("ci/libtorch.lock at HEAD does not match the pipeline's libtorch pins: {0}")]
    LockMismatch(String),
    /// The shardlift binary to run is missing, not a file or could not be started.
    #[error("the shardlift binary {path}: {message}")]
    Shardlift {
        /// The binary's path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The output directory already exists.
    #[error("{path} already exists; release evidence is never written over")]
    OutExists {
        /// The output directory.
        path: PathBuf,
    },
    /// An I/O operation failed.
    #[error("I/O on {path}: {error}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// A durable write, capped read or file hash ([`shardlift::durable`]) failed.
    #[error(transparent)]
    Durable(#[from] shardlift::durable::DurableError),
    /// A child command (killer-demo or verify-bundle) failed for a barrier.
    #[error("{command} for {barrier} failed ({outcome}); its run directory {kept} is kept for inspection; last stderr lines:\n{stderr_tail}")]
    ChildFailed {
        /// The shardlift subcommand.
        command: &'static str,
        /// The barrier it ran for.
        barrier: String,
        /// How it ended.
        outcome: String,
        /// Its run directory, kept.
        kept: PathBuf,
        /// The last lines of its stderr.
        stderr_tail: String,
    },
    /// The libtorch libraries mapped into the killer-demo process could not be observed.
    #[error("could not observe the libtorch libraries the killer-demo process loaded: {0}")]
    LoadedLibraries(String),
    /// killer-demo's stdout record does not parse, or does not say `passed` for its barrier.
    #[error("killer-demo for {barrier} printed an unusable record: {message}")]
    DemoOutput {
        /// The barrier it ran for.
        barrier: String,
        /// What is wrong with the record.
        message: String,
    },
    /// HEAD, the tree or the shardlift binary changed between binding and the end of the
    /// runs; what changed.
    #[error("the checkout changed while the runs were in progress: {0}")]
    CheckoutChanged(String),
    /// An emitted file would hold a host-specific string or an absolute path.
    #[error("{name} would carry host-specific text ({what}); refusing to emit it")]
    HostLeak {
        /// The file, by its path in the evidence directory.
        name: String,
        /// The text found and where.
        what: String,
    },
    /// Signing `SHA256SUMS` failed.
    #[error("cannot sign SHA256SUMS: {0}")]
    Sign(SshSigError),
    /// An emitted record could not be encoded as canonical JSON.
    #[error("cannot encode {name}: {message}")]
    Encode {
        /// The file, by its path in the evidence directory.
        name: String,
        /// The encoder's message.
        message: String,
    },

    // ---- verifying (each names the file) ----
    /// The evidence path is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// `SHA256SUMS` is missing.
    #[error("SHA256SUMS is missing")]
    MissingSums,
    /// `SHA256SUMS` is not in the exact form it is written in (`<sha256>  <path>` lines,
    /// plain relative paths, sorted and unique, final newline).
    #[error("SHA256SUMS line {line}: {reason}")]
    MalformedSums {
        /// The line number, 1-based.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A file in the directory is not listed in `SHA256SUMS`.
    #[error("{name} is not listed in SHA256SUMS")]
    Unlisted {
        /// The emitted file, by its path in the evidence directory.
        name: String,
    },
    /// A file `SHA256SUMS` lists is missing.
    #[error("{name} is listed in SHA256SUMS but missing")]
    Missing {
        /// The emitted file, by its path in the evidence directory.
        name: String,
    },
    /// A listed file is a symlink or not a regular file.
    #[error("{name} is not a regular file (symlinks and other kinds are refused)")]
    NotRegular {
        /// The emitted file, by its path in the evidence directory.
        name: String,
    },
    /// A file's SHA-256 is not the one `SHA256SUMS` records.
    #[error("{name}: SHA-256 is {actual}, but SHA256SUMS records {expected}")]
    DigestMismatch {
        /// The emitted file, by its path in the evidence directory.
        name: String,
        /// The SHA-256 `SHA256SUMS` records.
        expected: Digest,
        /// The SHA-256 of the file's bytes.
        actual: Digest,
    },
    /// A file (listed or not) is not part of the release evidence layout.
    #[error("{name} does not belong in release evidence")]
    UnexpectedFile {
        /// The emitted file, by its path in the evidence directory.
        name: String,
    },
    /// A file the layout requires is absent.
    #[error("{name} is missing from the release evidence layout")]
    MissingExpected {
        /// The emitted file, by its path in the evidence directory.
        name: String,
    },
    /// `--allowed-signers` was given and `SHA256SUMS.sig` is missing.
    #[error("SHA256SUMS.sig is missing, but --allowed-signers requires a signature")]
    SignatureMissing,
    /// `SHA256SUMS.sig` did not verify.
    #[error("SHA256SUMS.sig rejected: {0}")]
    SignatureRejected(SshSigError),
    /// A file holds an absolute path or host-specific text.
    #[error("{name} contains an absolute path or host-specific text: {excerpt:?}")]
    PathLeak {
        /// The emitted file, by its path in the evidence directory.
        name: String,
        /// The text around it.
        excerpt: String,
    },
    /// A record does not decode under its schema.
    #[error("{name} does not decode under its schema: {message}")]
    Malformed {
        /// The emitted file, by its path in the evidence directory.
        name: String,
        /// The decoder's message.
        message: String,
    },
    /// A record's bytes are not its canonical (RFC 8785) encoding.
    #[error("{name} is not canonical JSON (RFC 8785)")]
    NonCanonical {
        /// The emitted file, by its path in the evidence directory.
        name: String,
    },
    /// A claim in a file does not follow from the facts it is derived from.
    #[error("{name}: {claim}")]
    Inconsistent {
        /// The emitted file, by its path in the evidence directory.
        name: String,
        /// The claim, and what it disagrees with.
        claim: String,
    },
    /// A bundle of the evidence does not verify.
    #[error("{name}: the bundle does not verify: {error}")]
    BundleRejected {
        /// The bundle's folder, `bundles/<barrier>`, or the member file that failed in it.
        name: String,
        /// Why it does not verify.
        error: Box<BundleError>,
    },
    /// `receipts/merged.json` does not verify under the release policy.
    #[error("receipts/merged.json does not verify under the release policy: {0}")]
    ReceiptRejected(Box<crate::receipt::verify::VerifyError>),
    /// The receipt records another commit or tree than the statement binds.
    #[error("receipts/merged.json records {field} {receipt}, but release-evidence.json binds {statement}")]
    ReceiptSource {
        /// `commit` or `tree`.
        field: &'static str,
        /// The receipt's value.
        receipt: String,
        /// The statement's value.
        statement: String,
    },

    // ---- verifying against a repository or binaries (each names the file) ----
    /// The repository does not hold the commit the statement binds.
    #[error("release-evidence.json binds commit {commit}, which the repository {} does not hold", repository.display())]
    CommitNotInRepository {
        /// The commit bound.
        commit: String,
        /// The repository given.
        repository: PathBuf,
    },
    /// The commit's tree in the repository is not the one the statement binds.
    #[error("release-evidence.json binds tree {recorded} for commit {commit}, but that commit's tree is {actual}")]
    TreeMismatch {
        /// The commit bound.
        commit: String,
        /// The tree id the statement binds.
        recorded: String,
        /// The commit's tree id in the repository.
        actual: String,
    },
    /// A runtime source the statement records does not match the blob the recorded rule
    /// selects at the commit (or is missing, or extra).
    #[error("release-evidence.json: the runtime source {path} {claim} at commit {commit}")]
    SourceMismatch {
        /// The source's path.
        path: String,
        /// The commit bound.
        commit: String,
        /// How it differs.
        claim: String,
    },
    /// A binary given to check against has another SHA-256 than the statement records.
    #[error("release-evidence.json records {binary} SHA-256 {recorded}, but {} has {actual}", path.display())]
    BinaryMismatch {
        /// `shardlift` or `pipeline`.
        binary: &'static str,
        /// The binary given.
        path: PathBuf,
        /// The SHA-256 recorded, lowercase hex.
        recorded: String,
        /// The binary's SHA-256.
        actual: Digest,
    },

    // ---- reproducing ----
    /// The evidence was recorded on another CPU kernel path than this machine's, where
    /// libtorch computes other bits, so a rerun here cannot reproduce its bundles.
    #[error("evidence recorded on CPU kernel path '{recorded}' cannot be reproduced on this machine's '{here}': libtorch picks other FP32 kernels here")]
    OtherKernelPath {
        /// The kernel path the evidence records.
        recorded: String,
        /// This machine's.
        here: String,
    },
    /// HEAD's runtime sources differ from those the evidence records, so a rerun cannot
    /// reproduce it.
    #[error("cannot reproduce evidence of {recorded} from HEAD {head}: its runtime sources differ: {}", differing.join(", "))]
    NotReproducible {
        /// The commit the evidence binds.
        recorded: String,
        /// HEAD's commit.
        head: String,
        /// The runtime sources changed, added or removed.
        differing: Vec<String>,
    },
    /// A reproduced file is missing from the rerun or the record, or differs between them.
    #[error("{name} {claim}")]
    NotReproduced {
        /// The emitted file, by its path in the evidence directory.
        name: String,
        /// How it differs.
        claim: String,
    },
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
            ReleaseError::OtherKernelPath { .. } => "other-kernel-path",
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
            | ReleaseError::BinaryMismatch { .. }
            | ReleaseError::OtherKernelPath { .. } => Some(super::pins::STATEMENT.to_owned()),
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
