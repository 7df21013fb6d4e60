//! `receipt merge` (with carry-forward) and `receipt plan`.
//!
//! Merge refuses inputs that disagree on schema, commit, global fingerprint, mode,
//! toolchain, platform or tool version, and duplicate shard names or test IDs, each with
//! its own error. The union ORs `dirty`, spans the session times of the inputs, fails if
//! any input failed, and records each input (name, digest, shards, counts, times, signer).
//!
//! Carry-forward takes, from an older receipt, each shard absent from the fresh inputs, but
//! only when all five conditions hold ([`StaleReason`] names the one that does not):
//! (a) its commit is the current commit or an ancestor of it; (b) its narrow manifest,
//! extra paths included, recomputes identically at the current commit; (c) it was recorded
//! from a clean tree; (d) none of its test IDs is also a fresh one; (e) every test ID it
//! claims is in the old receipt's test table. Fresh shards always win. `plan` applies the
//! same conditions as a dry run.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use shardlift::core::canonical::CanonicalError;
use shardlift::core::digest::Digest;

use super::manifest::{self, ManifestError};
use super::schema::{
    self, Carried, Extension, InputSummary, Outcome, Receipt, Session, Shard, TestEntry,
};
use super::{read_file, write_durably, write_signature, IoError, SignatureError};
use crate::git::{GitError, Repo};

/// Why receipts could not be merged or planned.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No input was given.
    #[error("nothing to merge")]
    NoInputs,
    /// An input or the output could not be read or written.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A receipt file does not decode under the receipt schema.
    #[error("{path}: {source}")]
    Decode {
        /// The receipt file.
        path: PathBuf,
        /// Why it does not decode.
        source: CanonicalError,
    },
    /// An input's `schema@version` header differs from the first input's.
    #[error("{path} has schema {found}, but {first} has {expected}")]
    SchemaMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// An input was recorded at another commit.
    #[error("{path} was recorded at commit {found}, but {first} at {expected}")]
    CommitMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// An input has another global fingerprint (tree id).
    #[error("{path} has global fingerprint {found}, but {first} has {expected}")]
    FingerprintMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// An input has another mode (`ci`, `local`, …).
    #[error("{path} has mode {found:?}, but {first} has {expected:?}")]
    ModeMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// An input was recorded with another toolchain.
    #[error("{path} has toolchain {found}, but {first} has {expected}")]
    ToolchainMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// An input was recorded on another platform (host triple).
    #[error("{path} has platform {found}, but {first} has {expected}")]
    PlatformMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// An input was made by another version of the recording tool.
    #[error("{path} was made by {found}, but {first} by {expected}")]
    ToolVersionMismatch {
        /// The input that disagrees.
        path: PathBuf,
        /// The first input, which the others must agree with.
        first: PathBuf,
        /// The first input's value.
        expected: String,
        /// This input's value.
        found: String,
    },
    /// Two inputs hold a shard of the same name.
    #[error("shard name {name:?} appears in more than one input ({path})")]
    DuplicateShardName {
        /// The shard name.
        name: String,
        /// The later input that repeats it.
        path: PathBuf,
    },
    /// Two inputs hold the same test ID.
    #[error("test ID {id:?} appears in more than one input ({path})")]
    DuplicateTestId {
        /// The test ID.
        id: String,
        /// The later input that repeats it.
        path: PathBuf,
    },
    /// With `--verify-inputs`: an input's signature is missing or not accepted.
    #[error("input {path}: {source}")]
    InputSignature {
        /// The input.
        path: PathBuf,
        /// Why its signature was not accepted.
        source: SignatureError,
    },
    /// `--verify-inputs` was given without `--allowed-signers`.
    #[error("--verify-inputs needs --allowed-signers")]
    NoAllowedSigners,
    /// Carry-forward was asked for without a repository to check the conditions in.
    #[error("carry-forward needs --repo")]
    NoRepo,
    /// Reading the repository failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// An old shard's narrow manifest could not be recomputed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The merged receipt could not be encoded.
    #[error("cannot encode the merged receipt: {0}")]
    Encode(CanonicalError),
    /// The merged receipt could not be signed.
    #[error(transparent)]
    Sign(#[from] super::SignError),
}

