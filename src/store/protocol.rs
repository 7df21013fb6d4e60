//! The write side of the commit protocol (RFC 0001 §4, §7, §9.3), written once over a
//! backend's steps: choose the generation, install the objects, then the manifest, the
//! commit record (the commit point) and LATEST; and the offline reshard (check the source,
//! commit a new placement of its objects). A backend ([`WriteSteps`]) supplies the layout,
//! how each step is carried out and reaches its barriers, and the commit point: a rename
//! that never replaces on a file system, a claim and a PUT on an object store (§9.8).
use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::Progress;
use crate::core::topology::Topology;
use crate::store::codec::{
    encode, generation_after, ChunkEntry, CommitKind, CommitRecord, LatestRecord, ManifestRecord,
    SyntheticPayloads, COMMIT_SCHEMA, LATEST_SCHEMA, MAX_SYNTHETIC_OBJECT_BYTES, SCHEMA_VERSION,
};
use crate::store::error::StoreError;
use crate::store::layout::{manifest_for, synthetic_object};
use crate::store::verify::ObjectCheck;

/// Makes `index`'s object bytes; called from several threads where a backend installs
/// objects concurrently.
pub type ObjectSource<'a> = &'a (dyn Fn(usize) -> Vec<u8> + Sync);

/// How one backend carries out the protocol's steps. Each step reaches its own barriers
/// (RFC 0001 §4 on a file system, §9.6 on an object store) in the order the protocol
/// calls them.
pub trait WriteSteps {
    /// The backend's error.
    type Error;

    /// A protocol-level error (an invalid input, an encoding failure, an exhausted
    /// generation range) as the backend's error.
    fn protocol_error(error: StoreError) -> Self::Error;

    /// Before a publish checks its input: what the backend must know to write at all (an
    /// object store's conditional-create capability, probed when not yet known).
    fn prepare_publish(&mut self) -> Result<(), Self::Error>;

    /// Before a reshard checks its source: as [`Self::prepare_publish`], and the store
    /// must already exist.
    fn prepare_reshard(&mut self) -> Result<(), Self::Error>;

    /// Makes the layout exist durably before a generation is chosen (nothing where the
    /// layout is only key names).
    fn make_layout(&mut self) -> Result<(), Self::Error>;

    /// The highest generation any commit record (or, where it fences, any claim) names,
    /// whether or not its record verifies.
    fn highest_named_generation(&mut self) -> Result<Option<u64>, Self::Error>;

    /// This run writes `generation`.
    fn begin(&mut self, generation: u64);

    /// Installs objects `0..count` (each made by `source`) and returns their digests in
    /// index order; `progress` advances as they are installed.
    fn put_objects(
        &mut self,
        count: usize,
        source: ObjectSource<'_>,
        progress: &mut dyn Progress,
    ) -> Result<Vec<Digest>, Self::Error>;

    /// Every object is installed: what must be durable before the manifest.
    fn objects_installed(&mut self) -> Result<(), Self::Error>;

    /// Installs the manifest (a content-addressed object with its own barriers).
    fn put_manifest(&mut self, bytes: Vec<u8>, digest: Digest) -> Result<(), Self::Error>;

    /// The commit point: installs this run's commit record, never replacing another.
    fn install_commit(&mut self, bytes: Vec<u8>, digest: Digest) -> Result<(), Self::Error>;

    /// Writes LATEST (a hint, replaced in place).
    fn advance_latest(&mut self, bytes: Vec<u8>) -> Result<(), Self::Error>;

    /// A failure past the commit point, told apart from "not committed" where the
    /// backend's error can say so.
    fn failed_after_commit(&self, error: Self::Error) -> Self::Error;
}

/// What the manifest, commit record and LATEST steps committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The generation committed.
    pub generation: u64,
    /// Publish or reshard.
    pub kind: CommitKind,
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
}

/// The generation after the highest one named (0 for an empty store).
pub fn next_generation<B: WriteSteps + ?Sized>(backend: &mut B) -> Result<u64, B::Error> {
    let highest = backend.highest_named_generation()?;
    generation_after(highest).ok_or_else(|| B::protocol_error(StoreError::GenerationOverflow))
}

/// The commit record of `generation` for `manifest` (kind `reshard` with its source, else
/// `publish`).
pub fn commit_record(
    generation: u64,
    manifest: &ManifestRecord,
    manifest_digest: Digest,
    source_generation: Option<u64>,
) -> CommitRecord {
    CommitRecord {
        schema: COMMIT_SCHEMA.to_owned(),
        version: SCHEMA_VERSION,
        generation,
        kind: commit_kind(source_generation),
        source_generation,
        manifest: manifest_digest,
        workers: manifest.workers,
        step: manifest.step,
        logical_state_root: manifest.logical_state_root,
    }
}

