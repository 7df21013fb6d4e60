//! The suite's evidence artifact: closed, versioned canonical-JSON records, a JUnit
//! report, and a SHA-256 manifest over every other file; plus the verifier.
//!
//! Layout of an artifact directory (flat, nothing else allowed):
//! - `provenance.json` — bootstrap attestation of the loaded libtorch, the launcher;
//! - `summary.json` — counts, suite status, the claim boundary, and per scenario the
//!   digests of its observation and derived result;
//! - `observation-NN-<id>.json` — what the scenario observed (checks, facts, and what is
//!   not independently observed);
//! - `result-NN-<id>.json` — the verdict derived from the observation (and its digest);
//! - `junit.xml` — one test case per scenario, generated from the results;
//! - `manifest.json` — SHA-256 and size of every other file.
//!
//! Nothing here holds a path, pid, port, rendezvous value, environment value, timestamp,
//! raw marker or native checkpoint bytes; only derived booleans, counts and digests.
use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::core::canonical::{self, CanonicalError, CanonicalRecord};
use crate::core::digest::Digest;
use crate::durable::{self, DurableError, RealFs, WriteOptions};

use crate::orchestrate::invariants::registry::{ScenarioSpec, REGISTRY};

/// The one evidence schema version this build writes and reads.
pub const EVIDENCE_VERSION: u32 = 1;
/// Schema name of [`Observation`].
pub const OBSERVATION_SCHEMA: &str = "shardlift.invariants.observation";
/// Schema name of [`ScenarioResult`].
pub const RESULT_SCHEMA: &str = "shardlift.invariants.result";
/// Schema name of [`Summary`].
pub const SUMMARY_SCHEMA: &str = "shardlift.invariants.summary";
/// Schema name of [`Provenance`].
pub const PROVENANCE_SCHEMA: &str = "shardlift.invariants.provenance";
/// Schema name of [`Manifest`].
pub const MANIFEST_SCHEMA: &str = "shardlift.invariants.manifest";

/// File name of the [`Summary`] in an artifact.
pub const SUMMARY_FILE: &str = "summary.json";
/// File name of the [`Provenance`] in an artifact.
pub const PROVENANCE_FILE: &str = "provenance.json";
/// File name of the JUnit report in an artifact.
pub const JUNIT_FILE: &str = "junit.xml";
/// File name of the [`Manifest`] in an artifact.
pub const MANIFEST_FILE: &str = "manifest.json";

const RECORD_CAP: u64 = 1 << 20;

/// Whether the scenario ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationStatus {
    /// It ran; its checks are what it saw.
    Observed,
    /// It did not run (the reason is in `skip_reason`).
    Skipped,
}

/// One comparison: what the invariant requires and what was seen (digests, counts,
/// booleans, all as text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The check's registered name.
    pub name: String,
    /// What the invariant requires.
    pub expected: String,
    /// What was seen; the check passes only when it equals `expected`.
    pub observed: String,
}

/// An informational fact (not a pass condition), e.g. the outer launcher's exit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// The fact's name.
    pub name: String,
    /// Its value, as text.
    pub value: String,
}

/// What one scenario observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    /// The record's schema name.
    pub schema: String,
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The scenario's position in the registry (1-based).
    pub ordinal: u32,
    /// The scenario's id.
    pub scenario: String,
    /// Whether it ran.
    pub status: ObservationStatus,
    /// Why it was skipped, if it was.
    pub skip_reason: Option<String>,
    /// The comparisons it made.
    pub checks: Vec<Check>,
    /// Informational facts (not pass conditions).
    pub facts: Vec<Fact>,
    /// Statements this run relies on but did not observe independently.
    pub not_independently_observed: Vec<String>,
}

crate::canonical_record!(
    Observation,
    OBSERVATION_SCHEMA,
    EVIDENCE_VERSION,
    RECORD_CAP
);

