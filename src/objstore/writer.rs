//! The object-store writer (RFC 0001 §9.3): chunk objects, the manifest, the commit
//! record (after its claim where the store honours conditional create, §9.8), LATEST —
//! each a PUT, each reaching the barriers RFC 0001 §9.6 maps to it; and the offline
//! reshard (§9.9).
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::{NoProgress, Progress};
use crate::core::topology::Topology;
use crate::objstore::client::{ConditionalCreate, Fetched, ObjClient};
use crate::objstore::error::ObjStoreError;
use crate::objstore::keys::{
    claim_key, commit_key, object_key, parse_claim_key, parse_commit_key, CLAIMS_PREFIX,
    COMMITS_PREFIX, LATEST_KEY,
};
use crate::store::barrier::{Barrier, BarrierHook, BarrierSequencer, NoHooks};
use crate::store::codec::{CommitKind, ManifestRecord};
use crate::store::error::StoreError;
use crate::store::protocol::{self, Committed, ObjectSource, SourceCheck, WriteSteps};
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
            committed: Committed {
                generation: self.generation,
                kind: self.kind,
                commit_digest: self.commit_digest,
                manifest_digest: self.manifest_digest,
                workers: self.workers,
                step: self.step,
                logical_state_root: self.logical_state_root,
            },
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
    protocol::next_generation(&mut Run::new(client, conditional_create, &mut NoHooks))
}

/// The highest generation named under `commits/` (and `claims/` where they fence).
fn highest_named(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
) -> Result<Option<u64>, ObjStoreError> {
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
    Ok(highest)
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

/// One write on an object store: the S3 backend's steps of the protocol
/// ([`crate::store::protocol`]), each a PUT.
struct Run<'a> {
    client: &'a ObjClient,
    conditional_create: ConditionalCreate,
    hooks: &'a mut dyn BarrierHook,
    barriers: BarrierSequencer,
    generation: u64,
    objects_put: u64,
    bytes_put: u64,
    started: Instant,
}

impl<'a> Run<'a> {
    fn new(
        client: &'a ObjClient,
        conditional_create: ConditionalCreate,
        hooks: &'a mut dyn BarrierHook,
    ) -> Self {
        Run {
            client,
            conditional_create,
            hooks,
            barriers: BarrierSequencer::new(),
            generation: 0,
            objects_put: 0,
            bytes_put: 0,
            started: Instant::now(),
        }
    }

    fn emit(&mut self, barrier: Barrier, rel: &str) -> Result<(), ObjStoreError> {
        self.barriers
            .reach(self.hooks, barrier, rel)
            .map_err(|stop| ObjStoreError::Stopped {
                barrier,
                reason: stop.reason,
            })
    }

    /// One PUT with its four barriers: the two "write/fsync" barriers when the bytes are
    /// ready and nothing is sent, the two "rename/directory-fsync" barriers when the PUT
    /// was acknowledged (visible and, on a store that fsyncs before acknowledging,
    /// durable). RFC 0001 §9.6. With `claim_for` (the commit record's digest), the
    /// generation is claimed once the bytes-ready barriers are reached and before the PUT
    /// (RFC 0001 §9.8).
    fn put(
        &mut self,
        barriers: [Barrier; 4],
        rel: &str,
        bytes: Vec<u8>,
        claim_for: Option<Digest>,
    ) -> Result<(), ObjStoreError> {
        let [after_write, after_file_fsync, after_rename, after_directory_fsync] = barriers;
        self.emit(after_write, rel)?;
        self.emit(after_file_fsync, rel)?;
        if let Some(commit_digest) = claim_for {
            claim(self.client, self.generation, commit_digest)?;
        }
        let length = bytes.len() as u64;
        self.client.put(rel, bytes)?;
        self.bytes_put += length;
        self.emit(after_rename, rel)?;
        self.emit(after_directory_fsync, rel)
    }

