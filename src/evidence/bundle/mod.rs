//! Evidence bundles: installing the four records of a run (`audit.json` last, as the
//! commit marker) and verifying a bundle without changing it.
//!
//! Verification runs in a fixed order and stops at the first failure, each with its own
//! error kind: the directory; completeness (`audit.json` present); missing files; extra
//! files; regular files only, each linked by its bundle name alone (no other hard link),
//! read without following symlinks and with their identity (device, inode, size,
//! modification time) revalidated across the read ([`read`]); size
//! caps; closed schema and version; canonical bytes; the audit's self digest; the SHA-256
//! bindings between files; and the consistency of every claim with the facts it is
//! derived from, the evaluation figures among them: each against what it must equal (the
//! pinned test split's payload digests and image count, the probe's shape) and, when both
//! evaluations are of one state, against the other's. [`reevaluate`] then evaluates the recorded checkpoints
//! again from the run's stores, where they are present (with the torch engine only).
pub mod read;
pub mod records;
pub mod reevaluate;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::core::canonical::{self, CanonicalError, CanonicalRecord};
use crate::core::digest::Digest;
use crate::dataset::{PinTable, Resource, FASHION_MNIST};
use crate::durable::fs::{FileSystem, RealFs};
use crate::durable::{ensure_dir_with, write_file_with, DurableError, WriteOptions};

pub use records::*;

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
    /// The directory holds a name that is not in [`BUNDLE_FILES`].
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
    /// [`audit_self_digest`]).
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

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The audit's self digest: SHA-256 of its canonical bytes with `self_sha256` zeroed.
pub fn audit_self_digest(audit: &AuditRecord) -> Result<Digest, BundleError> {
    let mut body = audit.clone();
    body.self_sha256 = Digest([0; 32]);
    Ok(Digest::of(
        &canonical::encode(&body).map_err(BundleError::Encode)?,
    ))
}

fn bound(name: &str, bytes: &[u8]) -> BoundFile {
    BoundFile {
        name: name.to_owned(),
        bytes: bytes.len() as u64,
        sha256: Digest::of(bytes),
    }
}

/// What `install` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstalledBundle {
    /// The bundle directory.
    pub directory: PathBuf,
    /// SHA-256 of the installed `audit.json`, which binds the whole bundle.
    pub audit_sha256: Digest,
}

/// Installs a bundle into `directory`, which must not exist. The bindings (evaluation
/// digests in the evidence, file digests and the self digest in the audit) are filled in
/// here. Each file goes through [`write_file_with`] (temp → fsync → rename, never
/// replacing → directory fsync), and `audit.json` goes last, so a bundle with an audit is
/// complete.
pub fn install(
    directory: &Path,
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: RecoveryEvidenceRecord,
    audit: AuditRecord,
) -> Result<InstalledBundle, BundleError> {
    let fs = RealFs;
    if directory.symlink_metadata().is_ok() {
        return Err(BundleError::AlreadyExists(directory.to_owned()));
    }
    // create_dir, not ensure_dir_with alone: a bundle directory is never reused, even one
    // created since the check above; ensure_dir_with then makes its entry durable.
    fs.create_dir(directory).map_err(io_error(directory))?;
    ensure_dir_with(&fs, directory).map_err(install_error)?;
    let files = bound_files(reference, recovered, evidence, audit)?;
    for (name, bytes) in &files {
        write_file_with(&fs, &directory.join(name), bytes, WriteOptions::IMMUTABLE)
            .map_err(install_error)?;
    }
    let [.., (_, audit_bytes)] = &files;
    Ok(InstalledBundle {
        directory: directory.to_owned(),
        audit_sha256: Digest::of(audit_bytes),
    })
}

