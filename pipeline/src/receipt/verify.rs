//! `receipt verify`: a receipt's own consistency, its signature, a policy, and (with a
//! repository) the carry-forward conditions of its carried shards.
//!
//! The policy is a closed JSON object:
//! ```json
//! {
//!   "allow_carried": false,
//!   "allow_unchecked_carry": false,
//!   "carried_max_age_days": 7,
//!   "allow_dirty": false,
//!   "require_passed": false,
//!   "require_signature": true,
//!   "required_shard_fingerprints": {"fast": "<scope fingerprint hex>", ...}
//! }
//! ```
//! `allow_carried` (default false) admits carried shards; with a repository each must then
//! meet the five carry-forward conditions of [`super::merge::carry_conditions`] at the
//! receipt's commit, and without one they are refused unless `allow_unchecked_carry` (default
//! false) admits them unchecked (the result says so). `carried_max_age_days` (optional)
//! bounds how long ago a carried shard finished; `allow_dirty` (default false) admits
//! shards recorded from a dirty tree; `require_passed` (default false) demands that every
//! shard and test passed; `require_signature` (default false) demands
//! `--allowed-signers` and so a valid `FILE.sig`; and
//! `required_shard_fingerprints` (optional) pins the exact set of shard names and each
//! shard's declared scope (the fingerprint of its paths, extra paths and excluded paths,
//! recomputed here from the declared scope). With `--allowed-signers`, the signature is
//! always checked.
//!
//! Consistency ([`check_consistency`]) is always checked, with or without a repository:
//! the Statement is derived from the extension block, every shard's commit is the
//! receipt's unless the shard is carried, each test belongs to exactly one shard, every
//! shard's counts are those of its tests, and the outcomes and the dirty flag follow
//! from the shards.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shardlift::core::digest::Digest;

use super::manifest::ManifestError;
use super::merge::{carry_conditions, load, MergeError, StaleReason};
use super::schema::{self, Counts, Outcome, Receipt, TestOutcome, PREDICATE_TYPE};
use super::{read_file, SignatureError};
use crate::git::{GitError, Repo};
use crate::intoto::STATEMENT_TYPE;

/// The largest policy file read.
const POLICY_CAP: usize = 1 << 20;
/// How many test IDs an error lists before eliding the rest.
const LISTED_IDS: usize = 5;

/// A verification policy (the closed JSON object above; absent fields take their defaults).
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Admit carried shards (checked against a repository when one is given).
    #[serde(default)]
    pub allow_carried: bool,
    /// Without a repository, admit carried shards unchecked.
    #[serde(default)]
    pub allow_unchecked_carry: bool,
    /// The most days since a carried shard finished.
    #[serde(default)]
    pub carried_max_age_days: Option<u64>,
    /// Admit shards recorded from a dirty tree.
    #[serde(default)]
    pub allow_dirty: bool,
    /// Demand that every shard and test passed.
    #[serde(default)]
    pub require_passed: bool,
    /// Demand `--allowed-signers`, and so a valid `FILE.sig`.
    #[serde(default)]
    pub require_signature: bool,
    /// The exact set of shard names, each with its required scope fingerprint
    /// ([`schema::Scope::fingerprint`]).
    #[serde(default)]
    pub required_shard_fingerprints: Option<BTreeMap<String, Digest>>,
}

impl Policy {
    /// The release policy: every test passed, nothing dirty, and carried shards only when
    /// `allow_carried` (and then only checked against a repository).
    pub fn release(allow_carried: bool) -> Policy {
        Policy {
            allow_carried,
            require_passed: true,
            ..Policy::default()
        }
    }
}

