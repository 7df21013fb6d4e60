//! Evidence bundles: installing the four records of a run (`audit.json` last, as the
//! commit marker) and verifying a bundle without changing it.
//!
//! Verification runs in a fixed order and stops at the first failure, each with its own
//! error kind: the directory; completeness (`audit.json` present); missing files; extra
//! files; regular files only (no symlinks); size caps; closed schema and version;
//! canonical bytes; the audit's self digest; the SHA-256 bindings between files; and the
//! consistency of every claim with the facts it is derived from.
pub mod records;

use std::path::{Path, PathBuf};

use crate::core::canonical::{self, CanonicalError, CanonicalRecord};
use crate::core::digest::Digest;
use crate::durable::fs::{FileSystem, RealFs};
use crate::durable::{ensure_dir_with, write_file_with, DurableError, WriteOptions};

pub use records::*;

/// Why a bundle was not installed or did not verify.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("the bundle is incomplete: audit.json (its commit marker) is missing")]
    Incomplete,
    #[error("{name} is missing from the bundle")]
    MissingFile { name: String },
    #[error("{name} does not belong in a bundle")]
    UnexpectedFile { name: String },
    #[error("{name} is not a regular file (symlinks and other kinds are refused)")]
    NotRegularFile { name: String },
    #[error("{name} holds {bytes} bytes, above the cap of {cap}")]
    TooLarge { name: String, bytes: u64, cap: u64 },
    #[error(
        "{name} is not canonical JSON (RFC 8785): equivalent JSON in another byte form is refused"
    )]
    NonCanonical { name: String },
    #[error("{name} does not decode under its schema: {source}")]
    Malformed {
        name: String,
        source: CanonicalError,
    },
    #[error("audit.json does not match its own digest (expected {expected}, computed {actual})")]
    SelfDigestMismatch { expected: Digest, actual: Digest },
    #[error("{bound_by} binds {name} to {expected}, but the file's SHA-256 is {actual}")]
    BindingMismatch {
        bound_by: String,
        name: String,
        expected: Digest,
        actual: Digest,
    },
    #[error("inconsistent claim: {0}")]
    Inconsistent(String),
    #[error("{0} already exists; a bundle is never overwritten")]
    AlreadyExists(PathBuf),
    #[error("I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Encode(CanonicalError),
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
            BundleError::NotRegularFile { .. } => "not-regular-file",
            BundleError::TooLarge { .. } => "too-large",
            BundleError::NonCanonical { .. } => "non-canonical",
            BundleError::Malformed { .. } => "malformed",
            BundleError::SelfDigestMismatch { .. } => "self-digest-mismatch",
            BundleError::BindingMismatch { .. } => "binding-mismatch",
            BundleError::Inconsistent(_) => "inconsistent",
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
    pub directory: PathBuf,
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
    pub status: &'static str,
    pub run_status: String,
    #[serde(flatten)]
    pub outcome: RunOutcome,
    pub audit_sha256: Digest,
}

