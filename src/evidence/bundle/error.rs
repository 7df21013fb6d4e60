//! Why a bundle was not installed or did not verify: one variant per reason.
use std::path::{Path, PathBuf};

use crate::core::canonical::CanonicalError;
use crate::core::digest::Digest;
use crate::durable::DurableError;

use super::read;

/// Why a bundle was not installed or did not verify.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle path is not a directory (a symlink is refused too); or, when installing,
    /// something other than a directory is in the way.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// `audit.json`, installed last, is missing: the install did not finish.
    #[error("the bundle is incomplete: audit.json (its commit marker) is missing")]
    Incomplete,
    /// A member other than `audit.json` is missing.
    #[error("{name} is missing from the bundle")]
    MissingFile {
        /// The member's file name.
        name: String,
    },
    /// The directory holds a name that is not in [`BUNDLE_FILES`](super::BUNDLE_FILES).
    #[error("{name} does not belong in a bundle")]
    UnexpectedFile {
        /// The name found.
        name: String,
    },
    /// A member is a symlink.
    #[error("{name} is a symlink; bundle files are read without following symlinks")]
    Symlink {
        /// The member's file name.
        name: String,
    },
    /// A member has another hard link besides its name in the bundle (`st_nlink > 1`):
    /// it is not exclusively the bundle's own file, and its bytes can be changed through
    /// a name outside the bundle.
    #[error("{name} has {links} hard links; a bundle file must be linked only by its name in the bundle")]
    SharedFile {
        /// The member's file name.
        name: String,
        /// Its link count.
        links: u64,
    },
    /// A member is a directory, FIFO, device or socket.
    #[error("{name} is not a regular file (directories, FIFOs, devices and sockets are refused)")]
    NotRegularFile {
        /// The member's file name.
        name: String,
    },
    /// The name names another file-system object (device or inode) than the file opened,
    /// before the open or after the read.
    #[error("{name} was replaced while it was verified: its {field} differs between the directory entry and the opened file")]
    Replaced {
        /// The member's file name.
        name: String,
        /// The first identity field that differs.
        field: read::IdentityField,
    },
    /// The member's size or modification time changed while it was verified, or the bytes
    /// read are not its size.
    #[error("{name} changed while it was verified: its {field} differs before and after the read")]
    ChangedWhileRead {
        /// The member's file name.
        name: String,
        /// The first identity field that differs.
        field: read::IdentityField,
    },
    /// A member is larger than its record's cap.
    #[error("{name} holds {bytes} bytes, above the cap of {cap}")]
    TooLarge {
        /// The member's file name.
        name: String,
        /// Its size, in bytes.
        bytes: u64,
        /// The cap of its record, in bytes.
        cap: u64,
    },
    /// A member decodes, but its bytes are not the record's canonical (RFC 8785) encoding.
    #[error(
        "{name} is not canonical JSON (RFC 8785): equivalent JSON in another byte form is refused"
    )]
    NonCanonical {
        /// The member's file name.
        name: String,
    },
    /// A member is not a valid record of its closed schema and version.
    #[error("{name} does not decode under its schema: {source}")]
    Malformed {
        /// The member's file name.
        name: String,
        /// Why it does not decode.
        source: CanonicalError,
    },
    /// `audit.json`'s `self_sha256` is not the digest of its own body (see
    /// [`audit_self_digest`](super::audit_self_digest)).
    #[error("audit.json does not match its own digest (expected {expected}, computed {actual})")]
    SelfDigestMismatch {
        /// The digest the audit states.
        expected: Digest,
        /// The digest computed from it.
        actual: Digest,
    },
    /// A member's SHA-256 is not the one another member binds it to.
    #[error("{bound_by} binds {name} to {expected}, but the file's SHA-256 is {actual}")]
    BindingMismatch {
        /// The member that states the binding.
        bound_by: String,
        /// The member bound.
        name: String,
        /// The SHA-256 the binding states.
        expected: Digest,
        /// The SHA-256 of the member's bytes.
        actual: Digest,
    },
    /// A claim does not follow from the facts recorded beside it; the message names the
    /// claim, and the file and field it is in.
    #[error("inconsistent claim: {0}")]
    Inconsistent(String),
    /// A recorded dataset digest is not the pinned payload's: an evaluation's test images
    /// or labels, or the audit's list of dataset payloads.
    #[error("{name} {field} is {recorded}, not the pinned payload digest {pinned}")]
    UnpinnedDataset {
        /// The member's file name.
        name: &'static str,
        /// The field (and, for a list, the index) recorded.
        field: String,
        /// What the member records.
        recorded: String,
        /// What the pins give.
        pinned: String,
    },
    /// An evaluation's size is not the one the pinned test split and the model give: its
    /// `total` (the split's image count) or its logit probe's shape.
    #[error(
        "{name} {field} is {recorded}, but the pinned test split and the model give {expected}"
    )]
    EvaluationSize {
        /// The member's file name.
        name: &'static str,
        /// The field.
        field: &'static str,
        /// What the member records.
        recorded: u64,
        /// What it must be.
        expected: u64,
    },
    /// The two evaluations are of one state (equal logical state roots and ledger
    /// digests) on one pinned test split, yet record different figures: evaluation is a
    /// function of the state and the split, so they must be equal in every field.
    #[error("reference-evaluation.json and recovered-evaluation.json evaluate one state on one test split, but their {field} differ ({reference} and {recovered})")]
    EvaluationsDisagree {
        /// The field that differs.
        field: &'static str,
        /// The reference's value (a probe is shown by its SHA-256).
        reference: String,
        /// The recovered evaluation's value.
        recovered: String,
    },
    /// The checkpoint an evaluation names, loaded from the run's store, is not the state
    /// the evaluation records.
    #[error("{name} records {field} {recorded} for generation {generation} of {store}, but that generation loads with {loaded}")]
    StoreStateMismatch {
        /// The member's file name.
        name: &'static str,
        /// The store's name in the run directory.
        store: &'static str,
        /// The generation loaded.
        generation: u64,
        /// The field that differs (`logical_state_root` or `ledger_digest`).
        field: &'static str,
        /// The digest recorded, hex.
        recorded: String,
        /// The digest of the loaded state, hex.
        loaded: String,
    },
    /// A store beside the bundle exists, but the recorded generation does not load from
    /// it (missing, or failing its verification).
    #[error("{store} is present beside the bundle, but its generation {generation} does not load: {source}")]
    StoreUnreadable {
        /// The store's name in the run directory.
        store: &'static str,
        /// The generation recorded.
        generation: u64,
        /// Why it does not load.
        source: Box<crate::store::StoreError>,
    },
    /// The recorded checkpoint, evaluated again on the pinned test split, does not give
    /// the figures the evaluation records.
    #[error(
        "{name} {field} is {recorded}, but evaluating its checkpoint again gives {reevaluated}"
    )]
    ReevaluationMismatch {
        /// The member's file name.
        name: &'static str,
        /// The field that differs.
        field: &'static str,
        /// What the member records (a probe by its SHA-256).
        recorded: String,
        /// What the re-evaluation gives.
        reevaluated: String,
    },
    /// The torch engine failed while evaluating a checkpoint again.
    #[error("evaluating {name}'s checkpoint again failed: {message}")]
    ReevaluationFailed {
        /// The member's file name.
        name: &'static str,
        /// The engine's error.
        message: String,
    },
    /// Installing: the bundle directory, or a member in it, already exists.
    #[error("{0} already exists; a bundle is never overwritten")]
    AlreadyExists(PathBuf),
    /// An I/O operation on the bundle directory or a member failed.
    #[error("I/O on {path}: {source}")]
    Io {
        /// The directory or member concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Installing: a record could not be encoded as canonical JSON.
    #[error(transparent)]
    Encode(CanonicalError),
    /// Installing: the durable writer failed in a way not mapped to another variant.
    #[error(transparent)]
    Durable(DurableError),
}