/// Why an old shard cannot be carried forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "condition", rename_all = "snake_case")]
pub enum StaleReason {
    /// (a) The shard's commit is neither the current commit nor an ancestor of it.
    NotAncestor {
        /// The shard's commit.
        commit: String,
        /// The current commit.
        current: String,
    },
    /// (b) The narrow manifest recomputes differently at the current commit.
    ManifestChanged {
        /// The paths whose entries differ, sorted.
        changed: Vec<String>,
    },
    /// (c) The shard was recorded from a dirty tree.
    RecordedDirty,
    /// (d) Some of its test IDs are also fresh ones.
    DuplicatesFreshTests {
        /// Those test IDs.
        ids: Vec<String>,
    },
    /// (e) Some test IDs it claims are not in the old receipt's test table (for this shard).
    UnknownTestIds {
        /// Those test IDs.
        ids: Vec<String>,
    },
}

impl std::fmt::Display for StaleReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleReason::NotAncestor { commit, current } => {
                write!(
                    f,
                    "(a) commit {commit} is not {current} or an ancestor of it"
                )
            }
            StaleReason::ManifestChanged { changed } => {
                write!(f, "(b) narrow manifest changed: {}", changed.join(", "))
            }
            StaleReason::RecordedDirty => write!(f, "(c) recorded from a dirty tree"),
            StaleReason::DuplicatesFreshTests { ids } => {
                write!(f, "(d) test IDs also run fresh: {}", ids.join(", "))
            }
            StaleReason::UnknownTestIds { ids } => write!(
                f,
                "(e) test IDs missing from the old receipt's tests: {}",
                ids.join(", ")
            ),
        }
    }
}

/// What `receipt merge` is asked to do.
pub struct MergeOptions {
    /// The fresh receipts to merge (at least one).
    pub inputs: Vec<PathBuf>,
    /// Where the merged receipt is written.
    pub out: PathBuf,
    /// Check every input's detached signature against `allowed_signers`.
    pub verify_inputs: bool,
    /// The OpenSSH `allowed_signers` file for `verify_inputs`.
    pub allowed_signers: Option<PathBuf>,
    /// An older receipt to carry absent shards forward from.
    pub carry_from: Option<PathBuf>,
    /// The repository the carry-forward conditions are checked in.
    pub repo: Option<PathBuf>,
    /// The OpenSSH private key to sign the merged receipt with, if any.
    pub sign_key: Option<PathBuf>,
}

