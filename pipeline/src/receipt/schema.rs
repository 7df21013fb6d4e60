//! The receipt document: an in-toto Statement v1 with the test-result predicate and a
//! closed ShardLift extension block, stored as RFC 8785 canonical JSON.
//!
//! Top level (all fields required, unknown fields refused):
//! - `_type` = `https://in-toto.io/Statement/v1`, `subject` = the git commit
//!   (`{"name":"git-commit","digest":{"gitCommit":…}}`),
//! - `predicateType` = `https://in-toto.io/attestation/test-result/v0.1`, `predicate` =
//!   `{result, configuration, passedTests, failedTests}` (`configuration` names each shard
//!   and the SHA-256 of its narrow manifest),
//! - `schema` = `shardlift.test-receipt`, `version` = 1 (ShardLift's closed-schema header;
//!   in-toto consumers ignore fields they do not know),
//! - `shardlift`: the extension block ([`Extension`]): commit, global fingerprint (the
//!   HEAD tree id), mode, toolchain, platform, tool, dirty, session, shards, the test table
//!   (every test's outcome and shard), and for merged receipts the inputs.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shardlift::core::canonical::{self, CanonicalError};
use shardlift::core::digest::{Digest, FramedHasher};

use crate::intoto::ResourceDescriptor;

use crate::intoto::STATEMENT_TYPE;
pub const PREDICATE_TYPE: &str = "https://in-toto.io/attestation/test-result/v0.1";
pub const SCHEMA: &str = "shardlift.test-receipt";
pub const VERSION: u32 = 1;
/// The SSHSIG namespace of receipt signatures (detached, in `FILE.sig`).
pub const SIGNATURE_NAMESPACE: &str = "shardlift-receipt-v1";

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub schema: String,
    pub version: u32,
    pub subject: Vec<ResourceDescriptor>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: TestResult,
    pub shardlift: Extension,
}

shardlift::canonical_record!(Receipt, SCHEMA, VERSION, 64 << 20);

