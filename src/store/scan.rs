//! Recovery's scan and selection (RFC 0001 §6, §9.4), written once over any backend:
//! every commit record a backend lists is verified, in ascending order; a record that
//! does not verify is rejected with its reason, a read that fails ends the scan (answering
//! from the generations below would be a silent roll-back), and the highest generation
//! with a valid record is the answer. The verified-generation type is shared too.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::topology::Topology;
use crate::store::codec::{CommitRecord, ManifestRecord};

/// Why recovery rejected a commit record: the content check of RFC 0001 §5 that failed.
/// Only a failure of stored content rejects a record; an error that says nothing about
/// the content (a failed read or request) ends the scan instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectionKind {
    /// A record or object is not a regular file.
    NotRegularFile,
    /// A record or object is over its size cap.
    TooLarge,
    /// A record does not decode.
    Undecodable,
    /// A record names another schema.
    WrongSchema,
    /// A record's format version is not supported.
    UnsupportedVersion,
    /// A record is not in canonical form.
    NotCanonical,
    /// An object the manifest names is absent.
    MissingObject,
    /// An object's or record's bytes hash to another digest.
    DigestMismatch,
    /// The commit record's name gives another generation than its content.
    GenerationNameMismatch,
    /// The commit record and the manifest do not bind each other.
    BindingMismatch,
    /// The manifest is malformed.
    MalformedManifest,
    /// The manifest's ownership does not match its topology.
    OwnershipMismatch,
    /// A chunk object has the wrong size.
    ChunkSize,
    /// A synthetic object has another length than the manifest gives.
    SyntheticObjectSize,
    /// The decoded state is malformed.
    MalformedState,
    /// The state's root digest is not the one recorded.
    RootMismatch,
    /// The recorded topology is invalid.
    InvalidTopology,
    /// The generation the record names is not found.
    GenerationNotFound,
}

impl RejectionKind {
    /// Every kind, in declaration order.
    pub const ALL: [RejectionKind; 18] = [
        RejectionKind::NotRegularFile,
        RejectionKind::TooLarge,
        RejectionKind::Undecodable,
        RejectionKind::WrongSchema,
        RejectionKind::UnsupportedVersion,
        RejectionKind::NotCanonical,
        RejectionKind::MissingObject,
        RejectionKind::DigestMismatch,
        RejectionKind::GenerationNameMismatch,
        RejectionKind::BindingMismatch,
        RejectionKind::MalformedManifest,
        RejectionKind::OwnershipMismatch,
        RejectionKind::ChunkSize,
        RejectionKind::SyntheticObjectSize,
        RejectionKind::MalformedState,
        RejectionKind::RootMismatch,
        RejectionKind::InvalidTopology,
        RejectionKind::GenerationNotFound,
    ];

    /// Its name, as reports spell it (the error kind it comes from).
    pub const fn name(self) -> &'static str {
        match self {
            RejectionKind::NotRegularFile => "not-regular-file",
            RejectionKind::TooLarge => "too-large",
            RejectionKind::Undecodable => "undecodable",
            RejectionKind::WrongSchema => "wrong-schema",
            RejectionKind::UnsupportedVersion => "unsupported-version",
            RejectionKind::NotCanonical => "not-canonical",
            RejectionKind::MissingObject => "missing-object",
            RejectionKind::DigestMismatch => "digest-mismatch",
            RejectionKind::GenerationNameMismatch => "generation-name-mismatch",
            RejectionKind::BindingMismatch => "binding-mismatch",
            RejectionKind::MalformedManifest => "malformed-manifest",
            RejectionKind::OwnershipMismatch => "ownership-mismatch",
            RejectionKind::ChunkSize => "chunk-size",
            RejectionKind::SyntheticObjectSize => "synthetic-object-size",
            RejectionKind::MalformedState => "malformed-state",
            RejectionKind::RootMismatch => "root-mismatch",
            RejectionKind::InvalidTopology => "invalid-topology",
            RejectionKind::GenerationNotFound => "generation-not-found",
        }
    }
}

impl std::fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A commit record that did not verify, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rejection {
    /// The commit record file, relative to the store.
    pub file: String,
    /// The generation the record's file name gives, when known.
    pub generation: Option<u64>,
    /// The first failed check.
    pub kind: RejectionKind,
    /// The failed check's message.
    pub reason: String,
}

impl Rejection {
    /// The rejection of `record` (of `generation`) for `error`, a failure of `kind`.
    fn of<E: ScanError>(
        record: String,
        generation: u64,
        kind: RejectionKind,
        error: &E,
    ) -> Rejection {
        Rejection {
            file: record,
            generation: Some(generation),
            kind,
            reason: error.to_string(),
        }
    }
}