/// The four records' canonical bytes in install order (`audit.json` last), with the
/// evidence bound to the evaluations and the audit to the other three files and itself.
fn bound_files(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    mut evidence: RecoveryEvidenceRecord,
    mut audit: AuditRecord,
) -> Result<[(&'static str, Vec<u8>); 4], BundleError> {
    let encode = |record: &dyn Fn() -> Result<Vec<u8>, CanonicalError>| {
        record().map_err(BundleError::Encode)
    };
    let reference_bytes = encode(&|| canonical::encode(reference))?;
    let recovered_bytes = encode(&|| canonical::encode(recovered))?;
    evidence.reference_evaluation_sha256 = Digest::of(&reference_bytes);
    evidence.recovered_evaluation_sha256 = Digest::of(&recovered_bytes);
    let evidence_bytes = encode(&|| canonical::encode(&evidence))?;
    audit.files = vec![
        bound(REFERENCE_EVALUATION, &reference_bytes),
        bound(RECOVERED_EVALUATION, &recovered_bytes),
        bound(RECOVERY_EVIDENCE, &evidence_bytes),
    ];
    audit.self_sha256 = audit_self_digest(&audit)?;
    let audit_bytes = encode(&|| canonical::encode(&audit))?;
    Ok([
        (REFERENCE_EVALUATION, reference_bytes),
        (RECOVERED_EVALUATION, recovered_bytes),
        (RECOVERY_EVIDENCE, evidence_bytes),
        (AUDIT, audit_bytes),
    ])
}

/// A failed durable write of the bundle, as the bundle's error.
fn install_error(error: DurableError) -> BundleError {
    match error {
        DurableError::Io { path, source } | DurableError::Fsync { path, source } => {
            BundleError::Io { path, source }
        }
        DurableError::AlreadyExists { path } => BundleError::AlreadyExists(path),
        DurableError::NotRegularFile { path } => BundleError::NotADirectory(path),
        other => BundleError::Durable(other),
    }
}

/// What a verified bundle says (printed by `verify-bundle`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BundleSummary {
    /// Always `verified`: a bundle that does not verify gives a [`BundleError`].
    pub status: &'static str,
    /// The run's verdict as the audit states it (a [`RunStatus`] name).
    pub run_status: String,
    /// What the run showed, flattened into the summary's JSON.
    #[serde(flatten)]
    pub outcome: RunOutcome,
    /// SHA-256 of `audit.json`, which binds the whole bundle.
    pub audit_sha256: Digest,
}

fn decode_member<R: CanonicalRecord>(name: &str, bytes: &[u8]) -> Result<R, BundleError> {
    canonical::decode(bytes).map_err(|source| match source {
        CanonicalError::NotCanonical { .. } => BundleError::NonCanonical {
            name: name.to_owned(),
        },
        source => BundleError::Malformed {
            name: name.to_owned(),
            source,
        },
    })
}

fn check_binding(
    bound_by: &str,
    name: &str,
    expected: Digest,
    bytes: &[u8],
) -> Result<(), BundleError> {
    let actual = Digest::of(bytes);
    if expected != actual {
        return Err(BundleError::BindingMismatch {
            bound_by: bound_by.to_owned(),
            name: name.to_owned(),
            expected,
            actual,
        });
    }
    Ok(())
}

fn require(condition: bool, claim: impl FnOnce() -> String) -> Result<(), BundleError> {
    if condition {
        Ok(())
    } else {
        Err(BundleError::Inconsistent(claim()))
    }
}

/// A verified bundle: its summary, and the two evaluation records exactly as they were
/// read and verified (what [`reevaluate::reevaluate`] checks against the run's stores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedBundle {
    /// What the bundle says.
    pub summary: BundleSummary,
    /// `reference-evaluation.json`, decoded.
    pub reference: EvaluationRecord,
    /// `recovered-evaluation.json`, decoded.
    pub recovered: EvaluationRecord,
}

/// Verifies the bundle in `directory` without writing anything, against the pinned
/// Fashion-MNIST payloads ([`FASHION_MNIST`]).
pub fn verify(directory: &Path) -> Result<BundleSummary, BundleError> {
    verify_pinned(directory, &FASHION_MNIST).map(|verified| verified.summary)
}

/// [`verify`] against the dataset pins `pins` (tests use small synthetic ones), keeping
/// the evaluation records it verified.
pub fn verify_pinned(directory: &Path, pins: &PinTable) -> Result<VerifiedBundle, BundleError> {
    verify_with(directory, pins, &mut |_, _| {})
}