/// The LATEST record naming `generation`'s commit record.
pub fn latest_record(generation: u64, commit_digest: Digest) -> LatestRecord {
    LatestRecord {
        schema: LATEST_SCHEMA.to_owned(),
        version: SCHEMA_VERSION,
        generation,
        commit: commit_digest,
    }
}

fn commit_kind(source_generation: Option<u64>) -> CommitKind {
    match source_generation {
        Some(_) => CommitKind::Reshard,
        None => CommitKind::Publish,
    }
}

/// The synthetic objects `spec` asks for, or `InvalidSynthetic` (RFC 0001 §3).
pub fn synthetic_object_count(spec: SyntheticSpec) -> Result<usize, StoreError> {
    let invalid = || StoreError::InvalidSynthetic {
        object_bytes: spec.object_bytes,
        total_bytes: spec.total_bytes,
    };
    if spec.object_bytes == 0
        || u64::from(spec.object_bytes) > MAX_SYNTHETIC_OBJECT_BYTES
        || spec.total_bytes == 0
    {
        return Err(invalid());
    }
    usize::try_from(spec.object_count()).map_err(|_| invalid())
}

/// The manifest, the commit record of the chosen generation (the commit point) and
/// LATEST, in that order; anything that fails after the commit point is reported as such.
pub fn commit_manifest<B: WriteSteps + ?Sized>(
    backend: &mut B,
    generation: u64,
    manifest: &ManifestRecord,
    source_generation: Option<u64>,
) -> Result<Committed, B::Error> {
    backend.objects_installed()?;
    let manifest_bytes = encode(manifest).map_err(B::protocol_error)?;
    let manifest_digest = Digest::of(&manifest_bytes);
    backend.put_manifest(manifest_bytes, manifest_digest)?;
    let record = commit_record(generation, manifest, manifest_digest, source_generation);
    let record_bytes = encode(&record).map_err(B::protocol_error)?;
    let commit_digest = Digest::of(&record_bytes);
    backend.install_commit(record_bytes, commit_digest)?;
    encode(&latest_record(generation, commit_digest))
        .map_err(B::protocol_error)
        .and_then(|latest| backend.advance_latest(latest))
        .map_err(|error| backend.failed_after_commit(error))?;
    Ok(Committed {
        generation,
        kind: record.kind,
        commit_digest,
        manifest_digest,
        workers: manifest.workers,
        step: manifest.step,
        logical_state_root: manifest.logical_state_root,
    })
}

/// Publishes `state` on `topology` (plus the synthetic objects of `synthetic`) as the next
/// generation: the chunk payloads (three per chunk, chunks in id order), then the
/// synthetic objects in order (each made when due), then [`commit_manifest`]. With a
/// synthetic spec, `progress` gets one `publish` phase with a step per object.
pub fn publish<B: WriteSteps + ?Sized>(
    backend: &mut B,
    state: &LogicalState,
    topology: Topology,
    synthetic: Option<SyntheticSpec>,
    progress: &mut dyn Progress,
) -> Result<Committed, B::Error> {
    backend.prepare_publish()?;
    let synthetic_count = match synthetic {
        Some(spec) => Some(synthetic_object_count(spec).map_err(B::protocol_error)?),
        None => None,
    };
    let chunk_objects = state.chunks().len() * 3;
    if let Some(count) = synthetic_count {
        progress.phase("publish", Some((chunk_objects + count) as u64));
    }
    backend.make_layout()?;
    let generation = next_generation(backend)?;
    backend.begin(generation);
    let chunk_payload = |i: usize| {
        let chunk = &state.chunks()[i / 3];
        let slot = match i % 3 {
            0 => chunk.parameters(),
            1 => chunk.exp_avg(),
            _ => chunk.exp_avg_sq(),
        };
        crate::core::logical::f32_le_bytes(slot)
    };
    let digests = backend.put_objects(
        chunk_objects,
        &chunk_payload,
        &mut crate::core::progress::NoProgress,
    )?;
    let mut manifest = manifest_for(state, topology, chunk_entries(state, &digests));
    let (Some(spec), Some(count)) = (synthetic, synthetic_count) else {
        return commit_manifest(backend, generation, &manifest, None);
    };
    progress.advance(chunk_objects as u64);
    let synthetic_payload = |i: usize| {
        let len = spec.object_len(i as u64) as usize;
        synthetic_object(spec.seed, i as u64, len)
    };
    let mut offset = OffsetProgress {
        inner: progress,
        offset: chunk_objects as u64,
    };
    let objects = backend.put_objects(count, &synthetic_payload, &mut offset)?;
    manifest.synthetic = Some(SyntheticPayloads {
        seed: spec.seed,
        object_bytes: spec.object_bytes,
        total_bytes: spec.total_bytes,
        objects,
    });
    let committed = commit_manifest(backend, generation, &manifest, None);
    progress.finish();
    committed
}

