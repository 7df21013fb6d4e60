//! One generation verified on the local disk, in the order of RFC 0001 §5: its commit
//! record, its manifest, then every object it references (hashed, or by length), with
//! the synthetic objects of a scaled state checked in parallel batches.
use super::*;

/// Reads an object and checks its content against its address.
pub fn read_object(
    fs: &dyn FileSystem,
    root: &Path,
    digest: Digest,
    cap: u64,
) -> Result<Vec<u8>, StoreError> {
    let bytes = read_object_bytes(fs, root, digest, cap)?;
    let actual = Digest::of(&bytes);
    if actual != digest {
        return Err(StoreError::DigestMismatch {
            path: root.join(object_rel_path(&digest)),
            expected: digest,
            actual,
        });
    }
    Ok(bytes)
}

/// The bytes of the object at `digest`'s address, at most `cap`: present and within the
/// cap, not yet checked against the address ([`read_object`] checks them).
pub fn read_object_bytes(
    fs: &dyn FileSystem,
    root: &Path,
    digest: Digest,
    cap: u64,
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
    verify_generation_checked(
        fs,
        root,
        generation,
        RecordChecks {
            decode_state,
            objects: ObjectCheck::Hashed,
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
    verify_generation_checked(
        fs,
        root,
        generation,
        RecordChecks {
            decode_state: false,
            objects,
        },
        progress,
    )
}

/// Checks one generation through the local store's reads ([`LocalReads`]).
pub(super) fn verify_generation_checked(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    checks: RecordChecks,
    progress: &mut dyn Progress,
) -> Result<VerifiedGeneration, StoreError> {
    let mut reads = LocalReads::new(fs, root, progress);
    verify_generation_reading(fs, root, generation, checks, &mut reads)
}

/// Checks one generation in the order of RFC 0001 §5, its commit record read from `fs`
/// and everything it references through `reads` (the local store's [`LocalReads`], or a
/// reader that wraps them).
pub fn verify_generation_reading<R: RecordReads<Error = StoreError>>(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    checks: RecordChecks,
    reads: &mut R,
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
    let verified = verify_record(reads, &commit_path, &commit_bytes, generation, checks)?;
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

/// The local store's reads for [`verify_record`]: files under `root` through `fs`.
pub struct LocalReads<'a> {
    fs: &'a dyn FileSystem,
    root: &'a Path,
    progress: &'a mut dyn Progress,
}

impl<'a> LocalReads<'a> {
    /// Reads under `root` through `fs`; `progress` advances over the objects a check
    /// reads in bulk (synthetic objects, lengths).
    pub fn new(fs: &'a dyn FileSystem, root: &'a Path, progress: &'a mut dyn Progress) -> Self {
        LocalReads { fs, root, progress }
    }
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
        read_object(self.fs, self.root, digest, cap_bytes)
    }

    fn read_payload(&mut self, digest: Digest, cap_bytes: u64) -> Result<Vec<u8>, StoreError> {
        read_object(self.fs, self.root, digest, cap_bytes)
    }

    fn verify_payloads(
        &mut self,
        manifest_path: &Path,
        manifest: &ManifestRecord,
    ) -> Result<(), StoreError> {
        verify_payloads(manifest_path, manifest, &mut |digest, expected: u64| {
            self.read_payload(digest, expected.min(MAX_CHUNK_OBJECT_BYTES))
        })
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
pub(super) fn check_object_lengths(
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
pub(super) const VERIFY_BATCH: usize = 16;

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
pub(super) struct SyntheticCheck<'a> {
    root: &'a Path,
    manifest_path: &'a Path,
    synthetic: &'a SyntheticPayloads,
}

/// Verifies one synthetic object: present, exactly its recorded length, its SHA-256 its
/// address. Streams the file (the seam's `hash_file`); returns no bytes.
pub(super) fn verify_synthetic_object(
    fs: &dyn FileSystem,
    check: &SyntheticCheck<'_>,
    index: usize,
) -> Result<(), StoreError> {
    let digest = check.synthetic.objects[index];
    let path = check.root.join(object_rel_path(&digest));
    let expected = synthetic_object_len(check.manifest_path, check.synthetic, index)?;
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
pub(super) fn verify_synthetic(
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