/// [`verify_pinned`], with `hook` called at every stage of every member's read (tests use
/// it to swap or change a file mid-verification).
pub(crate) fn verify_with(
    directory: &Path,
    pins: &PinTable,
    hook: &mut dyn FnMut(read::ReadStage, &Path),
) -> Result<VerifiedBundle, BundleError> {
    let dir = read::BundleDir::open(directory)?;
    let mut names = dir.names()?;
    if !names.iter().any(|n| n == AUDIT) {
        return Err(BundleError::Incomplete);
    }
    for expected in BUNDLE_FILES {
        if !names.iter().any(|n| n == expected) {
            return Err(BundleError::MissingFile {
                name: expected.to_owned(),
            });
        }
    }
    names.sort();
    if let Some(extra) = names.iter().find(|n| !BUNDLE_FILES.contains(&n.as_str())) {
        return Err(BundleError::UnexpectedFile {
            name: extra.clone(),
        });
    }
    let reference_bytes = dir.read_member(REFERENCE_EVALUATION, EvaluationRecord::CAP, hook)?;
    let recovered_bytes = dir.read_member(RECOVERED_EVALUATION, EvaluationRecord::CAP, hook)?;
    let evidence_bytes = dir.read_member(RECOVERY_EVIDENCE, RecoveryEvidenceRecord::CAP, hook)?;
    let audit_bytes = dir.read_member(AUDIT, AuditRecord::CAP, hook)?;
    let reference: EvaluationRecord = decode_member(REFERENCE_EVALUATION, &reference_bytes)?;
    let recovered: EvaluationRecord = decode_member(RECOVERED_EVALUATION, &recovered_bytes)?;
    let evidence: RecoveryEvidenceRecord = decode_member(RECOVERY_EVIDENCE, &evidence_bytes)?;
    let audit: AuditRecord = decode_member(AUDIT, &audit_bytes)?;

    let self_digest = audit_self_digest(&audit)?;
    if self_digest != audit.self_sha256 {
        return Err(BundleError::SelfDigestMismatch {
            expected: audit.self_sha256,
            actual: self_digest,
        });
    }
    let members = [
        (REFERENCE_EVALUATION, &reference_bytes),
        (RECOVERED_EVALUATION, &recovered_bytes),
        (RECOVERY_EVIDENCE, &evidence_bytes),
    ];
    require(audit.files.len() == members.len(), || {
        "audit.json must bind exactly three files".into()
    })?;
    for (entry, (name, bytes)) in audit.files.iter().zip(members) {
        require(entry.name == name, || {
            format!("audit.json binds {} where {name} belongs", entry.name)
        })?;
        check_binding(AUDIT, name, entry.sha256, bytes)?;
        require(entry.bytes == bytes.len() as u64, || {
            format!("audit.json records a wrong size for {name}")
        })?;
    }
    check_binding(
        RECOVERY_EVIDENCE,
        REFERENCE_EVALUATION,
        evidence.reference_evaluation_sha256,
        &reference_bytes,
    )?;
    check_binding(
        RECOVERY_EVIDENCE,
        RECOVERED_EVALUATION,
        evidence.recovered_evaluation_sha256,
        &recovered_bytes,
    )?;

    check_claims(&reference, &recovered, &evidence, &audit, pins)?;
    Ok(VerifiedBundle {
        summary: BundleSummary {
            status: "verified",
            run_status: audit.status.clone(),
            outcome: RunOutcome::of(&audit),
            audit_sha256: Digest::of(&audit_bytes),
        },
        reference,
        recovered,
    })
}

/// A run's verdict, as `audit.json` states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// The run matched its row of the outcome table and every comparison held.
    Passed,
    /// It did not.
    Failed,
}

impl RunStatus {
    /// `Passed` when `passed`, else `Failed`.
    pub fn from_passed(passed: bool) -> Self {
        if passed {
            RunStatus::Passed
        } else {
            RunStatus::Failed
        }
    }