/// The manifest entries of `state`'s chunks from their payloads' digests (three per chunk).
fn chunk_entries(state: &LogicalState, digests: &[Digest]) -> Vec<ChunkEntry> {
    state
        .chunks()
        .iter()
        .zip(digests.chunks_exact(3))
        .map(|(chunk, d)| ChunkEntry {
            id: chunk.id(),
            elements: chunk.parameters().len() as u32,
            parameters: d[0],
            exp_avg: d[1],
            exp_avg_sq: d[2],
        })
        .collect()
}

/// Forwards `advance` with an offset (the synthetic objects come after the chunks).
struct OffsetProgress<'a> {
    inner: &'a mut dyn Progress,
    offset: u64,
}

impl Progress for OffsetProgress<'_> {
    fn advance(&mut self, done: u64) {
        self.inner.advance(self.offset + done);
    }
}

/// How a backend checks a reshard's source: its commit record and manifest in full, its
/// objects as `objects` says; returns the source's manifest.
pub trait SourceCheck: WriteSteps {
    /// Checks `generation` as RFC 0001 §7 asks before it is resharded.
    fn check_source(
        &mut self,
        generation: u64,
        objects: ObjectCheck,
        progress: &mut dyn Progress,
    ) -> Result<ManifestRecord, Self::Error>;
}

/// Offline reshard (RFC 0001 §7, §9.9): checks `generation`, then commits as the next
/// generation, kind `reshard`, a manifest equal to its manifest but for the worker count
/// and ownership of `topology`. No object is installed: they are content-addressed and the
/// source's are already there. `progress` gets two phases, `verifying generation G`
/// ([`ObjectCheck::Hashed`]) or `checking generation G` ([`ObjectCheck::Lengths`]), then
/// `committing the reshard`; a phase that fails is left unfinished.
pub fn reshard<B: SourceCheck + ?Sized>(
    backend: &mut B,
    generation: u64,
    topology: Topology,
    objects: ObjectCheck,
    progress: &mut dyn Progress,
) -> Result<Committed, B::Error> {
    backend.prepare_reshard()?;
    let verb = match objects {
        ObjectCheck::Hashed => "verifying",
        ObjectCheck::Lengths => "checking",
    };
    progress.phase(&format!("{verb} generation {generation}"), None);
    let mut manifest = backend.check_source(generation, objects, progress)?;
    progress.finish();
    manifest.workers = topology.workers();
    manifest.ownership = topology.chunk_ownership(manifest.chunks.len());
    progress.phase("committing the reshard", None);
    backend.make_layout()?;
    let candidate = next_generation(backend)?;
    backend.begin(candidate);
    let committed = commit_manifest(backend, candidate, &manifest, Some(generation))?;
    progress.finish();
    Ok(committed)
}

/// The extra objects of a synthetic state scaled to benchmark size (see
/// [`SyntheticPayloads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticSpec {
    /// Seed of their content ([`crate::store::layout::synthetic_object`]).
    pub seed: u64,
    /// Bytes of every object but the last (1 ..= `MAX_SYNTHETIC_OBJECT_BYTES`).
    pub object_bytes: u32,
    /// Bytes of all objects together (more than 0).
    pub total_bytes: u64,
}

impl SyntheticSpec {
    /// The synthetic objects that scale `state` to `state_bytes` of chunk payloads in
    /// all (at least one object): objects of the state's chunk size, seeded by `seed`.
    pub fn scaling(state: &LogicalState, seed: u64, state_bytes: u64) -> SyntheticSpec {
        let object_bytes = state.hyperparameters().chunk_elements.saturating_mul(4);
        SyntheticSpec {
            seed,
            object_bytes,
            total_bytes: state_bytes
                .saturating_sub(chunk_payload_bytes(state))
                .max(u64::from(object_bytes)),
        }
    }

    /// How many objects the spec makes.
    pub fn object_count(&self) -> u64 {
        self.total_bytes
            .div_ceil(u64::from(self.object_bytes.max(1)))
    }

    /// The length of object `index`.
    pub fn object_len(&self, index: u64) -> u64 {
        let object_bytes = u64::from(self.object_bytes.max(1));
        object_bytes.min(
            self.total_bytes
                .saturating_sub(index.saturating_mul(object_bytes)),
        )
    }
}

/// Chunk-payload bytes of `state`: three FP32 slots (parameters and both moments) per
/// parameter.
pub fn chunk_payload_bytes(state: &LogicalState) -> u64 {
    state
        .chunks()
        .iter()
        .map(|c| c.parameters().len() as u64 * 12)
        .sum()
}
