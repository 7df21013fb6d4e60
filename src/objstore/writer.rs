//! The object-store writer (RFC 0001 §9.3): chunk objects, the manifest, the commit
//! record (after its claim where the store honours conditional create, §9.8), LATEST —
//! each a PUT, each reaching the barriers RFC 0001 §9.6 maps to it; and the offline
//! reshard (§9.9).
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::Progress;
use crate::core::topology::Topology;
use crate::objstore::client::{ConditionalCreate, Fetched, ObjClient};
use crate::objstore::error::ObjStoreError;
use crate::objstore::keys::{
    claim_key, commit_key, object_key, parse_claim_key, parse_commit_key, CLAIMS_PREFIX,
    COMMITS_PREFIX, LATEST_KEY,
};
use crate::store::barrier::{Barrier, BarrierHook, BarrierSequencer};
use crate::store::codec::{
    encode, CommitKind, CommitRecord, LatestRecord, ManifestRecord, SyntheticPayloads,
    COMMIT_SCHEMA, LATEST_SCHEMA, MAX_CHUNK_OBJECT_BYTES, SCHEMA_VERSION,
};
use crate::store::error::StoreError;
use crate::store::layout::{chunk_entries, chunk_payloads, manifest_for, synthetic_object};
use crate::store::recovery::ObjectCheck;
use crate::store::writer::{CommitSummary, SyntheticSpec};

/// Most bytes a claim is read with: a SHA-256 in hex.
const CLAIM_CAP_BYTES: u64 = 64;

/// What a publish committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjCommitSummary {
    /// The store location.
    pub location: String,
    /// The generation committed.
    pub generation: u64,
    /// Publish or reshard.
    pub kind: CommitKind,
    /// The commit record's key (relative to the store).
    pub commit_key: String,
    /// SHA-256 of the commit record.
    pub commit_digest: Digest,
    /// SHA-256 of the manifest.
    pub manifest_digest: Digest,
    /// The worker count of the committed topology.
    pub workers: u32,
    /// The optimizer step of the committed state.
    pub step: u64,
    /// The committed logical-state root.
    pub logical_state_root: Digest,
    /// Chunk objects PUT (every one, idempotently).
    pub objects_put: u64,
    /// Bytes PUT: chunk objects, manifest, commit record and LATEST.
    pub bytes_put: u64,
    /// What the conditional-create probe found at open.
    pub conditional_create: ConditionalCreate,
    /// Wall time of the publish, in milliseconds.
    pub elapsed_ms: u64,
}

impl ObjCommitSummary {
    /// The local store's summary of the same commit (what the crash harness's protocol
    /// carries): chunk objects PUT count as written, none as reused.
    pub fn commit_summary(&self) -> CommitSummary {
        CommitSummary {
            generation: self.generation,
            kind: self.kind,
            commit_digest: self.commit_digest,
            manifest_digest: self.manifest_digest,
            workers: self.workers,
            step: self.step,
            logical_state_root: self.logical_state_root,
            objects_written: self.objects_put,
            objects_reused: 0,
        }
    }
}

/// Highest generation named under `commits/` plus one (0 for an empty store). Names
/// count whether or not their records verify, as in the local store. Where the backend
/// honours conditional create, generations named under `claims/` count too, so a writer
/// that claimed a generation and died before its commit record leaves a gap, never a
/// generation no one can claim again (RFC 0001 §9.8).
pub fn next_generation(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
) -> Result<u64, ObjStoreError> {
    let mut highest = client
        .list(COMMITS_PREFIX)?
        .iter()
        .filter_map(|k| parse_commit_key(k))
        .map(|(g, _)| g)
        .max();
    if conditional_create == ConditionalCreate::Honoured {
        let claimed = client
            .list(CLAIMS_PREFIX)?
            .iter()
            .filter_map(|k| parse_claim_key(k))
            .max();
        highest = highest.max(claimed);
    }
    crate::store::codec::generation_after(highest).ok_or(ObjStoreError::GenerationOverflow)
}

/// The capability a writer acts on: a store opened without the probe is probed now, so no
/// writer skips the fence on a store that honours conditional create (RFC 0001 §9.8).
pub(crate) fn probed(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
) -> Result<ConditionalCreate, ObjStoreError> {
    match conditional_create {
        ConditionalCreate::NotProbed => client.probe_conditional_create(),
        known => Ok(known),
    }
}

