//! Object-store recovery (RFC 0001 §9.4): LIST `commits/`, verify every record end to end
//! with the store's own checks, select the highest generation with exactly one valid
//! record, report split brains and LATEST's status. Writes nothing.
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::core::canonical::CanonicalRecord;
use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::{NoProgress, Progress};
use crate::core::topology::Topology;
use crate::objstore::client::{ConditionalCreate, Fetched, ObjClient};
use crate::objstore::error::ObjStoreError;
use crate::objstore::keys::{
    commit_prefix, object_key, parse_commit_key, COMMITS_PREFIX, LATEST_KEY, OBJECTS_PREFIX,
};
use crate::store::codec::{
    decode, CommitRecord, LatestRecord, ManifestRecord, SyntheticPayloads, MAX_CHUNK_OBJECT_BYTES,
    MAX_MANIFEST_BYTES,
};
use crate::store::error::StoreError;
use crate::store::layout::{assemble_state, check_manifest, verify_payloads};
use crate::store::recovery::{
    LatestReport, ObjectCheck, RecoveryReport, Rejection, SelectedGeneration,
};

/// Two or more different valid commit records for one generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitBrainRecords {
    /// The contested generation.
    pub generation: u64,
    /// The keys of its valid records (relative to the store), sorted.
    pub records: Vec<String>,
}

/// The result of an object-store recovery scan: the local store's report (RFC 0001 §6)
/// plus what only an object store has. Serialized flat, so its JSON has the local report's
/// fields at the top level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjRecoveryReport {
    /// The store location.
    pub location: String,
    /// The scan, as for a local store: `selected` is the highest generation with exactly
    /// one valid record, `rejected` names records by key, `ignored` lists keys under
    /// `commits/` that are not commit record keys.
    #[serde(flatten)]
    pub scan: RecoveryReport,
    /// The selected record's key (relative to the store).
    pub selected_key: Option<String>,
    /// Split brains below the selected generation (one at the top is an error instead).
    pub split_brains: Vec<SplitBrainRecords>,
    /// What the conditional-create probe found (recovery itself does not probe).
    pub conditional_create: ConditionalCreate,
}

/// A record that verified end to end.
pub(crate) struct Verified {
    pub(crate) generation: u64,
    pub(crate) key: String,
    pub(crate) commit_digest: Digest,
    pub(crate) manifest: ManifestRecord,
    pub(crate) manifest_digest: Digest,
    pub(crate) topology: Topology,
    pub(crate) state: Option<LogicalState>,
}

/// GET `rel` under `cap`; `MissingObject` when absent.
fn fetch(client: &ObjClient, rel: &str, cap_bytes: u64) -> Result<Vec<u8>, ObjStoreError> {
    match client.get_capped(rel, cap_bytes)? {
        Fetched::Bytes(bytes) => Ok(bytes),
        Fetched::Missing => Err(ObjStoreError::MissingObject {
            key: client.location().key_url(rel),
        }),
    }
}

/// GET a content-addressed object and check its bytes against the digest its key carries.
fn fetch_object(
    client: &ObjClient,
    digest: Digest,
    cap_bytes: u64,
) -> Result<Vec<u8>, ObjStoreError> {
    let rel = object_key(&digest);
    let bytes = fetch(client, &rel, cap_bytes)?;
    let actual = Digest::of(&bytes);
    if actual != digest {
        return Err(ObjStoreError::DigestMismatch {
            key: client.location().key_url(&rel),
            expected: digest,
            actual,
        });
    }
    Ok(bytes)
}

