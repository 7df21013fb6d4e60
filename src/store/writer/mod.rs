//! The writer protocol (RFC 0001 §Writer): objects, manifest, commit record, LATEST, each
//! step followed by its named barrier. A failed fsync aborts the generation.
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::topology::Topology;

use crate::core::progress::{NoProgress, Progress};
use crate::durable::fs::{EntryKind, FileSystem, SyncedWriteError};
use crate::store::barrier::{Barrier, BarrierHook, BarrierSequencer, NoHooks};
use crate::store::codec::{
    commit_rel_path, encode, object_rel_path, parse_commit_name, ManifestRecord, MAX_MANIFEST_BYTES,
};
use crate::store::error::StoreError;
use crate::store::protocol::{
    self, latest_record, Committed, ObjectSource, SourceCheck, WriteSteps,
};
use crate::store::recovery::ObjectCheck;

pub use crate::store::paths::{LATEST_REL_PATH, LAYOUT_DIRS};

mod objects;
mod steps;

pub use objects::*;

/// How many temp names a writer tries before giving up (names left by killed writers are
/// skipped, never reused).
pub const MAX_TEMP_NAME_ATTEMPTS: u32 = 64;

/// What a publish or reshard committed, and how many chunk objects it installed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitSummary {
    /// The commit: generation, kind, digests, topology, step and root.
    #[serde(flatten)]
    pub committed: Committed,
    /// Chunk objects this run installed (not already present).
    pub objects_written: u64,
    /// Chunk objects that were already present and verified.
    pub objects_reused: u64,
}

/// Makes the store layout exist durably: the root and its four directories are created if
/// missing, and the root's parent and the root are fsynced every time — whoever created
/// them. A writer killed between `mkdir` and its fsync leaves a directory that exists but
/// may vanish at power loss; the next writer must not rely on it before making it durable
/// (RFC 0001 §4, "Directories").
pub fn ensure_layout(fs: &dyn FileSystem, root: &Path) -> Result<(), StoreError> {
    let fsync = |path: &Path| {
        fs.fsync_dir(path)
            .map_err(|source| StoreError::FsyncFailed {
                path: path.to_owned(),
                generation: 0,
                source,
            })
    };
    match fs.entry_kind(root).map_err(|e| StoreError::io(root, e))? {
        None | Some(EntryKind::Dir) => {}
        found => {
            return Err(StoreError::NoStore {
                path: root.to_owned(),
                found,
            })
        }
    }
    create_dir_if_missing(fs, root)?;
    // "." for a bare relative root (`--store ckpt`): its entry lives in the current
    // directory, which must be fsynced like any other parent.
    fsync(crate::durable::file::parent_of(root))?;
    for dir in LAYOUT_DIRS {
        create_dir_if_missing(fs, &root.join(dir))?;
    }
    fsync(root)
}

