//! What the pictures show, read from a committed release-evidence directory through the
//! project's typed readers: each bundle is verified by `shardlift`'s bundle verifier and
//! its members are read with its `O_NOFOLLOW` reader and decoded under their closed
//! schemas; `summary.json` decodes as the release's `ReleaseSummary`; the `verify-bundle`
//! transcripts' stdout decodes as the verifier's summary fields. The barrier order comes
//! from `Barrier::ALL`, checked against RFC 0001's numbered list. Every byte read is kept
//! with its path, so the manifest can bind it.
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shardlift::core::barrier::Barrier;
use shardlift::core::canonical::{self, CanonicalRecord};
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::read::BundleDir;
use shardlift::evidence::bundle::{
    self, AuditRecord, EvaluationRecord, RecoveryEvidenceRecord, RunOutcome, AUDIT,
    RECOVERED_EVALUATION, RECOVERY_EVIDENCE, REFERENCE_EVALUATION,
};

use super::error::{io, VisualsError};
use crate::release::pins::{self, BARRIERS};
use crate::release::summary::ReleaseSummary;

/// Where RFC 0001 lies in the repository.
pub const RFC_PATH: &str = "docs/rfc/0001-commit-protocol.md";
/// The largest input file read.
const INPUT_CAP: u64 = 16 << 20;

/// `verify-bundle`'s stdout record, as the transcript captured it (no paths).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct VerifyOutput {
    /// `verified`.
    pub status: String,
    /// The run's status as the audit records it.
    pub run_status: String,
    /// What the run showed, as the audit states it.
    #[serde(flatten)]
    pub outcome: RunOutcome,
    /// SHA-256 of the bundle's `audit.json`.
    pub audit_sha256: Digest,
}

/// One barrier's run.
pub struct Run {
    /// The barrier the publisher was killed at.
    pub barrier: Barrier,
    /// The bundle's `audit.json`.
    pub audit: AuditRecord,
    /// The bundle's `recovery-evidence.json`.
    pub evidence: RecoveryEvidenceRecord,
    /// The bundle's `reference-evaluation.json`.
    pub reference: EvaluationRecord,
    /// The bundle's `recovered-evaluation.json`.
    pub recovered: EvaluationRecord,
    /// The four bundle files in installation order: name, size, SHA-256.
    pub files: Vec<(String, u64, Digest)>,
    /// The verify-bundle transcript's stdout record.
    pub verify_output: VerifyOutput,
    /// The verify-bundle transcript, as committed.
    pub verify_transcript: String,
}

/// Everything the pictures are drawn from.
pub struct Evidence {
    /// The evidence directory's name (`release-<commit>`).
    pub name: String,
    /// The evidence's `summary.json`.
    pub summary: ReleaseSummary,
    /// One run per barrier, in the summary's order.
    pub runs: Vec<Run>,
    /// The barriers in RFC 0001's order (equal to `Barrier::ALL`).
    pub protocol: Vec<Barrier>,
    /// Every input read: its name (inside the evidence directory, or `docs/rfc/…`) and
    /// bytes.
    pub inputs: Vec<(String, Vec<u8>)>,
}

/// The single `evidence/release-*` directory under `root`.
pub fn default_evidence_dir(root: &Path) -> Result<PathBuf, VisualsError> {
    let parent = root.join("evidence");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&parent).map_err(|_| VisualsError::NoEvidence(root.into()))? {
        let entry = entry.map_err(io(&parent))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("release-") && entry.path().is_dir() {
            found.push(name);
        }
    }
    found.sort();
    match found.as_slice() {
        [] => Err(VisualsError::NoEvidence(root.into())),
        [one] => Ok(parent.join(one)),
        many => Err(VisualsError::AmbiguousEvidence(many.join(", "))),
    }
}

/// The evidence directory's name, as the manifest records it.
pub fn evidence_name(dir: &Path) -> Result<String, VisualsError> {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| VisualsError::UnnamedEvidence { path: dir.into() })
}

fn read_capped(path: &Path) -> Result<Vec<u8>, VisualsError> {
    let metadata = path.symlink_metadata().map_err(io(path))?;
    if !metadata.is_file() || metadata.len() > INPUT_CAP {
        return Err(VisualsError::Io {
            path: path.into(),
            source: std::io::Error::other("not a regular file under the input cap"),
        });
    }
    std::fs::read(path).map_err(io(path))
}

fn decode<R: CanonicalRecord>(name: &str, bytes: &[u8]) -> Result<R, VisualsError> {
    canonical::decode(bytes).map_err(|source| VisualsError::Record {
        name: name.to_owned(),
        source,
    })
}

/// The input files the renderer reads from an evidence directory, in reading order.
pub fn input_names() -> Vec<String> {
    let mut names = vec![pins::SUMMARY.to_owned()];
    for barrier in BARRIERS {
        for file in bundle::BUNDLE_FILES {
            names.push(format!("{}/{file}", pins::bundle_folder(barrier)));
        }
        names.push(pins::verify_transcript(barrier));
    }
    names.push(RFC_PATH.to_owned());
    names
}