impl Observation {
    /// An empty observation for `spec`.
    pub fn new(spec: &ScenarioSpec) -> Self {
        Observation {
            schema: OBSERVATION_SCHEMA.to_owned(),
            version: EVIDENCE_VERSION,
            ordinal: spec.ordinal,
            scenario: spec.id.to_owned(),
            status: ObservationStatus::Observed,
            skip_reason: None,
            checks: Vec::new(),
            facts: Vec::new(),
            not_independently_observed: Vec::new(),
        }
    }

    /// A skipped observation for `spec`, with its reason.
    pub fn skipped(spec: &ScenarioSpec, reason: &str) -> Self {
        let mut observation = Observation::new(spec);
        observation.status = ObservationStatus::Skipped;
        observation.skip_reason = Some(reason.to_owned());
        observation
    }

    /// Adds a comparison.
    pub fn check(&mut self, name: &str, expected: impl ToString, observed: impl ToString) {
        self.checks.push(Check {
            name: name.to_owned(),
            expected: expected.to_string(),
            observed: observed.to_string(),
        });
    }

    /// Adds an informational fact.
    pub fn fact(&mut self, name: &str, value: impl ToString) {
        self.facts.push(Fact {
            name: name.to_owned(),
            value: value.to_string(),
        });
    }

    /// Adds a statement the run relies on but did not observe independently.
    pub fn not_observed(&mut self, statement: &str) {
        self.not_independently_observed.push(statement.to_owned());
    }
}

/// A scenario's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Observed, every registered check present and equal to what it requires.
    Pass,
    /// Anything else, including a skip of a scenario that may not be skipped.
    Fail,
    /// A skippable scenario that did not run.
    Skipped,
}

impl Verdict {
    /// The verdict's lower-case name, as serialised.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skipped => "skipped",
        }
    }
}

/// The result derived from one observation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioResult {
    /// The record's schema name.
    pub schema: String,
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The scenario's position in the registry (1-based).
    pub ordinal: u32,
    /// The scenario's id.
    pub scenario: String,
    /// SHA-256 of the observation file this result was derived from.
    pub observation_sha256: Digest,
    /// The verdict.
    pub verdict: Verdict,
    /// Checks in the observation.
    pub checks_total: u32,
    /// Checks whose observed value differs from the expected one.
    pub failed_checks: Vec<String>,
    /// Registered checks the observation does not contain.
    pub missing_checks: Vec<String>,
}

crate::canonical_record!(ScenarioResult, RESULT_SCHEMA, EVIDENCE_VERSION, RECORD_CAP);

/// Derives the result: a scenario passes only if it was observed, contains every
/// registered check, and every check's observed value equals the expected one.
pub fn derive(spec: &ScenarioSpec, observation: &Observation, digest: Digest) -> ScenarioResult {
    let failed_checks: Vec<String> = observation
        .checks
        .iter()
        .filter(|c| c.expected != c.observed)
        .map(|c| c.name.clone())
        .collect();
    let present: BTreeSet<&str> = observation.checks.iter().map(|c| c.name.as_str()).collect();
    let missing_checks: Vec<String> = spec
        .required_checks
        .iter()
        .filter(|name| !present.contains(**name))
        .map(|name| (*name).to_owned())
        .collect();
    let identity_ok = observation.ordinal == spec.ordinal && observation.scenario == spec.id;
    let verdict = match observation.status {
        ObservationStatus::Skipped if spec.skippable && observation.checks.is_empty() => {
            Verdict::Skipped
        }
        ObservationStatus::Skipped => Verdict::Fail,
        ObservationStatus::Observed
            if identity_ok && failed_checks.is_empty() && missing_checks.is_empty() =>
        {
            Verdict::Pass
        }
        ObservationStatus::Observed => Verdict::Fail,
    };
    ScenarioResult {
        schema: RESULT_SCHEMA.to_owned(),
        version: EVIDENCE_VERSION,
        ordinal: spec.ordinal,
        scenario: spec.id.to_owned(),
        observation_sha256: digest,
        verdict,
        checks_total: observation.checks.len() as u32,
        failed_checks,
        missing_checks,
    }
}

