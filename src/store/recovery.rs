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

/// Deliberately broken recoveries, for the crash lab's mutants (a model that cannot catch
/// them has a hole). Never set outside the lab.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryFaults {
    /// Select the generation LATEST names, when it decodes and its commit record verifies
    /// by name, instead of scanning `commits/` for the newest valid one.
    pub trust_latest: bool,
    /// Trust object names: read the manifest without checking its bytes against its
    /// address, and check chunk objects only for presence (no address check, no root
    /// recomputed from their bytes).
    pub skip_object_digests: bool,
}

impl RecoveryFaults {
    /// The correct recovery, usable in constants.
    pub const NONE: RecoveryFaults = RecoveryFaults {
        trust_latest: false,
        skip_object_digests: false,
    };
}

/// Reads an object and checks its content against its address.
pub fn read_object(
    fs: &dyn FileSystem,
    root: &Path,
    digest: Digest,
    cap: u64,
) -> Result<Vec<u8>, StoreError> {
    read_object_faulty(fs, root, digest, cap, RecoveryFaults::NONE)
}

fn read_object_faulty(
    fs: &dyn FileSystem,
    root: &Path,
    digest: Digest,
    cap: u64,
    faults: RecoveryFaults,
) -> Result<Vec<u8>, StoreError> {
    let path = root.join(object_rel_path(&digest));
    let bytes = match fs.read_file(&path, cap) {
        Ok(bytes) => bytes,
        Err(e) if is_absent(&e) => return Err(StoreError::MissingObject { path, digest }),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    if bytes.len() as u64 > cap {
        return Err(StoreError::TooLarge { path, cap });
    }
    let actual = Digest::of(&bytes);
    if actual != digest && !faults.skip_object_digests {
        return Err(StoreError::DigestMismatch {
            path,
            expected: digest,
            actual,
        });
    }
    Ok(bytes)
}

/// Verifies one generation end to end: record, name binding, manifest object, bindings
/// between record and manifest, every chunk object, the rebuilt state and its root.
pub fn verify_generation(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
) -> Result<VerifiedGeneration, StoreError> {
    verify_generation_with(fs, root, generation, true)
}

/// As `verify_generation`; with `decode_state` false the same checks run on the raw
/// bytes and no `LogicalState` is built.
pub fn verify_generation_with(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    decode_state: bool,
) -> Result<VerifiedGeneration, StoreError> {
    verify_generation_reporting(fs, root, generation, decode_state, &mut NoProgress)
}

/// As [`verify_generation_with`], reporting the synthetic objects verified to `progress`
/// (`advance` with how many, in manifest order; no phase of its own: the caller names
/// it). A generation without synthetic objects reports nothing.
pub fn verify_generation_reporting(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    decode_state: bool,
    progress: &mut dyn Progress,
) -> Result<VerifiedGeneration, StoreError> {
    verify_generation_faulty(
        fs,
        root,
        generation,
        Checks {
            decode_state,
            objects: ObjectCheck::Hashed,
            faults: RecoveryFaults::NONE,
        },
        progress,
    )
}

/// Checks one generation as [`verify_generation_reporting`] does, its objects as `objects`
/// says: with [`ObjectCheck::Lengths`] the commit record, the manifest and their bindings
/// are verified in full and every object only for presence and length (the offline
/// reshard's default, RFC 0001 §7). No `LogicalState` is built. `progress` advances over
/// the synthetic objects in manifest order with [`ObjectCheck::Hashed`]; with
/// [`ObjectCheck::Lengths`], over every referenced object, a fan-out directory at a time.
pub fn verify_generation_checking(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    objects: ObjectCheck,
    progress: &mut dyn Progress,
) -> Result<VerifiedGeneration, StoreError> {
    verify_generation_faulty(
        fs,
        root,
        generation,
        Checks {
            decode_state: false,
            objects,
            faults: RecoveryFaults::NONE,
        },
        progress,
    )
}

/// What [`verify_generation_faulty`] checks and builds.
#[derive(Clone, Copy, Debug)]
struct Checks {
    /// Build the `LogicalState` (only with [`ObjectCheck::Hashed`]).
    decode_state: bool,
    /// How the objects are checked.
    objects: ObjectCheck,
    /// Deliberate faults (the crash lab's recovery mutants).
    faults: RecoveryFaults,
}

fn verify_generation_faulty(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    checks: Checks,
    progress: &mut dyn Progress,
) -> Result<VerifiedGeneration, StoreError> {
    let commit_path = root.join(commit_rel_path(generation));
    let commit_bytes = match fs.read_file(&commit_path, CommitRecord::CAP) {
        Ok(bytes) => bytes,
        Err(e) if is_absent(&e) => {
            return Err(StoreError::GenerationNotFound {
                path: commit_path,
                generation,
            })
        }
        Err(e) => return Err(StoreError::io(commit_path, e)),
    };
    let mut reads = LocalReads {
        fs,
        root,
        faults: checks.faults,
        progress,
    };
    let record_checks = RecordChecks {
        decode_state: checks.decode_state,
        objects: checks.objects,
    };
    let verified = verify_record(
        &mut reads,
        &commit_path,
        &commit_bytes,
        generation,
        record_checks,
    )?;
    Ok(VerifiedGeneration {
        generation,
        record: commit_rel_path(generation),
        commit_digest: Digest::of(&commit_bytes),
        commit: verified.commit,
        manifest_digest: verified.manifest_digest,
        manifest: verified.manifest,
        state: verified.state,
        topology: verified.topology,
    })
}

/// The local store's reads for [`verify_record`]: files under `root` through `fs`, with
/// the crash lab's recovery faults where they are set.
struct LocalReads<'a> {
    fs: &'a dyn FileSystem,
    root: &'a Path,
    faults: RecoveryFaults,
    progress: &'a mut dyn Progress,
}