/// One input receipt, read and decoded.
pub struct Loaded {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its bytes, as read.
    pub bytes: Vec<u8>,
    /// The decoded receipt.
    pub receipt: Receipt,
    /// The principal whose signature verified, when inputs were verified.
    pub signer: Option<String>,
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// `schema@version` from the JSON header, without decoding the rest.
fn header(bytes: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Header {
        schema: Option<serde_json::Value>,
        version: Option<serde_json::Value>,
    }
    match serde_json::from_slice::<Header>(bytes) {
        Ok(h) => format!(
            "{}@{}",
            h.schema.map(|v| v.to_string()).unwrap_or_default(),
            h.version.map(|v| v.to_string()).unwrap_or_default()
        ),
        Err(_) => "<undecodable>".to_owned(),
    }
}

/// Reads and decodes the receipt at `path`; returns its bytes too.
pub fn load(path: &Path) -> Result<(Vec<u8>, Receipt), MergeError> {
    let bytes = read_file(path)?;
    let receipt = Receipt::decode(&bytes).map_err(|source| MergeError::Decode {
        path: path.to_owned(),
        source,
    })?;
    Ok((bytes, receipt))
}

/// Merges the inputs (carrying shards forward when asked to), writes and optionally
/// signs the result; returns it with each reason an old shard could not be carried.
pub fn merge(options: MergeOptions) -> Result<(Receipt, Vec<(String, StaleReason)>), MergeError> {
    if options.inputs.is_empty() {
        return Err(MergeError::NoInputs);
    }
    if options.verify_inputs && options.allowed_signers.is_none() {
        return Err(MergeError::NoAllowedSigners);
    }
    let inputs = load_inputs(&options)?;
    check_agreement(&inputs)?;
    let first = &inputs[0].receipt.shardlift;
    let mut union = Union::of(&inputs)?;
    let stale = match &options.carry_from {
        Some(old_path) => carry_forward(&options, old_path, &first.commit, &mut union)?,
        None => Vec::new(),
    };
    let receipt = Receipt::assemble(Extension {
        commit: first.commit.clone(),
        tree: first.tree.clone(),
        mode: first.mode.clone(),
        toolchain: first.toolchain.clone(),
        platform: first.platform.clone(),
        tool: first.tool.clone(),
        dirty: union.dirty,
        session: Session {
            started: union.started,
            finished: union.finished,
            outcome: union.outcome,
        },
        shards: union.shards,
        tests: union.tests,
        inputs: union.summaries,
    });
    let bytes = receipt.encode().map_err(MergeError::Encode)?;
    write_durably(&options.out, &bytes)?;
    if let Some(key) = &options.sign_key {
        write_signature(&options.out, key, &bytes)?;
    }
    Ok((receipt, stale))
}

/// Reads every input, checks that their headers agree (so disagreeing inputs are named
/// as such rather than as one unsupported version), decodes them, and checks their
/// signatures when asked to.
fn load_inputs(options: &MergeOptions) -> Result<Vec<Loaded>, MergeError> {
    let raw: Vec<(PathBuf, Vec<u8>)> = options
        .inputs
        .iter()
        .map(|p| read_file(p).map(|b| (p.clone(), b)))
        .collect::<Result<_, _>>()?;
    let first_header = header(&raw[0].1);
    for (path, bytes) in &raw[1..] {
        let found = header(bytes);
        if found != first_header {
            return Err(MergeError::SchemaMismatch {
                path: path.clone(),
                first: raw[0].0.clone(),
                expected: first_header,
                found,
            });
        }
    }
    let mut inputs = Vec::new();
    for (path, bytes) in raw {
        let receipt = Receipt::decode(&bytes).map_err(|source| MergeError::Decode {
            path: path.clone(),
            source,
        })?;
        let signer = match (&options.allowed_signers, options.verify_inputs) {
            (Some(allowed), true) => Some(input_signer(&path, &bytes, allowed)?),
            _ => None,
        };
        inputs.push(Loaded {
            path,
            bytes,
            receipt,
            signer,
        });
    }
    Ok(inputs)
}

fn input_signer(path: &Path, bytes: &[u8], allowed: &Path) -> Result<String, MergeError> {
    super::verify_signature(path, bytes, allowed).map_err(|source| MergeError::InputSignature {
        path: path.to_owned(),
        source,
    })
}

/// The shards, tests and sessions of the merged receipt, gathered from the inputs (and
/// then from the carried shards).
struct Union {
    shards: Vec<Shard>,
    tests: BTreeMap<String, TestEntry>,
    summaries: Vec<InputSummary>,
    dirty: bool,
    outcome: Outcome,
    started: String,
    finished: String,
}

impl Union {
    /// The union of the inputs; a shard name or test ID in two inputs is refused.
    fn of(inputs: &[Loaded]) -> Result<Union, MergeError> {
        let first = &inputs[0].receipt.shardlift;
        let mut union = Union {
            shards: Vec::new(),
            tests: BTreeMap::new(),
            summaries: Vec::new(),
            dirty: false,
            outcome: Outcome::Passed,
            started: first.session.started.clone(),
            finished: first.session.finished.clone(),
        };
        for input in inputs {
            union.add_input(input)?;
        }
        Ok(union)
    }

    fn add_input(&mut self, input: &Loaded) -> Result<(), MergeError> {
        let ext = &input.receipt.shardlift;
        for shard in &ext.shards {
            if self.shards.iter().any(|s| s.name == shard.name) {
                return Err(MergeError::DuplicateShardName {
                    name: shard.name.clone(),
                    path: input.path.clone(),
                });
            }
            self.shards.push(shard.clone());
        }
        for (id, entry) in &ext.tests {
            if self.tests.insert(id.clone(), entry.clone()).is_some() {
                return Err(MergeError::DuplicateTestId {
                    id: id.clone(),
                    path: input.path.clone(),
                });
            }
        }
        self.dirty |= ext.dirty;
        if ext.session.outcome == Outcome::Failed {
            self.outcome = Outcome::Failed;
        }
        self.started = earliest(&self.started, &ext.session.started);
        self.finished = latest(&self.finished, &ext.session.finished);
        self.summaries.push(InputSummary {
            name: file_name(&input.path),
            digest: Digest::of(&input.bytes),
            shards: ext.shards.iter().map(|s| s.name.clone()).collect(),
            counts: input.receipt.counts(),
            started: ext.session.started.clone(),
            finished: ext.session.finished.clone(),
            outcome: ext.session.outcome,
            signer: input.signer.clone(),
        });
        Ok(())
    }

