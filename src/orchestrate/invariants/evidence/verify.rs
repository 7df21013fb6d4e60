//! Verifying an artifact without changing it.
use std::collections::BTreeSet;
use std::path::Path;

use crate::core::canonical::{self, CanonicalRecord};
use crate::core::digest::Digest;

use crate::orchestrate::invariants::registry::{ScenarioSpec, REGISTRY};

use super::error::inconsistent;
use super::*;

fn read_listed(dir: &Path, file: &str) -> Result<Vec<u8>, EvidenceError> {
    std::fs::read(dir.join(file)).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => EvidenceError::Missing {
            file: file.to_owned(),
        },
        _ => EvidenceError::Io {
            file: file.to_owned(),
            source,
        },
    })
}

fn decode_file<R: CanonicalRecord>(file: &str, bytes: &[u8]) -> Result<R, EvidenceError> {
    canonical::decode(bytes).map_err(|source| EvidenceError::Record {
        file: file.to_owned(),
        source,
    })
}

/// Verifies an artifact without changing it: the manifest (exact version), every file's
/// digest, no unlisted files, then the records (exact version, canonical bytes) and their
/// cross-bindings: summary ↔ observations ↔ results ↔ provenance ↔ junit. Returns the
/// summary.
pub fn verify_artifact(dir: &Path) -> Result<Summary, EvidenceError> {
    if !dir.is_dir() {
        return Err(inconsistent(
            &dir.display().to_string(),
            "is not an artifact directory",
        ));
    }
    let manifest = read_manifest(dir)?;
    let listed = listed_names(&manifest)?;
    let present = present_names(dir, &listed)?;
    let contents = read_contents(dir, &manifest, &present)?;
    let summary: Summary = decode_file(SUMMARY_FILE, contents.get(SUMMARY_FILE)?)?;
    check_provenance(&summary, &contents)?;
    check_suite(&summary)?;
    let results = verify_entries(&summary, &contents)?;
    check_totals(&summary, &results, &contents)?;
    check_no_extra_files(&listed)?;
    Ok(summary)
}

fn read_manifest(dir: &Path) -> Result<Manifest, EvidenceError> {
    let manifest_bytes = read_listed(dir, MANIFEST_FILE)?;
    let manifest: Manifest = decode_file(MANIFEST_FILE, &manifest_bytes)?;
    if manifest.algorithm != "sha256" {
        return Err(inconsistent(MANIFEST_FILE, "algorithm must be sha256"));
    }
    Ok(manifest)
}

/// The manifest's file names: plain, distinct, and never the manifest itself.
fn listed_names(manifest: &Manifest) -> Result<BTreeSet<String>, EvidenceError> {
    let mut listed = BTreeSet::new();
    for entry in &manifest.files {
        let name_ok = !entry.file.is_empty()
            && entry.file != MANIFEST_FILE
            && !entry.file.contains('/')
            && !entry.file.starts_with('.');
        if !name_ok || !listed.insert(entry.file.clone()) {
            return Err(inconsistent(
                MANIFEST_FILE,
                format!("bad or repeated entry {:?}", entry.file),
            ));
        }
    }
    Ok(listed)
}

/// The directory's entries: regular files only, every one listed (besides the manifest).
fn present_names(dir: &Path, listed: &BTreeSet<String>) -> Result<BTreeSet<String>, EvidenceError> {
    let directory_error = |source| EvidenceError::Io {
        file: ".".into(),
        source,
    };
    let mut present = BTreeSet::new();
    for item in std::fs::read_dir(dir).map_err(directory_error)? {
        let item = item.map_err(directory_error)?;
        let name = item.file_name().to_string_lossy().into_owned();
        let kind = item.file_type().map_err(|source| EvidenceError::Io {
            file: name.clone(),
            source,
        })?;
        if !kind.is_file() {
            return Err(EvidenceError::NotAFile { file: name });
        }
        if name != MANIFEST_FILE && !listed.contains(&name) {
            return Err(EvidenceError::Unlisted { file: name });
        }
        present.insert(name);
    }
    Ok(present)
}

/// The bytes of every listed file, each matching its manifest digest and size.
struct Contents(std::collections::BTreeMap<String, Vec<u8>>);

impl Contents {
    fn get(&self, file: &str) -> Result<&[u8], EvidenceError> {
        self.0
            .get(file)
            .map(Vec::as_slice)
            .ok_or_else(|| EvidenceError::Missing {
                file: file.to_owned(),
            })
    }
}

fn read_contents(
    dir: &Path,
    manifest: &Manifest,
    present: &BTreeSet<String>,
) -> Result<Contents, EvidenceError> {
    let mut contents = std::collections::BTreeMap::new();
    for entry in &manifest.files {
        if !present.contains(&entry.file) {
            return Err(EvidenceError::Missing {
                file: entry.file.clone(),
            });
        }
        let bytes = read_listed(dir, &entry.file)?;
        let found = Digest::of(&bytes);
        if found != entry.sha256 || bytes.len() as u64 != entry.bytes {
            return Err(EvidenceError::DigestMismatch {
                file: entry.file.clone(),
                expected: entry.sha256,
                found,
            });
        }
        contents.insert(entry.file.clone(), bytes);
    }
    Ok(Contents(contents))
}