/// The in-toto test-result predicate (v0.1).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TestResult {
    pub result: Outcome,
    pub configuration: Vec<ResourceDescriptor>,
    #[serde(rename = "passedTests")]
    pub passed_tests: Vec<String>,
    #[serde(rename = "failedTests")]
    pub failed_tests: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    #[serde(rename = "PASSED")]
    Passed,
    #[serde(rename = "FAILED")]
    Failed,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TestOutcome {
    Passed,
    Failed,
    Ignored,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Extension {
    /// The commit every fresh shard was recorded at.
    pub commit: String,
    /// Global fingerprint of the tracked tree: the git tree id of `commit`.
    pub tree: String,
    pub mode: String,
    pub toolchain: Toolchain,
    /// The rustc host triple.
    pub platform: String,
    /// The recording tool and its version (`pipeline 0.1.0`).
    pub tool: String,
    /// Whether any shard was recorded from a working tree that was not clean.
    pub dirty: bool,
    pub session: Session,
    pub shards: Vec<Shard>,
    /// Every test ID with its outcome and shard.
    pub tests: BTreeMap<String, TestEntry>,
    /// For merged receipts, one entry per merged input; empty for a recorded one.
    pub inputs: Vec<InputSummary>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Toolchain {
    pub rustc: String,
    pub cargo: String,
    /// `cargo nextest --version`, or `absent`.
    pub nextest: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// RFC 3339 UTC.
    pub started: String,
    pub finished: String,
    pub outcome: Outcome,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TestEntry {
    pub shard: String,
    pub outcome: TestOutcome,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// Unique within a receipt (the lane name).
    pub name: String,
    pub commit: String,
    pub dirty: bool,
    pub scope: Scope,
    /// Digest of the declared scope (paths, extra paths, excluded paths).
    pub scope_fingerprint: Digest,
    pub manifest: Manifest,
    pub manifest_digest: Digest,
    pub command: Vec<String>,
    pub environment: BTreeMap<String, String>,
    pub started: String,
    pub finished: String,
    pub exit: ExitStatus,
    pub outcome: Outcome,
    /// The exact member test IDs, sorted.
    pub test_ids: Vec<String>,
    pub counts: Counts,
    /// Present when the shard was carried forward from an older receipt.
    pub carried: Option<Carried>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    pub paths: Vec<String>,
    pub extra_paths: Vec<String>,
    pub excluded_paths: Vec<String>,
}

impl Scope {
    pub fn fingerprint(&self) -> Digest {
        let mut hasher = FramedHasher::new("shardlift.receipt.scope.v1");
        for list in [&self.paths, &self.extra_paths, &self.excluded_paths] {
            hasher.u64(list.len() as u64);
            for item in list {
                hasher.field(item.as_bytes());
            }
        }
        hasher.finish()
    }
}

/// The narrow manifest: git blob ids of the tracked files under `scope.paths` at the
/// shard's commit (minus `scope.excluded_paths`), and SHA-256 digests of the files under
/// `scope.extra_paths` in the working tree (`null`: absent).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub blobs: BTreeMap<String, String>,
    pub extras: BTreeMap<String, Option<Digest>>,
}

impl Manifest {
    pub fn digest(&self) -> Digest {
        let mut hasher = FramedHasher::new("shardlift.receipt.manifest.v1");
        hasher.u64(self.blobs.len() as u64);
        for (path, blob) in &self.blobs {
            hasher.field(path.as_bytes()).field(blob.as_bytes());
        }
        hasher.u64(self.extras.len() as u64);
        for (path, digest) in &self.extras {
            hasher.field(path.as_bytes());
            match digest {
                Some(digest) => hasher.field(&digest.0),
                None => hasher.field(b""),
            };
        }
        hasher.finish()
    }

    /// Paths whose entries differ between `self` and `other`, sorted.
    pub fn changed_paths(&self, other: &Manifest) -> Vec<String> {
        let mut changed: Vec<String> = Vec::new();
        for key in self.blobs.keys().chain(other.blobs.keys()) {
            if self.blobs.get(key) != other.blobs.get(key) && !changed.contains(key) {
                changed.push(key.clone());
            }
        }
        for key in self.extras.keys().chain(other.extras.keys()) {
            if self.extras.get(key) != other.extras.get(key) && !changed.contains(key) {
                changed.push(key.clone());
            }
        }
        changed.sort();
        changed
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// libtest's own counts: tests that reported `ok`, `FAILED` or `ignored`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.passed + self.failed + self.ignored
    }

    pub fn add(&mut self, outcome: TestOutcome) {
        match outcome {
            TestOutcome::Passed => self.passed += 1,
            TestOutcome::Failed => self.failed += 1,
            TestOutcome::Ignored => self.ignored += 1,
        }
    }

    pub fn plus(self, other: Counts) -> Counts {
        Counts {
            passed: self.passed + other.passed,
            failed: self.failed + other.failed,
            ignored: self.ignored + other.ignored,
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Carried {
    /// SHA-256 of the receipt file the shard was carried from.
    pub from_receipt: Digest,
    /// When it was carried (RFC 3339 UTC).
    pub carried_at: String,
    /// The shard's dirty flag as recorded originally.
    pub original_dirty: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InputSummary {
    /// The input's file name.
    pub name: String,
    pub digest: Digest,
    pub shards: Vec<String>,
    pub counts: Counts,
    pub started: String,
    pub finished: String,
    pub outcome: Outcome,
    /// The allowed-signers principal whose signature was verified, when inputs were verified.
    pub signer: Option<String>,
}

impl Receipt {
    pub fn encode(&self) -> Result<Vec<u8>, CanonicalError> {
        canonical::encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Receipt, CanonicalError> {
        canonical::decode(bytes)
    }

    /// Builds the Statement around an extension block, deriving the predicate and subject.
    pub fn assemble(extension: Extension) -> Receipt {
        let mut passed = Vec::new();
        let mut failed = Vec::new();
        for (id, entry) in &extension.tests {
            match entry.outcome {
                TestOutcome::Passed => passed.push(id.clone()),
                TestOutcome::Failed => failed.push(id.clone()),
                TestOutcome::Ignored => {}
            }
        }
        let configuration = extension
            .shards
            .iter()
            .map(|shard| {
                ResourceDescriptor::named(
                    format!("shard:{}", shard.name),
                    &[("sha256", shard.manifest_digest.to_hex())],
                )
            })
            .collect();
        Receipt {
            statement_type: STATEMENT_TYPE.to_owned(),
            schema: SCHEMA.to_owned(),
            version: VERSION,
            subject: vec![ResourceDescriptor::named(
                "git-commit",
                &[("gitCommit", extension.commit.clone())],
            )],
            predicate_type: PREDICATE_TYPE.to_owned(),
            predicate: TestResult {
                result: extension.session.outcome,
                configuration,
                passed_tests: passed,
                failed_tests: failed,
            },
            shardlift: extension,
        }
    }

    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for entry in self.shardlift.tests.values() {
            counts.add(entry.outcome);
        }
        counts
    }
}

/// RFC 3339 UTC, whole seconds.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    format_time(now)
}

pub fn format_time(at: time::OffsetDateTime) -> String {
    let at = at.replace_nanosecond(0).unwrap_or(at);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

pub fn parse_time(text: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}
