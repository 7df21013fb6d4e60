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
/// The in-toto test-result predicate type (v0.1), the receipt's `predicateType`.
pub const PREDICATE_TYPE: &str = "https://in-toto.io/attestation/test-result/v0.1";
/// ShardLift's schema id of a receipt, its top-level `schema`.
pub const SCHEMA: &str = "shardlift.test-receipt";
/// The one receipt schema version this build writes and reads.
pub const VERSION: u32 = 1;
/// The SSHSIG namespace of receipt signatures (detached, in `FILE.sig`).
pub const SIGNATURE_NAMESPACE: &str = "shardlift-receipt-v1";

/// A test receipt: the in-toto Statement with ShardLift's schema header and extension
/// block (closed: unknown fields are refused).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// `_type`: [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// [`SCHEMA`].
    pub schema: String,
    /// [`VERSION`].
    pub version: u32,
    /// The one subject: `git-commit`, digest `gitCommit` = the extension's commit.
    pub subject: Vec<ResourceDescriptor>,
    /// `predicateType`: [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The test-result predicate, derived from the extension ([`Receipt::assemble`]).
    pub predicate: TestResult,
    /// The ShardLift extension block: what the predicate is derived from.
    pub shardlift: Extension,
}

shardlift::canonical_record!(Receipt, SCHEMA, VERSION, 64 << 20);

/// The in-toto test-result predicate (v0.1).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TestResult {
    /// `result`: the session's outcome.
    pub result: Outcome,
    /// `configuration`: one descriptor per shard, `shard:<name>` with the SHA-256 of its
    /// narrow manifest.
    pub configuration: Vec<ResourceDescriptor>,
    /// `passedTests`: the IDs of the tests that passed, sorted.
    #[serde(rename = "passedTests")]
    pub passed_tests: Vec<String>,
    /// `failedTests`: the IDs of the tests that failed, sorted.
    #[serde(rename = "failedTests")]
    pub failed_tests: Vec<String>,
}

/// The outcome of a shard or session, spelled as the test-result predicate spells it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `PASSED`: the command succeeded and no test failed.
    #[serde(rename = "PASSED")]
    Passed,
    /// `FAILED`: anything else.
    #[serde(rename = "FAILED")]
    Failed,
}

/// One test's outcome, as its runner reported it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TestOutcome {
    /// `passed`: libtest's `ok`.
    Passed,
    /// `failed`: libtest's `FAILED`.
    Failed,
    /// `ignored`: not run.
    Ignored,
}

/// The ShardLift extension block, `shardlift` in the receipt.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Extension {
    /// The commit every fresh shard was recorded at.
    pub commit: String,
    /// Global fingerprint of the tracked tree: the git tree id of `commit`.
    pub tree: String,
    /// How the run was made: `ci` when `CI` is set, else `local`, unless given.
    pub mode: String,
    /// The Rust toolchain of the recording host.
    pub toolchain: Toolchain,
    /// The rustc host triple.
    pub platform: String,
    /// The recording tool and its version (`pipeline 0.1.0`).
    pub tool: String,
    /// Whether any shard was recorded from a working tree that was not clean.
    pub dirty: bool,
    /// The session's span and outcome (for a merge, over every input).
    pub session: Session,
    /// Every shard, fresh or carried.
    pub shards: Vec<Shard>,
    /// Every test ID with its outcome and shard.
    pub tests: BTreeMap<String, TestEntry>,
    /// For merged receipts, one entry per merged input; empty for a recorded one.
    pub inputs: Vec<InputSummary>,
}

/// The toolchain versions, each the first line of its `--version`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Toolchain {
    /// `rustc --version`, or `absent`.
    pub rustc: String,
    /// `cargo --version`, or `absent`.
    pub cargo: String,
    /// `cargo nextest --version`, or `absent`.
    pub nextest: String,
}

/// When the recording ran and how it ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// RFC 3339 UTC.
    pub started: String,
    /// RFC 3339 UTC.
    pub finished: String,
    /// `FAILED` when any shard failed.
    pub outcome: Outcome,
}

/// One row of the test table.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TestEntry {
    /// The shard that ran the test.
    pub shard: String,
    /// Its outcome there.
    pub outcome: TestOutcome,
}