    /// The name recorded in `audit.json` (and printed in every report of the run).
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Passed => "passed",
            RunStatus::Failed => "failed",
        }
    }

    /// The status recorded as `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [RunStatus::Passed, RunStatus::Failed]
            .into_iter()
            .find(|status| status.name() == name)
    }
}

/// Which state an evaluation record is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationRole {
    /// The uninterrupted reference at the target step.
    Reference,
    /// The final checkpoint, loaded back from disk after recovery and reshard.
    Recovered,
}

impl EvaluationRole {
    /// The name recorded in an evaluation record's `role`.
    pub fn name(self) -> &'static str {
        match self {
            EvaluationRole::Reference => "reference",
            EvaluationRole::Recovered => "recovered",
        }
    }

    /// The role recorded as `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [EvaluationRole::Reference, EvaluationRole::Recovered]
            .into_iter()
            .find(|role| role.name() == name)
    }
}

/// Every claim must follow from the facts recorded beside it. The checks run in a fixed
/// order and the first that fails names the claim (and the file and field it is in).
fn check_claims(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
    pins: &PinTable,
) -> Result<(), BundleError> {
    check_labels(reference, recovered, evidence, audit)?;
    for record in [reference, recovered] {
        check_logit_probe(record)?;
    }
    check_dataset_pins(reference, recovered, audit, pins)?;
    let count = pinned_test_count(pins)?;
    for record in [reference, recovered] {
        check_evaluation_size(record, count)?;
    }
    check_evaluations_agree(reference, recovered)?;
    check_sessions_and_exits(evidence)?;
    let reference_at_target = check_evaluated_states(reference, recovered, evidence)?;
    check_reshard(evidence)?;
    let derived = derive_comparisons(reference, recovered, evidence, reference_at_target)?;
    for (file, claimed) in [
        (RECOVERY_EVIDENCE, &evidence.comparisons),
        (AUDIT, &audit.comparisons),
    ] {
        require(*claimed == derived.comparisons, || {
            format!(
                "{file} comparisons {claimed:?} differ from those derived from the records {:?} ({})",
                derived.comparisons,
                if derived.unequal.is_empty() {
                    "every compared pair is equal".to_owned()
                } else {
                    format!("unequal: {}", derived.unequal.join("; "))
                }
            )
        })?;
    }
    check_audit_summary(evidence, audit)?;
    check_status(audit, evidence, &derived.comparisons)
}

/// The recorded session named `name`.
fn session<'a>(evidence: &'a RecoveryEvidenceRecord, name: &str) -> Option<&'a SessionEntry> {
    evidence.sessions.iter().find(|s| s.name == name)
}

/// The sessions are the demo's, in order, and every worker of every session was reaped
/// exactly once with a clean exit: derived from the recorded exits, never assumed.
fn check_sessions_and_exits(evidence: &RecoveryEvidenceRecord) -> Result<(), BundleError> {
    let recorded: Vec<(&str, u32)> = evidence
        .sessions
        .iter()
        .map(|s| (s.name.as_str(), s.workers))
        .collect();
    require(recorded == records::DEMO_SESSIONS, || {
        format!(
            "{RECOVERY_EVIDENCE} sessions {recorded:?} are not the demo's {:?}",
            records::DEMO_SESSIONS
        )
    })?;
    let expected_exits: usize = evidence.sessions.iter().map(|s| s.workers as usize).sum();
    require(evidence.worker_exits.len() == expected_exits, || {
        format!(
            "{RECOVERY_EVIDENCE} worker_exits: {} recorded, the sessions ran {expected_exits} workers",
            evidence.worker_exits.len()
        )
    })?;
    for session in &evidence.sessions {
        let mut ranks: Vec<u32> = evidence
            .worker_exits
            .iter()
            .filter(|e| e.session == session.name)
            .map(|e| e.rank)
            .collect();
        ranks.sort_unstable();
        require(ranks == (0..session.workers).collect::<Vec<_>>(), || {
            format!(
                "{RECOVERY_EVIDENCE} worker_exits: session {:?} recorded exits of ranks {ranks:?}, not 0..{} once each",
                session.name, session.workers
            )
        })?;
    }
    match evidence
        .worker_exits
        .iter()
        .enumerate()
        .find(|(_, e)| e.outcome != records::CLEAN_WORKER_EXIT)
    {
        Some((index, unclean)) => Err(BundleError::Inconsistent(format!(
            "{RECOVERY_EVIDENCE} worker_exits[{index}].outcome: worker rank {} of session {:?} ended with {}, not a clean {}",
            unclean.rank,
            unclean.session,
            unclean.outcome,
            records::CLEAN_WORKER_EXIT
        ))),
        None => Ok(()),
    }
}

