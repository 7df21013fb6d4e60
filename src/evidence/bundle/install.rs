//! Installing a bundle: the four records, bound by digests, `audit.json` last.
use std::path::{Path, PathBuf};

use crate::core::canonical::{self, CanonicalError};
use crate::core::digest::Digest;
use crate::durable::fs::{FileSystem, RealFs};
use crate::durable::{ensure_dir_with, write_file_with, DurableError, WriteOptions};

use super::error::*;
use super::records::*;

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