struct Run<'a> {
    client: &'a ObjClient,
    hooks: &'a mut dyn BarrierHook,
    barriers: BarrierSequencer,
    bytes_put: u64,
}

impl<'a> Run<'a> {
    fn new(client: &'a ObjClient, hooks: &'a mut dyn BarrierHook) -> Self {
        Run {
            client,
            hooks,
            barriers: BarrierSequencer::new(),
            bytes_put: 0,
        }
    }

    fn emit(&mut self, barrier: Barrier, rel: &str) -> Result<(), ObjStoreError> {
        self.barriers
            .reach(self.hooks, barrier, rel)
            .map_err(|reason| ObjStoreError::Stopped {
                barrier: barrier.name(),
                reason,
            })
    }

    /// One PUT with its four barriers: the two "write/fsync" barriers when the bytes are
    /// ready and nothing is sent, the two "rename/directory-fsync" barriers when the PUT
    /// was acknowledged (visible and, on a store that fsyncs before acknowledging,
    /// durable). RFC 0001 §9.6.
    fn put(
        &mut self,
        barriers: [Barrier; 4],
        rel: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ObjStoreError> {
        self.put_after(barriers, rel, bytes, |_| Ok(()))
    }

    /// [`Self::put`] with `before_send` run once the bytes-ready barriers are reached and
    /// before the PUT (the commit record's claim, RFC 0001 §9.8).
    fn put_after(
        &mut self,
        barriers: [Barrier; 4],
        rel: &str,
        bytes: Vec<u8>,
        before_send: impl FnOnce(&ObjClient) -> Result<(), ObjStoreError>,
    ) -> Result<(), ObjStoreError> {
        let [after_write, after_file_fsync, after_rename, after_directory_fsync] = barriers;
        self.emit(after_write, rel)?;
        self.emit(after_file_fsync, rel)?;
        before_send(self.client)?;
        let length = bytes.len() as u64;
        self.client.put(rel, bytes)?;
        self.bytes_put += length;
        self.emit(after_rename, rel)?;
        self.emit(after_directory_fsync, rel)
    }
}

const OBJECT_BARRIERS: [Barrier; 4] = [
    Barrier::ObjectAfterWrite,
    Barrier::ObjectAfterFileFsync,
    Barrier::ObjectAfterRename,
    Barrier::ObjectAfterDirectoryFsync,
];
const MANIFEST_BARRIERS: [Barrier; 4] = [
    Barrier::ManifestAfterWrite,
    Barrier::ManifestAfterFileFsync,
    Barrier::ManifestAfterRename,
    Barrier::ManifestAfterDirectoryFsync,
];
const COMMIT_BARRIERS: [Barrier; 4] = [
    Barrier::CommitAfterWrite,
    Barrier::CommitAfterFileFsync,
    Barrier::CommitAfterRename,
    Barrier::CommitAfterDirectoryFsync,
];
const LATEST_BARRIERS: [Barrier; 4] = [
    Barrier::LatestAfterWrite,
    Barrier::LatestAfterFileFsync,
    Barrier::LatestAfterRename,
    Barrier::LatestAfterDirectoryFsync,
];

/// Publishes `state` on `topology` as the next generation: every chunk payload, then the
/// manifest, then the commit record (the commit point), then LATEST. Nothing is reported
/// committed unless the commit record's PUT was acknowledged.
pub fn publish(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
    state: &LogicalState,
    topology: Topology,
    hooks: &mut dyn BarrierHook,
) -> Result<ObjCommitSummary, ObjStoreError> {
    publish_with(client, conditional_create, state, topology, None, hooks)
}

/// Publishes `state` plus the synthetic objects of `spec` (RFC 0001 §3, §9.3 step 2): the
/// chunk payloads, then the synthetic objects in order (each generated when its PUT is
/// due, so memory stays one object), then the manifest that lists them, the commit record
/// and LATEST.
pub fn publish_synthetic(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
    state: &LogicalState,
    topology: Topology,
    spec: SyntheticSpec,
    hooks: &mut dyn BarrierHook,
) -> Result<ObjCommitSummary, ObjStoreError> {
    publish_with(
        client,
        conditional_create,
        state,
        topology,
        Some(spec),
        hooks,
    )
}

fn publish_with(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
    state: &LogicalState,
    topology: Topology,
    synthetic: Option<SyntheticSpec>,
    hooks: &mut dyn BarrierHook,
) -> Result<ObjCommitSummary, ObjStoreError> {
    let started = Instant::now();
    let conditional_create = probed(client, conditional_create)?;
    if let Some(spec) = synthetic {
        if spec.object_bytes == 0
            || u64::from(spec.object_bytes) > MAX_CHUNK_OBJECT_BYTES
            || spec.total_bytes == 0
        {
            return Err(ObjStoreError::Publish(StoreError::InvalidSynthetic {
                object_bytes: spec.object_bytes,
                total_bytes: spec.total_bytes,
            }));
        }
    }
    let generation = next_generation(client, conditional_create)?;
    let mut run = Run::new(client, hooks);
    let mut objects_put = 0u64;
    for chunk in state.chunks() {
        for payload in chunk_payloads(chunk) {
            let rel = object_key(&Digest::of(&payload));
            run.put(OBJECT_BARRIERS, &rel, payload)?;
            objects_put += 1;
        }
    }
    let mut synthetic_digests = Vec::new();
    if let Some(spec) = synthetic {
        for index in 0..spec.object_count() {
            let len = usize::try_from(spec.object_len(index)).map_err(|_| {
                ObjStoreError::Publish(StoreError::InvalidSynthetic {
                    object_bytes: spec.object_bytes,
                    total_bytes: spec.total_bytes,
                })
            })?;
            let payload = synthetic_object(spec.seed, index, len);
            let digest = Digest::of(&payload);
            run.put(OBJECT_BARRIERS, &object_key(&digest), payload)?;
            synthetic_digests.push(digest);
            objects_put += 1;
        }
    }
    let mut manifest: ManifestRecord = manifest_for(state, topology, chunk_entries(state));
    if let Some(spec) = synthetic {
        manifest.synthetic = Some(SyntheticPayloads {
            seed: spec.seed,
            object_bytes: spec.object_bytes,
            total_bytes: spec.total_bytes,
            objects: synthetic_digests,
        });
    }
    let committed = commit_manifest(&mut run, generation, &manifest, None, conditional_create)?;
    Ok(committed.summary(conditional_create, objects_put, started))
}

/// Reshards `generation` onto `topology` (RFC 0001 §7 on an object store, §9.9): verifies
/// the source as a loader does (exactly one record that verifies end to end, every object
/// re-hashed), then commits a manifest equal to its manifest but for `workers` and
/// `ownership` as the next generation, kind `reshard`. No chunk object is PUT: they are
/// content-addressed and the source's are already there. A source that does not verify
/// fails with its error and nothing is PUT. `progress` gets the file-system reshard's two
/// phases: `verifying generation G` (advancing as each payload object arrives and verifies)
/// and `committing the reshard`; a phase that fails is left unfinished.
pub fn reshard(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
    generation: u64,
    topology: Topology,
    objects: ObjectCheck,
    hooks: &mut dyn BarrierHook,
    progress: &mut dyn Progress,
) -> Result<ObjCommitSummary, ObjStoreError> {
    let started = Instant::now();
    let conditional_create = probed(client, conditional_create)?;
    let verb = match objects {
        ObjectCheck::Hashed => "verifying",
        ObjectCheck::Lengths => "checking",
    };
    progress.phase(&format!("{verb} generation {generation}"), None);
    let checks = crate::store::verify::RecordChecks {
        decode_state: false,
        objects,
    };
    let source = crate::objstore::recovery::verify_generation_reporting(
        client, generation, checks, progress,
    )?;
    progress.finish();
    progress.phase("committing the reshard", None);
    let mut manifest = source.manifest;
    manifest.workers = topology.workers();
    manifest.ownership = topology.chunk_ownership(manifest.chunks.len());
    let candidate = next_generation(client, conditional_create)?;
    let mut run = Run::new(client, hooks);
    let committed = commit_manifest(
        &mut run,
        candidate,
        &manifest,
        Some(generation),
        conditional_create,
    )?;
    progress.finish();
    Ok(committed.summary(conditional_create, 0, started))
}

/// What steps 3–5 of RFC 0001 §9.3 committed.
struct Committed {
    location: String,
    generation: u64,
    kind: CommitKind,
    record_key: String,
    commit_digest: Digest,
    manifest_digest: Digest,
    manifest: ManifestRecord,
    bytes_put: u64,
}

impl Committed {
    fn summary(
        self,
        conditional_create: ConditionalCreate,
        objects_put: u64,
        started: Instant,
    ) -> ObjCommitSummary {
        ObjCommitSummary {
            location: self.location,
            generation: self.generation,
            kind: self.kind,
            commit_key: self.record_key,
            commit_digest: self.commit_digest,
            manifest_digest: self.manifest_digest,
            workers: self.manifest.workers,
            step: self.manifest.step,
            logical_state_root: self.manifest.logical_state_root,
            objects_put,
            bytes_put: self.bytes_put,
            conditional_create,
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// RFC 0001 §9.3 steps 3–5: the manifest, the commit record of `generation` (the commit
/// point; kind `reshard` with `source_generation`, else `publish`), then LATEST. Where the
/// backend honours conditional create, the generation is claimed first (§9.8).
fn commit_manifest(
    run: &mut Run<'_>,
    generation: u64,
    manifest: &ManifestRecord,
    source_generation: Option<u64>,
    conditional_create: ConditionalCreate,
) -> Result<Committed, ObjStoreError> {
    let manifest_bytes = encode(manifest).map_err(ObjStoreError::Publish)?;
    let manifest_digest = Digest::of(&manifest_bytes);
    run.put(
        MANIFEST_BARRIERS,
        &object_key(&manifest_digest),
        manifest_bytes,
    )?;
    let kind = match source_generation {
        Some(_) => CommitKind::Reshard,
        None => CommitKind::Publish,
    };
    let record = CommitRecord {
        schema: COMMIT_SCHEMA.to_owned(),
        version: SCHEMA_VERSION,
        generation,
        kind,
        source_generation,
        manifest: manifest_digest,
        workers: manifest.workers,
        step: manifest.step,
        logical_state_root: manifest.logical_state_root,
    };
    let record_bytes = encode(&record).map_err(ObjStoreError::Publish)?;
    let commit_digest = Digest::of(&record_bytes);
    let record_key = commit_key(generation, &commit_digest);
    run.put_after(
        COMMIT_BARRIERS,
        &record_key,
        record_bytes,
        |client| match conditional_create {
            ConditionalCreate::Honoured => claim(client, generation, commit_digest),
            _ => Ok(()),
        },
    )?;
    let latest = LatestRecord {
        schema: LATEST_SCHEMA.to_owned(),
        version: SCHEMA_VERSION,
        generation,
        commit: commit_digest,
    };
    let latest_bytes = encode(&latest).map_err(ObjStoreError::Publish)?;
    run.put(LATEST_BARRIERS, LATEST_KEY, latest_bytes)?;
    Ok(Committed {
        location: run.client.location().url(),
        generation,
        kind,
        record_key,
        commit_digest,
        manifest_digest,
        manifest: manifest.clone(),
        bytes_put: run.bytes_put,
    })
}

/// The fence of RFC 0001 §9.8: creates `claims/<generation>` (naming the record about to
/// be committed) with `If-None-Match: *`. A refusal of a claim that names another record
/// means another writer claimed the generation first: `GenerationTaken`, and this writer
/// commits nothing. A refused claim that names this writer's own record is its own (a
/// create the store applied but answered with an error, then retried): it stands.
fn claim(client: &ObjClient, generation: u64, commit_digest: Digest) -> Result<(), ObjStoreError> {
    let key = claim_key(generation);
    let ours = commit_digest.to_hex().into_bytes();
    if client.put_create(&key, ours.clone())? {
        return Ok(());
    }
    if let Fetched::Bytes(existing) = client.get_capped(&key, CLAIM_CAP_BYTES)? {
        if existing == ours {
            return Ok(());
        }
    }
    Err(ObjStoreError::GenerationTaken {
        generation,
        key: client.location().key_url(&key),
    })
}