impl BundleError {
    /// A stable name for the error's kind (printed in JSON by `verify-bundle`).
    pub fn kind(&self) -> &'static str {
        match self {
            BundleError::NotADirectory(_) => "not-a-directory",
            BundleError::Incomplete => "incomplete",
            BundleError::MissingFile { .. } => "missing-file",
            BundleError::UnexpectedFile { .. } => "unexpected-file",
            BundleError::Symlink { .. } => "symlink",
            BundleError::SharedFile { .. } => "shared-file",
            BundleError::NotRegularFile { .. } => "not-regular-file",
            BundleError::Replaced { .. } => "file-replaced",
            BundleError::ChangedWhileRead { .. } => "file-changed",
            BundleError::TooLarge { .. } => "too-large",
            BundleError::NonCanonical { .. } => "non-canonical",
            BundleError::Malformed { .. } => "malformed",
            BundleError::SelfDigestMismatch { .. } => "self-digest-mismatch",
            BundleError::BindingMismatch { .. } => "binding-mismatch",
            BundleError::Inconsistent(_) => "inconsistent",
            BundleError::UnpinnedDataset { .. } => "unpinned-dataset",
            BundleError::EvaluationSize { .. } => "evaluation-size",
            BundleError::EvaluationsDisagree { .. } => "evaluations-disagree",
            BundleError::StoreStateMismatch { .. } => "store-state-mismatch",
            BundleError::StoreUnreadable { .. } => "store-unreadable",
            BundleError::ReevaluationMismatch { .. } => "reevaluation-mismatch",
            BundleError::ReevaluationFailed { .. } => "reevaluation-failed",
            BundleError::AlreadyExists(_) => "already-exists",
            BundleError::Io { .. } | BundleError::Durable(_) => "io",
            BundleError::Encode(_) => "encode",
        }
    }
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `Ok` when `condition` holds, else the claim as a [`BundleError::Inconsistent`].
pub(super) fn require(condition: bool, claim: impl FnOnce() -> String) -> Result<(), BundleError> {
    if condition {
        Ok(())
    } else {
        Err(BundleError::Inconsistent(claim()))
    }
}