/// What the evidence claims, and what it does not, as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBoundary {
    /// Hosts the suite ran on (1).
    pub hosts: u32,
    /// The device the arithmetic ran on (`cpu`).
    pub device: String,
    /// Most training processes in any one scenario.
    pub training_processes_per_scenario_max: u32,
    /// Failure points injected per scenario.
    pub injected_failure_points_per_scenario: u32,
    /// Whether anything crossed hosts (no).
    pub multi_node: bool,
    /// Whether the evidence claims anything about performance (no).
    pub performance_claim: bool,
    /// The boundary in one sentence.
    pub statement: String,
    /// What the evidence does not claim, item by item.
    pub not_claimed: Vec<String>,
}

impl ClaimBoundary {
    /// The boundary of this build's suite.
    pub fn current() -> Self {
        ClaimBoundary {
            hosts: 1,
            device: "cpu".into(),
            training_processes_per_scenario_max: 2,
            injected_failure_points_per_scenario: 1,
            multi_node: false,
            performance_claim: false,
            statement: "Single host, CPU only, one or two training processes per scenario (plus isolated \
                        publisher and recovery child processes), one fixed injected failure point per scenario (the elastic case: rank 1 exits with code 91 \
                        on attempt 0 of a fixed 2-to-2 group under torch.distributed.run with \
                        --max-restarts=1)."
                .into(),
            not_claimed: vec![
                "multi-node or multi-host behaviour".into(),
                "GPU or any accelerator".into(),
                "elastic membership changes (scale up or down) or failures other than the one injected point".into(),
                "power-loss durability on real hardware".into(),
                "performance or scalability".into(),
                "authenticity of this artifact (the manifest is not signed)".into(),
            ],
        }
    }
}

/// One line of the summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryEntry {
    /// The scenario's position in the registry (1-based).
    pub ordinal: u32,
    /// The scenario's id.
    pub scenario: String,
    /// The invariant it checks, in words (from the registry).
    pub claim: String,
    /// Its verdict.
    pub verdict: Verdict,
    /// Its observation's file name.
    pub observation_file: String,
    /// SHA-256 of that file.
    pub observation_sha256: Digest,
    /// Its result's file name.
    pub result_file: String,
    /// SHA-256 of that file.
    pub result_sha256: Digest,
}

/// The suite's overall status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SuiteStatus {
    /// Every registered scenario ran and passed.
    AllPassed,
    /// Nothing failed, but some scenarios were skipped: not a claim that all passed.
    PassedWithSkips,
    /// At least one scenario failed.
    Failed,
}

/// The artifact's summary (`summary.json`): counts, status, claim boundary, one entry per
/// registered scenario.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The record's schema name.
    pub schema: String,
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The suite's name (`shardlift.invariants`).
    pub suite: String,
    /// Scenarios in the registry.
    pub registered: u32,
    /// Scenarios that passed.
    pub passed: u32,
    /// Scenarios that failed.
    pub failed: u32,
    /// Scenarios skipped.
    pub skipped: u32,
    /// The overall status the counts imply.
    pub status: SuiteStatus,
    /// What the evidence claims and does not.
    pub claim_boundary: ClaimBoundary,
    /// SHA-256 of `provenance.json`.
    pub provenance_sha256: Digest,
    /// One per registered scenario, by ordinal.
    pub entries: Vec<SummaryEntry>,
}

crate::canonical_record!(Summary, SUMMARY_SCHEMA, EVIDENCE_VERSION, RECORD_CAP);

/// The start-up check of the loaded libtorch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootstrapAttestation {
    /// The tch crate version linked.
    pub tch_version: String,
    /// The libtorch release (e.g. `2.13.0`).
    pub libtorch_version: String,
    /// The libtorch build string, from the version file beside the library.
    pub libtorch_build: String,
    /// The library file attested (`libtorch_cpu.so`).
    pub library: String,
    /// SHA-256 of the library file this process actually mapped.
    pub library_sha256: Digest,
    /// Whether versions and digest matched a registered pair (the process refuses to
    /// run otherwise).
    pub registered_pair_matched: bool,
    /// Where the matched pair comes from (e.g. the pinned wheel).
    pub registered_origin: String,
    /// How each value was observed, in words.
    pub method: String,
}

