//! Verifying a bundle in a fixed order, stopping at the first failure.
use std::path::Path;

use crate::core::canonical::{self, CanonicalError, CanonicalRecord};
use crate::core::digest::Digest;
use crate::dataset::{PinTable, FASHION_MNIST};

use super::claims::check_claims;
use super::error::*;
use super::install::audit_self_digest;
use super::read;
use super::records::*;

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

pub(super) fn decode_member<R: CanonicalRecord>(
    name: &str,
    bytes: &[u8],
) -> Result<R, BundleError> {
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

pub(super) fn check_binding(
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

/// A verified bundle: its summary, and the two evaluation records exactly as they were
/// read and verified (what [`reevaluate::reevaluate`](super::reevaluate::reevaluate) checks against the run's stores).
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

/// The directory holds exactly the bundle's files: `audit.json` first (a bundle without
/// it was never finished), then every other member, then nothing else.
fn check_member_names(mut names: Vec<String>) -> Result<(), BundleError> {
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
    Ok(())
}

/// [`verify_pinned`], with `hook` called at every stage of every member's read (tests use
/// it to swap or change a file mid-verification).
pub(crate) fn verify_with(
    directory: &Path,
    pins: &PinTable,
    hook: &mut dyn FnMut(read::ReadStage, &Path),
) -> Result<VerifiedBundle, BundleError> {
    let dir = read::BundleDir::open(directory)?;
    check_member_names(dir.names()?)?;
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
