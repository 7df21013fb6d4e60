//! The record checks of RFC 0001 §5 that do not depend on where records live, written once
//! for every backend (the local store and the object store): the generation a record's
//! name gives, the record-manifest bindings, the length of every referenced object and the
//! error that names a wrong one.
use std::path::Path;

use crate::core::digest::Digest;
use crate::store::codec::{CommitRecord, ManifestRecord, SyntheticPayloads};
use crate::store::error::StoreError;

/// The record names generation `named` (its file name or key) and must record the same.
pub fn check_generation_name(
    record_path: &Path,
    named: u64,
    record: &CommitRecord,
) -> Result<(), StoreError> {
    if record.generation != named {
        return Err(StoreError::GenerationNameMismatch {
            path: record_path.to_owned(),
            named,
            recorded: record.generation,
        });
    }
    Ok(())
}

/// The fields a commit record repeats from its manifest must agree, checked in this order:
/// `workers`, `step`, `logical_state_root`.
pub fn check_bindings(
    record_path: &Path,
    record: &CommitRecord,
    manifest: &ManifestRecord,
) -> Result<(), StoreError> {
    for (what, agrees) in [
        ("workers", record.workers == manifest.workers),
        ("step", record.step == manifest.step),
        (
            "logical_state_root",
            record.logical_state_root == manifest.logical_state_root,
        ),
    ] {
        if !agrees {
            return Err(StoreError::BindingMismatch {
                path: record_path.to_owned(),
                what,
            });
        }
    }
    Ok(())
}

/// Which object of a manifest a length belongs to, for the error that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectRole {
    /// A chunk payload of chunk `id`.
    Chunk(u32),
    /// Synthetic object `index`.
    Synthetic(u64),
}

impl ObjectRole {
    /// The error for an object of this role holding `found` bytes where the manifest at
    /// `manifest_path` gives it `expected`. It names the manifest (what states the length)
    /// on every backend.
    pub fn wrong_length(self, manifest_path: &Path, expected: u64, found: u64) -> StoreError {
        match self {
            ObjectRole::Chunk(id) => StoreError::ChunkSize {
                path: manifest_path.to_owned(),
                id,
                expected,
                found,
            },
            ObjectRole::Synthetic(index) => StoreError::SyntheticObjectSize {
                path: manifest_path.to_owned(),
                index,
                expected,
                found,
            },
        }
    }
}

/// One object a manifest references, with the length the manifest gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReferencedObject {
    /// The object's address.
    pub digest: Digest,
    /// Its length by the manifest, in bytes.
    pub length_bytes: u64,
    /// What it is in the manifest.
    pub role: ObjectRole,
}

/// The length synthetic object `index` must have, or `MalformedManifest` naming the
/// manifest when its synthetic sizes are inconsistent.
pub fn synthetic_object_len(
    manifest_path: &Path,
    synthetic: &SyntheticPayloads,
    index: usize,
) -> Result<u64, StoreError> {
    synthetic
        .object_len(index)
        .ok_or_else(|| StoreError::MalformedManifest {
            path: manifest_path.to_owned(),
            reason: "synthetic objects do not cover their total".into(),
        })
}

/// Every object a (checked) manifest references, in manifest order — the chunk payloads
/// (three per chunk, chunks in id order), then the synthetic objects — with the length the
/// manifest gives each.
pub fn referenced_objects(
    manifest_path: &Path,
    manifest: &ManifestRecord,
) -> Result<Vec<ReferencedObject>, StoreError> {
    let mut objects = Vec::with_capacity(
        manifest.chunks.len() * 3 + manifest.synthetic.as_ref().map_or(0, |s| s.objects.len()),
    );
    for entry in &manifest.chunks {
        for (_, digest) in entry.digests() {
            objects.push(ReferencedObject {
                digest,
                length_bytes: entry.payload_len(),
                role: ObjectRole::Chunk(entry.id),
            });
        }
    }
    if let Some(synthetic) = &manifest.synthetic {
        for (index, digest) in synthetic.objects.iter().enumerate() {
            objects.push(ReferencedObject {
                digest: *digest,
                length_bytes: synthetic_object_len(manifest_path, synthetic, index)?,
                role: ObjectRole::Synthetic(index as u64),
            });
        }
    }
    Ok(objects)
}
