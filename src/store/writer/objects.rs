//! Installing objects: a temp file in `staging/`, its fsync, the rename into its fan-out directory and that directory's fsync, one object at a time or from a bounded pool of threads.
use super::*;

/// How [`write_temp_in`] writes its file.
#[derive(Clone, Copy, Debug)]
pub(super) struct TempWrite {
    /// Create it read-only (objects, commit records) or not (LATEST).
    pub(super) read_only: bool,
    /// Fsync it too, through the same open file (steps 1 and 2 with no barrier between).
    pub(super) fsync: bool,
}

/// Why [`write_temp_in`] failed: creating or writing the file, or its fsync.
pub(super) enum TempError {
    Store(StoreError),
    Fsync(PathBuf, std::io::Error),
}

/// Writes `bytes` to a new file `staging/<what>-<nonce>-<n>.tmp`, `n` the next number
/// `next_number` hands out, and returns its path. A name a killed writer left behind (same
/// pid after a restart, as in a container, and the same uncommitted generation) is
/// skipped, never reused or deleted: recovery ignores `staging/`, and the next name is
/// tried, at most `MAX_TEMP_NAME_ATTEMPTS` times.
pub(super) fn write_temp_in(
    fs: &dyn FileSystem,
    root: &Path,
    nonce: &str,
    what: &str,
    next_number: &mut dyn FnMut() -> u64,
    bytes: &[u8],
    how: TempWrite,
) -> Result<PathBuf, TempError> {
    for _ in 0..MAX_TEMP_NAME_ATTEMPTS {
        let temp = root.join(format!("staging/{what}-{nonce}-{}.tmp", next_number()));
        let written = if how.fsync {
            fs.write_new_file_synced(&temp, bytes, how.read_only)
        } else {
            fs.write_new_file(&temp, bytes, how.read_only)
                .map_err(SyncedWriteError::Write)
        };
        match written {
            Ok(()) => return Ok(temp),
            Err(SyncedWriteError::Write(e)) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(SyncedWriteError::Write(e)) => {
                return Err(TempError::Store(StoreError::io(&temp, e)))
            }
            Err(SyncedWriteError::Fsync(e)) => return Err(TempError::Fsync(temp, e)),
        }
    }
    Err(TempError::Store(StoreError::io(
        root.join("staging"),
        std::io::Error::other(format!(
            "no free temp name after {MAX_TEMP_NAME_ATTEMPTS} attempts"
        )),
    )))
}

/// Makes the fan-out directory `objects/ab/` exist durably before an object is renamed
/// into it: created if missing, and `objects/` fsynced once per run for each fan-out
/// directory used (`durable` holds those already done), whoever created it (a killed
/// writer may have left it non-durable).
pub(super) fn ensure_fan_dir_in(
    fs: &dyn FileSystem,
    root: &Path,
    fan_dir: &Path,
    durable: &mut std::collections::BTreeSet<PathBuf>,
    generation: u64,
) -> Result<(), StoreError> {
    if durable.contains(fan_dir) {
        return Ok(());
    }
    create_dir_if_missing(fs, fan_dir)?;
    let objects = root.join("objects");
    fs.fsync_dir(&objects)
        .map_err(|source| fsync_failed(&objects, generation, source))?;
    durable.insert(fan_dir.to_owned());
    Ok(())
}

/// Whether an object's bytes were installed by this run or were already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// This run's temp file now holds the address.
    Written,
    /// The address held verified bytes; the temp file was removed and the object fsynced.
    Reused,
}

/// Step 3: renames the fsynced temp file `temp` to the object's address `target` without
/// replacing. When the name exists, the existing file is kept if its bytes verify (the
/// temp file is removed and the object fsynced, as a killed writer may not have), and
/// otherwise replaced by the verified bytes.
pub(super) fn place_object(
    fs: &dyn FileSystem,
    temp: &Path,
    target: &Path,
    digest: Digest,
    generation: u64,
) -> Result<Placed, StoreError> {
    match fs.rename_noreplace(temp, target) {
        Ok(()) => Ok(Placed::Written),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            let existing = fs.read_file(target, MAX_MANIFEST_BYTES);
            if matches!(&existing, Ok(b) if Digest::of(b) == digest) {
                fs.remove_file(temp).map_err(|e| StoreError::io(temp, e))?;
                fs.fsync_file(target)
                    .map_err(|source| fsync_failed(target, generation, source))?;
                Ok(Placed::Reused)
            } else {
                fs.rename_replace(temp, target)
                    .map_err(|e| StoreError::io(target, e))?;
                Ok(Placed::Written)
            }
        }
        Err(e) => Err(StoreError::io(target, e)),
    }
}

/// Most threads a publish installs objects from when nothing observes its barriers
/// (RFC 0001 §4): each thread blocks in its own fsyncs, so the disk sees up to this many
/// at once (more than the cores, as the threads mostly wait).
pub const MAX_OBJECT_IO_THREADS: usize = 16;

/// The shared state of one concurrent object install.
pub(super) struct ConcurrentInstall<'s> {
    fs: &'s (dyn FileSystem + Sync),
    root: &'s Path,
    nonce: &'s str,
    generation: u64,
    produce: &'s (dyn Fn(usize) -> Vec<u8> + Sync),
    temp_numbers: std::sync::atomic::AtomicU64,
    fan_dirs: std::sync::Mutex<std::collections::BTreeSet<PathBuf>>,
    /// Fan-out directories an object was renamed into (or found in): step 4 fsyncs each.
    renamed_into: std::sync::Mutex<std::collections::BTreeSet<PathBuf>>,
}

