//! The state handoff file a parent writes for a publisher child.
//!
//! Layout: the magic line `SHARDLIFT-HANDOFF-1\n`, the header length as u64 LE, the
//! header (a canonical manifest record, decoded under the manifest schema), then every
//! chunk's three payloads in manifest order, each exactly `elements × 4` bytes and each
//! checked against its digest in the header, then the SHA-256 of everything before it
//! (32 bytes), which binds the header fields no payload digest covers (e.g. the ledger
//! digest). No trailing bytes. The decoded state must validate and match the header's
//! logical-state root.
use std::path::Path;

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::topology::Topology;

use crate::store::codec::{decode, encode, ManifestRecord, MAX_MANIFEST_BYTES};
use crate::store::error::StoreError;
use crate::store::layout::{
    assemble_state, check_manifest, chunk_entries, chunk_payloads, manifest_for,
};

/// First bytes of every handoff file (its format's name and version).
pub const HANDOFF_MAGIC: &[u8] = b"SHARDLIFT-HANDOFF-1\n";

/// Encodes a validated state and its topology.
pub fn encode_handoff(state: &LogicalState, topology: Topology) -> Result<Vec<u8>, StoreError> {
    let topology = Topology::new(topology.workers())?;
    let manifest = manifest_for(state, topology, chunk_entries(state));
    let header = encode(&manifest)?;
    let mut out = Vec::with_capacity(header.len() + state.chunks().len() * 3 * 4 * 8192);
    out.extend_from_slice(HANDOFF_MAGIC);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for chunk in state.chunks() {
        for payload in chunk_payloads(chunk) {
            out.extend_from_slice(&payload);
        }
    }
    let seal = Digest::of(&out);
    out.extend_from_slice(&seal.0);
    Ok(out)
}

/// Decodes and verifies a handoff; never returns a state that does not verify.
pub fn decode_handoff(path: &Path, bytes: &[u8]) -> Result<(LogicalState, Topology), StoreError> {
    let bad = |reason: &str| StoreError::BadHandoff {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let (body, seal) = bytes
        .split_at_checked(bytes.len().saturating_sub(32))
        .filter(|(_, seal)| seal.len() == 32)
        .ok_or_else(|| bad("shorter than its seal"))?;
    if Digest::of(body).0[..] != seal[..] {
        return Err(bad("the seal (SHA-256 of the file) does not match"));
    }
    let rest = body
        .strip_prefix(HANDOFF_MAGIC)
        .ok_or_else(|| bad("missing magic"))?;
    let (length, rest) = rest
        .split_at_checked(8)
        .ok_or_else(|| bad("truncated header length"))?;
    let mut length_bytes = [0u8; 8];
    length_bytes.copy_from_slice(length);
    let header_len = u64::from_le_bytes(length_bytes);
    if header_len > MAX_MANIFEST_BYTES {
        return Err(bad("header exceeds the manifest cap"));
    }
    let (header, mut payloads) = rest
        .split_at_checked(header_len as usize)
        .ok_or_else(|| bad("truncated header"))?;
    let manifest: ManifestRecord = decode(path, header)?;
    let topology = check_manifest(path, &manifest)?;
    let state = assemble_state(path, &manifest, &mut |digest: Digest, expected: u64| {
        let (payload, tail) = payloads
            .split_at_checked(expected as usize)
            .ok_or_else(|| bad("truncated payload"))?;
        payloads = tail;
        let actual = Digest::of(payload);
        if actual != digest {
            return Err(StoreError::DigestMismatch {
                path: path.to_owned(),
                expected: digest,
                actual,
            });
        }
        Ok(payload.to_vec())
    })?;
    if !payloads.is_empty() {
        return Err(bad("trailing bytes after the last payload"));
    }
    Ok((state, topology))
}
