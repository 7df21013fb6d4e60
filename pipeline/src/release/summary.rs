//! `summary.json`: a path-free summary of both runs, closed schema, canonical JSON.
use serde::{Deserialize, Serialize};
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::{BundleSummary, CheckpointEntry};

pub const SUMMARY_SCHEMA: &str = "shardlift.release.summary";
pub const SUMMARY_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSummary {
    pub schema: String,
    pub version: u32,
    pub source: SourceSummary,
    pub runs: Vec<RunSummary>,
    pub nonclaims: Vec<String>,
}

shardlift::canonical_record!(ReleaseSummary, SUMMARY_SCHEMA, SUMMARY_VERSION, 1 << 20);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSummary {
    pub commit: String,
    pub tree: String,
    /// How many runtime-source blobs the Statement binds.
    pub runtime_sources: u64,
}

/// One barrier's run, as verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSummary {
    pub barrier: String,
    pub status: RunStatus,
    pub candidate_installed: bool,
    pub selected_generation: u64,
    pub selected_step: u64,
    pub replayed_batches: u64,
    pub final_checkpoint: CheckpointEntry,
    pub logit_probe_equal: bool,
    pub logical_state_roots_equal: bool,
    pub ledger_digests_equal: bool,
    pub worker_exits: u64,
    /// The bundle's folder inside the evidence directory.
    pub bundle: String,
    pub audit_sha256: Digest,
    /// `verify-bundle` accepted the bundle.
    pub bundle_verified: bool,
}

impl RunSummary {
    /// The summary of a verified bundle kept at `folder`.
    pub fn from_bundle(folder: &str, summary: &BundleSummary) -> Self {
        RunSummary {
            barrier: summary.outcome.barrier.clone(),
            status: RunStatus::from(summary.run_status.as_str()),
            candidate_installed: summary.outcome.candidate_installed,
            selected_generation: summary.outcome.selected_generation,
            selected_step: summary.outcome.selected_step,
            replayed_batches: summary.outcome.replayed_batches,
            final_checkpoint: summary.outcome.final_checkpoint.clone(),
            logit_probe_equal: summary.outcome.logit_probe_equal,
            logical_state_roots_equal: summary.outcome.logical_state_roots_equal,
            ledger_digests_equal: summary.outcome.ledger_digests_equal,
            worker_exits: summary.outcome.worker_exits,
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
    Passed,
    Failed,
    Other(String),
}

impl RunStatus {
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
    Verified,
}

impl BundleStatus {
    pub fn parse(word: &str) -> Option<BundleStatus> {
        (word == "verified").then_some(BundleStatus::Verified)
    }
}
