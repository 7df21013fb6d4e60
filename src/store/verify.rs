//! The verification of one commit record in the order of RFC 0001 §5 (steps 2–4), written
//! once over [`RecordReads`], the reads a backend supplies: the local store reads files
//! under its directory, the object store GETs and LISTs keys. The record's own bytes are
//! read by the backend (a file named by its generation, or a key that carries its digest);
//! everything after them — decode, name binding, manifest, record-manifest bindings,
//! manifest structure, the objects and the root — happens here, in this order, on both.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::topology::Topology;
use crate::store::checks::{
    check_bindings, check_generation_name, referenced_objects, ReferencedObject,
};
use crate::store::codec::{
    decode, CommitRecord, ManifestRecord, SyntheticPayloads, MAX_CHUNK_OBJECT_BYTES,
    MAX_MANIFEST_BYTES,
};
use crate::store::error::StoreError;
use crate::store::layout::{assemble_state, check_manifest, verify_payloads};

/// How far the objects of a generation are checked (its commit record and manifest are
/// always read, hashed and decoded in full).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectCheck {
    /// Every object read whole, its SHA-256 compared with its address, and the
    /// logical-state root recomputed from the chunk payloads (RFC 0001 §5 step 4): what
    /// recovery and every loader do.
    #[default]
    Hashed,
    /// Every object present as a regular file of exactly the length the manifest gives it,
    /// from its metadata alone: no object byte is read (RFC 0001 §7, the offline reshard's
    /// default). Catches a missing, truncated or extended object in metadata time; a
    /// same-length change of its bytes is left to the loaders, which hash every byte before
    /// they use it.
    Lengths,
}

impl ObjectCheck {
    /// The name reports use (`hashed`, `lengths`).
    pub fn name(self) -> &'static str {
        match self {
            ObjectCheck::Hashed => "hashed",
            ObjectCheck::Lengths => "lengths",
        }
    }
}

/// What [`verify_record`] checks and builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordChecks {
    /// Build the `LogicalState` (only with [`ObjectCheck::Hashed`]).
    pub decode_state: bool,
    /// How the objects are checked.
    pub objects: ObjectCheck,
}

impl RecordChecks {
    /// Every object hashed; the state built when `decode_state`.
    pub fn hashed(decode_state: bool) -> Self {
        RecordChecks {
            decode_state,
            objects: ObjectCheck::Hashed,
        }
    }
}

/// The reads one backend supplies for [`verify_record`]. Every read is capped and every
/// object read is checked against its address before its bytes are returned.
pub trait RecordReads {
    /// The backend's error.
    type Error;

    /// A failed store check as the backend's error; `at` is the record or manifest the
    /// check concerns (the path the error itself names).
    fn invalid(&self, at: &Path, error: StoreError) -> Self::Error;

    /// Where the object at `digest` lives, as errors name it (a path, or a key's URL).
    fn object_path(&self, digest: &Digest) -> PathBuf;

