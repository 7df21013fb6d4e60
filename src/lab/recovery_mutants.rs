//! The crash lab's recovery mutants: recoveries broken on purpose, built here from the
//! store's public pieces, so that the store's own recovery has no fault switch.
//!
//! - trusting LATEST: whatever generation LATEST names is the answer when its commit
//!   record verifies (the store's own check); the store's scan otherwise;
//! - trusting object names: the store's scan and selection
//!   ([`crate::store::recovery::recover_verifying`]) over a reader that wraps the store's
//!   [`LocalReads`] and checks objects for presence only — the manifest read without its
//!   address checked, chunk and synthetic objects not read at all, so no root is
//!   recomputed from their bytes.
use std::path::{Path, PathBuf};

use crate::core::canonical::CanonicalRecord;
use crate::core::digest::Digest;
use crate::core::progress::NoProgress;
use crate::durable::fs::{EntryKind, FileSystem};
use crate::store::checks::{synthetic_object_len, ReferencedObject};
use crate::store::codec::{
    decode, object_rel_path, LatestRecord, ManifestRecord, SyntheticPayloads,
};
use crate::store::error::StoreError;
use crate::store::paths::LATEST_REL_PATH;
use crate::store::recovery::{
    read_object_bytes, recover_verifying, recover_with, verify_generation_reading,
    verify_generation_with, LatestReport, LatestStatus, LocalReads, ObjectCheck, RecoveryReport,
    SelectedGeneration, VerifiedGeneration,
};
use crate::store::verify::{RecordChecks, RecordReads};

/// Which recovery mutant runs (none: the store's recovery). Never set outside the lab.
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

/// Recovery of the store at `root` as `faults` breaks it; the store's own
/// [`recover_with`] when `faults` is [`RecoveryFaults::NONE`].
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
    if faults.skip_object_digests {
        recover_verifying(fs, root, &mut |generation| {
            verify_trusting_names(fs, root, generation)
        })
    } else {
        recover_with(fs, root)
    }
}

/// One generation checked as recovery's scan checks it, or as the name-trusting mutant
/// does.
fn verify_as_scanned(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    faults: RecoveryFaults,
) -> Result<VerifiedGeneration, StoreError> {
    if faults.skip_object_digests {
        verify_trusting_names(fs, root, generation)
    } else {
        verify_generation_with(fs, root, generation, false)
    }
}

/// The trust-LATEST mutant: whatever generation LATEST names is the answer, if its commit
/// record verifies; `None` (scan as usual) when LATEST is missing or unusable.
fn trusted_latest(
    fs: &dyn FileSystem,
    root: &Path,
    faults: RecoveryFaults,
) -> Option<RecoveryReport> {
    let path = root.join(LATEST_REL_PATH);
    let bytes = fs.read_file(&path, LatestRecord::CAP).ok()?;
    if bytes.len() as u64 > LatestRecord::CAP {
        return None;
    }
    let record: LatestRecord = decode(&path, &bytes).ok()?;
    let v = verify_as_scanned(fs, root, record.generation, faults).ok()?;
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

/// The name-trusting mutant's check of one generation: the store's order of checks, its
/// objects read through [`NameTrustingReads`].
fn verify_trusting_names(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
) -> Result<VerifiedGeneration, StoreError> {
    let mut progress = NoProgress;
    let mut reads = NameTrustingReads {
        inner: LocalReads::new(fs, root, &mut progress),
        fs,
        root,
    };
    let checks = RecordChecks {
        decode_state: false,
        objects: ObjectCheck::Hashed,
    };
    verify_generation_reading(fs, root, generation, checks, &mut reads)
}

/// The store's local reads with every object's address trusted.
struct NameTrustingReads<'a> {
    inner: LocalReads<'a>,
    fs: &'a dyn FileSystem,
    root: &'a Path,
}

impl NameTrustingReads<'_> {
    /// A regular file at `digest`'s address, or `MissingObject`.
    fn present(&self, digest: Digest) -> Result<(), StoreError> {
        let path = self.root.join(object_rel_path(&digest));
        match self
            .fs
            .entry_kind(&path)
            .map_err(|e| StoreError::io(&path, e))?
        {
            Some(EntryKind::File) => Ok(()),
            _ => Err(StoreError::MissingObject { path, digest }),
        }
    }
}

impl RecordReads for NameTrustingReads<'_> {
    type Error = StoreError;

    fn invalid(&self, at: &Path, error: StoreError) -> StoreError {
        self.inner.invalid(at, error)
    }

    fn object_path(&self, digest: &Digest) -> PathBuf {
        self.inner.object_path(digest)
    }

    fn read_manifest(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, StoreError> {
        read_object_bytes(self.fs, self.root, digest, cap_bytes)
    }

    fn read_payload(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, StoreError> {
        read_object_bytes(self.fs, self.root, digest, cap_bytes)
    }

    fn verify_payloads(
        &mut self,
        _manifest_path: &Path,
        manifest: &ManifestRecord,
    ) -> Result<(), StoreError> {
        manifest
            .chunks
            .iter()
            .flat_map(|entry| entry.digests())
            .try_for_each(|(_, digest)| self.present(digest))
    }

    fn check_lengths(
        &mut self,
        manifest_path: &Path,
        objects: &[ReferencedObject],
    ) -> Result<(), StoreError> {
        self.inner.check_lengths(manifest_path, objects)
    }

    fn verify_synthetic(
        &mut self,
        manifest_path: &Path,
        synthetic: &SyntheticPayloads,
    ) -> Result<(), StoreError> {
        for (index, digest) in synthetic.objects.iter().enumerate() {
            // The recorded lengths are still checked; only the bytes go unread.
            synthetic_object_len(manifest_path, synthetic, index)?;
            self.present(*digest)?;
        }
        Ok(())
    }
}
