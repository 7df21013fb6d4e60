//! Writing an artifact: records, the JUnit report and the manifest, in one directory.
use std::path::Path;

use crate::core::canonical::{self, CanonicalRecord};
use crate::core::digest::Digest;
use crate::durable::{self, DurableError, RealFs, WriteOptions};

use crate::orchestrate::invariants::registry::{ScenarioSpec, REGISTRY};

use super::error::inconsistent;
use super::*;

/// The file name of `spec`'s observation: `observation-NN-<id>.json`.
pub fn observation_file(spec: &ScenarioSpec) -> String {
    format!("observation-{:02}-{}.json", spec.ordinal, spec.id)
}

/// The file name of `spec`'s result: `result-NN-<id>.json`.
pub fn result_file(spec: &ScenarioSpec) -> String {
    format!("result-{:02}-{}.json", spec.ordinal, spec.id)
}

fn encode_record<R: CanonicalRecord>(file: &str, record: &R) -> Result<Vec<u8>, EvidenceError> {
    canonical::encode(record).map_err(|source| EvidenceError::Record {
        file: file.to_owned(),
        source,
    })
}

/// The JUnit report: one test case per scenario, generated from the results only and
/// serialised by `quick-junit` (escaping included), so it is a function of the results.
pub fn junit_xml(results: &[ScenarioResult]) -> Result<String, EvidenceError> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new("shardlift.invariants");
    for result in results {
        let name = format!("{:02}-{}", result.ordinal, result.scenario);
        let status = match result.verdict {
            Verdict::Pass => TestCaseStatus::success(),
            Verdict::Skipped => TestCaseStatus::skipped(),
            Verdict::Fail => {
                let mut message = Vec::new();
                if !result.failed_checks.is_empty() {
                    message.push(format!(
                        "failed checks: {}",
                        result.failed_checks.join(", ")
                    ));
                }
                if !result.missing_checks.is_empty() {
                    message.push(format!(
                        "missing checks: {}",
                        result.missing_checks.join(", ")
                    ));
                }
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(message.join("; "));
                status
            }
        };
        let mut case = TestCase::new(name, status);
        case.set_classname("shardlift.invariants");
        suite.add_test_case(case);
    }
    let mut report = Report::new("shardlift.invariants");
    report.add_test_suite(suite);
    report
        .to_string()
        .map_err(|error| EvidenceError::Junit(error.to_string()))
}

/// Counts and status of a set of results.
pub fn tally(results: &[ScenarioResult]) -> (u32, u32, u32, SuiteStatus) {
    let count = |v: Verdict| results.iter().filter(|r| r.verdict == v).count() as u32;
    let (passed, failed, skipped) = (
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Skipped),
    );
    let status = if failed > 0 || passed + skipped != REGISTRY.len() as u32 {
        SuiteStatus::Failed
    } else if skipped > 0 {
        SuiteStatus::PassedWithSkips
    } else {
        SuiteStatus::AllPassed
    };
    (passed, failed, skipped, status)
}

/// Writes a complete artifact into the new directory `dir` (it must not exist) and
/// returns its summary. `observations` must follow [`REGISTRY`] order.
pub fn write_artifact(
    dir: &Path,
    provenance: &Provenance,
    observations: &[Observation],
) -> Result<Summary, EvidenceError> {
    if observations.len() != REGISTRY.len() {
        return Err(inconsistent(
            SUMMARY_FILE,
            format!(
                "{} observations for {} registered scenarios",
                observations.len(),
                REGISTRY.len()
            ),
        ));
    }
    create_artifact_dir(dir)?;
    let provenance_bytes = encode_record(PROVENANCE_FILE, provenance)?;
    let provenance_sha256 = Digest::of(&provenance_bytes);
    let scenarios = encode_scenarios(observations)?;
    let (passed, failed, skipped, status) = tally(&scenarios.results);
    let summary = Summary {
        schema: SUMMARY_SCHEMA.to_owned(),
        version: EVIDENCE_VERSION,
        suite: "shardlift.invariants".into(),
        registered: REGISTRY.len() as u32,
        passed,
        failed,
        skipped,
        status,
        claim_boundary: ClaimBoundary::current(),
        provenance_sha256,
        entries: scenarios.entries,
    };
    let mut files = scenarios.files;
    files.push((PROVENANCE_FILE.to_owned(), provenance_bytes));
    files.push((
        SUMMARY_FILE.to_owned(),
        encode_record(SUMMARY_FILE, &summary)?,
    ));
    files.push((
        JUNIT_FILE.to_owned(),
        junit_xml(&scenarios.results)?.into_bytes(),
    ));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let manifest_bytes = encode_record(MANIFEST_FILE, &manifest_of(&files))?;
    files.push((MANIFEST_FILE.to_owned(), manifest_bytes));
    for (name, bytes) in &files {
        durable::write_file(&dir.join(name), bytes, WriteOptions::REPLACEABLE)
            .map_err(|error| write_error(name, error))?;
    }
    Ok(summary)
}