/// Why a receipt did not verify: one variant per check, in the order they run.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The receipt could not be read or decoded.
    #[error(transparent)]
    Load(#[from] MergeError),
    /// The policy file could not be read, is too large, or is not a valid policy.
    #[error("cannot read the policy {path}: {message}")]
    Policy {
        /// The policy file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// `_type` or `predicateType` is not the test-result Statement's.
    #[error("the receipt is not a test-result Statement (_type or predicateType)")]
    NotAStatement,
    /// The subject is not the `git-commit` descriptor of the extension's commit.
    #[error("the receipt's subject is not its commit {commit}")]
    SubjectNotCommit {
        /// The extension's commit.
        commit: String,
    },
    /// The predicate is not the one derived from the test table and shards.
    #[error("the receipt's test-result predicate does not match its test table and shards")]
    PredicateMismatch,
    /// Two shards have one name.
    #[error("shard name {shard:?} appears twice")]
    DuplicateShard {
        /// The shard's name.
        shard: String,
    },
    /// A shard's `manifest_digest` is not the digest of its manifest.
    #[error("shard {shard}: its manifest digest does not match its manifest")]
    ManifestDigest {
        /// The shard's name.
        shard: String,
    },
    /// A shard's `scope_fingerprint` is not the fingerprint of its declared scope.
    #[error("shard {shard}: its scope fingerprint does not match its declared scope")]
    ScopeDigest {
        /// The shard's name.
        shard: String,
    },
    /// A fresh (not carried) shard was recorded at another commit than the receipt's.
    #[error("shard {shard} was recorded at commit {found}, but the receipt is of commit {expected} and the shard is not marked carried")]
    ShardCommit {
        /// The shard's name.
        shard: String,
        /// The receipt's commit.
        expected: String,
        /// The shard's commit.
        found: String,
    },
    /// A shard lists a test the test table does not give to it.
    #[error("shard {shard} claims test {id}, which the test table {}", match owner { Some(o) => format!("gives to shard {o}"), None => "does not hold".to_owned() })]
    TestNotOwned {
        /// The shard's name.
        shard: String,
        /// The test ID.
        id: String,
        /// The shard the test table gives it to; `None` when the table lacks it.
        owner: Option<String>,
    },
    /// A test ID is listed twice.
    #[error("shard {shard} claims test {id} more than once")]
    TestClaimedTwice {
        /// The shard's name.
        shard: String,
        /// The test ID.
        id: String,
    },
    /// A shard's counts are not those of its tests' outcomes.
    #[error("shard {shard} records counts {recorded:?}, but its tests give {actual:?}")]
    ShardCounts {
        /// The shard's name.
        shard: String,
        /// The counts the shard records.
        recorded: Counts,
        /// The counts of its tests in the test table.
        actual: Counts,
    },
    /// Tests in the test table belong to no shard's test list.
    #[error("tests in the test table belong to no shard's test list: {}", ids.join(", "))]
    OrphanTests {
        /// Their IDs (the first few, then how many more).
        ids: Vec<String>,
    },
    /// A shard records `PASSED` although a test failed or its command did not exit 0.
    #[error("shard {shard} records PASSED, but {reason}")]
    ShardOutcome {
        /// The shard's name.
        shard: String,
        /// Which.
        reason: String,
    },
    /// The session's outcome is not `FAILED` exactly when some shard failed.
    #[error("the session records {recorded:?}, but {}", match failed_shard { Some(shard) => format!("shard {shard} failed"), None => "no shard failed".to_owned() })]
    SessionOutcome {
        /// The session's recorded outcome.
        recorded: Outcome,
        /// The first failed shard, if any.
        failed_shard: Option<String>,
    },
    /// The receipt's dirty flag is not the OR of its shards'.
    #[error("the receipt's dirty flag is {recorded}, but the OR of its shards' is {expected}")]
    DirtyFlag {
        /// The receipt's flag.
        recorded: bool,
        /// The OR of the shards' flags.
        expected: bool,
    },
    /// A carried shard's dirty flag differs from the one it was originally recorded with.
    #[error("carried shard {shard}: dirty is {dirty}, but carried.original_dirty is {original}")]
    CarriedDirtyFlag {
        /// The shard's name.
        shard: String,
        /// The shard's `dirty`.
        dirty: bool,
        /// Its `carried.original_dirty`.
        original: bool,
    },
    /// The receipt's commit is not in the repository given.
    #[error("the receipt's commit {commit} is not in the repository")]
    CommitNotInRepository {
        /// The receipt's commit.
        commit: String,
    },
    /// The repository has another tree for the receipt's commit than the receipt records.
    #[error("the receipt records tree {recorded} for commit {commit}, but the repository has tree {actual}")]
    TreeMismatch {
        /// The receipt's commit.
        commit: String,
        /// The tree id the receipt records.
        recorded: String,
        /// The commit's tree id in the repository.
        actual: String,
    },
    /// A shard is carried and the policy does not allow carried shards.
    #[error("shard {shard} was carried forward and the policy does not allow carried shards")]
    CarriedNotAllowed {
        /// The shard's name.
        shard: String,
    },
    /// A carried shard could not be checked (no repository) and the policy does not allow
    /// unchecked carry.
    #[error("carried shard {shard}: the carry-forward conditions were not checked (no --repository) and the policy does not allow unchecked carry")]
    CarryUnchecked {
        /// The shard's name.
        shard: String,
    },
    /// A carried shard fails carry-forward conditions at the receipt's commit.
    #[error("carried shard {shard} fails the carry-forward conditions: {}", reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    CarryConditions {
        /// The shard's name.
        shard: String,
        /// Every condition it fails.
        reasons: Vec<StaleReason>,
    },
    /// A carried shard finished longer ago than `carried_max_age_days` allows.
    #[error("carried shard {shard} finished {age_days} days ago; the policy allows {max_days}")]
    CarriedTooOld {
        /// The shard's name.
        shard: String,
        /// Whole days since it finished.
        age_days: i64,
        /// The policy's limit, in days.
        max_days: u64,
    },
    /// A carried shard's `finished` is not an RFC 3339 time.
    #[error("carried shard {shard} has an unreadable finish time {time:?}")]
    BadTime {
        /// The shard's name.
        shard: String,
        /// The text found.
        time: String,
    },
    /// The shard names are not the policy's required set.
    #[error("the receipt's shards {found:?} are not the required set {required:?}")]
    ShardSetMismatch {
        /// The required names, sorted.
        required: Vec<String>,
        /// The receipt's names, sorted.
        found: Vec<String>,
    },
    /// A shard's declared scope is not the one the policy requires for it.
    #[error("shard {shard} declares scope {found}, the policy requires {required}")]
    ShardScopeMismatch {
        /// The shard's name.
        shard: String,
        /// The fingerprint the policy requires.
        required: Digest,
        /// The fingerprint of the shard's declared scope.
        found: Digest,
    },
    /// A shard was recorded from a dirty tree and the policy does not allow it.
    #[error("shard {shard} was recorded from a dirty tree and the policy does not allow it")]
    DirtyShard {
        /// The shard's name.
        shard: String,
    },
    /// The policy requires a passing run and a shard failed.
    #[error("shard {shard} failed ({failed} failed tests{}) and the policy requires every test to pass", if ids.is_empty() { String::new() } else { format!(": {}", ids.join(", ")) })]
    NotPassed {
        /// The shard's name.
        shard: String,
        /// Its failed-test count.
        failed: u64,
        /// The failed test IDs (the first few, then how many more).
        ids: Vec<String>,
    },
    /// The policy requires a signature and no `--allowed-signers` was given.
    #[error("the policy requires a signature; pass --allowed-signers")]
    SignatureRequired,
    /// The detached signature is missing or not accepted.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// Reading the repository failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A carried shard's narrow manifest could not be recomputed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// What was established about the carried shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CarryCheck {
    /// No shard is carried.
    NoneCarried,
    /// These carried shards met the five carry-forward conditions at the receipt's commit.
    Checked(Vec<String>),
    /// These carried shards were admitted without checking the conditions (no repository).
    Unchecked(Vec<String>),
}