/// The stdout record of a `verify-bundle` transcript.
fn verify_output(name: &str, text: &str) -> Result<VerifyOutput, VisualsError> {
    let stdout = text
        .rsplit_once("--- stdout ---\n")
        .map(|(_, stdout)| stdout)
        .ok_or_else(|| VisualsError::TranscriptNoStdout { name: name.into() })?;
    serde_json::from_str(stdout.trim()).map_err(|source| VisualsError::TranscriptRecord {
        name: name.into(),
        source,
    })
}

/// RFC 0001's numbered barrier list, which must be `Barrier::ALL` in order.
fn protocol_order(text: &str) -> Result<Vec<Barrier>, VisualsError> {
    let listed: Vec<Barrier> = text
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.split_once(". ")?;
            number.parse::<u32>().ok()?;
            Barrier::from_name(rest.trim())
        })
        .collect();
    if listed != Barrier::ALL {
        return Err(VisualsError::RfcOrder {
            name: RFC_PATH.into(),
        });
    }
    Ok(listed)
}

fn read_run(
    dir: &Path,
    barrier: Barrier,
    inputs: &mut Vec<(String, Vec<u8>)>,
) -> Result<Run, VisualsError> {
    let name = barrier.name();
    let folder = pins::bundle_folder(name);
    let bundle_dir = dir.join(&folder);
    let bundle_error = |source| VisualsError::Bundle {
        barrier: name.to_owned(),
        source: Box::new(source),
    };
    let summary = bundle::verify(&bundle_dir).map_err(bundle_error)?;
    let reader = BundleDir::open(&bundle_dir).map_err(bundle_error)?;
    let mut files = Vec::new();
    let mut member = |file: &str, cap: u64| -> Result<Vec<u8>, VisualsError> {
        let bytes = reader
            .read_member(file, cap, &mut |_, _| {})
            .map_err(bundle_error)?;
        files.push((file.to_owned(), bytes.len() as u64, Digest::of(&bytes)));
        inputs.push((format!("{folder}/{file}"), bytes.clone()));
        Ok(bytes)
    };
    let reference_bytes = member(REFERENCE_EVALUATION, EvaluationRecord::CAP)?;
    let recovered_bytes = member(RECOVERED_EVALUATION, EvaluationRecord::CAP)?;
    let evidence_bytes = member(RECOVERY_EVIDENCE, RecoveryEvidenceRecord::CAP)?;
    let audit_bytes = member(AUDIT, AuditRecord::CAP)?;
    let reference: EvaluationRecord = decode(REFERENCE_EVALUATION, &reference_bytes)?;
    let recovered: EvaluationRecord = decode(RECOVERED_EVALUATION, &recovered_bytes)?;
    let evidence: RecoveryEvidenceRecord = decode(RECOVERY_EVIDENCE, &evidence_bytes)?;
    let audit: AuditRecord = decode(AUDIT, &audit_bytes)?;

    let transcript_name = pins::verify_transcript(name);
    let transcript_bytes = read_capped(&dir.join(&transcript_name))?;
    let verify_transcript = String::from_utf8_lossy(&transcript_bytes).into_owned();
    let output = verify_output(&transcript_name, &verify_transcript)?;
    if output.outcome != summary.outcome
        || output.audit_sha256 != summary.audit_sha256
        || output.status != summary.status
        || output.run_status != summary.run_status
    {
        return Err(VisualsError::TranscriptDisagrees {
            name: transcript_name,
        });
    }
    inputs.push((transcript_name, transcript_bytes));
    Ok(Run {
        barrier,
        audit,
        evidence,
        reference,
        recovered,
        files,
        verify_output: output,
        verify_transcript,
    })
}

/// Reads the evidence directory `dir` and RFC 0001 under `root`.
pub fn read(root: &Path, dir: &Path) -> Result<Evidence, VisualsError> {
    let name = evidence_name(dir)?;
    let mut inputs = Vec::new();
    let summary_bytes = read_capped(&dir.join(pins::SUMMARY))?;
    let summary: ReleaseSummary = decode(pins::SUMMARY, &summary_bytes)?;
    inputs.push((pins::SUMMARY.to_owned(), summary_bytes));
    let mut runs = Vec::new();
    for barrier in shardlift::core::barrier::DEMO_BARRIERS {
        let run = read_run(dir, barrier, &mut inputs)?;
        let listed = summary.runs.iter().any(|r| {
            r.outcome == run.verify_output.outcome
                && r.audit_sha256 == run.verify_output.audit_sha256
        });
        if !listed {
            return Err(VisualsError::SummaryRun {
                barrier: barrier.name().to_owned(),
            });
        }
        runs.push(run);
    }
    let rfc_bytes = read_capped(&root.join(RFC_PATH))?;
    let protocol = protocol_order(&String::from_utf8_lossy(&rfc_bytes))?;
    inputs.push((RFC_PATH.to_owned(), rfc_bytes));
    Ok(Evidence {
        name,
        summary,
        runs,
        protocol,
        inputs,
    })
}