impl ConcurrentInstall<'_> {
    /// RFC 0001 §4 steps 1–3 for object `index`, in order (its fan-out directory made
    /// durable first), on this thread; step 4 is the run's, after every object's step 3.
    fn install(&self, index: usize) -> Result<(Digest, Placed), StoreError> {
        let bytes = (self.produce)(index);
        let digest = Digest::of(&bytes);
        let target = self.root.join(object_rel_path(&digest));
        let fan_dir = target
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| self.root.join("objects"));
        // The lock is held only to look the directory up: threads whose directory is
        // durable go on while another makes its own durable (two may both make one
        // durable the first time; each fsyncs `objects/` before its own rename).
        let known = lock(&self.fan_dirs).contains(&fan_dir);
        if !known {
            let mut durable_now = std::collections::BTreeSet::new();
            ensure_fan_dir_in(
                self.fs,
                self.root,
                &fan_dir,
                &mut durable_now,
                self.generation,
            )?;
            lock(&self.fan_dirs).extend(durable_now);
        }
        let temp = write_temp_in(
            self.fs,
            self.root,
            self.nonce,
            "object",
            &mut || {
                self.temp_numbers
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1
            },
            &bytes,
            TempWrite {
                read_only: true,
                fsync: true,
            },
        )
        .map_err(|error| match error {
            TempError::Store(error) => error,
            TempError::Fsync(path, source) => fsync_failed(&path, self.generation, source),
        })?;
        let placed = place_object(self.fs, &temp, &target, digest, self.generation)?;
        lock(&self.renamed_into).insert(fan_dir);
        Ok((digest, placed))
    }
}

pub(super) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Installs `count` objects from up to [`MAX_OBJECT_IO_THREADS`] threads (RFC 0001 §4:
/// only a writer no hook observes does this): each object's steps 1–3 in order on one
/// thread, objects in no order among themselves. Step 4, an fsync of every fan-out
/// directory an object was renamed into (or found in), comes once for the whole run,
/// before step 5 ([`Writer::commit`]). Fails with the error of the lowest-indexed object
/// that failed (the others stop taking work; nothing is committed). Returns the digests
/// in index order.
pub(super) fn put_objects_concurrently(
    writer: &mut Writer<'_>,
    fs: &(dyn FileSystem + Sync),
    count: usize,
    produce: &(dyn Fn(usize) -> Vec<u8> + Sync),
    progress: &mut dyn Progress,
) -> Result<Vec<Digest>, StoreError> {
    let install = ConcurrentInstall {
        fs,
        root: &writer.root,
        nonce: &writer.nonce,
        generation: writer.generation,
        produce,
        temp_numbers: std::sync::atomic::AtomicU64::new(writer.temp_counter),
        fan_dirs: std::sync::Mutex::new(std::mem::take(&mut writer.durable_fan_dirs)),
        renamed_into: std::sync::Mutex::new(std::collections::BTreeSet::new()),
    };
    let results = crate::core::parallel::run_indexed(
        count,
        MAX_OBJECT_IO_THREADS,
        &|index| install.install(index),
        &mut |done| progress.advance(done),
    );
    writer.temp_counter = install.temp_numbers.into_inner();
    writer.durable_fan_dirs = install
        .fan_dirs
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut digests = Vec::with_capacity(count);
    for (_, result) in results {
        let (digest, placed) = result?;
        match placed {
            Placed::Written => writer.objects_written += 1,
            Placed::Reused => writer.objects_reused += 1,
        }
        digests.push(digest);
    }
    assert_eq!(
        digests.len(),
        count,
        "every object index is taken by exactly one thread, and none failed"
    );
    writer.unsynced_fan_dirs.extend(
        install
            .renamed_into
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    progress.advance(count as u64);
    Ok(digests)
}

/// Most threads a publish generates and hashes objects on.
pub const MAX_HASH_THREADS: usize = 8;

/// Installs `count` objects and returns their digests in index order. A run that may
/// install concurrently ([`Writer::concurrent_fs`]) does so ([`put_objects_concurrently`]);
/// any other installs them in index order (RFC 0001 §4 steps 1–4 for each, every
/// file-system operation issued from this thread, in the same order as a sequential
/// writer), while up to [`MAX_HASH_THREADS`] threads produce and hash the next objects
/// (at most three per thread in flight), and reports every barrier.
pub(super) fn put_objects_pipelined(
    writer: &mut Writer<'_>,
    count: usize,
    produce: &(dyn Fn(usize) -> Vec<u8> + Sync),
    progress: &mut dyn Progress,
) -> Result<Vec<Digest>, StoreError> {
    if let Some(shared) = writer.concurrent_fs() {
        return put_objects_concurrently(writer, shared, count, produce, progress);
    }
    let mut digests = Vec::with_capacity(count);
    crate::core::parallel::ordered_map(
        count,
        crate::core::parallel::worker_count(MAX_HASH_THREADS),
        2,
        |i| {
            let bytes = produce(i);
            let digest = Digest::of(&bytes);
            (bytes, digest)
        },
        |i, (bytes, digest)| {
            writer.put_object_digested(&bytes, digest, false)?;
            digests.push(digest);
            progress.advance(i as u64 + 1);
            Ok::<(), StoreError>(())
        },
    )?;
    Ok(digests)
}