/// A receipt that verified, and what was established about it.
pub struct Verified {
    /// The receipt.
    pub receipt: Receipt,
    /// The principal whose signature verified, when `--allowed-signers` was given.
    pub signer: Option<String>,
    /// The number of tests in its test table.
    pub tests: u64,
    /// What was established about its carried shards.
    pub carry: CarryCheck,
}

/// Reads a policy file (at most 1 MiB of closed JSON).
pub fn read_policy(path: &Path) -> Result<Policy, VerifyError> {
    let policy_error = |message: String| VerifyError::Policy {
        path: path.to_owned(),
        message,
    };
    let bytes = read_file(path).map_err(|e| policy_error(e.to_string()))?;
    if bytes.len() > POLICY_CAP {
        return Err(policy_error(format!("larger than {POLICY_CAP} bytes")));
    }
    serde_json::from_slice(&bytes).map_err(|e| policy_error(e.to_string()))
}

/// Verifies the receipt file at `path`: its signature (with `allowed_signers`), then
/// [`check_receipt`], with the repository at `repository` when one is given.
pub fn verify(
    path: &Path,
    policy: &Policy,
    allowed_signers: Option<&Path>,
    repository: Option<&Path>,
) -> Result<Verified, VerifyError> {
    let (bytes, receipt) = load(path)?;
    let signer = match allowed_signers {
        Some(allowed) => Some(super::verify_signature(path, &bytes, allowed)?),
        None if policy.require_signature => return Err(VerifyError::SignatureRequired),
        None => None,
    };
    let repo = repository.map(Repo::discover).transpose()?;
    let carry = check_receipt(&receipt, policy, repo.as_ref())?;
    let tests = receipt.counts().total();
    Ok(Verified {
        receipt,
        signer,
        tests,
        carry,
    })
}