/// All records name one barrier, and each evaluation has its own role.
fn check_labels(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
) -> Result<(), BundleError> {
    let barrier = &audit.barrier;
    require(
        &evidence.barrier == barrier
            && &reference.barrier == barrier
            && &recovered.barrier == barrier,
        || "the records name different barriers".into(),
    )?;
    require(
        EvaluationRole::from_name(&reference.role) == Some(EvaluationRole::Reference)
            && EvaluationRole::from_name(&recovered.role) == Some(EvaluationRole::Recovered),
        || "evaluation roles are swapped or unknown".into(),
    )
}

/// The logit probe decodes, has its declared shape and digest; accuracy is within range.
fn check_logit_probe(record: &EvaluationRecord) -> Result<(), BundleError> {
    let probe = hex::decode(&record.logit_probe_f32le_hex).map_err(|_| {
        BundleError::Inconsistent(format!("{} logit probe is not hex", record.role))
    })?;
    let [rows, classes] = record.logit_probe_shape;
    require(
        probe.len() as u64 == u64::from(rows) * u64::from(classes) * 4,
        || {
            format!(
                "{} logit probe does not have its declared shape",
                record.role
            )
        },
    )?;
    require(Digest::of(&probe) == record.logit_probe_sha256, || {
        format!(
            "{} logit probe bytes do not match their SHA-256",
            record.role
        )
    })?;
    require(record.correct <= record.total, || {
        format!("{} accuracy exceeds its total", record.role)
    })
}

/// The file an evaluation record is installed as.
fn evaluation_file(record: &EvaluationRecord) -> &'static str {
    match EvaluationRole::from_name(&record.role) {
        Some(EvaluationRole::Recovered) => RECOVERED_EVALUATION,
        _ => REFERENCE_EVALUATION,
    }
}

/// Every recorded dataset digest is the pinned payload's: each evaluation's test images
/// and labels, and the audit's list of the four payloads (in pin order).
fn check_dataset_pins(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    audit: &AuditRecord,
    pins: &PinTable,
) -> Result<(), BundleError> {
    let unpinned = |name: &'static str, field: String, recorded: String, pinned: String| {
        Err(BundleError::UnpinnedDataset {
            name,
            field,
            recorded,
            pinned,
        })
    };
    let images = pins.get(Resource::TestImages).payload.sha256;
    let labels = pins.get(Resource::TestLabels).payload.sha256;
    for record in [reference, recovered] {
        for (field, recorded, pinned) in [
            ("test_images_sha256", record.test_images_sha256, images),
            ("test_labels_sha256", record.test_labels_sha256, labels),
        ] {
            if recorded != pinned {
                return unpinned(
                    evaluation_file(record),
                    field.to_owned(),
                    recorded.to_hex(),
                    pinned.to_hex(),
                );
            }
        }
    }
    let listed = &audit.build.dataset_payload_sha256;
    if listed.len() != pins.resources.len() {
        return unpinned(
            AUDIT,
            "build.dataset_payload_sha256".to_owned(),
            format!("a list of {} digests", listed.len()),
            format!("a list of {}", pins.resources.len()),
        );
    }
    for (index, (recorded, pin)) in listed.iter().zip(&pins.resources).enumerate() {
        if *recorded != pin.payload.sha256 {
            return unpinned(
                AUDIT,
                format!("build.dataset_payload_sha256[{index}]"),
                recorded.to_hex(),
                pin.payload.sha256.to_hex(),
            );
        }
    }
    Ok(())
}

/// Bytes of an IDX labels payload before its labels: magic and count, 4 bytes each.
const IDX_LABELS_HEADER_BYTES: u64 = 8;

