//! From a `LogicalState` to manifest entries and back, with every check on the way back.
use std::path::Path;

use crate::digest::Digest;
use crate::logical::{f32_from_le_bytes, ChunkState, LogicalState, Topology};

use super::codec::{ChunkEntry, HyperparametersRecord, ManifestRecord, MANIFEST_SCHEMA, SCHEMA_VERSION};
use super::error::StoreError;

/// The three raw little-endian FP32 payloads of a chunk, in manifest order.
pub fn chunk_payloads(chunk: &ChunkState) -> [Vec<u8>; 3] {
    [
        crate::logical::f32_le_bytes(&chunk.parameters),
        crate::logical::f32_le_bytes(&chunk.exp_avg),
        crate::logical::f32_le_bytes(&chunk.exp_avg_sq),
    ]
}

/// The manifest for a (validated) state placed on `topology`, given its chunk entries.
pub fn manifest_for(state: &LogicalState, topology: Topology, chunks: Vec<ChunkEntry>) -> ManifestRecord {
    ManifestRecord {
        schema: MANIFEST_SCHEMA.to_owned(),
        version: SCHEMA_VERSION,
        step: state.step,
        cursor: state.cursor,
        ledger_digest: state.ledger_digest,
        hyperparameters: HyperparametersRecord::from(&state.hyperparameters),
        workers: topology.workers,
        ownership: topology.chunk_ownership(chunks.len()),
        chunks,
        logical_state_root: state.logical_state_root(),
    }
}

/// Entries (with digests) for every chunk of a state.
pub fn chunk_entries(state: &LogicalState) -> Vec<ChunkEntry> {
    state
        .chunks
        .iter()
        .map(|chunk| {
            let [p, m, v] = chunk_payloads(chunk);
            ChunkEntry {
                id: chunk.id,
                elements: chunk.parameters.len() as u32,
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
    let expected = hyper.chunk_count();
    if manifest.chunks.len() != expected {
        return Err(malformed(format!(
            "{} chunks listed, the hyper-parameters imply {expected}",
            manifest.chunks.len()
        )));
    }
    for (position, entry) in manifest.chunks.iter().enumerate() {
        if entry.id as usize != position {
            return Err(malformed(format!("chunk at position {position} has id {}", entry.id)));
        }
        let length = hyper.chunk_range(position).len();
        if entry.elements as usize != length {
            return Err(malformed(format!(
                "chunk {position} lists {} elements, expected {length}",
                entry.elements
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

/// Rebuilds the state a (checked) manifest describes. `fetch(digest, expected_len)` must
/// return bytes whose SHA-256 is `digest` (or an error naming the file). The rebuilt state
/// is validated and its root must equal the manifest's.
pub fn assemble_state(
    path: &Path,
    manifest: &ManifestRecord,
    fetch: &mut dyn FnMut(Digest, u64) -> Result<Vec<u8>, StoreError>,
) -> Result<LogicalState, StoreError> {
    let mut chunks = Vec::with_capacity(manifest.chunks.len());
    for entry in &manifest.chunks {
        let expected = u64::from(entry.elements)
            .checked_mul(4)
            .ok_or_else(|| StoreError::MalformedManifest {
                path: path.to_owned(),
                reason: "chunk size overflows".into(),
            })?;
        let mut slots = Vec::with_capacity(3);
        for (_, digest) in entry.digests() {
            let bytes = fetch(digest, expected)?;
            if bytes.len() as u64 != expected {
                return Err(StoreError::ChunkSize {
                    path: path.to_owned(),
                    id: entry.id,
                    expected,
                    found: bytes.len() as u64,
                });
            }
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
        chunks.push(ChunkState {
            id: entry.id,
            parameters,
            exp_avg,
            exp_avg_sq,
        });
    }
    let state = LogicalState {
        hyperparameters: manifest.hyperparameters.to_hyperparameters(),
        step: manifest.step,
        cursor: manifest.cursor,
        ledger_digest: manifest.ledger_digest,
        chunks,
    };
    state.validate().map_err(|source| StoreError::MalformedState {
        path: path.to_owned(),
        source,
    })?;
    let actual = state.logical_state_root();
    if actual != manifest.logical_state_root {
        return Err(StoreError::RootMismatch {
            path: path.to_owned(),
            expected: manifest.logical_state_root,
            actual,
        });
    }
    Ok(state)
}