/// The launcher used by the elastic scenario, if it ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LauncherProvenance {
    /// The launcher, in words (`torch.distributed.run`).
    pub launcher: String,
    /// The Python torch version the launcher imported.
    pub python_torch_version: String,
    /// Whether the launcher's wheel carries the same `libtorch_cpu.so` bytes as the
    /// library this process loaded (same pinned wheel).
    pub wheel_libtorch_cpu_matches_loaded: bool,
}

/// Where the run's arithmetic came from (`provenance.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The record's schema name.
    pub schema: String,
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The `shardlift` crate version.
    pub shardlift_version: String,
    /// The start-up check of the loaded libtorch.
    pub bootstrap_attestation: BootstrapAttestation,
    /// Intra-op threads torch ran with (1, for deterministic arithmetic).
    pub torch_threads: u32,
    /// SHA-256 of the four Fashion-MNIST payloads (train images and labels, test images
    /// and labels).
    pub dataset_payload_sha256: Vec<Digest>,
    /// The elastic scenario's launcher, if it ran.
    pub launcher: Option<LauncherProvenance>,
}

crate::canonical_record!(Provenance, PROVENANCE_SCHEMA, EVIDENCE_VERSION, RECORD_CAP);

/// One file of the artifact, as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// The file's name.
    pub file: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its SHA-256.
    pub sha256: Digest,
}

/// The artifact's manifest (`manifest.json`): every other file with its size and digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The record's schema name.
    pub schema: String,
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The digest algorithm (`sha256`).
    pub algorithm: String,
    /// Every other file of the artifact.
    pub files: Vec<ManifestEntry>,
}

crate::canonical_record!(Manifest, MANIFEST_SCHEMA, EVIDENCE_VERSION, RECORD_CAP);

/// Why writing or verifying an artifact failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// Reading or listing a file failed.
    #[error("{file}: {source}")]
    Io {
        /// The file concerned.
        file: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A record is not canonical JSON of its schema and version.
    #[error("{file}: {source}")]
    Record {
        /// The file concerned.
        file: String,
        /// Why it was refused.
        source: CanonicalError,
    },
    /// The manifest lists a file the directory lacks.
    #[error("{file}: listed in the manifest but missing")]
    Missing {
        /// The file concerned.
        file: String,
    },
    /// The directory holds a file the manifest does not list.
    #[error("{file}: present but not listed in the manifest")]
    Unlisted {
        /// The file concerned.
        file: String,
    },
    /// An entry of the directory is not a regular file.
    #[error("{file}: not a plain file (the artifact is a flat directory of files)")]
    NotAFile {
        /// The file concerned.
        file: String,
    },
    /// A file's bytes do not have the digest the manifest lists.
    #[error("{file}: sha256 is {found}, the manifest says {expected}")]
    DigestMismatch {
        /// The file concerned.
        file: String,
        /// The digest the manifest lists.
        expected: Digest,
        /// The digest of the file's bytes.
        found: Digest,
    },
    /// Records disagree with each other or with the registry (a count, a digest, a
    /// verdict that does not follow from its observation).
    #[error("{file}: {reason}")]
    Inconsistent {
        /// The file concerned.
        file: String,
        /// What disagrees.
        reason: String,
    },
    /// The artifact directory to write already exists.
    #[error("{0}: the artifact directory already exists; choose a new one")]
    Exists(String),
    /// A durable write of a file failed.
    #[error("{file}: {source}")]
    Durable {
        /// The file concerned.
        file: String,
        /// The underlying error.
        source: DurableError,
    },
    /// The JUnit report could not be serialised.
    #[error("junit.xml: cannot serialise the report: {0}")]
    Junit(String),
}

fn inconsistent(file: &str, reason: impl Into<String>) -> EvidenceError {
    EvidenceError::Inconsistent {
        file: file.to_owned(),
        reason: reason.into(),
    }
}

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