    /// The manifest object at `digest`: at most `cap_bytes`, its SHA-256 its address.
    fn read_manifest(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, Self::Error>;

    /// A chunk payload object at `digest`: at most `cap_bytes`, its SHA-256 its address.
    fn read_payload(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, Self::Error>;

    /// Every chunk payload of the (checked) manifest at `manifest_path` read and the root
    /// recomputed from their bytes, without decoding FP32 values.
    fn verify_payloads(
        &mut self,
        manifest_path: &Path,
        manifest: &ManifestRecord,
    ) -> Result<(), Self::Error> {
        verify_payloads(manifest_path, manifest, &mut |digest, expected| {
            self.read_payload(digest, expected.min(MAX_CHUNK_OBJECT_BYTES))
                .map_err(PayloadFailure::Read)
        })
        .map_err(|failure| failure.into_backend(|error| self.invalid(manifest_path, error)))
    }

    /// [`ObjectCheck::Lengths`]: each of `objects` present with exactly its length,
    /// judged in the given (manifest) order; no object byte is read.
    fn check_lengths(
        &mut self,
        manifest_path: &Path,
        objects: &[ReferencedObject],
    ) -> Result<(), Self::Error>;

    /// Every synthetic object of the manifest at `manifest_path`: present, exactly its
    /// length, its SHA-256 its address; the first bad one in manifest order is reported.
    fn verify_synthetic(
        &mut self,
        manifest_path: &Path,
        synthetic: &SyntheticPayloads,
    ) -> Result<(), Self::Error>;
}

/// A failure while checking payloads: the backend's read failed, or a store check did.
#[derive(Debug)]
pub enum PayloadFailure<E> {
    /// A read failed (the backend's error, kept as it is).
    Read(E),
    /// A store check failed (sizes, state, root).
    Check(StoreError),
}

impl<E> From<StoreError> for PayloadFailure<E> {
    fn from(error: StoreError) -> Self {
        PayloadFailure::Check(error)
    }
}

impl<E> PayloadFailure<E> {
    /// The backend's error: a read's as it was, a check's through `invalid`.
    pub fn into_backend(self, invalid: impl FnOnce(StoreError) -> E) -> E {
        match self {
            PayloadFailure::Read(error) => error,
            PayloadFailure::Check(error) => invalid(error),
        }
    }
}

/// What [`verify_record`] found: the decoded record and manifest, the topology, the state
/// when asked for.
#[derive(Clone, Debug)]
pub struct VerifiedRecord {
    /// The decoded commit record.
    pub commit: CommitRecord,
    /// The decoded manifest.
    pub manifest: ManifestRecord,
    /// SHA-256 of the manifest.
    pub manifest_digest: Digest,
    /// The topology the manifest records.
    pub topology: Topology,
    /// The decoded state (only with [`RecordChecks::decode_state`]).
    pub state: Option<LogicalState>,
}

/// Verifies the commit record at `record_path` (its bytes `record_bytes`, read by the
/// backend; its name gives `generation`) end to end through `reads`, in the order of RFC
/// 0001 §5: the record's decode, the generation binding, the manifest object and its
/// decode, the record-manifest bindings, the manifest's structure, then the objects as
/// `checks` says (lengths, or every payload hashed and the root recomputed, then the
/// synthetic objects). The first failed check is the error.
pub fn verify_record<R: RecordReads + ?Sized>(
    reads: &mut R,
    record_path: &Path,
    record_bytes: &[u8],
    generation: u64,
    checks: RecordChecks,
) -> Result<VerifiedRecord, R::Error> {
    let commit: CommitRecord =
        decode(record_path, record_bytes).map_err(|e| reads.invalid(record_path, e))?;
    check_generation_name(record_path, generation, &commit)
        .map_err(|e| reads.invalid(record_path, e))?;
    let manifest_bytes = reads.read_manifest(commit.manifest, MAX_MANIFEST_BYTES)?;
    let manifest_path = reads.object_path(&commit.manifest);
    let manifest: ManifestRecord =
        decode(&manifest_path, &manifest_bytes).map_err(|e| reads.invalid(&manifest_path, e))?;
    check_bindings(record_path, &commit, &manifest).map_err(|e| reads.invalid(record_path, e))?;
    let topology =
        check_manifest(&manifest_path, &manifest).map_err(|e| reads.invalid(&manifest_path, e))?;
    let state = match checks.objects {
        ObjectCheck::Lengths => {
            let objects = referenced_objects(&manifest_path, &manifest)
                .map_err(|e| reads.invalid(&manifest_path, e))?;
            reads.check_lengths(&manifest_path, &objects)?;
            None
        }
        ObjectCheck::Hashed => {
            let state = if checks.decode_state {
                let assembled = assemble_state(&manifest_path, &manifest, &mut |digest, n| {
                    reads
                        .read_payload(digest, n.min(MAX_CHUNK_OBJECT_BYTES))
                        .map_err(PayloadFailure::Read)
                });
                Some(assembled.map_err(|failure| {
                    failure.into_backend(|error| reads.invalid(&manifest_path, error))
                })?)
            } else {
                reads.verify_payloads(&manifest_path, &manifest)?;
                None
            };
            if let Some(synthetic) = &manifest.synthetic {
                reads.verify_synthetic(&manifest_path, synthetic)?;
            }
            state
        }
    };
    Ok(VerifiedRecord {
        commit,
        manifest_digest: Digest::of(&manifest_bytes),
        manifest,
        topology,
        state,
    })
}