/// Verifies the record at `rel` (generation and digest from its key) end to end: the
/// record's bytes against its key's digest, the store's record decode, the generation
/// binding, the manifest object, the record-manifest bindings, the manifest's structure,
/// every chunk payload and the recomputed root (RFC 0001 §5 steps 2–4, §9.4).
fn verify_record(
    client: &ObjClient,
    rel: &str,
    generation: u64,
    record_digest: Digest,
    checks: RecordChecks,
    on_object: &mut dyn FnMut(),
) -> Result<Verified, ObjStoreError> {
    let RecordChecks {
        decode_state,
        objects,
    } = checks;
    let location = client.location();
    let record_url = location.key_url(rel);
    let invalid = |key: &str, source| ObjStoreError::Invalid {
        key: key.to_owned(),
        source,
    };
    let bytes = fetch(client, rel, CommitRecord::CAP)?;
    let actual = Digest::of(&bytes);
    if actual != record_digest {
        return Err(ObjStoreError::DigestMismatch {
            key: record_url,
            expected: record_digest,
            actual,
        });
    }
    let record: CommitRecord =
        decode(Path::new(&record_url), &bytes).map_err(|e| invalid(&record_url, e))?;
    if record.generation != generation {
        return Err(invalid(
            &record_url,
            StoreError::GenerationNameMismatch {
                path: record_url.clone().into(),
                named: generation,
                recorded: record.generation,
            },
        ));
    }
    let manifest_url = location.key_url(&object_key(&record.manifest));
    let manifest_bytes = fetch_object(client, record.manifest, MAX_MANIFEST_BYTES)?;
    let manifest: ManifestRecord =
        decode(Path::new(&manifest_url), &manifest_bytes).map_err(|e| invalid(&manifest_url, e))?;
    for (what, agrees) in [
        ("workers", record.workers == manifest.workers),
        ("step", record.step == manifest.step),
        (
            "logical_state_root",
            record.logical_state_root == manifest.logical_state_root,
        ),
    ] {
        if !agrees {
            return Err(invalid(
                &record_url,
                StoreError::BindingMismatch {
                    path: record_url.clone().into(),
                    what,
                },
            ));
        }
    }
    let manifest_path = Path::new(&manifest_url);
    let topology =
        check_manifest(manifest_path, &manifest).map_err(|e| invalid(&manifest_url, e))?;
    // The store's payload checks take a fetch returning StoreError; the object-store
    // error (naming the payload's key) is kept aside and returned in its place.
    let mut failure: Option<ObjStoreError> = None;
    let mut fetch_payload = |digest: Digest, expected: u64| {
        let fetched =
            fetch_object(client, digest, expected.min(MAX_CHUNK_OBJECT_BYTES)).map_err(|error| {
                let message = error.to_string();
                failure = Some(error);
                StoreError::Io {
                    path: location.key_url(&object_key(&digest)).into(),
                    source: std::io::Error::other(message),
                }
            });
        if fetched.is_ok() {
            on_object();
        }
        fetched
    };
    let state = match objects {
        ObjectCheck::Lengths => {
            check_lengths(client, &manifest_url, &manifest, on_object)?;
            None
        }
        ObjectCheck::Hashed => {
            let checked = if decode_state {
                assemble_state(manifest_path, &manifest, &mut fetch_payload).map(Some)
            } else {
                verify_payloads(manifest_path, &manifest, &mut fetch_payload).map(|()| None)
            };
            let state = match checked {
                Ok(state) => state,
                Err(error) => {
                    return Err(failure
                        .take()
                        .unwrap_or_else(|| invalid(&manifest_url, error)))
                }
            };
            if let Some(synthetic) = &manifest.synthetic {
                verify_synthetic(client, &manifest_url, synthetic, on_object)?;
            }
            state
        }
    };
    Ok(Verified {
        generation,
        key: rel.to_owned(),
        commit_digest: record_digest,
        manifest_digest: Digest::of(&manifest_bytes),
        manifest,
        topology,
        state,
    })
}

/// What [`verify_record`] checks and builds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordChecks {
    /// Build the `LogicalState` (only with [`ObjectCheck::Hashed`]).
    pub(crate) decode_state: bool,
    /// How the objects are checked.
    pub(crate) objects: ObjectCheck,
}

/// A loader's checks: every object fetched and hashed.
fn hashed(decode_state: bool) -> RecordChecks {
    RecordChecks {
        decode_state,
        objects: ObjectCheck::Hashed,
    }
}