/// Creates `path` if nothing is there; returns whether it did. Not durable by itself.
fn create_dir_if_missing(fs: &dyn FileSystem, path: &Path) -> Result<bool, StoreError> {
    if fs
        .entry_kind(path)
        .map_err(|e| StoreError::io(path, e))?
        .is_some()
    {
        return Ok(false);
    }
    match fs.create_dir(path) {
        Ok(()) => Ok(true),
        // Another thread of a concurrent install created it between the check and here.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

/// Highest generation named in `commits/` plus one (0 for an empty store).
pub fn next_generation(fs: &dyn FileSystem, root: &Path) -> Result<u64, StoreError> {
    protocol::next_generation(&mut Writer::new(fs, root, &mut NoHooks))
}

/// The highest generation named in `commits/`, whether or not its record verifies.
fn highest_commit_name(fs: &dyn FileSystem, root: &Path) -> Result<Option<u64>, StoreError> {
    let commits = root.join("commits");
    let names = match fs.list_dir(&commits) {
        Ok(names) => names,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(StoreError::io(commits, e)),
    };
    Ok(names.iter().filter_map(|n| parse_commit_name(n)).max())
}

/// One run of the writer protocol for one generation.
pub struct Writer<'a> {
    fs: &'a dyn FileSystem,
    root: PathBuf,
    hooks: &'a mut dyn BarrierHook,
    generation: u64,
    barriers: BarrierSequencer,
    nonce: String,
    temp_counter: u64,
    objects_written: u64,
    objects_reused: u64,
    /// Fan-out directories this run has already made durable in `objects/`.
    durable_fan_dirs: std::collections::BTreeSet<PathBuf>,
    /// Fan-out directories a concurrent install renamed objects into (or found them in)
    /// whose fsync, step 4, is still to come: once each, before step 5.
    unsynced_fan_dirs: std::collections::BTreeSet<PathBuf>,
}

impl<'a> Writer<'a> {
    /// A run over the store at `root` that has touched nothing yet; the protocol
    /// ([`crate::store::protocol`]) makes the layout and chooses its generation.
    pub fn new(fs: &'a dyn FileSystem, root: &Path, hooks: &'a mut dyn BarrierHook) -> Self {
        Writer {
            fs,
            root: root.to_owned(),
            hooks,
            generation: 0,
            barriers: BarrierSequencer::new(),
            nonce: String::new(),
            temp_counter: 0,
            objects_written: 0,
            objects_reused: 0,
            durable_fan_dirs: std::collections::BTreeSet::new(),
            unsynced_fan_dirs: std::collections::BTreeSet::new(),
        }
    }

    /// The generation this run claimed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn emit(&mut self, barrier: Barrier, rel_path: &str) -> Result<(), StoreError> {
        self.barriers
            .reach(self.hooks, barrier, rel_path)
            .map_err(|stop| StoreError::Stopped {
                barrier,
                reason: stop.reason,
            })
    }

    /// Writes `bytes` to a new temp file in `staging/` and returns its path (see
    /// [`write_temp_in`]).
    fn write_temp(
        &mut self,
        what: &str,
        bytes: &[u8],
        read_only: bool,
    ) -> Result<PathBuf, StoreError> {
        let counter = &mut self.temp_counter;
        let how = TempWrite {
            read_only,
            fsync: false,
        };
        let next_number = &mut || {
            *counter += 1;
            *counter
        };
        write_temp_in(
            self.fs,
            &self.root,
            &self.nonce,
            what,
            next_number,
            bytes,
            how,
        )
        .map_err(|error| match error {
            TempError::Store(error) => error,
            // Never: this write does not fsync.
            TempError::Fsync(path, source) => fsync_failed(&path, self.generation, source),
        })
    }

    fn fsync_file(&self, path: &Path) -> Result<(), StoreError> {
        self.fs
            .fsync_file(path)
            .map_err(|source| self.fsync_failed(path, source))
    }

    fn fsync_dir(&self, path: &Path) -> Result<(), StoreError> {
        self.fs
            .fsync_dir(path)
            .map_err(|source| self.fsync_failed(path, source))
    }

    fn fsync_failed(&self, path: &Path, source: std::io::Error) -> StoreError {
        fsync_failed(path, self.generation, source)
    }

    /// Makes the fan-out directory `objects/ab/` exist durably before an object is renamed
    /// into it (see [`ensure_fan_dir_in`]).
    fn ensure_fan_dir(&mut self, fan_dir: &Path) -> Result<(), StoreError> {
        ensure_fan_dir_in(
            self.fs,
            &self.root,
            fan_dir,
            &mut self.durable_fan_dirs,
            self.generation,
        )
    }

    /// Step 4 of a concurrent install (RFC 0001 §4, "Concurrent objects"): fsyncs every
    /// fan-out directory its objects were renamed into (or found in), once each, from
    /// several threads, after every object's step 3 and before step 5.
    fn sync_concurrent_fan_dirs(&mut self) -> Result<(), StoreError> {
        let fan_dirs: Vec<PathBuf> = std::mem::take(&mut self.unsynced_fan_dirs)
            .into_iter()
            .collect();
        if fan_dirs.is_empty() {
            return Ok(());
        }
        let generation = self.generation;
        let Some(fs) = self.concurrent_fs() else {
            for fan_dir in &fan_dirs {
                self.fsync_dir(fan_dir)?;
            }
            return Ok(());
        };
        let fsync = |index: usize| {
            fs.fsync_dir(&fan_dirs[index])
                .map_err(|source| fsync_failed(&fan_dirs[index], generation, source))
        };
        let results = crate::core::parallel::run_indexed(
            fan_dirs.len(),
            MAX_OBJECT_IO_THREADS,
            &fsync,
            &mut |_| {},
        );
        for (_, result) in results {
            result?;
        }
        Ok(())
    }

    /// The file system to install objects from several threads through, when this run
    /// may (RFC 0001 §4): no hook observes its barriers, and the file system is one
    /// threads may share (the real one, a recorder that allows threads, or a lab mutant's
    /// over one of those). `None` keeps it sequential.
    fn concurrent_fs(&self) -> Option<&'a (dyn FileSystem + Sync)> {
        if !self.hooks.observes() {
            self.fs.shared()
        } else {
            None
        }
    }

    /// Installs one object whose SHA-256 the caller computed (`digest` MUST be
    /// `Digest::of(bytes)`; the pipelined publish hashes on other threads).
    fn put_object_digested(
        &mut self,
        bytes: &[u8],
        digest: Digest,
        manifest: bool,
    ) -> Result<Digest, StoreError> {
        let [after_write, after_fsync, after_rename, after_dir_fsync] = if manifest {
            [
                Barrier::ManifestAfterWrite,
                Barrier::ManifestAfterFileFsync,
                Barrier::ManifestAfterRename,
                Barrier::ManifestAfterDirectoryFsync,
            ]
        } else {
            [
                Barrier::ObjectAfterWrite,
                Barrier::ObjectAfterFileFsync,
                Barrier::ObjectAfterRename,
                Barrier::ObjectAfterDirectoryFsync,
            ]
        };
        let rel = object_rel_path(&digest);
        let target = self.root.join(&rel);
        let fan_dir = target
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| self.root.join("objects"));
        self.ensure_fan_dir(&fan_dir)?;
        let temp = self.write_temp(if manifest { "manifest" } else { "object" }, bytes, true)?;
        self.emit(after_write, &rel)?;
        self.fsync_file(&temp)?;
        self.emit(after_fsync, &rel)?;
        let placed = place_object(self.fs, &temp, &target, digest, self.generation)?;
        if !manifest {
            match placed {
                Placed::Written => self.objects_written += 1,
                Placed::Reused => self.objects_reused += 1,
            }
        }
        self.emit(after_rename, &rel)?;
        self.fsync_dir(&fan_dir)?;
        self.emit(after_dir_fsync, &rel)?;
        Ok(digest)
    }

    fn install_commit_record(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let rel = commit_rel_path(self.generation);
        let target = self.root.join(&rel);
        let temp = self.write_temp("commit", bytes, true)?;
        self.emit(Barrier::CommitAfterWrite, &rel)?;
        self.fsync_file(&temp)?;
        self.emit(Barrier::CommitAfterFileFsync, &rel)?;
        match self.fs.rename_noreplace(&temp, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let _ = self.fs.remove_file(&temp);
                return Err(StoreError::GenerationTaken {
                    path: target,
                    generation: self.generation,
                });
            }
            Err(e) => return Err(StoreError::io(&target, e)),
        }
        self.emit(Barrier::CommitAfterRename, &rel)?;
        self.fsync_dir(&self.root.join("commits"))?;
        self.emit(Barrier::CommitAfterDirectoryFsync, &rel)
    }

    /// Writes LATEST's `bytes` to a temp file and renames it over `refs/LATEST`.
    fn write_latest(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let target = self.root.join(LATEST_REL_PATH);
        let temp = self.write_temp("latest", bytes, false)?;
        self.emit(Barrier::LatestAfterWrite, LATEST_REL_PATH)?;
        self.fsync_file(&temp)?;
        self.emit(Barrier::LatestAfterFileFsync, LATEST_REL_PATH)?;
        self.fs
            .rename_replace(&temp, &target)
            .map_err(|e| StoreError::io(&target, e))?;
        self.emit(Barrier::LatestAfterRename, LATEST_REL_PATH)?;
        self.fsync_dir(&self.root.join("refs"))?;
        self.emit(Barrier::LatestAfterDirectoryFsync, LATEST_REL_PATH)?;
        Ok(())
    }

    /// Rewrites LATEST alone (used by `--repair-latest`) to name `generation`, whose
    /// commit record recovery verified. `commits/` is fsynced first, so LATEST never names a
    /// record whose name a power cut could still take away (RFC 0001 §6).
    pub fn repair_latest(
        fs: &'a dyn FileSystem,
        root: &Path,
        hooks: &'a mut dyn BarrierHook,
        generation: u64,
        commit_digest: Digest,
    ) -> Result<(), StoreError> {
        // LATEST relies on `staging/` and `refs/` like any publish does.
        ensure_layout(fs, root)?;
        make_commits_durable(fs, root, generation)?;
        let mut writer = Writer::new(fs, root, hooks);
        writer.generation = generation;
        writer.nonce = format!("{}-repair-{generation}", std::process::id());
        writer.write_latest(&encode(&latest_record(generation, commit_digest))?)
    }
}

