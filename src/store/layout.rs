//! From a `LogicalState` to manifest entries and back, with every check on the way back.
use std::path::Path;

use crate::core::digest::Digest;
use crate::core::logical::{f32_from_le_bytes, ChunkState, LogicalState};
use crate::core::topology::Topology;

use crate::store::codec::{
    ChunkEntry, HyperparametersRecord, ManifestRecord, MANIFEST_SCHEMA, MAX_SYNTHETIC_OBJECT_BYTES,
    SCHEMA_VERSION,
};
use crate::store::error::StoreError;

/// The three raw little-endian FP32 payloads of a chunk, in manifest order.
pub fn chunk_payloads(chunk: &ChunkState) -> [Vec<u8>; 3] {
    [
        crate::core::logical::f32_le_bytes(chunk.parameters()),
        crate::core::logical::f32_le_bytes(chunk.exp_avg()),
        crate::core::logical::f32_le_bytes(chunk.exp_avg_sq()),
    ]
}

/// The manifest for a (validated) state placed on `topology`, given its chunk entries.
pub fn manifest_for(
    state: &LogicalState,
    topology: Topology,
    chunks: Vec<ChunkEntry>,
) -> ManifestRecord {
    ManifestRecord {
        schema: MANIFEST_SCHEMA.to_owned(),
        version: SCHEMA_VERSION,
        step: state.step(),
        cursor: state.cursor(),
        ledger_digest: state.ledger_digest(),
        hyperparameters: HyperparametersRecord::from(state.hyperparameters()),
        workers: topology.workers(),
        ownership: topology.chunk_ownership(chunks.len()),
        chunks,
        logical_state_root: state.logical_state_root(),
        synthetic: None,
    }
}

/// Entries (with digests) for every chunk of a state.
pub fn chunk_entries(state: &LogicalState) -> Vec<ChunkEntry> {
    state
        .chunks()
        .iter()
        .map(|chunk| {
            let [p, m, v] = chunk_payloads(chunk);
            ChunkEntry {
                id: chunk.id(),
                elements: chunk.parameters().len() as u32,
                parameters: Digest::of(&p),
                exp_avg: Digest::of(&m),
                exp_avg_sq: Digest::of(&v),
            }
        })
        .collect()
}

/// Structural checks on a decoded manifest; returns its topology.
pub fn check_manifest(path: &Path, manifest: &ManifestRecord) -> Result<Topology, StoreError> {
    let malformed = |reason: String| StoreError::MalformedManifest {
        path: path.to_owned(),
        reason,
    };
    let topology = Topology::new(manifest.workers).map_err(|e| malformed(e.to_string()))?;
    let hyper = manifest.hyperparameters.to_hyperparameters();
    if hyper.chunk_elements == 0 {
        return Err(malformed("chunk_elements is 0".into()));
    }
    if hyper.micro_batch_size == 0 || hyper.logical_micro_batches == 0 {
        return Err(StoreError::MalformedState {
            path: path.to_owned(),
            source: crate::core::logical::LogicalStateError::EmptyBatch,
        });
    }
    let expected = hyper.chunk_count();
    if manifest.chunks.len() != expected {
        return Err(malformed(format!(
            "{} chunks listed, the hyper-parameters imply {expected}",
            manifest.chunks.len()
        )));
    }
    for (position, entry) in manifest.chunks.iter().enumerate() {
        if entry.id as usize != position {
            return Err(malformed(format!(
                "chunk at position {position} has id {}",
                entry.id
            )));
        }
        let length = hyper.chunk_range(position).len();
        if entry.elements as usize != length {
            return Err(malformed(format!(
                "chunk {position} lists {} elements, expected {length}",
                entry.elements
            )));
        }
    }
    if let Some(synthetic) = &manifest.synthetic {
        if u64::from(synthetic.object_bytes) > MAX_SYNTHETIC_OBJECT_BYTES {
            return Err(malformed(format!(
                "synthetic objects of {} bytes are over the cap of {MAX_SYNTHETIC_OBJECT_BYTES}",
                synthetic.object_bytes
            )));
        }
        if synthetic.object_len(0).is_none() {
            return Err(malformed(format!(
                "synthetic objects: {} listed of {} bytes for {} bytes in all",
                synthetic.objects.len(),
                synthetic.object_bytes,
                synthetic.total_bytes
            )));
        }
    }
    if manifest.ownership != topology.chunk_ownership(manifest.chunks.len()) {
        return Err(StoreError::OwnershipMismatch {
            path: path.to_owned(),
            workers: manifest.workers,
        });
    }
    Ok(topology)
}

/// One chunk payload of exactly `expected` bytes from `fetch`, or `ChunkSize`.
fn fetch_payload<E: From<StoreError>>(
    path: &Path,
    chunk_id: u32,
    digest: Digest,
    expected: u64,
    fetch: &mut dyn FnMut(Digest, u64) -> Result<Vec<u8>, E>,
) -> Result<Vec<u8>, E> {
    let bytes = fetch(digest, expected)?;
    if bytes.len() as u64 != expected {
        return Err(StoreError::ChunkSize {
            path: path.to_owned(),
            id: chunk_id,
            expected,
            found: bytes.len() as u64,
        }
        .into());
    }
    Ok(bytes)
}