/// The number of images in the pinned test split, from the pinned size of its labels
/// payload (one byte per label after the IDX header).
fn pinned_test_count(pins: &PinTable) -> Result<u64, BundleError> {
    pins.get(Resource::TestLabels)
        .payload
        .bytes
        .checked_sub(IDX_LABELS_HEADER_BYTES)
        .ok_or_else(|| {
            BundleError::Inconsistent(
                "the pinned test labels payload is shorter than its IDX header".into(),
            )
        })
}

/// The evaluation covers the whole pinned test split, and its probe holds the logits of
/// its first images ([`LOGIT_PROBE_IMAGES`](crate::core::step::LOGIT_PROBE_IMAGES) or the
/// split's count, whichever is fewer) over every class.
fn check_evaluation_size(record: &EvaluationRecord, count: u64) -> Result<(), BundleError> {
    let probe_rows = count.min(crate::core::step::LOGIT_PROBE_IMAGES as u64);
    let [rows, classes] = record.logit_probe_shape;
    for (field, recorded, expected) in [
        ("total", record.total, count),
        ("logit_probe_shape[0]", u64::from(rows), probe_rows),
        (
            "logit_probe_shape[1]",
            u64::from(classes),
            u64::from(crate::dataset::idx::CLASSES),
        ),
    ] {
        if recorded != expected {
            return Err(BundleError::EvaluationSize {
                name: evaluation_file(record),
                field,
                recorded,
                expected,
            });
        }
    }
    Ok(())
}

/// When both evaluations are of one state (equal logical state roots and ledger
/// digests), every figure they record is equal: evaluation is a function of the state and
/// the split. The split (digests), `total` and the probe's shape are pinned for both, so
/// checked before; what remains is the correct count and the probe's bytes (its SHA-256
/// is checked against the bytes before).
fn check_evaluations_agree(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
) -> Result<(), BundleError> {
    if reference.logical_state_root != recovered.logical_state_root
        || reference.ledger_digest != recovered.ledger_digest
    {
        return Ok(());
    }
    if reference.correct != recovered.correct {
        return Err(BundleError::EvaluationsDisagree {
            field: "correct",
            reference: reference.correct.to_string(),
            recovered: recovered.correct.to_string(),
        });
    }
    if reference.logit_probe_f32le_hex != recovered.logit_probe_f32le_hex {
        let probe = |record: &EvaluationRecord| {
            format!("probe bytes with SHA-256 {}", record.logit_probe_sha256)
        };
        return Err(BundleError::EvaluationsDisagree {
            field: "logit_probe_f32le_hex",
            reference: probe(reference),
            recovered: probe(recovered),
        });
    }
    Ok(())
}

/// Both evaluations are at the target step, of the reference store's checkpoint of the
/// reference and of the final checkpoint respectively, each on the placement of the
/// session that produced it. Returns the reference's digests at the target step.
fn check_evaluated_states<'a>(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &'a RecoveryEvidenceRecord,
) -> Result<&'a StateDigests, BundleError> {
    let target = evidence.target_step;
    let reference_at_target = reference_at(evidence, target)?;
    require(reference.step == target && recovered.step == target, || {
        format!(
            "{REFERENCE_EVALUATION} step {} / {RECOVERED_EVALUATION} step {} are not the target step {target}",
            reference.step, recovered.step
        )
    })?;
    require(
        reference.logical_state_root == reference_at_target.logical_state_root
            && reference.ledger_digest == reference_at_target.ledger_digest,
        || {
            format!(
                "{REFERENCE_EVALUATION} logical_state_root/ledger_digest are not the reference's at step {target}"
            )
        },
    )?;
    let checkpoint = &evidence.reference_checkpoint;
    let reference_workers = session(evidence, "reference").map(|s| s.workers);
    require(
        reference.generation == Some(checkpoint.generation)
            && checkpoint.step == target
            && Some(checkpoint.workers) == reference_workers
            && reference.workers == checkpoint.workers,
        || {
            format!(
                "{REFERENCE_EVALUATION} generation {:?} (W{}) is not {RECOVERY_EVIDENCE} reference_checkpoint {checkpoint:?} of the reference session (W{reference_workers:?}) at step {target}",
                reference.generation, reference.workers
            )
        },
    )?;
    require(
        recovered.logical_state_root == evidence.resharded_w3.logical_state_root
            && recovered.ledger_digest == evidence.resharded_w3.ledger_digest
            && recovered.generation == Some(evidence.final_checkpoint.generation)
            && recovered.workers == evidence.final_checkpoint.workers,
        || {
            format!(
                "{RECOVERED_EVALUATION} is not of {RECOVERY_EVIDENCE} final_checkpoint / resharded_w3"
            )
        },
    )?;
    Ok(reference_at_target)
}

