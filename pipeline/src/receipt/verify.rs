//! `receipt verify`: a receipt's own consistency, its signature, and a policy.
//!
//! The policy is a closed JSON object:
//! ```json
//! {
//!   "allow_carried": false,
//!   "carried_max_age_days": 7,
//!   "allow_dirty": false,
//!   "require_signature": true,
//!   "required_shard_fingerprints": {"fast": "<scope fingerprint hex>", ...}
//! }
//! ```
//! `allow_carried` (default false) admits carried shards; `carried_max_age_days` (optional)
//! bounds how long ago a carried shard finished; `allow_dirty` (default false) admits
//! shards recorded from a dirty tree; `require_signature` (default false) demands
//! `--allowed-signers` and so a valid `FILE.sig`; and
//! `required_shard_fingerprints` (optional) pins the exact set of shard names and each
//! shard's declared scope (the fingerprint of its paths, extra paths and excluded paths,
//! recomputed here from the declared scope). With `--allowed-signers`, the signature is
//! always checked.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shardlift::core::digest::Digest;

use super::merge::{load, MergeError};
use super::schema::{self, Counts, Outcome, Receipt, TestOutcome, PREDICATE_TYPE};
use super::{read_file, SignatureError};
use crate::intoto::STATEMENT_TYPE;

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub allow_carried: bool,
    #[serde(default)]
    pub carried_max_age_days: Option<u64>,
    #[serde(default)]
    pub allow_dirty: bool,
    #[serde(default)]
    pub require_signature: bool,
    #[serde(default)]
    pub required_shard_fingerprints: Option<BTreeMap<String, Digest>>,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Load(#[from] MergeError),
    #[error("cannot read the policy {path}: {message}")]
    Policy { path: PathBuf, message: String },
    #[error("the receipt is not a test-result Statement (_type or predicateType)")]
    NotAStatement,
    #[error("the receipt is inconsistent: {0}")]
    Inconsistent(String),
    #[error("shard {shard}: its manifest digest does not match its manifest")]
    ManifestDigest { shard: String },
    #[error("shard {shard}: its scope fingerprint does not match its declared scope")]
    ScopeDigest { shard: String },
    #[error("shard {shard} was carried forward and the policy does not allow carried shards")]
    CarriedNotAllowed { shard: String },
    #[error("carried shard {shard} finished {age_days} days ago; the policy allows {max_days}")]
    CarriedTooOld {
        shard: String,
        age_days: i64,
        max_days: u64,
    },
    #[error("carried shard {shard} has an unreadable finish time {time:?}")]
    BadTime { shard: String, time: String },
    #[error("the receipt's shards {found:?} are not the required set {required:?}")]
    ShardSetMismatch {
        required: Vec<String>,
        found: Vec<String>,
    },
    #[error("shard {shard} declares scope {found}, the policy requires {required}")]
    ShardScopeMismatch {
        shard: String,
        required: Digest,
        found: Digest,
    },
    #[error("shard {shard} was recorded from a dirty tree and the policy does not allow it")]
    DirtyShard { shard: String },
    #[error("the policy requires a signature; pass --allowed-signers")]
    SignatureRequired,
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

pub struct Verified {
    pub receipt: Receipt,
    pub signer: Option<String>,
    pub tests: u64,
}

pub fn read_policy(path: &Path) -> Result<Policy, VerifyError> {
    let bytes = read_file(path).map_err(|e| VerifyError::Policy {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| VerifyError::Policy {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

pub fn verify(
    path: &Path,
    policy: &Policy,
    allowed_signers: Option<&Path>,
) -> Result<Verified, VerifyError> {
    let (bytes, receipt) = load(path)?;
    let signer = match allowed_signers {
        Some(allowed) => Some(super::verify_signature(path, &bytes, allowed)?),
        None if policy.require_signature => return Err(VerifyError::SignatureRequired),
        None => None,
    };
    check_consistency(&receipt)?;
    let ext = &receipt.shardlift;
    for shard in &ext.shards {
        if shard.carried.is_some() {
            if !policy.allow_carried {
                return Err(VerifyError::CarriedNotAllowed {
                    shard: shard.name.clone(),
                });
            }
            if let Some(max_days) = policy.carried_max_age_days {
                let finished =
                    schema::parse_time(&shard.finished).ok_or_else(|| VerifyError::BadTime {
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
            }
        }
    }
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
    let tests = receipt.counts().total();
    Ok(Verified {
        receipt,
        signer,
        tests,
    })
}

/// The receipt agrees with itself: envelope, predicate, test table, shards, counts.
pub fn check_consistency(receipt: &Receipt) -> Result<(), VerifyError> {
    let inconsistent = |what: String| Err(VerifyError::Inconsistent(what));
    if receipt.statement_type != STATEMENT_TYPE || receipt.predicate_type != PREDICATE_TYPE {
        return Err(VerifyError::NotAStatement);
    }
    let ext = &receipt.shardlift;
    let assembled = Receipt::assemble(ext.clone());
    if assembled.subject != receipt.subject {
        return inconsistent("the subject is not the receipt's commit".into());
    }
    if assembled.predicate != receipt.predicate {
        return inconsistent("the test-result predicate does not match the test table".into());
    }
    let mut names = BTreeSet::new();
    let mut members = BTreeSet::new();
    let mut any_dirty = false;
    let mut any_failed = false;
    for shard in &ext.shards {
        if !names.insert(&shard.name) {
            return inconsistent(format!("shard name {:?} appears twice", shard.name));
        }
        if shard.manifest.digest() != shard.manifest_digest {
            return Err(VerifyError::ManifestDigest {
                shard: shard.name.clone(),
            });
        }
        if shard.scope.fingerprint() != shard.scope_fingerprint {
            return Err(VerifyError::ScopeDigest {
                shard: shard.name.clone(),
            });
        }
        let mut counts = Counts::default();
        for id in &shard.test_ids {
            let Some(entry) = ext.tests.get(id) else {
                return inconsistent(format!("shard {} claims unknown test {id}", shard.name));
            };
            if entry.shard != shard.name || !members.insert(id) {
                return inconsistent(format!("test {id} is claimed by more than one shard"));
            }
            counts.add(entry.outcome);
            any_failed |= entry.outcome == TestOutcome::Failed;
        }
        if counts != shard.counts {
            return inconsistent(format!(
                "shard {} counts disagree with its tests",
                shard.name
            ));
        }
        any_dirty |= shard.dirty;
        any_failed |= shard.outcome == Outcome::Failed;
    }
    if members.len() != ext.tests.len() {
        return inconsistent("some tests belong to no shard".into());
    }
    if any_dirty != ext.dirty {
        return inconsistent("the dirty flag is not the OR of the shards'".into());
    }
    if any_failed && ext.session.outcome != Outcome::Failed {
        return inconsistent("a shard or test failed but the session passed".into());
    }
    Ok(())
}
