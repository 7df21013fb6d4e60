//! Recovery (RFC 0001 §Recovery): scan `commits/`, verify each record end to end, select
//! the highest fully valid generation, report LATEST's status. Reads only.
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::topology::Topology;

use crate::core::canonical::CanonicalRecord;
use crate::core::progress::{NoProgress, Progress};
use crate::durable::fs::{EntryKind, FileSystem};
use crate::store::checks::{synthetic_object_len, ObjectRole, ReferencedObject};
use crate::store::codec::{
    commit_rel_path, decode, object_rel_path, parse_commit_name, CommitRecord, LatestRecord,
    ManifestRecord, SyntheticPayloads, MAX_CHUNK_OBJECT_BYTES,
};
use crate::store::error::StoreError;
use crate::store::layout::verify_payloads;
use crate::store::paths::LATEST_REL_PATH;
use crate::store::scan::{scan, ScanError};
pub use crate::store::verify::ObjectCheck;
use crate::store::verify::{verify_record, RecordChecks, RecordReads};

/// What LATEST says relative to the scan's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatestStatus {
    /// No `refs/LATEST`.
    Missing,
    /// Names an older generation than the selected one.
    Stale,
    /// Names a generation newer than the selected one (or any, when none is selectable).
    Ahead,
    /// Not a valid LATEST record, or names the selected generation with another digest.
    Garbage,
    /// Names exactly the selected generation and commit record.
    Consistent,
}

/// What recovery found in `refs/LATEST` (reported, never trusted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatestReport {
    /// How LATEST compares with the selected generation.
    pub status: LatestStatus,
    /// The generation LATEST names, when it names one.
    pub generation: Option<u64>,
    /// Why LATEST is garbage, when it is.
    pub reason: Option<String>,
}

impl LatestReport {
    /// No LATEST at all.
    pub const MISSING: LatestReport = LatestReport {
        status: LatestStatus::Missing,
        generation: None,
        reason: None,
    };

    /// A LATEST that cannot be read as a record (or contradicts the selection), and why.
    pub fn garbage(reason: String, generation: Option<u64>) -> Self {
        LatestReport {
            status: LatestStatus::Garbage,
            generation,
            reason: Some(reason),
        }
    }

    /// How a decoded LATEST `record` compares with the generation recovery `selected`
    /// (RFC 0001 §6: reported, never trusted).
    pub fn compare(record: &LatestRecord, selected: Option<&SelectedGeneration>) -> Self {
        let status = match selected {
            None => LatestStatus::Ahead,
            Some(s) if record.generation > s.generation => LatestStatus::Ahead,
            Some(s) if record.generation < s.generation => LatestStatus::Stale,
            Some(s) if record.commit == s.commit_digest => LatestStatus::Consistent,
            Some(_) => {
                return Self::garbage(
                    "names the selected generation with another commit digest".into(),
                    Some(record.generation),
                )
            }
        };
        LatestReport {
            status,
            generation: Some(record.generation),
            reason: None,
        }
    }
}

/// The generation recovery selected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectedGeneration {
    /// The generation number.
    pub generation: u64,
    /// SHA-256 of its commit record.
    pub commit_digest: Digest,
    /// SHA-256 of its manifest.
    pub manifest_digest: Digest,
    /// The worker count of its topology.
    pub workers: u32,
    /// The optimizer step of its state.
    pub step: u64,
    /// Its manifest's logical-state root.
    pub logical_state_root: Digest,
}

impl SelectedGeneration {
    /// The selection of a generation whose commit record (`commit_digest`) and manifest
    /// verified: what recovery reports of it, on either backend.
    pub fn verified(
        generation: u64,
        commit_digest: Digest,
        manifest_digest: Digest,
        manifest: &ManifestRecord,
        topology: Topology,
    ) -> Self {
        SelectedGeneration {
            generation,
            commit_digest,
            manifest_digest,
            workers: topology.workers(),
            step: manifest.step,
            logical_state_root: manifest.logical_state_root,
        }
    }

    /// The selection of `v`.
    pub fn of(v: &VerifiedGeneration) -> Self {
        Self::verified(
            v.generation,
            v.commit_digest,
            v.manifest_digest,
            &v.manifest,
            v.topology,
        )
    }
}

/// The result of a recovery scan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryReport {
    /// The highest fully valid generation, if any.
    pub selected: Option<SelectedGeneration>,
    /// Every generation that fully verified, ascending.
    pub valid_generations: Vec<u64>,
    /// Every commit record that did not verify, and why.
    pub rejected: Vec<Rejection>,
    /// What `refs/LATEST` says, compared with the selection.
    pub latest: LatestReport,
    /// Entries in `commits/` that are not commit record names (temp files, clutter).
    pub ignored: Vec<String>,
}

pub use crate::store::scan::{Rejection, RejectionKind, VerifiedGeneration};