/// The reference's digests at `step`.
fn reference_at(
    evidence: &RecoveryEvidenceRecord,
    step: u64,
) -> Result<&StateDigests, BundleError> {
    evidence
        .reference
        .iter()
        .find(|d| d.step == step)
        .ok_or_else(|| {
            BundleError::Inconsistent(format!(
                "{RECOVERY_EVIDENCE} reference never reached step {step}"
            ))
        })
}

/// The reshard is of the generation recovery selected, onto the placement the last
/// session loaded, committed just before the final checkpoint.
fn check_reshard(evidence: &RecoveryEvidenceRecord) -> Result<(), BundleError> {
    let reshard = &evidence.reshard;
    require(
        reshard.source_generation == evidence.recovery.selected_generation,
        || {
            format!(
                "{RECOVERY_EVIDENCE} reshard.source_generation {} is not recovery.selected_generation {}",
                reshard.source_generation, evidence.recovery.selected_generation
            )
        },
    )?;
    require(
        reshard.generation.checked_add(1) == Some(evidence.final_checkpoint.generation),
        || {
            format!(
                "{RECOVERY_EVIDENCE} reshard.generation {} does not precede final_checkpoint.generation {}",
                reshard.generation, evidence.final_checkpoint.generation
            )
        },
    )?;
    let before = session(evidence, "recovered").map(|s| s.workers);
    let after = evidence.sessions.last().map(|s| s.workers);
    require(
        Some(reshard.workers_before) == before && Some(reshard.workers_after) == after,
        || {
            format!(
                "{RECOVERY_EVIDENCE} reshard.workers_before/after W{}→W{} are not the placements the recovered (W{before:?}) and last (W{after:?}) sessions loaded",
                reshard.workers_before, reshard.workers_after
            )
        },
    )
}

/// The comparisons as the recorded digests imply them, and every unequal pair by name.
struct Derived {
    comparisons: Comparisons,
    unequal: Vec<String>,
}