/// Everything but the signature: consistency; with `repo`, that the receipt's commit and
/// tree are in it; the carried shards (refused, checked against `repo`, or admitted
/// unchecked, as the policy says); and the rest of the policy.
pub fn check_receipt(
    receipt: &Receipt,
    policy: &Policy,
    repo: Option<&Repo>,
) -> Result<CarryCheck, VerifyError> {
    check_consistency(receipt)?;
    if let Some(repo) = repo {
        check_commit_in(repo, receipt)?;
    }
    let carry = check_carried(receipt, policy, repo)?;
    check_policy(receipt, policy)?;
    Ok(carry)
}

/// The receipt's commit exists in `repo`, with the tree the receipt records.
fn check_commit_in(repo: &Repo, receipt: &Receipt) -> Result<(), VerifyError> {
    let ext = &receipt.shardlift;
    let Some(actual) = repo.find_commit_tree(&ext.commit)? else {
        return Err(VerifyError::CommitNotInRepository {
            commit: ext.commit.clone(),
        });
    };
    if actual != ext.tree {
        return Err(VerifyError::TreeMismatch {
            commit: ext.commit.clone(),
            recorded: ext.tree.clone(),
            actual,
        });
    }
    Ok(())
}

/// Carried shards: refused unless allowed; with `repo`, each must meet the five
/// carry-forward conditions at the receipt's commit; without one, admitted only when the
/// policy allows unchecked carry. The age limit applies either way.
fn check_carried(
    receipt: &Receipt,
    policy: &Policy,
    repo: Option<&Repo>,
) -> Result<CarryCheck, VerifyError> {
    let ext = &receipt.shardlift;
    let carried: Vec<&schema::Shard> = ext.shards.iter().filter(|s| s.carried.is_some()).collect();
    if carried.is_empty() {
        return Ok(CarryCheck::NoneCarried);
    }
    // The test IDs of the fresh shards, for condition (d).
    let fresh_ids: BTreeSet<String> = ext
        .shards
        .iter()
        .filter(|s| s.carried.is_none())
        .flat_map(|s| s.test_ids.iter().cloned())
        .collect();
    for shard in &carried {
        if !policy.allow_carried {
            return Err(VerifyError::CarriedNotAllowed {
                shard: shard.name.clone(),
            });
        }
        match repo {
            None if !policy.allow_unchecked_carry => {
                return Err(VerifyError::CarryUnchecked {
                    shard: shard.name.clone(),
                })
            }
            None => {}
            Some(repo) => {
                // Condition (e) reads the claimed IDs from this receipt's own test table:
                // the old receipt is not at hand, only its digest.
                let reasons = carry_conditions(repo, &ext.commit, receipt, shard, &fresh_ids)?;
                if !reasons.is_empty() {
                    return Err(VerifyError::CarryConditions {
                        shard: shard.name.clone(),
                        reasons,
                    });
                }
            }
        }
        check_age(shard, policy)?;
    }
    let names = carried.iter().map(|s| s.name.clone()).collect();
    Ok(match repo {
        Some(_) => CarryCheck::Checked(names),
        None => CarryCheck::Unchecked(names),
    })
}