    /// Adds an old shard that met every carry-forward condition, with its tests.
    fn add_carried(&mut self, old: &Receipt, shard: &Shard, carried: Carried) {
        for id in &shard.test_ids {
            if let Some(entry) = old.shardlift.tests.get(id) {
                self.tests.insert(id.clone(), entry.clone());
            }
        }
        if shard.outcome == Outcome::Failed {
            self.outcome = Outcome::Failed;
        }
        self.dirty |= shard.dirty;
        let mut shard = shard.clone();
        shard.carried = Some(carried);
        self.shards.push(shard);
    }
}

/// Carries forward each shard of the old receipt that no input has and that still meets
/// every condition at `current`; returns the reasons of those not carried.
fn carry_forward(
    options: &MergeOptions,
    old_path: &Path,
    current: &str,
    union: &mut Union,
) -> Result<Vec<(String, StaleReason)>, MergeError> {
    let repo_path = options.repo.as_deref().ok_or(MergeError::NoRepo)?;
    let repo = Repo::discover(repo_path)?;
    let (old_bytes, old) = load(old_path)?;
    if let (Some(allowed), true) = (&options.allowed_signers, options.verify_inputs) {
        input_signer(old_path, &old_bytes, allowed)?;
    }
    let fresh_ids: BTreeSet<String> = union.tests.keys().cloned().collect();
    let carried_at = schema::now_rfc3339();
    let from_receipt = Digest::of(&old_bytes);
    let mut stale = Vec::new();
    for shard in &old.shardlift.shards {
        if union.shards.iter().any(|s| s.name == shard.name) {
            continue; // fresh shards always win
        }
        let reasons = carry_conditions(&repo, current, &old, shard, &fresh_ids)?;
        if !reasons.is_empty() {
            stale.extend(reasons.into_iter().map(|r| (shard.name.clone(), r)));
            continue;
        }
        let carried = Carried {
            from_receipt,
            carried_at: carried_at.clone(),
            original_dirty: shard.dirty,
        };
        union.add_carried(&old, shard, carried);
    }
    Ok(stale)
}

fn check_agreement(inputs: &[Loaded]) -> Result<(), MergeError> {
    let first = &inputs[0];
    let a = &first.receipt.shardlift;
    for input in &inputs[1..] {
        let b = &input.receipt.shardlift;
        let path = input.path.clone();
        let first_path = first.path.clone();
        if a.commit != b.commit {
            return Err(MergeError::CommitMismatch {
                path,
                first: first_path,
                expected: a.commit.clone(),
                found: b.commit.clone(),
            });
        }
        if a.tree != b.tree {
            return Err(MergeError::FingerprintMismatch {
                path,
                first: first_path,
                expected: a.tree.clone(),
                found: b.tree.clone(),
            });
        }
        if a.mode != b.mode {
            return Err(MergeError::ModeMismatch {
                path,
                first: first_path,
                expected: a.mode.clone(),
                found: b.mode.clone(),
            });
        }
        if a.toolchain != b.toolchain {
            return Err(MergeError::ToolchainMismatch {
                path,
                first: first_path,
                expected: format!("{:?}", a.toolchain),
                found: format!("{:?}", b.toolchain),
            });
        }
        if a.platform != b.platform {
            return Err(MergeError::PlatformMismatch {
                path,
                first: first_path,
                expected: a.platform.clone(),
                found: b.platform.clone(),
            });
        }
        if a.tool != b.tool {
            return Err(MergeError::ToolVersionMismatch {
                path,
                first: first_path,
                expected: a.tool.clone(),
                found: b.tool.clone(),
            });
        }
    }
    Ok(())
}

fn earliest(a: &str, b: &str) -> String {
    match (schema::parse_time(a), schema::parse_time(b)) {
        (Some(x), Some(y)) if y < x => b.to_owned(),
        _ => a.to_owned(),
    }
}

fn latest(a: &str, b: &str) -> String {
    match (schema::parse_time(a), schema::parse_time(b)) {
        (Some(x), Some(y)) if y > x => b.to_owned(),
        _ => a.to_owned(),
    }
}

/// Every carry-forward condition that `shard` fails, in the order (a)..(e).
pub fn carry_conditions(
    repo: &Repo,
    current: &str,
    old: &Receipt,
    shard: &Shard,
    fresh_ids: &BTreeSet<String>,
) -> Result<Vec<StaleReason>, ManifestError> {
    let mut reasons = Vec::new();
    let ancestor = repo.is_same_or_ancestor(&shard.commit, current)?;
    if !ancestor {
        reasons.push(StaleReason::NotAncestor {
            commit: shard.commit.clone(),
            current: current.to_owned(),
        });
    }
    let now = manifest::manifest(repo, current, &shard.scope, false)?;
    if now != shard.manifest {
        reasons.push(StaleReason::ManifestChanged {
            changed: shard.manifest.changed_paths(&now),
        });
    }
    if shard.dirty {
        reasons.push(StaleReason::RecordedDirty);
    }
    let duplicates: Vec<String> = shard
        .test_ids
        .iter()
        .filter(|id| fresh_ids.contains(*id))
        .cloned()
        .collect();
    if !duplicates.is_empty() {
        reasons.push(StaleReason::DuplicatesFreshTests { ids: duplicates });
    }
    let unknown: Vec<String> = shard
        .test_ids
        .iter()
        .filter(|id| {
            old.shardlift
                .tests
                .get(*id)
                .is_none_or(|entry| entry.shard != shard.name)
        })
        .cloned()
        .collect();
    if !unknown.is_empty() {
        reasons.push(StaleReason::UnknownTestIds { ids: unknown });
    }
    Ok(reasons)
}

/// One old shard in a carry-forward plan.
#[derive(Serialize)]
pub struct PlanEntry {
    /// The shard's name.
    pub shard: String,
    /// `fresh` (a fresh receipt has it), `carryable` or `stale`.
    pub status: &'static str,
    /// Why it is stale; empty otherwise.
    pub reasons: Vec<StaleReason>,
}

/// What `receipt plan` prints: which shards of an old receipt could be carried forward.
#[derive(Serialize)]
pub struct Plan {
    /// The old receipt's file name.
    pub receipt: String,
    /// The current commit (HEAD).
    pub current: String,
    /// Every shard of the old receipt, in its order.
    pub shards: Vec<PlanEntry>,
}

/// The carry-forward conditions as a dry run against HEAD of `repo`; `fresh` receipts
/// (optional) supply the fresh test IDs for condition (d).
pub fn plan(old_path: &Path, repo_path: &Path, fresh: &[PathBuf]) -> Result<Plan, MergeError> {
    let (_, old) = load(old_path)?;
    let repo = Repo::discover(repo_path)?;
    let current = repo.head()?.commit;
    let mut fresh_ids = BTreeSet::new();
    let mut fresh_shards = BTreeSet::new();
    for path in fresh {
        let (_, receipt) = load(path)?;
        fresh_ids.extend(receipt.shardlift.tests.keys().cloned());
        fresh_shards.extend(receipt.shardlift.shards.iter().map(|s| s.name.clone()));
    }
    let mut shards = Vec::new();
    for shard in &old.shardlift.shards {
        if fresh_shards.contains(&shard.name) {
            shards.push(PlanEntry {
                shard: shard.name.clone(),
                status: "fresh",
                reasons: Vec::new(),
            });
            continue;
        }
        let reasons = carry_conditions(&repo, &current, &old, shard, &fresh_ids)?;
        shards.push(PlanEntry {
            shard: shard.name.clone(),
            status: if reasons.is_empty() {
                "carryable"
            } else {
                "stale"
            },
            reasons,
        });
    }
    Ok(Plan {
        receipt: file_name(old_path),
        current,
        shards,
    })
}