/// [`ObjectCheck::Lengths`] on an object store: one LIST of `objects/` gives every object's
/// size, and each chunk payload and synthetic object of the (checked) manifest must be
/// listed with exactly its length; no object is fetched (RFC 0001 §9.9). `on_object` is
/// called for each object checked.
fn check_lengths(
    client: &ObjClient,
    manifest_url: &str,
    manifest: &ManifestRecord,
    on_object: &mut dyn FnMut(),
) -> Result<(), ObjStoreError> {
    let sizes: std::collections::HashMap<String, u64> = client
        .list_with_sizes(OBJECTS_PREFIX)?
        .into_iter()
        .collect();
    let invalid = |source| ObjStoreError::Invalid {
        key: manifest_url.to_owned(),
        source,
    };
    let check = |digest: &Digest, expected: u64, wrong: &dyn Fn(u64) -> StoreError| {
        let rel = object_key(digest);
        match sizes.get(&rel) {
            None => Err(ObjStoreError::MissingObject {
                key: client.location().key_url(&rel),
            }),
            Some(&found) if found != expected => Err(invalid(wrong(found))),
            Some(_) => Ok(()),
        }
    };
    for entry in &manifest.chunks {
        let expected = u64::from(entry.elements).saturating_mul(4);
        for (_, digest) in entry.digests() {
            check(&digest, expected, &|found| StoreError::ChunkSize {
                path: manifest_url.into(),
                id: entry.id,
                expected,
                found,
            })?;
            on_object();
        }
    }
    if let Some(synthetic) = &manifest.synthetic {
        for (index, digest) in synthetic.objects.iter().enumerate() {
            let expected = synthetic.object_len(index).ok_or_else(|| {
                invalid(StoreError::MalformedManifest {
                    path: manifest_url.into(),
                    reason: format!("synthetic object {index} has no consistent length"),
                })
            })?;
            check(digest, expected, &|found| StoreError::SyntheticObjectSize {
                path: client.location().key_url(&object_key(digest)).into(),
                index: index as u64,
                expected,
                found,
            })?;
            on_object();
        }
    }
    Ok(())
}

/// Synthetic objects (a state scaled for benchmarks, RFC 0001 §3): each GET under its
/// expected length, its digest checked against its key, its length against the manifest's.
fn verify_synthetic(
    client: &ObjClient,
    manifest_url: &str,
    synthetic: &SyntheticPayloads,
    on_object: &mut dyn FnMut(),
) -> Result<(), ObjStoreError> {
    let invalid = |source| ObjStoreError::Invalid {
        key: manifest_url.to_owned(),
        source,
    };
    for (index, digest) in synthetic.objects.iter().enumerate() {
        let malformed = || {
            invalid(StoreError::MalformedManifest {
                path: manifest_url.into(),
                reason: format!("synthetic object {index} has no consistent length"),
            })
        };
        let expected = synthetic.object_len(index).ok_or_else(malformed)?;
        let bytes = fetch_object(client, *digest, expected)?;
        if bytes.len() as u64 != expected {
            return Err(invalid(StoreError::SyntheticObjectSize {
                path: client.location().key_url(&object_key(digest)).into(),
                index: index as u64,
                expected,
                found: bytes.len() as u64,
            }));
        }
        on_object();
    }
    Ok(())
}

fn selected_of(v: &Verified) -> SelectedGeneration {
    SelectedGeneration::verified(
        v.generation,
        v.commit_digest,
        v.manifest_digest,
        &v.manifest,
        v.topology,
    )
}

/// LATEST's status; a request that fails (after its retries) fails recovery, as every
/// other read does; a LATEST too large or undecodable is `garbage`.
fn latest_report(
    client: &ObjClient,
    selected: Option<&SelectedGeneration>,
) -> Result<LatestReport, ObjStoreError> {
    let url = client.location().key_url(LATEST_KEY);
    let bytes = match client.get_capped(LATEST_KEY, LatestRecord::CAP) {
        Ok(Fetched::Bytes(bytes)) => bytes,
        Ok(Fetched::Missing) => return Ok(LatestReport::MISSING),
        Err(error @ ObjStoreError::TooLarge { .. }) => {
            return Ok(LatestReport::garbage(error.to_string(), None))
        }
        Err(error) => return Err(error),
    };
    Ok(match decode::<LatestRecord>(Path::new(&url), &bytes) {
        Ok(record) => LatestReport::compare(&record, selected),
        Err(error) => LatestReport::garbage(error.to_string(), None),
    })
}