fn check_age(shard: &schema::Shard, policy: &Policy) -> Result<(), VerifyError> {
    let Some(max_days) = policy.carried_max_age_days else {
        return Ok(());
    };
    let finished = schema::parse_time(&shard.finished).ok_or_else(|| VerifyError::BadTime {
        shard: shard.name.clone(),
        time: shard.finished.clone(),
    })?;
    let age = time::OffsetDateTime::now_utc() - finished;
    if age > time::Duration::days(i64::try_from(max_days).unwrap_or(i64::MAX)) {
        return Err(VerifyError::CarriedTooOld {
            shard: shard.name.clone(),
            age_days: age.whole_days(),
            max_days,
        });
    }
    Ok(())
}

/// The required shard set and scopes, dirtiness and (when required) a passing run.
fn check_policy(receipt: &Receipt, policy: &Policy) -> Result<(), VerifyError> {
    let ext = &receipt.shardlift;
    if let Some(required) = &policy.required_shard_fingerprints {
        let found: BTreeSet<&String> = ext.shards.iter().map(|s| &s.name).collect();
        let wanted: BTreeSet<&String> = required.keys().collect();
        if found != wanted {
            return Err(VerifyError::ShardSetMismatch {
                required: wanted.into_iter().cloned().collect(),
                found: found.into_iter().cloned().collect(),
            });
        }
        for shard in &ext.shards {
            let declared = shard.scope.fingerprint();
            if let Some(required) = required.get(&shard.name) {
                if *required != declared {
                    return Err(VerifyError::ShardScopeMismatch {
                        shard: shard.name.clone(),
                        required: *required,
                        found: declared,
                    });
                }
            }
        }
    }
    if !policy.allow_dirty {
        if let Some(shard) = ext.shards.iter().find(|s| s.dirty) {
            return Err(VerifyError::DirtyShard {
                shard: shard.name.clone(),
            });
        }
    }
    if policy.require_passed {
        // Consistency made the session's outcome the OR of the shards'.
        if let Some(shard) = ext.shards.iter().find(|s| s.outcome == Outcome::Failed) {
            let ids: Vec<String> = shard
                .test_ids
                .iter()
                .filter(|id| {
                    ext.tests
                        .get(*id)
                        .is_some_and(|t| t.outcome == TestOutcome::Failed)
                })
                .cloned()
                .collect();
            return Err(VerifyError::NotPassed {
                shard: shard.name.clone(),
                failed: shard.counts.failed,
                ids: elide(ids),
            });
        }
    }
    Ok(())
}

/// The first few of `ids`, then how many more.
fn elide(mut ids: Vec<String>) -> Vec<String> {
    if ids.len() > LISTED_IDS {
        let more = ids.len() - LISTED_IDS;
        ids.truncate(LISTED_IDS);
        ids.push(format!("... and {more} more"));
    }
    ids
}