    /// What this run committed, as its summary.
    fn summary(&self, committed: Committed) -> ObjCommitSummary {
        ObjCommitSummary {
            location: self.client.location().url(),
            generation: committed.generation,
            kind: committed.kind,
            commit_key: commit_key(committed.generation, &committed.commit_digest),
            commit_digest: committed.commit_digest,
            manifest_digest: committed.manifest_digest,
            workers: committed.workers,
            step: committed.step,
            logical_state_root: committed.logical_state_root,
            objects_put: self.objects_put,
            bytes_put: self.bytes_put,
            conditional_create: self.conditional_create,
            elapsed_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl WriteSteps for Run<'_> {
    type Error = ObjStoreError;

    fn protocol_error(error: StoreError) -> ObjStoreError {
        match error {
            StoreError::GenerationOverflow => ObjStoreError::GenerationOverflow,
            other => ObjStoreError::Publish(other),
        }
    }

    fn prepare_publish(&mut self) -> Result<(), ObjStoreError> {
        self.conditional_create = probed(self.client, self.conditional_create)?;
        Ok(())
    }

    fn prepare_reshard(&mut self) -> Result<(), ObjStoreError> {
        self.prepare_publish()
    }

    fn make_layout(&mut self) -> Result<(), ObjStoreError> {
        Ok(())
    }

    fn highest_named_generation(&mut self) -> Result<Option<u64>, ObjStoreError> {
        highest_named(self.client, self.conditional_create)
    }

    fn begin(&mut self, generation: u64) {
        self.generation = generation;
    }

    fn put_objects(
        &mut self,
        count: usize,
        source: ObjectSource<'_>,
        progress: &mut dyn Progress,
    ) -> Result<Vec<Digest>, ObjStoreError> {
        let mut digests = Vec::with_capacity(count);
        for index in 0..count {
            let payload = source(index);
            let digest = Digest::of(&payload);
            self.put(OBJECT_BARRIERS, &object_key(&digest), payload, None)?;
            self.objects_put += 1;
            digests.push(digest);
            progress.advance(index as u64 + 1);
        }
        Ok(digests)
    }

    fn objects_installed(&mut self) -> Result<(), ObjStoreError> {
        Ok(())
    }

    fn put_manifest(&mut self, bytes: Vec<u8>, digest: Digest) -> Result<(), ObjStoreError> {
        self.put(MANIFEST_BARRIERS, &object_key(&digest), bytes, None)
    }

    fn install_commit(&mut self, bytes: Vec<u8>, digest: Digest) -> Result<(), ObjStoreError> {
        let claim_for = match self.conditional_create {
            ConditionalCreate::Honoured => Some(digest),
            _ => None,
        };
        let key = commit_key(self.generation, &digest);
        self.put(COMMIT_BARRIERS, &key, bytes, claim_for)
    }

    fn advance_latest(&mut self, bytes: Vec<u8>) -> Result<(), ObjStoreError> {
        self.put(LATEST_BARRIERS, LATEST_KEY, bytes, None)
    }

    fn failed_after_commit(&self, error: ObjStoreError) -> ObjStoreError {
        error
    }
}

impl SourceCheck for Run<'_> {
    fn check_source(
        &mut self,
        generation: u64,
        objects: ObjectCheck,
        progress: &mut dyn Progress,
    ) -> Result<ManifestRecord, ObjStoreError> {
        let checks = crate::store::verify::RecordChecks {
            decode_state: false,
            objects,
        };
        let source = crate::objstore::recovery::verify_generation_reporting(
            self.client,
            generation,
            checks,
            progress,
        )?;
        Ok(source.manifest)
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
    let mut run = Run::new(client, conditional_create, hooks);
    let committed = protocol::publish(&mut run, state, topology, None, &mut NoProgress)?;
    Ok(run.summary(committed))
}

/// Publishes `state` plus the synthetic objects of `spec` (RFC 0001 §3, §9.3 step 2): the
/// chunk payloads, then the synthetic objects in order (each generated when its PUT is
/// due, so memory stays one object), then the manifest that lists them, the commit record
/// and LATEST; one progress step per object.
pub fn publish_synthetic(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
    state: &LogicalState,
    topology: Topology,
    spec: SyntheticSpec,
    hooks: &mut dyn BarrierHook,
    progress: &mut dyn Progress,
) -> Result<ObjCommitSummary, ObjStoreError> {
    let mut run = Run::new(client, conditional_create, hooks);
    let committed = protocol::publish(&mut run, state, topology, Some(spec), progress)?;
    Ok(run.summary(committed))
}

/// Reshards `generation` onto `topology` (RFC 0001 §7 on an object store, §9.9; see
/// [`protocol::reshard`]): verifies the source as a loader does, then commits a manifest
/// equal to its manifest but for `workers` and `ownership` as the next generation, kind
/// `reshard`. No chunk object is PUT. A source that does not verify fails with its error
/// and nothing is PUT.
pub fn reshard(
    client: &ObjClient,
    conditional_create: ConditionalCreate,
    generation: u64,
    topology: Topology,
    objects: ObjectCheck,
    hooks: &mut dyn BarrierHook,
    progress: &mut dyn Progress,
) -> Result<ObjCommitSummary, ObjStoreError> {
    let mut run = Run::new(client, conditional_create, hooks);
    let committed = protocol::reshard(&mut run, generation, topology, objects, progress)?;
    Ok(run.summary(committed))
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
