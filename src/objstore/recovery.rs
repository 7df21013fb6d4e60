//! Object-store recovery (RFC 0001 §9.4): LIST `commits/`, verify every record end to end
//! with the store's own checks, select the highest generation with exactly one valid
//! record, report split brains and LATEST's status. Writes nothing.
use std::path::{Path, PathBuf};

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
use crate::store::checks::{synthetic_object_len, ObjectRole, ReferencedObject};
use crate::store::codec::{decode, CommitRecord, LatestRecord, SyntheticPayloads};
use crate::store::error::StoreError;
use crate::store::recovery::{LatestReport, RecoveryReport, SelectedGeneration};
use crate::store::scan::{scan, RejectionKind, ScanError, VerifiedGeneration};
use crate::store::verify::{verify_record, RecordChecks, RecordReads};

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
/// record's bytes against its key's digest, then the store's checks in the order of RFC
/// 0001 §5 steps 2–4 ([`verify_record`]) over this backend's reads (§9.4).
fn verify_key(
    client: &ObjClient,
    rel: &str,
    generation: u64,
    record_digest: Digest,
    checks: RecordChecks,
    on_object: &mut dyn FnMut(),
) -> Result<VerifiedGeneration, ObjStoreError> {
    let record_url = client.location().key_url(rel);
    let bytes = fetch(client, rel, CommitRecord::CAP)?;
    let actual = Digest::of(&bytes);
    if actual != record_digest {
        return Err(ObjStoreError::DigestMismatch {
            key: record_url,
            expected: record_digest,
            actual,
        });
    }
    let mut reads = ObjReads { client, on_object };
    let verified = verify_record(
        &mut reads,
        Path::new(&record_url),
        &bytes,
        generation,
        checks,
    )?;
    Ok(VerifiedGeneration {
        generation,
        record: rel.to_owned(),
        commit: verified.commit,
        commit_digest: record_digest,
        manifest_digest: verified.manifest_digest,
        manifest: verified.manifest,
        topology: verified.topology,
        state: verified.state,
    })
}

/// The object store's reads for [`verify_record`]: GETs of content-addressed keys, one
/// LIST for lengths; `on_object` is called for each payload or synthetic object checked.
struct ObjReads<'a> {
    client: &'a ObjClient,
    on_object: &'a mut dyn FnMut(),
}