/// The receipt agrees with itself: envelope, predicate, test table, shards (their
/// commits, counts and outcomes), the session's outcome and the dirty flag.
pub fn check_consistency(receipt: &Receipt) -> Result<(), VerifyError> {
    if receipt.statement_type != STATEMENT_TYPE || receipt.predicate_type != PREDICATE_TYPE {
        return Err(VerifyError::NotAStatement);
    }
    let ext = &receipt.shardlift;
    let assembled = Receipt::assemble(ext.clone());
    if assembled.subject != receipt.subject {
        return Err(VerifyError::SubjectNotCommit {
            commit: ext.commit.clone(),
        });
    }
    if assembled.predicate != receipt.predicate {
        return Err(VerifyError::PredicateMismatch);
    }
    let mut names = BTreeSet::new();
    let mut members = BTreeSet::new();
    let mut any_dirty = false;
    let mut failed_shard = None;
    for shard in &ext.shards {
        if !names.insert(&shard.name) {
            return Err(VerifyError::DuplicateShard {
                shard: shard.name.clone(),
            });
        }
        check_shard(receipt, shard, &mut members)?;
        any_dirty |= shard.dirty;
        if shard.outcome == Outcome::Failed && failed_shard.is_none() {
            failed_shard = Some(shard.name.clone());
        }
    }
    if members.len() != ext.tests.len() {
        let ids = ext
            .tests
            .keys()
            .filter(|id| !members.contains(id))
            .cloned()
            .collect();
        return Err(VerifyError::OrphanTests { ids: elide(ids) });
    }
    if any_dirty != ext.dirty {
        return Err(VerifyError::DirtyFlag {
            recorded: ext.dirty,
            expected: any_dirty,
        });
    }
    let expected = match failed_shard {
        Some(_) => Outcome::Failed,
        None => Outcome::Passed,
    };
    if ext.session.outcome != expected {
        return Err(VerifyError::SessionOutcome {
            recorded: ext.session.outcome,
            failed_shard,
        });
    }
    Ok(())
}

/// One shard: its digests, its commit, its claim on its tests, its counts and outcome.
fn check_shard<'a>(
    receipt: &'a Receipt,
    shard: &'a schema::Shard,
    members: &mut BTreeSet<&'a String>,
) -> Result<(), VerifyError> {
    let ext = &receipt.shardlift;
    let name = || shard.name.clone();
    if shard.manifest.digest() != shard.manifest_digest {
        return Err(VerifyError::ManifestDigest { shard: name() });
    }
    if shard.scope.fingerprint() != shard.scope_fingerprint {
        return Err(VerifyError::ScopeDigest { shard: name() });
    }
    match &shard.carried {
        None if shard.commit != ext.commit => {
            return Err(VerifyError::ShardCommit {
                shard: name(),
                expected: ext.commit.clone(),
                found: shard.commit.clone(),
            })
        }
        Some(carried) if carried.original_dirty != shard.dirty => {
            return Err(VerifyError::CarriedDirtyFlag {
                shard: name(),
                dirty: shard.dirty,
                original: carried.original_dirty,
            })
        }
        _ => {}
    }
    let mut counts = Counts::default();
    let mut failed_tests = false;
    for id in &shard.test_ids {
        let entry = ext.tests.get(id).filter(|entry| entry.shard == shard.name);
        let Some(entry) = entry else {
            return Err(VerifyError::TestNotOwned {
                shard: name(),
                id: id.clone(),
                owner: ext.tests.get(id).map(|e| e.shard.clone()),
            });
        };
        if !members.insert(id) {
            return Err(VerifyError::TestClaimedTwice {
                shard: name(),
                id: id.clone(),
            });
        }
        counts.add(entry.outcome);
        failed_tests |= entry.outcome == TestOutcome::Failed;
    }
    if counts != shard.counts {
        return Err(VerifyError::ShardCounts {
            shard: name(),
            recorded: shard.counts,
            actual: counts,
        });
    }
    if shard.outcome == Outcome::Passed {
        let reason = if failed_tests {
            Some("some of its tests failed".to_owned())
        } else if shard.exit.code != Some(0) || shard.exit.signal.is_some() {
            Some(format!("its command exited with {:?}", shard.exit))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(VerifyError::ShardOutcome {
                shard: name(),
                reason,
            });
        }
    }
    Ok(())
}
