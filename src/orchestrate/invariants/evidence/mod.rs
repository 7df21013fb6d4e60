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
mod error;
mod records;
mod verify;
mod write;

pub use error::EvidenceError;
pub use records::*;
pub use verify::verify_artifact;
pub use write::{junit_xml, observation_file, result_file, tally, write_artifact};

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

pub(super) const RECORD_CAP: u64 = 1 << 20;