fn read_member(directory: &Path, name: &str, cap: u64) -> Result<Vec<u8>, BundleError> {
    let path = directory.join(name);
    let metadata = path.symlink_metadata().map_err(io_error(&path))?;
    if !metadata.file_type().is_file() {
        return Err(BundleError::NotRegularFile {
            name: name.to_owned(),
        });
    }
    if metadata.len() > cap {
        return Err(BundleError::TooLarge {
            name: name.to_owned(),
            bytes: metadata.len(),
            cap,
        });
    }
    let bytes = std::fs::read(&path).map_err(io_error(&path))?;
    if bytes.len() as u64 > cap {
        return Err(BundleError::TooLarge {
            name: name.to_owned(),
            bytes: bytes.len() as u64,
            cap,
        });
    }
    Ok(bytes)
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

/// Verifies the bundle in `directory` without writing anything.
pub fn verify(directory: &Path) -> Result<BundleSummary, BundleError> {
    let metadata = directory.symlink_metadata().map_err(io_error(directory))?;
    if !metadata.is_dir() {
        return Err(BundleError::NotADirectory(directory.to_owned()));
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(directory).map_err(io_error(directory))? {
        let entry = entry.map_err(io_error(directory))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
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
    let reference_bytes = read_member(directory, REFERENCE_EVALUATION, EvaluationRecord::CAP)?;
    let recovered_bytes = read_member(directory, RECOVERED_EVALUATION, EvaluationRecord::CAP)?;
    let evidence_bytes = read_member(directory, RECOVERY_EVIDENCE, RecoveryEvidenceRecord::CAP)?;
    let audit_bytes = read_member(directory, AUDIT, AuditRecord::CAP)?;
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

    check_claims(&reference, &recovered, &evidence, &audit)?;
    Ok(BundleSummary {
        status: "verified",
        run_status: audit.status.clone(),
        outcome: RunOutcome::of(&audit),
        audit_sha256: Digest::of(&audit_bytes),
    })
}

/// A run's verdict, as `audit.json` states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Passed,
    Failed,
}

impl RunStatus {
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

    pub fn from_name(name: &str) -> Option<Self> {
        [EvaluationRole::Reference, EvaluationRole::Recovered]
            .into_iter()
            .find(|role| role.name() == name)
    }
}

/// Every claim must follow from the facts recorded beside it. The checks run in a fixed
/// order and the first that fails names the claim.
fn check_claims(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
) -> Result<(), BundleError> {
    check_labels(reference, recovered, evidence, audit)?;
    for record in [reference, recovered] {
        check_logit_probe(record)?;
    }
    let reference_at_target = check_evaluated_states(reference, recovered, evidence)?;
    let derived = derive_comparisons(reference, recovered, evidence, reference_at_target);
    require(
        evidence.comparisons == derived && audit.comparisons == derived,
        || {
            format!(
                "claimed comparisons {:?} differ from those derived from the records {derived:?}",
                audit.comparisons
            )
        },
    )?;
    check_audit_summary(evidence, audit)?;
    check_sessions_and_exits(evidence)?;
    check_status(audit, evidence, &derived)
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
            "sessions {recorded:?} are not the demo's {:?}",
            records::DEMO_SESSIONS
        )
    })?;
    let expected_exits: usize = evidence.sessions.iter().map(|s| s.workers as usize).sum();
    require(evidence.worker_exits.len() == expected_exits, || {
        format!(
            "{} worker exits recorded, the sessions ran {expected_exits} workers",
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
                "session {:?} recorded exits of ranks {ranks:?}, not 0..{} once each",
                session.name, session.workers
            )
        })?;
    }
    match evidence
        .worker_exits
        .iter()
        .find(|e| e.outcome != records::CLEAN_WORKER_EXIT)
    {
        Some(unclean) => Err(BundleError::Inconsistent(format!(
            "worker rank {} of session {:?} ended with {}, not a clean {}",
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

/// Both evaluations are at the target step, of the reference state and of the final
/// checkpoint respectively. Returns the reference's digests at the target step.
fn check_evaluated_states<'a>(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &'a RecoveryEvidenceRecord,
) -> Result<&'a StateDigests, BundleError> {
    let target = evidence.target_step;
    let reference_at_target = evidence.reference.iter().find(|d| d.step == target);
    let reference_at_target = reference_at_target.ok_or_else(|| {
        BundleError::Inconsistent(format!(
            "the reference never reached the target step {target}"
        ))
    })?;
    require(reference.step == target && recovered.step == target, || {
        "evaluations are not at the target step".into()
    })?;
    require(
        reference.logical_state_root == reference_at_target.logical_state_root,
        || "reference evaluation is not of the reference state".into(),
    )?;
    require(
        recovered.logical_state_root == evidence.resharded_w3.logical_state_root
            && recovered.generation == Some(evidence.final_checkpoint.generation),
        || "recovered evaluation is not of the final checkpoint".into(),
    )?;
    Ok(reference_at_target)
}

/// The comparisons as the recorded digests imply them.
fn derive_comparisons(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    reference_at_target: &StateDigests,
) -> Comparisons {
    let roots_equal = [
        evidence.recovered_w4.logical_state_root,
        evidence.resharded_w3.logical_state_root,
    ]
    .iter()
    .all(|root| *root == reference_at_target.logical_state_root)
        && evidence.reshard.logical_state_root_before == evidence.reshard.logical_state_root_after;
    let ledgers_equal = [
        evidence.recovered_w4.ledger_digest,
        evidence.resharded_w3.ledger_digest,
        recovered.ledger_digest,
    ]
    .iter()
    .all(|ledger| *ledger == reference_at_target.ledger_digest);
    Comparisons {
        logical_state_roots_equal: roots_equal,
        ledger_digests_equal: ledgers_equal,
        logit_probe_equal: reference.logit_probe_sha256 == recovered.logit_probe_sha256,
    }
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