/// Fsyncs `commits/` so that every commit record name in it is durable. A writer killed
/// between its commit rename and its `commits/` fsync leaves a record that verifies but
/// may vanish at a power cut; whoever acts on a generation it did not write itself (a
/// LATEST repair, a reshard of it, a loader) makes the record durable first (RFC 0001 §6).
pub fn make_commits_durable(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
) -> Result<(), StoreError> {
    let commits = root.join("commits");
    fs.fsync_dir(&commits)
        .map_err(|source| fsync_failed(&commits, generation, source))
}

fn fsync_failed(path: &Path, generation: u64, source: std::io::Error) -> StoreError {
    StoreError::FsyncFailed {
        path: path.to_owned(),
        generation,
        source,
    }
}

/// Publishes a state as the next generation through `fs`.
pub fn publish_with(
    fs: &dyn FileSystem,
    root: &Path,
    state: &LogicalState,
    topology: Topology,
    hooks: &mut dyn BarrierHook,
) -> Result<CommitSummary, StoreError> {
    let topology = Topology::new(topology.workers())?;
    let mut writer = Writer::new(fs, root, hooks);
    let committed = protocol::publish(&mut writer, state, topology, None, &mut NoProgress)?;
    Ok(writer.summary(committed))
}

pub use crate::store::protocol::SyntheticSpec;