/// Rebuilds the state a (checked) manifest describes. `fetch(digest, expected_len)` must
/// return bytes whose SHA-256 is `digest` (or the caller's error, `E`, which a failed store
/// check converts into). The rebuilt state is validated and its root must equal the
/// manifest's.
pub fn assemble_state<E: From<StoreError>>(
    path: &Path,
    manifest: &ManifestRecord,
    fetch: &mut dyn FnMut(Digest, u64) -> Result<Vec<u8>, E>,
) -> Result<LogicalState, E> {
    let mut chunks = Vec::with_capacity(manifest.chunks.len());
    for entry in &manifest.chunks {
        let expected = entry.payload_len();
        let mut slots = Vec::with_capacity(3);
        for (_, digest) in entry.digests() {
            let bytes = fetch_payload(path, entry.id, digest, expected, fetch)?;
            let values = f32_from_le_bytes(&bytes).map_err(|_| StoreError::ChunkSize {
                path: path.to_owned(),
                id: entry.id,
                expected,
                found: bytes.len() as u64,
            })?;
            slots.push(values);
        }
        let exp_avg_sq = slots.pop().unwrap_or_default();
        let exp_avg = slots.pop().unwrap_or_default();
        let parameters = slots.pop().unwrap_or_default();
        let malformed = |source| StoreError::MalformedState {
            path: path.to_owned(),
            source,
        };
        chunks.push(ChunkState::new(entry.id, parameters, exp_avg, exp_avg_sq).map_err(malformed)?);
    }
    let state = LogicalState::from_parts(
        manifest.hyperparameters.to_hyperparameters(),
        manifest.step,
        manifest.cursor,
        manifest.ledger_digest,
        chunks,
    )
    .map_err(|source| StoreError::MalformedState {
        path: path.to_owned(),
        source,
    })?;
    check_root(path, manifest, state.logical_state_root())?;
    Ok(state)
}

/// The manifest's logical-state root must be `actual`, the root of the payloads it names.
fn check_root(path: &Path, manifest: &ManifestRecord, actual: Digest) -> Result<(), StoreError> {
    if actual != manifest.logical_state_root {
        return Err(StoreError::RootMismatch {
            path: path.to_owned(),
            expected: manifest.logical_state_root,
            actual,
        });
    }
    Ok(())
}

/// A deterministic, valid state for tests, the crash matrix and benchmarks: the seeded
/// genesis parameters with `chunk_elements` per chunk, at `step`, with non-zero moments.
pub fn synthetic_state(seed: u64, step: u64, chunk_elements: u32) -> LogicalState {
    let mut hyper = crate::core::logical::Hyperparameters::with_seed(seed);
    hyper.chunk_elements = chunk_elements.max(1);
    let mut state = LogicalState::genesis(hyper);
    let mut ledger = crate::core::digest::FramedHasher::new("shardlift/store/synthetic-ledger/v1");
    ledger.u64(seed).u64(step);
    state.set_counters(
        step,
        step.saturating_mul(hyper.global_batch_size()),
        ledger.finish(),
    );
    let scale = step as f32 + 1.0;
    for chunk in state.slots_mut() {
        for (i, value) in chunk.parameters.iter_mut().enumerate() {
            *value += (i as f32) * 1e-7 * (step as f32);
        }
        for (m, p) in chunk.exp_avg.iter_mut().zip(chunk.parameters.iter()) {
            *m = p * 0.1 * scale;
        }
        for (v, p) in chunk.exp_avg_sq.iter_mut().zip(chunk.parameters.iter()) {
            *v = p * p * 0.01 * scale;
        }
    }
    state
}

/// Object `index` of the synthetic objects seeded by `seed`: `len` deterministic bytes
/// (SplitMix64 keyed by seed and index), distinct for every index.
pub fn synthetic_object(seed: u64, index: u64, len: usize) -> Vec<u8> {
    let mut rng =
        crate::core::rng::SplitMix64::keyed(seed, "shardlift/store/synthetic-object/v1", index);
    let mut out = Vec::with_capacity(len.next_multiple_of(8));
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Checks every payload of a (checked) manifest and the root binding without decoding
/// FP32 values: the fast path recovery uses to select a generation. `fetch` and the error
/// are as for [`assemble_state`].
pub fn verify_payloads<E: From<StoreError>>(
    path: &Path,
    manifest: &ManifestRecord,
    fetch: &mut dyn FnMut(Digest, u64) -> Result<Vec<u8>, E>,
) -> Result<(), E> {
    let mut payloads = Vec::with_capacity(manifest.chunks.len());
    for entry in &manifest.chunks {
        let expected = entry.payload_len();
        let [(_, p), (_, m), (_, v)] = entry.digests();
        payloads.push([
            fetch_payload(path, entry.id, p, expected, fetch)?,
            fetch_payload(path, entry.id, m, expected, fetch)?,
            fetch_payload(path, entry.id, v, expected, fetch)?,
        ]);
    }
    let hyper = manifest.hyperparameters.to_hyperparameters();
    let actual = crate::core::logical::logical_state_root_of_payloads(
        &hyper,
        manifest.step,
        manifest.cursor,
        &payloads,
    );
    Ok(check_root(path, manifest, actual)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_root_equals_state_root() {
        for (seed, step, elements) in [(1, 0, 8192), (9, 5, 24_000), (3, 2, 101_770)] {
            let state = synthetic_state(seed, step, elements);
            let payloads: Vec<[Vec<u8>; 3]> = state.chunks().iter().map(chunk_payloads).collect();
            assert_eq!(
                crate::core::logical::logical_state_root_of_payloads(
                    state.hyperparameters(),
                    state.step(),
                    state.cursor(),
                    &payloads
                ),
                state.logical_state_root()
            );
        }
    }
}