/// Derives the comparisons from the recorded digests. The reshard's root is derived from
/// the two roots the demo recomputed from chunk objects loaded back from the store, not
/// from the commit record's root field (which the reshard writer copies).
fn derive_comparisons(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    reference_at_target: &StateDigests,
) -> Result<Derived, BundleError> {
    let reference_at_selected = reference_at(evidence, evidence.recovery.selected_step)?;
    let reshard = &evidence.reshard;
    let target = evidence.target_step;
    let ev = |field: &str| format!("{RECOVERY_EVIDENCE} {field}");
    let mut unequal = Vec::new();
    let mut all_equal = |pairs: &[(String, Digest, String, Digest)]| {
        let mut equal = true;
        for (a_name, a, b_name, b) in pairs {
            if a != b {
                unequal.push(format!("{a_name} != {b_name}"));
                equal = false;
            }
        }
        equal
    };
    let at_target = format!("reference[step {target}]");
    let roots_equal = all_equal(&[
        (
            ev("recovered_w4.logical_state_root"),
            evidence.recovered_w4.logical_state_root,
            ev(&format!("{at_target}.logical_state_root")),
            reference_at_target.logical_state_root,
        ),
        (
            ev("resharded_w3.logical_state_root"),
            evidence.resharded_w3.logical_state_root,
            ev(&format!("{at_target}.logical_state_root")),
            reference_at_target.logical_state_root,
        ),
        (
            ev("reshard.source_root_from_chunks"),
            reshard.source_root_from_chunks,
            ev(&format!(
                "reference[step {}].logical_state_root",
                evidence.recovery.selected_step
            )),
            reference_at_selected.logical_state_root,
        ),
        (
            ev("reshard.resharded_root_from_chunks"),
            reshard.resharded_root_from_chunks,
            ev("reshard.source_root_from_chunks"),
            reshard.source_root_from_chunks,
        ),
        (
            ev("reshard.committed_root"),
            reshard.committed_root,
            ev("reshard.resharded_root_from_chunks"),
            reshard.resharded_root_from_chunks,
        ),
    ]);
    let ledgers_equal = all_equal(&[
        (
            ev("recovered_w4.ledger_digest"),
            evidence.recovered_w4.ledger_digest,
            ev(&format!("{at_target}.ledger_digest")),
            reference_at_target.ledger_digest,
        ),
        (
            ev("resharded_w3.ledger_digest"),
            evidence.resharded_w3.ledger_digest,
            ev(&format!("{at_target}.ledger_digest")),
            reference_at_target.ledger_digest,
        ),
        (
            format!("{RECOVERED_EVALUATION} ledger_digest"),
            recovered.ledger_digest,
            ev(&format!("{at_target}.ledger_digest")),
            reference_at_target.ledger_digest,
        ),
    ]);
    let probe_equal = all_equal(&[(
        format!("{REFERENCE_EVALUATION} logit_probe_sha256"),
        reference.logit_probe_sha256,
        format!("{RECOVERED_EVALUATION} logit_probe_sha256"),
        recovered.logit_probe_sha256,
    )]);
    Ok(Derived {
        comparisons: Comparisons {
            logical_state_roots_equal: roots_equal,
            ledger_digests_equal: ledgers_equal,
            logit_probe_equal: probe_equal,
        },
        unequal,
    })
}

/// The audit summarises the evidence faithfully, and the evidence shows a SIGKILL at the
/// target barrier followed by a continuation to the selected step + 1.
fn check_audit_summary(
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
) -> Result<(), BundleError> {
    require(
        audit.candidate_installed == evidence.kill.candidate_installed
            && audit.selected_generation == evidence.recovery.selected_generation
            && audit.selected_step == evidence.recovery.selected_step
            && audit.replayed_batches == evidence.replayed_batches
            && audit.final_checkpoint == evidence.final_checkpoint
            && audit.worker_exits == evidence.worker_exits.len() as u64,
        || "audit.json summarises recovery-evidence.json wrongly".into(),
    )?;
    require(
        evidence.kill.signal == 9
            && evidence.kill.reaped
            && evidence.kill.unacknowledged_event == evidence.kill.target_barrier,
        || "the publisher was not killed with SIGKILL at the target barrier and reaped".into(),
    )?;
    require(
        evidence.target_step == evidence.recovery.selected_step + 1,
        || "target step is not the selected step + 1".into(),
    )
}

/// The status follows from the outcome table and the derived comparisons.
fn check_status(
    audit: &AuditRecord,
    evidence: &RecoveryEvidenceRecord,
    derived: &Comparisons,
) -> Result<(), BundleError> {
    // The final checkpoint was committed by the last session: its placement is that
    // session's worker count, as recorded.
    let final_workers = evidence.sessions.last().map(|s| s.workers);
    let matches_table = crate::core::barrier::Barrier::from_name(&audit.barrier)
        .and_then(records::expected_outcome)
        == Some((
            audit.candidate_installed,
            audit.selected_generation,
            audit.selected_step,
            audit.replayed_batches,
            audit.final_checkpoint.generation,
            audit.final_checkpoint.step,
        ));
    let passed = matches_table
        && derived.logical_state_roots_equal
        && derived.ledger_digests_equal
        && derived.logit_probe_equal
        && Some(audit.final_checkpoint.workers) == final_workers;
    require(
        RunStatus::from_name(&audit.status) == Some(RunStatus::from_passed(passed)),
        || {
            format!(
                "status {:?} does not follow from the recorded outcome",
                audit.status
            )
        },
    )
}