/// Creates the artifact directory (never reusing one) and makes its entry durable.
fn create_artifact_dir(dir: &Path) -> Result<(), EvidenceError> {
    let dir_name = dir.display().to_string();
    std::fs::create_dir(dir).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => EvidenceError::Exists(dir_name.clone()),
        _ => EvidenceError::Io {
            file: dir_name.clone(),
            source,
        },
    })?;
    durable::ensure_dir_with(&RealFs, dir).map_err(|error| write_error(&dir_name, error))
}

/// Every scenario's observation and result records, their summary entries and results.
struct EncodedScenarios {
    entries: Vec<SummaryEntry>,
    results: Vec<ScenarioResult>,
    files: Vec<(String, Vec<u8>)>,
}

/// Encodes each observation, derives its result, and binds both into a summary entry.
fn encode_scenarios(observations: &[Observation]) -> Result<EncodedScenarios, EvidenceError> {
    let mut encoded = EncodedScenarios {
        entries: Vec::new(),
        results: Vec::new(),
        files: Vec::new(),
    };
    for (spec, observation) in REGISTRY.iter().zip(observations) {
        let observation_name = observation_file(spec);
        let observation_bytes = encode_record(&observation_name, observation)?;
        let observation_sha256 = Digest::of(&observation_bytes);
        let result = derive(spec, observation, observation_sha256);
        let result_name = result_file(spec);
        let result_bytes = encode_record(&result_name, &result)?;
        encoded.entries.push(SummaryEntry {
            ordinal: spec.ordinal,
            scenario: spec.id.to_owned(),
            claim: spec.claim.to_owned(),
            verdict: result.verdict,
            observation_file: observation_name.clone(),
            observation_sha256,
            result_file: result_name.clone(),
            result_sha256: Digest::of(&result_bytes),
        });
        encoded.files.push((observation_name, observation_bytes));
        encoded.files.push((result_name, result_bytes));
        encoded.results.push(result);
    }
    Ok(encoded)
}

/// The manifest over `files` (already in name order).
fn manifest_of(files: &[(String, Vec<u8>)]) -> Manifest {
    Manifest {
        schema: MANIFEST_SCHEMA.to_owned(),
        version: EVIDENCE_VERSION,
        algorithm: "sha256".into(),
        files: files
            .iter()
            .map(|(name, bytes)| ManifestEntry {
                file: name.clone(),
                bytes: bytes.len() as u64,
                sha256: Digest::of(bytes),
            })
            .collect(),
    }
}

/// A failed durable write of `file`, as the artifact's error.
fn write_error(file: &str, error: DurableError) -> EvidenceError {
    match error {
        DurableError::Io { source, .. } | DurableError::Fsync { source, .. } => EvidenceError::Io {
            file: file.to_owned(),
            source,
        },
        other => EvidenceError::Durable {
            file: file.to_owned(),
            source: other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(ordinal: u32, verdict: Verdict, failed: &[&str]) -> ScenarioResult {
        ScenarioResult {
            schema: RESULT_SCHEMA.to_owned(),
            version: EVIDENCE_VERSION,
            ordinal,
            scenario: format!("scenario-{ordinal}"),
            observation_sha256: Digest([0; 32]),
            verdict,
            checks_total: 2,
            failed_checks: failed.iter().map(|s| s.to_string()).collect(),
            missing_checks: Vec::new(),
        }
    }

    #[test]
    fn junit_counts_and_escapes_follow_the_results() {
        let results = [
            result(1, Verdict::Pass, &[]),
            result(2, Verdict::Fail, &["a<b&\"c\""]),
            result(3, Verdict::Skipped, &[]),
        ];
        let xml = junit_xml(&results).expect("serialise");
        assert!(xml.contains("tests=\"3\""), "{xml}");
        assert!(xml.contains("failures=\"1\""), "{xml}");
        assert!(xml.contains("02-scenario-2"), "{xml}");
        assert!(xml.contains("a&lt;b&amp;"), "{xml}");
        assert!(!xml.contains("a<b"), "{xml}");
        assert!(xml.contains("<skipped"), "{xml}");
        // A different verdict is a different report: the verifier's byte comparison sees it.
        let forged = [
            result(1, Verdict::Pass, &[]),
            result(2, Verdict::Pass, &[]),
            result(3, Verdict::Skipped, &[]),
        ];
        assert_ne!(junit_xml(&forged).expect("serialise"), xml);
    }
}