impl RecordReads for LocalReads<'_> {
    type Error = StoreError;

    fn invalid(&self, _at: &Path, error: StoreError) -> StoreError {
        error
    }

    fn object_path(&self, digest: &Digest) -> PathBuf {
        self.root.join(object_rel_path(digest))
    }

    fn read_manifest(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, StoreError> {
        read_object_faulty(self.fs, self.root, digest, cap_bytes, self.faults)
    }

    fn read_payload(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, StoreError> {
        read_object_faulty(self.fs, self.root, digest, cap_bytes, self.faults)
    }

    fn verify_payloads(
        &mut self,
        manifest_path: &Path,
        manifest: &ManifestRecord,
    ) -> Result<(), StoreError> {
        if !self.faults.skip_object_digests {
            return verify_payloads(manifest_path, manifest, &mut |digest, expected: u64| {
                self.read_payload(digest, expected.min(MAX_CHUNK_OBJECT_BYTES))
            });
        }
        // The skip-digests mutant: chunk objects checked for presence only.
        for entry in &manifest.chunks {
            for (_, digest) in entry.digests() {
                let path = self.object_path(&digest);
                if self
                    .fs
                    .entry_kind(&path)
                    .map_err(|e| StoreError::io(&path, e))?
                    != Some(EntryKind::File)
                {
                    return Err(StoreError::MissingObject { path, digest });
                }
            }
        }
        Ok(())
    }

    fn check_lengths(
        &mut self,
        manifest_path: &Path,
        objects: &[ReferencedObject],
    ) -> Result<(), StoreError> {
        check_object_lengths(self.fs, self.root, manifest_path, objects, self.progress)
    }

    fn verify_synthetic(
        &mut self,
        manifest_path: &Path,
        synthetic: &SyntheticPayloads,
    ) -> Result<(), StoreError> {
        let check = SyntheticCheck {
            root: self.root,
            manifest_path,
            synthetic,
            faults: self.faults,
        };
        verify_synthetic(self.fs, &check, self.progress)
    }
}

/// [`ObjectCheck::Lengths`]: every object a (checked) manifest references must be a
/// regular file of exactly its length. The lengths are read from metadata one fan-out
/// directory at a time (opened once, each entry read relative to it), on up to
/// [`MAX_VERIFY_THREADS`] threads when the file system may be shared; then the objects are
/// judged in manifest order, so the first bad one in manifest order is reported, every
/// time. `progress` advances as directories are done, by the objects checked so far.
fn check_object_lengths(
    fs: &dyn FileSystem,
    root: &Path,
    manifest_path: &Path,
    objects: &[ReferencedObject],
    progress: &mut dyn Progress,
) -> Result<(), StoreError> {
    // Fan-out directory (the digest's first byte) → the objects' positions, in order.
    let mut by_directory: Vec<Vec<usize>> = vec![Vec::new(); 256];
    for (position, object) in objects.iter().enumerate() {
        by_directory[usize::from(object.digest.0[0])].push(position);
    }
    let groups: Vec<&Vec<usize>> = by_directory.iter().filter(|g| !g.is_empty()).collect();
    let mut lengths: Vec<Option<u64>> = vec![None; objects.len()];
    let lookup = |fs: &dyn FileSystem, group: &[usize]| {
        let hex: Vec<String> = group.iter().map(|&p| objects[p].digest.to_hex()).collect();
        let names: Vec<&str> = hex.iter().map(|h| &h[2..]).collect();
        let dir = root.join("objects").join(&hex[0][..2]);
        fs.regular_file_lens_in(&dir, &names)
            .map_err(|e| StoreError::io(&dir, e))
    };
    let mut done = 0u64;
    let mut record = |group: &[usize], found: Vec<Option<u64>>| {
        for (&position, length) in group.iter().zip(found) {
            lengths[position] = length;
        }
        done += group.len() as u64;
        progress.advance(done);
    };
    match fs.shared() {
        Some(shared) => crate::core::parallel::ordered_map(
            groups.len(),
            verify_threads(fs),
            2,
            |g| lookup(shared, groups[g]),
            |g, found| {
                record(groups[g], found?);
                Ok::<(), StoreError>(())
            },
        )?,
        None => {
            for group in &groups {
                record(group, lookup(fs, group)?);
            }
        }
    }
    for (object, found) in objects.iter().zip(lengths) {
        match found {
            None => {
                // Absent, or an entry that is not a regular file (a symlink is never
                // followed): told apart here, on the failure path only, so the error
                // names the same reason a hashed read gives (RFC 0001 §5).
                let path = root.join(object_rel_path(&object.digest));
                let kind = fs.entry_kind(&path).map_err(|e| StoreError::io(&path, e))?;
                return Err(match kind {
                    Some(EntryKind::Dir | EntryKind::Other) => StoreError::NotRegularFile { path },
                    // Still absent, or a regular file that appeared after the check.
                    Some(EntryKind::File) | None => StoreError::MissingObject {
                        path,
                        digest: object.digest,
                    },
                });
            }
            Some(found) if found != object.length_bytes => {
                return Err(object
                    .role
                    .wrong_length(manifest_path, object.length_bytes, found))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Objects one hashing thread takes at a time (512 KiB of 32 KiB objects).
const VERIFY_BATCH: usize = 16;

/// Most threads recovery hashes objects on.
pub const MAX_VERIFY_THREADS: usize = 8;

/// How many threads recovery hashes synthetic objects on through `fs` (1 unless `fs` may be
/// shared between threads).
pub fn verify_threads(fs: &dyn FileSystem) -> usize {
    if fs.shared().is_some() {
        crate::core::parallel::worker_count(MAX_VERIFY_THREADS)
    } else {
        1
    }
}

/// One manifest's synthetic objects and how to check them.
struct SyntheticCheck<'a> {
    root: &'a Path,
    manifest_path: &'a Path,
    synthetic: &'a SyntheticPayloads,
    faults: RecoveryFaults,
}

/// Verifies one synthetic object: present, exactly its recorded length, its SHA-256 its
/// address. Streams the file (the seam's `hash_file`); returns no bytes.
fn verify_synthetic_object(
    fs: &dyn FileSystem,
    check: &SyntheticCheck<'_>,
    index: usize,
) -> Result<(), StoreError> {
    let digest = check.synthetic.objects[index];
    let path = check.root.join(object_rel_path(&digest));
    let expected = synthetic_object_len(check.manifest_path, check.synthetic, index)?;
    if check.faults.skip_object_digests {
        return match fs.entry_kind(&path).map_err(|e| StoreError::io(&path, e))? {
            Some(EntryKind::File) => Ok(()),
            _ => Err(StoreError::MissingObject { path, digest }),
        };
    }
    let (actual, found) = match fs.hash_file(&path, expected) {
        Ok(hashed) => hashed,
        Err(e) if is_absent(&e) => return Err(StoreError::MissingObject { path, digest }),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    if found != expected {
        return Err(ObjectRole::Synthetic(index as u64).wrong_length(
            check.manifest_path,
            expected,
            found,
        ));
    }
    if actual != digest {
        return Err(StoreError::DigestMismatch {
            path,
            expected: digest,
            actual,
        });
    }
    Ok(())
}

/// Verifies every synthetic object of a manifest, hashing them in parallel on up to
/// [`MAX_VERIFY_THREADS`] threads when the file system may be shared (memory: one
/// fixed-size buffer per thread). If several objects are bad, the first in manifest order
/// is reported, every time. `progress` advances as objects are verified, in manifest
/// order (a batch at a time when threads hash).
fn verify_synthetic(
    fs: &dyn FileSystem,
    check: &SyntheticCheck<'_>,
    progress: &mut dyn Progress,
) -> Result<(), StoreError> {
    let count = check.synthetic.objects.len();
    match fs.shared() {
        // Objects go to the threads in batches (fewer hand-offs); a batch stops at its
        // first bad object, and batches are consumed in order, so the error reported is
        // the first in manifest order.
        Some(shared) => crate::core::parallel::ordered_map(
            count.div_ceil(VERIFY_BATCH),
            verify_threads(fs),
            2,
            |batch| {
                let end = ((batch + 1) * VERIFY_BATCH).min(count);
                (batch * VERIFY_BATCH..end)
                    .try_for_each(|i| verify_synthetic_object(shared, check, i))
            },
            |batch, result| {
                result?;
                let verified = ((batch + 1) * VERIFY_BATCH).min(count);
                progress.advance(verified as u64);
                Ok(())
            },
        ),
        None => (0..count).try_for_each(|i| {
            verify_synthetic_object(fs, check, i)?;
            progress.advance(i as u64 + 1);
            Ok(())
        }),
    }
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
fn scan_checks(faults: RecoveryFaults) -> Checks {
    Checks {
        decode_state: false,
        objects: ObjectCheck::Hashed,
        faults,
    }
}

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
    recover_faulty(fs, root, RecoveryFaults::NONE)
}

/// As [`recover_with`], with deliberate faults (the crash lab's recovery mutants).
pub fn recover_faulty(
    fs: &dyn FileSystem,
    root: &Path,
    faults: RecoveryFaults,
) -> Result<RecoveryReport, StoreError> {
    if faults.trust_latest {
        if let Some(report) = trusted_latest(fs, root, faults) {
            return Ok(report);
        }
    }
    let (records, ignored) = list_commit_records(fs, root)?;
    let scanned = scan(records, |generation, _, ()| {
        verify_generation_faulty(fs, root, generation, scan_checks(faults), &mut NoProgress)
    })?;
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

/// The trust-LATEST mutant: whatever generation LATEST names is the answer, if its commit
/// record verifies; `None` (scan as usual) when LATEST is missing or unusable.
fn trusted_latest(
    fs: &dyn FileSystem,
    root: &Path,
    faults: RecoveryFaults,
) -> Option<RecoveryReport> {
    let path = root.join(LATEST_REL_PATH);
    let bytes = read_capped(fs, &path, LatestRecord::CAP).ok()?;
    let record: LatestRecord = decode(&path, &bytes).ok()?;
    let v = verify_generation_faulty(
        fs,
        root,
        record.generation,
        scan_checks(faults),
        &mut NoProgress,
    )
    .ok()?;
    Some(RecoveryReport {
        selected: Some(SelectedGeneration::of(&v)),
        valid_generations: vec![v.generation],
        rejected: Vec::new(),
        latest: LatestReport {
            status: LatestStatus::Consistent,
            generation: Some(v.generation),
            reason: None,
        },
        ignored: Vec::new(),
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
