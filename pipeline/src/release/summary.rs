//! `summary.json`: a path-free summary of both runs, closed schema, canonical JSON.
use serde::{Deserialize, Serialize};
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::{BundleSummary, RunOutcome};

/// Schema id of `summary.json`.
pub const SUMMARY_SCHEMA: &str = "shardlift.release.summary";
/// Version 2: each run nests the bundle's `RunOutcome` instead of repeating its fields.
pub const SUMMARY_VERSION: u32 = 2;

/// `summary.json`: what the release runs showed, path-free.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSummary {
    /// [`SUMMARY_SCHEMA`].
    pub schema: String,
    /// [`SUMMARY_VERSION`].
    pub version: u32,
    /// The source revision bound.
    pub source: SourceSummary,
    /// One entry per barrier, in [`super::pins::BARRIERS`] order.
    pub runs: Vec<RunSummary>,
    /// What the evidence does not prove ([`super::pins::NONCLAIMS`]).
    pub nonclaims: Vec<String>,
}

shardlift::canonical_record!(ReleaseSummary, SUMMARY_SCHEMA, SUMMARY_VERSION, 1 << 20);

/// The source revision the runs were bound to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSummary {
    /// The commit id.
    pub commit: String,
    /// Its tree id.
    pub tree: String,
    /// How many runtime-source blobs the Statement binds.
    pub runtime_sources: u64,
}

/// One barrier's run, as verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSummary {
    /// The run's status as its audit records it.
    pub status: RunStatus,
    /// What the run showed, as the bundle's audit states it.
    pub outcome: RunOutcome,
    /// The bundle's folder inside the evidence directory.
    pub bundle: String,
    /// SHA-256 of the bundle's `audit.json`, which binds the whole bundle.
    pub audit_sha256: Digest,
    /// `verify-bundle` accepted the bundle.
    pub bundle_verified: bool,
}

impl RunSummary {
    /// The summary of a verified bundle kept at `folder`.
    pub fn from_bundle(folder: &str, summary: &BundleSummary) -> Self {
        RunSummary {
            status: RunStatus::from(summary.run_status.as_str()),
            outcome: summary.outcome.clone(),
            bundle: folder.to_owned(),
            audit_sha256: summary.audit_sha256,
            bundle_verified: BundleStatus::parse(summary.status) == Some(BundleStatus::Verified),
        }
    }
}

/// A run's status, as killer-demo prints it and the bundle's audit records it. Any other
/// word is kept as written, so it is reported, and serialises back, unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum RunStatus {
    /// `passed`.
    Passed,
    /// `failed`.
    Failed,
    /// Any other word, as written.
    Other(String),
}

impl RunStatus {
    /// The word, as written.
    pub fn as_str(&self) -> &str {
        match self {
            RunStatus::Passed => "passed",
            RunStatus::Failed => "failed",
            RunStatus::Other(word) => word,
        }
    }
}

impl From<&str> for RunStatus {
    fn from(word: &str) -> Self {
        match word {
            "passed" => RunStatus::Passed,
            "failed" => RunStatus::Failed,
            other => RunStatus::Other(other.to_owned()),
        }
    }
}

impl From<String> for RunStatus {
    fn from(word: String) -> Self {
        RunStatus::from(word.as_str())
    }
}

impl From<RunStatus> for String {
    fn from(status: RunStatus) -> Self {
        status.as_str().to_owned()
    }
}

/// The verdict `verify-bundle` (and [`shardlift::evidence::bundle::verify`]) reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleStatus {
    /// `verified`: the bundle verified.
    Verified,
}

impl BundleStatus {
    /// The status `word` names, if any.
    pub fn parse(word: &str) -> Option<BundleStatus> {
        (word == "verified").then_some(BundleStatus::Verified)
    }
}