/// Whether a read failed because nothing can be at the path: no entry, or a path component
/// that is not a directory (a fan-out directory replaced by a file). Both are stored
/// content gone missing, not an I/O failure.
fn is_absent(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

fn read_capped(fs: &dyn FileSystem, path: &Path, cap: u64) -> Result<Vec<u8>, StoreError> {
    let bytes = fs
        .read_file(path, cap)
        .map_err(|e| StoreError::io(path, e))?;
    if bytes.len() as u64 > cap {
        return Err(StoreError::TooLarge {
            path: path.to_owned(),
            cap,
        });
    }
    Ok(bytes)
}

fn latest_report(
    fs: &dyn FileSystem,
    root: &Path,
    selected: Option<&SelectedGeneration>,
) -> LatestReport {
    let path = root.join(LATEST_REL_PATH);
    let bytes = match read_capped(fs, &path, LatestRecord::CAP) {
        Ok(bytes) => bytes,
        Err(StoreError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
            return LatestReport::MISSING
        }
        Err(e) => return LatestReport::garbage(e.to_string(), None),
    };
    match decode::<LatestRecord>(&path, &bytes) {
        Ok(record) => LatestReport::compare(&record, selected),
        Err(e) => LatestReport::garbage(e.to_string(), None),
    }
}

/// What recovery's scan checks of each generation: every object hashed, no state built.
const SCAN_CHECKS: RecordChecks = RecordChecks {
    decode_state: false,
    objects: ObjectCheck::Hashed,
};

/// Commit records as a scan takes them: generation, name relative to the store, and
/// nothing else known from a local listing.
type ListedRecords = Vec<(u64, String, ())>;

/// The commit records under `root` (ascending) and the entries of `commits/` that are
/// not record names. A missing `commits/` holds no records; a `root`
/// that is not a directory is `no-store`.
fn list_commit_records(
    fs: &dyn FileSystem,
    root: &Path,
) -> Result<(ListedRecords, Vec<String>), StoreError> {
    let found = fs.entry_kind(root).map_err(|e| StoreError::io(root, e))?;
    if found != Some(EntryKind::Dir) {
        return Err(StoreError::NoStore {
            path: root.to_owned(),
            found,
        });
    }
    let commits = root.join("commits");
    let names = match fs.list_dir(&commits) {
        Ok(names) => names,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(StoreError::io(commits, e)),
    };
    let mut ignored = Vec::new();
    let mut records = Vec::new();
    for name in names {
        match parse_commit_name(&name) {
            Some(generation) => records.push((generation, commit_rel_path(generation), ())),
            None => ignored.push(format!("commits/{name}")),
        }
    }
    records.sort_unstable();
    Ok((records, ignored))
}

/// What [`load_newest_with`] found: the newest generation that verified, decoded, and the
/// records above it that did not.
#[derive(Debug)]
pub struct NewestLoad {
    /// The generation loaded, `None` when no record verified.
    pub loaded: Option<LoadedGeneration>,
    /// The records above the loaded generation (all records when none loaded) that did
    /// not verify, highest first.
    pub rejected: Vec<Rejection>,
}

/// A generation's fully verified state.
#[derive(Debug)]
pub struct LoadedGeneration {
    /// The generation number.
    pub generation: u64,
    /// Its state, rebuilt from verified bytes.
    pub state: crate::core::logical::LogicalState,
    /// The topology its manifest records.
    pub topology: Topology,
}

/// Loads the newest generation whose record passes every check of RFC 0001 §5 steps 2–4,
/// verifying records from the highest generation down and stopping at the first that
/// passes: on a local store (one record file per generation) the generation recovery's
/// scan selects, its bytes read and hashed once instead of once by the scan and again by
/// the load. A read that fails ends the load (`recovery-read-failed`), as it ends the scan.
/// Writes nothing; LATEST is not read.
pub fn load_newest_with(fs: &dyn FileSystem, root: &Path) -> Result<NewestLoad, StoreError> {
    let (records, _ignored) = list_commit_records(fs, root)?;
    let (verified, rejected) =
        crate::store::scan::first_valid_from_top(records, |generation, _, ()| {
            verify_generation(fs, root, generation)
        })?;
    let loaded = match verified {
        None => None,
        Some(verified) => {
            let generation = verified.generation;
            let state = verified
                .state
                .ok_or_else(|| StoreError::GenerationNotFound {
                    path: root.join(commit_rel_path(generation)),
                    generation,
                })?;
            Some(LoadedGeneration {
                generation,
                state,
                topology: verified.topology,
            })
        }
    };
    Ok(NewestLoad { loaded, rejected })
}

/// Scans and verifies every commit record under `root` through `fs`. Writes nothing.
pub fn recover_with(fs: &dyn FileSystem, root: &Path) -> Result<RecoveryReport, StoreError> {
    recover_verifying(fs, root, &mut |generation| {
        verify_generation_checked(fs, root, generation, SCAN_CHECKS, &mut NoProgress)
    })
}

/// Recovery's scan and selection (RFC 0001 §5) with each generation checked by `verify`
/// ([`recover_with`] passes the store's own check, every object hashed): the records
/// under `root` listed, verified from the highest down, the newest valid one selected,
/// LATEST compared with it. Writes nothing.
pub fn recover_verifying(
    fs: &dyn FileSystem,
    root: &Path,
    verify: &mut dyn FnMut(u64) -> Result<VerifiedGeneration, StoreError>,
) -> Result<RecoveryReport, StoreError> {
    let (records, ignored) = list_commit_records(fs, root)?;
    let scanned = scan(records, |generation, _, ()| verify(generation))?;
    // One record file per generation: a generation never has two valid records here.
    let selected = scanned
        .top()
        .and_then(|(_, records)| records.first())
        .map(SelectedGeneration::of);
    let latest = latest_report(fs, root, selected.as_ref());
    Ok(RecoveryReport {
        selected,
        valid_generations: scanned.valid_generations(),
        rejected: scanned.rejected,
        latest,
        ignored,
    })
}

impl ScanError for StoreError {
    /// `None` when the disk could not say what the record or an object holds (RFC 0001 §5).
    fn rejection(&self) -> Option<RejectionKind> {
        self.rejection_kind()
    }

    fn scan_failed(self, generation: u64) -> Self {
        StoreError::RecoveryReadFailed {
            generation,
            source: Box::new(self),
        }
    }
}

mod verify_local;
use verify_local::verify_generation_checked;
pub use verify_local::{
    read_object, read_object_bytes, verify_generation, verify_generation_checking,
    verify_generation_reading, verify_generation_reporting, verify_generation_with, verify_threads,
    LocalReads, MAX_VERIFY_THREADS,
};