/// Publishes `state` plus the synthetic objects of `spec` as the next generation through
/// `fs` (see [`protocol::publish`]): the chunk payloads, then the synthetic objects in
/// order, each by steps 1–4, then the manifest (which lists them), the commit record and
/// LATEST. `progress` gets one phase with a step per object.
#[allow(clippy::too_many_arguments)]
pub fn publish_synthetic_with(
    fs: &dyn FileSystem,
    root: &Path,
    state: &LogicalState,
    topology: Topology,
    spec: SyntheticSpec,
    hooks: &mut dyn BarrierHook,
    progress: &mut dyn Progress,
) -> Result<CommitSummary, StoreError> {
    let topology = Topology::new(topology.workers())?;
    let mut writer = Writer::new(fs, root, hooks);
    let committed = protocol::publish(&mut writer, state, topology, Some(spec), progress)?;
    Ok(writer.summary(committed))
}

/// Offline reshard through `fs` (see [`protocol::reshard`]): checks `generation` (its
/// commit record and manifest in full, its objects as `objects` says: RFC 0001 §7), then
/// commits the next generation with the same chunk objects and the ownership map for
/// `topology`, reporting both phases to `progress`.
pub fn reshard_with(
    fs: &dyn FileSystem,
    root: &Path,
    generation: u64,
    topology: Topology,
    objects: ObjectCheck,
    hooks: &mut dyn BarrierHook,
    progress: &mut dyn Progress,
) -> Result<CommitSummary, StoreError> {
    let topology = Topology::new(topology.workers())?;
    let mut writer = Writer::new(fs, root, hooks);
    let committed = protocol::reshard(&mut writer, generation, topology, objects, progress)?;
    Ok(writer.summary(committed))
}