/// A generation whose commit record verified end to end.
#[derive(Clone, Debug)]
pub struct VerifiedGeneration {
    /// The generation number.
    pub generation: u64,
    /// The commit record's name relative to the store (its path, or its key).
    pub record: String,
    /// Its decoded commit record.
    pub commit: CommitRecord,
    /// SHA-256 of the commit record.
    pub commit_digest: Digest,
    /// Its decoded manifest.
    pub manifest: ManifestRecord,
    /// SHA-256 of the manifest.
    pub manifest_digest: Digest,
    /// The decoded state (only when asked for; recovery's scan does not decode FP32).
    pub state: Option<LogicalState>,
    /// The topology the manifest records.
    pub topology: Topology,
}

/// How a backend's verification error takes part in a scan.
pub trait ScanError: std::fmt::Display {
    /// The content failure the error is, which rejects the record; `None` when the error
    /// says nothing about the record (a read that failed) and so ends the scan.
    fn rejection(&self) -> Option<RejectionKind>;

    /// The error the scan ends with when verifying `generation` failed with `self`.
    fn scan_failed(self, generation: u64) -> Self;
}

/// What a scan found: every valid record by generation (more than one where two writers
/// committed the same generation on a store without a fence), and every rejection.
#[derive(Debug, Default)]
pub struct Scanned {
    /// The records that verified, by generation, in listing order.
    pub valid: BTreeMap<u64, Vec<VerifiedGeneration>>,
    /// The records that did not verify, in listing order.
    pub rejected: Vec<Rejection>,
}

impl Scanned {
    /// The highest generation with a valid record, with all its valid records.
    pub fn top(&self) -> Option<(u64, &[VerifiedGeneration])> {
        self.valid
            .iter()
            .next_back()
            .map(|(&generation, records)| (generation, records.as_slice()))
    }

    /// Every generation with a valid record, ascending.
    pub fn valid_generations(&self) -> Vec<u64> {
        self.valid.keys().copied().collect()
    }
}

/// Verifies each of `records` (generation, the record's name relative to the store, and
/// what else the backend knows of it from its listing; ascending) with `verify`, sorting them into valid and rejected; the first error that
/// has no [`ScanError::rejection`] ends the scan.
pub fn scan<E: ScanError, C>(
    records: Vec<(u64, String, C)>,
    mut verify: impl FnMut(u64, &str, C) -> Result<VerifiedGeneration, E>,
) -> Result<Scanned, E> {
    let mut scanned = Scanned::default();
    for (generation, record, listed) in records {
        match verify(generation, &record, listed) {
            Ok(verified) => scanned.valid.entry(generation).or_default().push(verified),
            Err(error) => match error.rejection() {
                Some(kind) => scanned
                    .rejected
                    .push(Rejection::of(record, generation, kind, &error)),
                None => return Err(error.scan_failed(generation)),
            },
        }
    }
    Ok(scanned)
}

/// The newest valid record, found the short way (RFC 0001 §5, a loader of the newest
/// state): `records` (as for [`scan`]) are verified from the highest generation down and
/// the first that verifies is the answer, with the records above it that did not. The rule
/// for errors is the scan's: a rejected record is passed over, an error that
/// has no [`ScanError::rejection`] ends the search. On a backend with at most one record per
/// generation this answers what [`Scanned::top`] would, verifying the answer once and the
/// generations below it not at all.
pub fn first_valid_from_top<E: ScanError, C>(
    mut records: Vec<(u64, String, C)>,
    mut verify: impl FnMut(u64, &str, C) -> Result<VerifiedGeneration, E>,
) -> Result<(Option<VerifiedGeneration>, Vec<Rejection>), E> {
    records.sort_by_key(|(generation, _, _)| std::cmp::Reverse(*generation));
    let mut rejected = Vec::new();
    for (generation, record, listed) in records {
        match verify(generation, &record, listed) {
            Ok(verified) => return Ok((Some(verified), rejected)),
            Err(error) => match error.rejection() {
                Some(kind) => rejected.push(Rejection::of(record, generation, kind, &error)),
                None => return Err(error.scan_failed(generation)),
            },
        }
    }
    Ok((None, rejected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejection_kind_is_spelled_in_json_as_its_name() {
        for kind in RejectionKind::ALL {
            let json = serde_json::to_string(&kind).expect("encode");
            assert_eq!(json, format!("\"{}\"", kind.name()));
            let back: RejectionKind = serde_json::from_str(&json).expect("decode");
            assert_eq!(back, kind);
        }
        let mut names: Vec<&str> = RejectionKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RejectionKind::ALL.len(), "two kinds share a name");
    }

    #[test]
    fn an_unknown_rejection_kind_is_refused() {
        let decoded = serde_json::from_str::<RejectionKind>("\"io\"");
        assert!(decoded.is_err(), "an I/O error is never a rejection");
    }
}