/// The summary binds `provenance.json`, whose attestation names a registered exact pair.
fn check_provenance(summary: &Summary, contents: &Contents) -> Result<(), EvidenceError> {
    let provenance_bytes = contents.get(PROVENANCE_FILE)?;
    let provenance: Provenance = decode_file(PROVENANCE_FILE, provenance_bytes)?;
    if Digest::of(provenance_bytes) != summary.provenance_sha256 {
        return Err(inconsistent(
            SUMMARY_FILE,
            "provenance_sha256 does not match provenance.json",
        ));
    }
    let attestation = &provenance.bootstrap_attestation;
    let registered = crate::orchestrate::invariants::provenance::REGISTERED_PAIRS
        .iter()
        .any(|p| {
            p.tch_version == attestation.tch_version
                && p.libtorch_version == attestation.libtorch_version
                && p.libtorch_cpu_sha256 == attestation.library_sha256.to_hex()
        });
    if !attestation.registered_pair_matched || !registered {
        return Err(inconsistent(
            PROVENANCE_FILE,
            "the bootstrap attestation does not show a registered exact (tch, libtorch, digest) pair",
        ));
    }
    Ok(())
}

/// The summary is of this suite: its registry, its claim boundary, one entry per scenario.
fn check_suite(summary: &Summary) -> Result<(), EvidenceError> {
    if summary.suite != "shardlift.invariants" || summary.registered != REGISTRY.len() as u32 {
        return Err(inconsistent(SUMMARY_FILE, "not this suite's registry"));
    }
    if summary.claim_boundary != ClaimBoundary::current() {
        return Err(inconsistent(
            SUMMARY_FILE,
            "the claim boundary differs from this build's",
        ));
    }
    if summary.entries.len() != REGISTRY.len() {
        return Err(inconsistent(SUMMARY_FILE, "wrong number of entries"));
    }
    Ok(())
}

fn verify_entries(
    summary: &Summary,
    contents: &Contents,
) -> Result<Vec<ScenarioResult>, EvidenceError> {
    REGISTRY
        .iter()
        .zip(&summary.entries)
        .map(|(spec, entry)| verify_entry(spec, entry, contents))
        .collect()
}

/// One summary entry: it matches the registry, binds its observation and result, and the
/// result is exactly what the observation derives.
fn verify_entry(
    spec: &ScenarioSpec,
    entry: &SummaryEntry,
    contents: &Contents,
) -> Result<ScenarioResult, EvidenceError> {
    let observation_name = observation_file(spec);
    let result_name = result_file(spec);
    if entry.ordinal != spec.ordinal
        || entry.scenario != spec.id
        || entry.claim != spec.claim
        || entry.observation_file != observation_name
        || entry.result_file != result_name
    {
        return Err(inconsistent(
            SUMMARY_FILE,
            format!("entry {} does not match the registry", spec.ordinal),
        ));
    }
    let observation_bytes = contents.get(&observation_name)?;
    let observation: Observation = decode_file(&observation_name, observation_bytes)?;
    let observation_sha256 = Digest::of(observation_bytes);
    if observation_sha256 != entry.observation_sha256 {
        return Err(inconsistent(
            SUMMARY_FILE,
            format!("observation digest of {observation_name} differs"),
        ));
    }
    let result_bytes = contents.get(&result_name)?;
    let result: ScenarioResult = decode_file(&result_name, result_bytes)?;
    if Digest::of(result_bytes) != entry.result_sha256 {
        return Err(inconsistent(
            SUMMARY_FILE,
            format!("result digest of {result_name} differs"),
        ));
    }
    let derived = derive(spec, &observation, observation_sha256);
    if derived != result {
        return Err(inconsistent(
            &result_name,
            format!(
                "does not follow from {observation_name} (derived verdict {})",
                derived.verdict.name()
            ),
        ));
    }
    if entry.verdict != result.verdict {
        return Err(inconsistent(
            SUMMARY_FILE,
            format!("verdict of {} differs from {result_name}", spec.id),
        ));
    }
    Ok(result)
}

/// The summary's counts and status, and `junit.xml`, follow from the results.
fn check_totals(
    summary: &Summary,
    results: &[ScenarioResult],
    contents: &Contents,
) -> Result<(), EvidenceError> {
    let (passed, failed, skipped, status) = tally(results);
    if (passed, failed, skipped, status)
        != (
            summary.passed,
            summary.failed,
            summary.skipped,
            summary.status,
        )
    {
        return Err(inconsistent(
            SUMMARY_FILE,
            "counts or status do not follow from the results",
        ));
    }
    if contents.get(JUNIT_FILE)? != junit_xml(results)?.as_bytes() {
        return Err(inconsistent(
            JUNIT_FILE,
            "does not match the report generated from the results",
        ));
    }
    Ok(())
}

/// Nothing is listed beyond this schema's files.
fn check_no_extra_files(listed: &BTreeSet<String>) -> Result<(), EvidenceError> {
    let expected_files: BTreeSet<String> = REGISTRY
        .iter()
        .flat_map(|spec| [observation_file(spec), result_file(spec)])
        .chain(
            [SUMMARY_FILE, PROVENANCE_FILE, JUNIT_FILE]
                .iter()
                .map(|s| (*s).to_owned()),
        )
        .collect();
    if let Some(extra) = listed.difference(&expected_files).next() {
        return Err(inconsistent(extra, "is not part of this schema's artifact"));
    }
    Ok(())
}