impl RecordReads for ObjReads<'_> {
    type Error = ObjStoreError;

    fn invalid(&self, at: &Path, error: StoreError) -> ObjStoreError {
        ObjStoreError::Invalid {
            key: at.display().to_string(),
            source: error,
        }
    }

    fn object_path(&self, digest: &Digest) -> PathBuf {
        PathBuf::from(self.client.location().key_url(&object_key(digest)))
    }

    fn read_manifest(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, ObjStoreError> {
        fetch_object(self.client, digest, cap_bytes)
    }

    fn read_payload(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, ObjStoreError> {
        let bytes = fetch_object(self.client, digest, cap_bytes)?;
        (self.on_object)();
        Ok(bytes)
    }

    fn check_lengths(
        &mut self,
        manifest_path: &Path,
        objects: &[ReferencedObject],
    ) -> Result<(), ObjStoreError> {
        check_lengths(self.client, manifest_path, objects, self.on_object)
    }

    fn verify_synthetic(
        &mut self,
        manifest_path: &Path,
        synthetic: &SyntheticPayloads,
    ) -> Result<(), ObjStoreError> {
        verify_synthetic(self.client, manifest_path, synthetic, self.on_object)
    }
}

/// [`ObjectCheck::Lengths`](crate::store::verify::ObjectCheck::Lengths) on an object
/// store: one LIST of `objects/` gives every object's size, and each of `objects` (the
/// chunk payloads and synthetic objects of the checked manifest) must be listed with
/// exactly its length; no object is fetched (RFC 0001 §9.9). `on_object` is called for
/// each object checked.
fn check_lengths(
    client: &ObjClient,
    manifest_path: &Path,
    objects: &[ReferencedObject],
    on_object: &mut dyn FnMut(),
) -> Result<(), ObjStoreError> {
    let sizes: std::collections::HashMap<String, u64> = client
        .list_with_sizes(OBJECTS_PREFIX)?
        .into_iter()
        .collect();
    for object in objects {
        let rel = object_key(&object.digest);
        match sizes.get(&rel) {
            None => {
                return Err(ObjStoreError::MissingObject {
                    key: client.location().key_url(&rel),
                })
            }
            Some(&found) if found != object.length_bytes => {
                let wrong = object
                    .role
                    .wrong_length(manifest_path, object.length_bytes, found);
                return Err(object_invalid(client, &rel, wrong));
            }
            Some(_) => on_object(),
        }
    }
    Ok(())
}

/// An object that failed a store check (its length): the store's error, which names the
/// manifest that gives the length, under the object's own key (RFC 0001 §9.4 step 6).
fn object_invalid(client: &ObjClient, rel: &str, error: StoreError) -> ObjStoreError {
    ObjStoreError::Invalid {
        key: client.location().key_url(rel),
        source: error,
    }
}

/// Synthetic objects (a state scaled for benchmarks, RFC 0001 §3): each GET under its
/// expected length, its length checked against the manifest's, then its digest against
/// its key.
fn verify_synthetic(
    client: &ObjClient,
    manifest_path: &Path,
    synthetic: &SyntheticPayloads,
    on_object: &mut dyn FnMut(),
) -> Result<(), ObjStoreError> {
    let invalid = |source| ObjStoreError::Invalid {
        key: manifest_path.display().to_string(),
        source,
    };
    for (index, digest) in synthetic.objects.iter().enumerate() {
        let expected = synthetic_object_len(manifest_path, synthetic, index).map_err(invalid)?;
        // Length first, then SHA-256 (RFC 0001 §5 step 4), as on the local store: an
        // object longer than the manifest says is refused by the cap before its body.
        let rel = object_key(digest);
        let wrong_length = |found| {
            let role = ObjectRole::Synthetic(index as u64);
            object_invalid(
                client,
                &rel,
                role.wrong_length(manifest_path, expected, found),
            )
        };
        let bytes = match fetch(client, &rel, expected) {
            Ok(bytes) => bytes,
            Err(ObjStoreError::TooLarge { size_bytes, .. }) => {
                return Err(wrong_length(size_bytes))
            }
            Err(error) => return Err(error),
        };
        if bytes.len() as u64 != expected {
            return Err(wrong_length(bytes.len() as u64));
        }
        let actual = Digest::of(&bytes);
        if actual != *digest {
            return Err(ObjStoreError::DigestMismatch {
                key: client.location().key_url(&rel),
                expected: *digest,
                actual,
            });
        }
        on_object();
    }
    Ok(())
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
    let records = records
        .into_iter()
        .map(|(generation, digest, key)| (generation, key, digest))
        .collect();
    let scanned = scan(records, |generation, key, digest| {
        verify_key(
            client,
            key,
            generation,
            digest,
            RecordChecks::hashed(false),
            &mut || {},
        )
    })?;
    // Every split brain here is below the selected generation: one at the top is an error.
    let split_brains: Vec<SplitBrainRecords> = scanned
        .valid
        .iter()
        .filter(|(_, records)| records.len() > 1)
        .map(|(&generation, records)| SplitBrainRecords {
            generation,
            records: records.iter().map(|v| v.record.clone()).collect(),
        })
        .collect();
    let selected = match scanned.top() {
        None => None,
        Some((generation, records)) if records.len() > 1 => {
            return Err(ObjStoreError::SplitBrain {
                generation,
                records: records
                    .iter()
                    .map(|v| client.location().key_url(&v.record))
                    .collect(),
            })
        }
        Some((_, records)) => records.first(),
    };
    let selected_generation = selected.map(SelectedGeneration::of);
    let latest = latest_report(client, selected_generation.as_ref())?;
    Ok(ObjRecoveryReport {
        location: client.location().url(),
        selected_key: selected.map(|v| v.record.clone()),
        scan: RecoveryReport {
            selected: selected_generation,
            valid_generations: scanned.valid_generations(),
            rejected: scanned.rejected,
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
) -> Result<VerifiedGeneration, ObjStoreError> {
    verify_generation_reporting(
        client,
        generation,
        RecordChecks::hashed(decode_state),
        &mut NoProgress,
    )
}

/// As [`verify_generation`], advancing `progress` (a running count over every record
/// tried) as each payload object arrives with the digest its key names; the phase is the
/// caller's.
pub(crate) fn verify_generation_reporting(
    client: &ObjClient,
    generation: u64,
    checks: RecordChecks,
    progress: &mut dyn Progress,
) -> Result<VerifiedGeneration, ObjStoreError> {
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
        match verify_key(client, &key, generation, digest, checks, &mut on_object) {
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
                .map(|v| client.location().key_url(&v.record))
                .collect(),
        }),
    }
}

impl ScanError for ObjStoreError {
    /// `None` for a request that failed, which says nothing about the record.
    fn rejection(&self) -> Option<RejectionKind> {
        self.rejection_kind()
    }

    fn scan_failed(self, _generation: u64) -> Self {
        self
    }
}
