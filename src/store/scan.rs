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
pub use crate::store::rejection::RejectionKind;

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