/// One lane's run: what it ran, at which commit and scope, and what its tests did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// Unique within a receipt (the lane name).
    pub name: String,
    /// The commit HEAD was at when the lane ran.
    pub commit: String,
    /// Whether the working tree was not clean when it ran.
    pub dirty: bool,
    /// The declared scope of files the shard's result depends on.
    pub scope: Scope,
    /// Digest of the declared scope (paths, extra paths, excluded paths).
    pub scope_fingerprint: Digest,
    /// The narrow manifest of the scope at `commit`.
    pub manifest: Manifest,
    /// [`Manifest::digest`] of `manifest`.
    pub manifest_digest: Digest,
    /// The lane command, argument by argument.
    pub command: Vec<String>,
    /// The variables that steer a cargo test run (`CI`, `RUST_TEST_THREADS`,
    /// `RUST_BACKTRACE`, `SHARDLIFT_*`, `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, `RUSTFLAGS`), as set.
    pub environment: BTreeMap<String, String>,
    /// When the command started, RFC 3339 UTC.
    pub started: String,
    /// When it ended, RFC 3339 UTC.
    pub finished: String,
    /// How the command ended.
    pub exit: ExitStatus,
    /// `PASSED` when the command succeeded, no test failed and no test binary stopped
    /// before its summary line.
    pub outcome: Outcome,
    /// The exact member test IDs, sorted.
    pub test_ids: Vec<String>,
    /// Its tests by outcome.
    pub counts: Counts,
    /// Present when the shard was carried forward from an older receipt.
    pub carried: Option<Carried>,
}

/// The files a shard's result depends on, as declared to the recorder.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// Tracked paths (files or folders, `.` for the whole tree), pinned by git blob id at
    /// the shard's commit.
    pub paths: Vec<String>,
    /// Working-tree paths, untracked ones included, pinned by the SHA-256 of their bytes.
    pub extra_paths: Vec<String>,
    /// Paths left out of the manifest, with everything under them.
    pub excluded_paths: Vec<String>,
}

impl Scope {
    /// The scope's digest: a framed SHA-256 (`shardlift.receipt.scope.v1`) of the three
    /// lists in order.
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
    /// Tracked path → git blob id (or `commit:<id>` for a submodule).
    pub blobs: BTreeMap<String, String>,
    /// Extra path → SHA-256 of its bytes; `None` when absent.
    pub extras: BTreeMap<String, Option<Digest>>,
}

impl Manifest {
    /// The manifest's digest: a framed SHA-256 (`shardlift.receipt.manifest.v1`) of every
    /// blob entry, then every extra entry, in path order.
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

/// How the lane command ended: exactly one of the two is set.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExitStatus {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
}

/// libtest's own counts: tests that reported `ok`, `FAILED` or `ignored`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// Tests that reported `ok`.
    pub passed: u64,
    /// Tests that reported `FAILED`.
    pub failed: u64,
    /// Tests that reported `ignored`.
    pub ignored: u64,
}

impl Counts {
    /// Every test counted.
    pub fn total(&self) -> u64 {
        self.passed + self.failed + self.ignored
    }

    /// Counts one more test with `outcome`.
    pub fn add(&mut self, outcome: TestOutcome) {
        match outcome {
            TestOutcome::Passed => self.passed += 1,
            TestOutcome::Failed => self.failed += 1,
            TestOutcome::Ignored => self.ignored += 1,
        }
    }

    /// The sum of two counts, field by field.
    pub fn plus(self, other: Counts) -> Counts {
        Counts {
            passed: self.passed + other.passed,
            failed: self.failed + other.failed,
            ignored: self.ignored + other.ignored,
        }
    }
}

/// Where a carried-forward shard came from.
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

/// One input of a merged receipt.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InputSummary {
    /// The input's file name.
    pub name: String,
    /// SHA-256 of the input file's bytes.
    pub digest: Digest,
    /// The names of its shards.
    pub shards: Vec<String>,
    /// Its tests by outcome.
    pub counts: Counts,
    /// Its session's start, RFC 3339 UTC.
    pub started: String,
    /// Its session's end, RFC 3339 UTC.
    pub finished: String,
    /// Its session's outcome.
    pub outcome: Outcome,
    /// The allowed-signers principal whose signature was verified, when inputs were verified.
    pub signer: Option<String>,
}

impl Receipt {
    /// The receipt's canonical (RFC 8785) bytes.
    pub fn encode(&self) -> Result<Vec<u8>, CanonicalError> {
        canonical::encode(self)
    }

    /// Decodes canonical bytes into a receipt (closed schema, canonical form required).
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

    /// The test table's counts by outcome.
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

/// `at` as RFC 3339, whole seconds (as [`now_rfc3339`] writes it).
pub fn format_time(at: time::OffsetDateTime) -> String {
    let at = at.replace_nanosecond(0).unwrap_or(at);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

/// Parses an RFC 3339 time; `None` when it is not one.
pub fn parse_time(text: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}
