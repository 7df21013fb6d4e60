//! The artifact's records: closed, versioned canonical-JSON schemas.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;

use crate::orchestrate::invariants::registry::ScenarioSpec;

use super::*;

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