/// Scans `commits/`, verifies every record, selects the highest generation with exactly
/// one valid record. Two different valid records at the highest valid generation are
/// [`ObjStoreError::SplitBrain`]; a request that fails (after its bounded retries) fails
/// the scan — recovery never answers from a partial listing or a partial read.
pub fn recover(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
) -> Result<ObjRecoveryReport, ObjStoreError> {
    let mut ignored = Vec::new();
    let mut records = Vec::new();
    for key in client.list(COMMITS_PREFIX)? {
        match parse_commit_key(&key) {
            Some((generation, digest)) => records.push((generation, digest, key)),
            None => ignored.push(key),
        }
    }
    records.sort();
    let mut valid: BTreeMap<u64, Vec<Verified>> = BTreeMap::new();
    let mut rejected = Vec::new();
    for (generation, digest, key) in records {
        match verify_record(client, &key, generation, digest, hashed(false), &mut || {}) {
            Ok(v) => valid.entry(generation).or_default().push(v),
            // A request that failed says nothing about the record: fail the scan.
            Err(error @ (ObjStoreError::Request { .. } | ObjStoreError::Timeout { .. })) => {
                return Err(error)
            }
            Err(error) => rejected.push(Rejection {
                file: key,
                generation: Some(generation),
                kind: error.kind().to_owned(),
                reason: error.to_string(),
            }),
        }
    }
    // Every split brain here is below the selected generation: one at the top is an error.
    let split_brains: Vec<SplitBrainRecords> = valid
        .iter()
        .filter(|(_, records)| records.len() > 1)
        .map(|(&generation, records)| SplitBrainRecords {
            generation,
            records: records.iter().map(|v| v.key.clone()).collect(),
        })
        .collect();
    let top = valid.iter().next_back();
    let selected = match top {
        None => None,
        Some((&generation, records)) if records.len() > 1 => {
            return Err(ObjStoreError::SplitBrain {
                generation,
                records: records
                    .iter()
                    .map(|v| client.location().key_url(&v.key))
                    .collect(),
            })
        }
        Some((_, records)) => records.first(),
    };
    let selected_generation = selected.map(selected_of);
    let latest = latest_report(client, selected_generation.as_ref())?;
    Ok(ObjRecoveryReport {
        location: client.location().url(),
        selected_key: selected.map(|v| v.key.clone()),
        scan: RecoveryReport {
            selected: selected_generation,
            valid_generations: valid.keys().copied().collect(),
            rejected,
            latest,
            ignored,
        },
        split_brains,
        conditional_create,
    })
}

/// The fully verified state of `generation`: its one valid record, decoded end to end.
pub fn load_generation(
    client: &ObjClient,
    generation: u64,
) -> Result<(LogicalState, Topology), ObjStoreError> {
    let (state, topology, _) = load_generation_record(client, generation)?;
    Ok((state, topology))
}

/// As [`load_generation`], with the SHA-256 of the one commit record that verified.
pub fn load_generation_record(
    client: &ObjClient,
    generation: u64,
) -> Result<(LogicalState, Topology, Digest), ObjStoreError> {
    let verified = verify_generation(client, generation, true)?;
    match verified.state {
        Some(state) => Ok((state, verified.topology, verified.commit_digest)),
        None => Err(ObjStoreError::GenerationNotFound {
            location: client.location().url(),
            generation,
        }),
    }
}

/// The one record of `generation` that verifies end to end (RFC 0001 §9.4, a loader's
/// steps), with its state decoded when `decode_state`. None is `GenerationNotFound` or the
/// first record's error; two or more are a split brain.
pub(crate) fn verify_generation(
    client: &ObjClient,
    generation: u64,
    decode_state: bool,
) -> Result<Verified, ObjStoreError> {
    verify_generation_reporting(client, generation, hashed(decode_state), &mut NoProgress)
}

/// As [`verify_generation`], advancing `progress` (a running count over every record
/// tried) as each payload object arrives with the digest its key names; the phase is the
/// caller's.
pub(crate) fn verify_generation_reporting(
    client: &ObjClient,
    generation: u64,
    checks: RecordChecks,
    progress: &mut dyn Progress,
) -> Result<Verified, ObjStoreError> {
    let mut objects_fetched = 0u64;
    let mut on_object = || {
        objects_fetched += 1;
        progress.advance(objects_fetched);
    };
    let prefix = commit_prefix(generation);
    let mut found = Vec::new();
    let mut first_error = None;
    for key in client.list(&prefix)? {
        let Some((named, digest)) = parse_commit_key(&key) else {
            continue;
        };
        if named != generation {
            continue;
        }
        match verify_record(client, &key, generation, digest, checks, &mut on_object) {
            Ok(v) => found.push(v),
            Err(error @ (ObjStoreError::Request { .. } | ObjStoreError::Timeout { .. })) => {
                return Err(error)
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match found.len() {
        0 => Err(first_error.unwrap_or(ObjStoreError::GenerationNotFound {
            location: client.location().url(),
            generation,
        })),
        1 => Ok(found.remove(0)),
        _ => Err(ObjStoreError::SplitBrain {
            generation,
            records: found
                .iter()
                .map(|v| client.location().key_url(&v.key))
                .collect(),
        }),
    }
}
