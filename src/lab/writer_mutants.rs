//! The crash lab's writer mutants: the store's one correct writer run over [`MutantFs`], a
//! file system that breaks one rule of RFC 0001 §4 on the writer's behalf, so that the
//! store's writer has no fault switch.
//!
//! `MutantFs` knows the store's layout and the writer's temp-file names, and it changes
//! the operations the writer issues, picked by path and by what came before:
//!
//! - an fsync the mutant skips is dropped (`staging/{object,manifest,commit,latest}-*`,
//!   a fan-out directory, `objects/`, `commits/`, `refs/`, the root or its parent). A
//!   fan-out directory's fsync belongs to the kind of the last temp file renamed into it,
//!   and its objects count as *found* when no rename landed there since its last fsync
//!   (one object in a sequential install, all of them in a concurrent one);
//! - a rename into `commits/` is made replacing; a found object's bytes read back as the
//!   temp file's (its check trusted);
//! - the commit record is written in place, or renamed before its fsync: the operations
//!   move between the writer's calls, so every barrier falls where the broken writer
//!   would report it;
//! - object fsyncs are held back and issued right after `commits/` is fsynced;
//! - LATEST is written, from the commit record's bytes, before the record's temp file,
//!   and the writer's own four LATEST operations are dropped.
//!
//! Invariant: with [`WriterFaults::NONE`] every call reaches the inner file system
//! unchanged, and a concurrent install is offered only for the faults it honours
//! ([`WriterFaults::allow_concurrent_install`]).
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::digest::Digest;
use crate::durable::fs::{EntryKind, FileSystem, SyncedWriteError};
use crate::store::codec::{commit_rel_path, decode, encode, CommitRecord};
use crate::store::paths::LATEST_REL_PATH;
use crate::store::protocol::latest_record;

/// Deliberate protocol violations, for tests that show the power-loss checker can fail.
/// Never set outside the lab and its tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterFaults {
    /// Skip the `commits/` fsync after installing the commit record.
    pub skip_commit_directory_fsync: bool,
    /// Advance LATEST before renaming the commit record into `commits/`.
    pub latest_before_commit_rename: bool,
    /// The pre-RFC-0001-§4 writer: fsync a directory into its parent only when this
    /// writer created it, trusting directories a killed writer may have left non-durable.
    pub trust_existing_directories: bool,
    /// Skip the fsync of each chunk object's temp file.
    pub skip_object_file_fsync: bool,
    /// Skip the fsync of the fan-out directory after a chunk object's rename.
    pub skip_object_directory_fsync: bool,
    /// Skip the fsync of `objects/` that makes a fan-out directory durable.
    pub skip_objects_directory_fsync: bool,
    /// Skip the fsync of the manifest's temp file.
    pub skip_manifest_file_fsync: bool,
    /// Skip the fsync of the fan-out directory after the manifest's rename.
    pub skip_manifest_directory_fsync: bool,
    /// Skip the fsync of the commit record's temp file.
    pub skip_commit_file_fsync: bool,
    /// Skip the fsyncs of the store root (and its parent) that make the layout durable.
    pub skip_layout_fsync: bool,
    /// Skip only the fsync of the store root's parent, which makes the root's own entry
    /// durable (the root's fsync still runs).
    pub skip_root_parent_fsync: bool,
    /// A `--repair-latest` that advances LATEST without first fsyncing `commits/`, so
    /// LATEST may name a generation whose record's name is not yet durable.
    pub repair_without_commits_fsync: bool,
    /// Skip the fsync of LATEST's temp file.
    pub skip_latest_file_fsync: bool,
    /// Rename the commit record into `commits/` first and fsync it there afterwards.
    pub commit_rename_before_fsync: bool,
    /// Write the commit record in place in `commits/` (no temp file, no rename).
    pub commit_written_in_place: bool,
    /// Fsync chunk objects (file and fan-out directory) only after the commit is durable.
    pub objects_durable_after_commit: bool,
    /// Keep an object found at its address without fsyncing it: trust a killed writer's
    /// object (whose data may never have reached the disk) to be durable.
    pub skip_found_object_fsync: bool,
    /// Leave the fan-out directory of an object found at its address out of the directory
    /// fsyncs: trust a killed writer's rename into it to be durable.
    pub skip_found_object_directory_fsync: bool,
    /// Keep an object found at its address without checking its bytes: trust whatever
    /// file holds the name to be the object.
    pub skip_found_object_check: bool,
    /// Install the commit record with a rename that replaces: a writer racing for a
    /// generation another already committed overwrites that record.
    pub commit_rename_replaces: bool,
    /// Skip the fsync of `refs/` after LATEST's rename (step 16).
    pub skip_latest_directory_fsync: bool,
}

impl WriterFaults {
    /// Whether a writer with these faults may install objects concurrently (RFC 0001 §4,
    /// "Concurrent objects") when no hook observes it: with no fault, or only the object
    /// fsync faults (of a written or a found object), which [`MutantFs`] applies to a
    /// concurrent install too (so the power-loss model can show it catches a concurrent
    /// writer that skips them). Any other fault keeps the writer sequential.
    pub fn allow_concurrent_install(&self) -> bool {
        let other_faults = WriterFaults {
            skip_object_file_fsync: false,
            skip_object_directory_fsync: false,
            skip_found_object_fsync: false,
            skip_found_object_directory_fsync: false,
            ..*self
        };
        other_faults == WriterFaults::NONE
    }

    /// The correct writer (no fault), usable in constants.
    pub const NONE: WriterFaults = WriterFaults {
        skip_commit_directory_fsync: false,
        latest_before_commit_rename: false,
        trust_existing_directories: false,
        skip_object_file_fsync: false,
        skip_object_directory_fsync: false,
        skip_objects_directory_fsync: false,
        skip_manifest_file_fsync: false,
        skip_manifest_directory_fsync: false,
        skip_commit_file_fsync: false,
        skip_layout_fsync: false,
        skip_root_parent_fsync: false,
        repair_without_commits_fsync: false,
        skip_latest_file_fsync: false,
        commit_rename_before_fsync: false,
        commit_written_in_place: false,
        objects_durable_after_commit: false,
        skip_found_object_fsync: false,
        skip_found_object_directory_fsync: false,
        skip_found_object_check: false,
        commit_rename_replaces: false,
        skip_latest_directory_fsync: false,
    };

    /// Whether the commit record's install is moved (written in place, or renamed before
    /// its fsync): [`MutantFs`] then needs the record's place in `commits/` at its write.
    fn moves_commit_install(&self) -> bool {
        self.commit_written_in_place || self.commit_rename_before_fsync
    }
}

/// A file in `staging/`, by the prefix the writer names it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TempKind {
    Object,
    Manifest,
    Commit,
    Latest,
}

impl TempKind {
    fn of(file_name: &str) -> Option<TempKind> {
        [
            ("object-", TempKind::Object),
            ("manifest-", TempKind::Manifest),
            ("commit-", TempKind::Commit),
            ("latest-", TempKind::Latest),
        ]
        .into_iter()
        .find(|(prefix, _)| file_name.starts_with(prefix))
        .map(|(_, kind)| kind)
    }
}

/// Where a path lies in the store the writer works on.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    RootParent,
    Root,
    Objects,
    FanDir,
    /// An object's address, in the fan-out directory it names.
    Object(PathBuf),
    Temp(TempKind),
    Commits,
    CommitRecord,
    Refs,
    Latest,
    Elsewhere,
}

/// What happened in one fan-out directory since the writer last fsynced it.
#[derive(Clone, Copy, Debug)]
struct FanDirHistory {
    /// The kind of the last temp file renamed into it.
    last_kind: TempKind,
    /// Whether any rename landed there (else its objects were all found).
    landed: bool,
}

/// Where the early LATEST of `latest_before_commit_rename` stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum EarlyLatest {
    #[default]
    NotWritten,
    /// Written; the writer's own LATEST operations still to drop.
    Written { writer_ops_left: u8 },
}

/// The writer's operations so far, as far as a fault depends on them.
#[derive(Debug, Default)]
struct History {
    /// Directories a child directory was created in since their last fsync.
    created_in: BTreeSet<PathBuf>,
    fan_dirs: BTreeMap<PathBuf, FanDirHistory>,
    /// A commit record entered `commits/` since its last fsync.
    commits_entered: bool,
    /// Object fsyncs held back until the commit is durable: (object, fan-out directory).
    deferred: Vec<(PathBuf, PathBuf)>,
    /// `commits/` was fsynced with fsyncs held back: they go before the next operation.
    replay_due: bool,
    /// A moved commit install: the record's temp file and its place in `commits/`.
    commit_temp: Option<(PathBuf, PathBuf)>,
    /// The last no-replace rename that found its target taken: (temp, target).
    found: Option<(PathBuf, PathBuf)>,
    early_latest: EarlyLatest,
}

/// The writer's file system with one writer mutant's faults applied (see the module docs).
pub struct MutantFs<'a> {
    inner: &'a (dyn FileSystem + Sync),
    faults: WriterFaults,
    root: PathBuf,
    root_parent: PathBuf,
    history: Mutex<History>,
}

impl<'a> MutantFs<'a> {
    /// The store at `root` (as the writer is given it) through `inner`, with `faults`.
    pub fn new(inner: &'a (dyn FileSystem + Sync), root: &Path, faults: WriterFaults) -> Self {
        MutantFs {
            inner,
            faults,
            root: root.to_owned(),
            root_parent: crate::durable::file::parent_of(root).to_owned(),
            history: Mutex::new(History::default()),
        }
    }

    fn place(&self, path: &Path) -> Place {
        if path == self.root_parent {
            return Place::RootParent;
        }
        if path == self.root {
            return Place::Root;
        }
        let Some(parent) = path.parent() else {
            return Place::Elsewhere;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if parent == self.root {
            return match name {
                "objects" => Place::Objects,
                "commits" => Place::Commits,
                "refs" => Place::Refs,
                _ => Place::Elsewhere,
            };
        }
        let in_root = |dir: &str| parent == self.root.join(dir);
        if in_root("objects") {
            Place::FanDir
        } else if in_root("staging") {
            TempKind::of(name).map_or(Place::Elsewhere, Place::Temp)
        } else if in_root("commits") {
            Place::CommitRecord
        } else if path == self.root.join(LATEST_REL_PATH) {
            Place::Latest
        } else if parent.parent() == Some(self.root.join("objects").as_path()) {
            Place::Object(parent.to_owned())
        } else {
            Place::Elsewhere
        }
    }

    /// The history, after issuing any object fsyncs held back past the commit.
    fn history(&self) -> std::io::Result<MutexGuard<'_, History>> {
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        if history.replay_due {
            history.replay_due = false;
            for (object, fan_dir) in std::mem::take(&mut history.deferred) {
                self.inner.fsync_file(&object)?;
                self.inner.fsync_dir(&fan_dir)?;
            }
        }
        Ok(history)
    }

    /// Issues the object fsyncs held back past the commit, if their time has come (before
    /// any operation after the `commits/` fsync).
    fn issue_held_back_fsyncs(&self) -> std::io::Result<()> {
        self.history().map(drop)
    }

    /// Drops one of the writer's own LATEST operations after LATEST was written early.
    fn drops_writer_latest_op(history: &mut History) -> bool {
        match &mut history.early_latest {
            EarlyLatest::Written { writer_ops_left } if *writer_ops_left > 0 => {
                *writer_ops_left -= 1;
                true
            }
            _ => false,
        }
    }

    /// `latest_before_commit_rename`: LATEST naming the commit record in `bytes`, written
    /// whole (temp file, fsync, rename, `refs/` fsync) before the record's temp `temp`.
    fn write_latest_early(&self, temp: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let record: CommitRecord = decode(temp, bytes).map_err(std::io::Error::other)?;
        let latest = encode(&latest_record(record.generation, Digest::of(bytes)))
            .map_err(std::io::Error::other)?;
        let name = temp
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("commit-"))
            .unwrap_or("early.tmp");
        let latest_temp = self.root.join("staging").join(format!("latest-{name}"));
        self.inner.write_new_file(&latest_temp, &latest, false)?;
        self.inner.fsync_file(&latest_temp)?;
        self.inner
            .rename_replace(&latest_temp, &self.root.join(LATEST_REL_PATH))?;
        self.inner.fsync_dir(&self.root.join("refs"))
    }

    /// The record's place in `commits/`, read from its bytes.
    fn commit_target(&self, temp: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let record: CommitRecord = decode(temp, bytes).map_err(std::io::Error::other)?;
        Ok(self.root.join(commit_rel_path(record.generation)))
    }

    fn write_commit_temp(&self, temp: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        let mut history = self.history()?;
        if self.faults.latest_before_commit_rename
            && history.early_latest == EarlyLatest::NotWritten
        {
            self.write_latest_early(temp, bytes)?;
            history.early_latest = EarlyLatest::Written { writer_ops_left: 4 };
        }
        if !self.faults.moves_commit_install() {
            return self.inner.write_new_file(temp, bytes, read_only);
        }
        let target = self.commit_target(temp, bytes)?;
        history.commit_temp = Some((temp.to_owned(), target.clone()));
        if self.faults.commit_written_in_place {
            self.inner.write_new_file(&target, bytes, read_only)?;
            history.commits_entered = true;
            return Ok(());
        }
        self.inner.write_new_file(temp, bytes, read_only)
    }

    /// The moved commit install at the writer's fsync of the record's temp file: in place,
    /// the record is fsynced where it already is; renamed early, it goes into `commits/`
    /// first and is fsynced there.
    fn fsync_moved_commit(&self, temp: &Path) -> std::io::Result<()> {
        let mut history = self.history()?;
        let Some((_, target)) = history.commit_temp.clone().filter(|(t, _)| t == temp) else {
            return self.inner.fsync_file(temp);
        };
        if self.faults.commit_rename_before_fsync {
            self.inner.rename_noreplace(temp, &target)?;
            history.commits_entered = true;
        }
        self.inner.fsync_file(&target)
    }

    fn file_fsync_skipped(&self, place: &Place, history: &mut History) -> bool {
        let f = &self.faults;
        match place {
            Place::Temp(TempKind::Object) => {
                f.skip_object_file_fsync || f.objects_durable_after_commit
            }
            Place::Temp(TempKind::Manifest) => f.skip_manifest_file_fsync,
            Place::Temp(TempKind::Commit) => f.skip_commit_file_fsync,
            Place::Temp(TempKind::Latest) => {
                Self::drops_writer_latest_op(history) || f.skip_latest_file_fsync
            }
            // Only an object found at its address is fsynced there.
            Place::Object(_) => f.skip_found_object_fsync,
            _ => false,
        }
    }

    fn dir_fsync_skipped(&self, path: &Path, place: &Place, history: &mut History) -> bool {
        let f = &self.faults;
        let trusted = f.trust_existing_directories && !history.created_in.contains(path);
        match place {
            Place::RootParent => f.skip_layout_fsync || f.skip_root_parent_fsync || trusted,
            Place::Root => f.skip_layout_fsync || trusted,
            Place::Objects => f.skip_objects_directory_fsync || trusted,
            Place::FanDir => match history.fan_dirs.remove(path) {
                None => false,
                Some(fan) => {
                    let found = !fan.landed && f.skip_found_object_directory_fsync;
                    found
                        || match fan.last_kind {
                            TempKind::Manifest => f.skip_manifest_directory_fsync,
                            _ => f.skip_object_directory_fsync || f.objects_durable_after_commit,
                        }
                }
            },
            Place::Commits => {
                if std::mem::take(&mut history.commits_entered) {
                    f.skip_commit_directory_fsync
                } else {
                    f.repair_without_commits_fsync
                }
            }
            Place::Refs => Self::drops_writer_latest_op(history) || f.skip_latest_directory_fsync,
            _ => false,
        }
    }

    /// A no-replace rename of a temp file to an object's address in `fan_dir`: whether it
    /// landed or found the address taken (`result`).
    fn note_object_rename(
        &self,
        history: &mut History,
        (from, to): (&Path, &Path),
        fan_dir: &Path,
        result: &std::io::Result<()>,
    ) {
        let Place::Temp(kind) = self.place(from) else {
            return;
        };
        let fan = history
            .fan_dirs
            .entry(fan_dir.to_owned())
            .or_insert(FanDirHistory {
                last_kind: kind,
                landed: false,
            });
        fan.last_kind = kind;
        fan.landed |= result.is_ok();
        let found = matches!(result, Err(e) if e.kind() == ErrorKind::AlreadyExists);
        history.found = found.then(|| (from.to_owned(), to.to_owned()));
        if kind == TempKind::Object
            && self.faults.objects_durable_after_commit
            && (found || result.is_ok())
        {
            history.deferred.push((to.to_owned(), fan_dir.to_owned()));
        }
    }
}

impl FileSystem for MutantFs<'_> {
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        let mut history = self.history()?;
        self.inner.create_dir(path)?;
        history
            .created_in
            .insert(crate::durable::file::parent_of(path).to_owned());
        Ok(())
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        match self.place(path) {
            Place::Temp(TempKind::Commit) => self.write_commit_temp(path, bytes, read_only),
            Place::Temp(TempKind::Latest)
                if Self::drops_writer_latest_op(&mut *self.history()?) =>
            {
                Ok(())
            }
            _ => {
                self.issue_held_back_fsyncs()?;
                self.inner.write_new_file(path, bytes, read_only)
            }
        }
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        let place = self.place(path);
        if place == Place::Temp(TempKind::Commit) && self.faults.moves_commit_install() {
            return self.fsync_moved_commit(path);
        }
        if self.file_fsync_skipped(&place, &mut *self.history()?) {
            return Ok(());
        }
        self.inner.fsync_file(path)
    }

    fn write_new_file_synced(
        &self,
        path: &Path,
        bytes: &[u8],
        read_only: bool,
    ) -> Result<(), SyncedWriteError> {
        let place = self.place(path);
        let skipped = self.file_fsync_skipped(
            &place,
            &mut *self.history().map_err(SyncedWriteError::Write)?,
        );
        if skipped {
            return self
                .inner
                .write_new_file(path, bytes, read_only)
                .map_err(SyncedWriteError::Write);
        }
        self.inner.write_new_file_synced(path, bytes, read_only)
    }

    fn fsync_dir(&self, path: &Path) -> std::io::Result<()> {
        let place = self.place(path);
        let mut history = self.history()?;
        let skipped = self.dir_fsync_skipped(path, &place, &mut history);
        history.created_in.remove(path);
        if skipped {
            return Ok(());
        }
        self.inner.fsync_dir(path)?;
        if place == Place::Commits && !history.deferred.is_empty() {
            history.replay_due = true;
        }
        Ok(())
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let mut history = self.history()?;
        match self.place(to) {
            Place::CommitRecord => {
                if history
                    .commit_temp
                    .as_ref()
                    .is_some_and(|(temp, _)| temp == from)
                {
                    // Installed already, at the write or the fsync.
                    return Ok(());
                }
                let renamed = if self.faults.commit_rename_replaces {
                    self.inner.rename_replace(from, to)
                } else {
                    self.inner.rename_noreplace(from, to)
                };
                history.commits_entered |= renamed.is_ok();
                renamed
            }
            Place::Object(fan_dir) => {
                let renamed = self.inner.rename_noreplace(from, to);
                self.note_object_rename(&mut history, (from, to), &fan_dir, &renamed);
                renamed
            }
            _ => self.inner.rename_noreplace(from, to),
        }
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let mut history = self.history()?;
        match self.place(to) {
            Place::Latest if Self::drops_writer_latest_op(&mut history) => Ok(()),
            Place::Object(fan_dir) => {
                let renamed = self.inner.rename_replace(from, to);
                if let Some(fan) = history.fan_dirs.get_mut(&fan_dir) {
                    fan.landed |= renamed.is_ok();
                }
                renamed
            }
            _ => self.inner.rename_replace(from, to),
        }
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.issue_held_back_fsyncs()?;
        self.inner.remove_file(path)
    }

    fn read_file(&self, path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
        let history = self.history()?;
        if self.faults.skip_found_object_check {
            if let Some((temp, _)) = history.found.as_ref().filter(|(_, target)| target == path) {
                // The found file's check sees the bytes it expects.
                return self.inner.read_file(temp, cap);
            }
        }
        self.inner.read_file(path, cap)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        self.issue_held_back_fsyncs()?;
        self.inner.list_dir(path)
    }

    fn entry_kind(&self, path: &Path) -> std::io::Result<Option<EntryKind>> {
        self.issue_held_back_fsyncs()?;
        self.inner.entry_kind(path)
    }

    fn regular_file_len(&self, path: &Path) -> std::io::Result<Option<u64>> {
        self.issue_held_back_fsyncs()?;
        self.inner.regular_file_len(path)
    }

    fn regular_file_lens_in(
        &self,
        dir: &Path,
        names: &[&str],
    ) -> std::io::Result<Vec<Option<u64>>> {
        self.issue_held_back_fsyncs()?;
        self.inner.regular_file_lens_in(dir, names)
    }

    fn hash_file(&self, path: &Path, cap: u64) -> std::io::Result<(Digest, u64)> {
        self.issue_held_back_fsyncs()?;
        self.inner.hash_file(path, cap)
    }

    fn shared(&self) -> Option<&(dyn FileSystem + Sync)> {
        if self.faults.allow_concurrent_install() && self.inner.shared().is_some() {
            Some(self)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::topology::Topology;
    use crate::lab::crash_model::trace::TraceOp;
    use crate::lab::powerloss::{MarkingHooks, RecordingFs};
    use crate::store::layout::synthetic_state;
    use crate::store::writer::publish_with;

    /// A recorded run, one line per operation (files named, not numbered): what the
    /// writer issued through `faults`, and the barriers' positions.
    struct Run {
        ops: Vec<String>,
        marks: Vec<(String, usize)>,
    }

    /// Publishes `generations` states (W4, a few small chunks) into a fresh store, the
    /// last one recorded through a [`MutantFs`] with `faults`.
    fn run(faults: WriterFaults, generations: u64) -> Run {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("store");
        let four = Topology::new(4).expect("topology");
        for step in 1..generations {
            let state = synthetic_state(9, step, 64);
            crate::store::publish(&root, &state, four, &mut crate::store::NoHooks)
                .expect("earlier publish");
        }
        let recorder = RecordingFs::new(dir.path()).expect("recorder");
        let mutant = MutantFs::new(&recorder, &root, faults);
        let state = synthetic_state(9, generations, 64);
        publish_with(&mutant, &root, &state, four, &mut MarkingHooks(&recorder)).expect("publish");
        drop(mutant);
        let recording = recorder.finish();
        let mut created = BTreeMap::new();
        let ops = recording
            .trace
            .ops
            .iter()
            .map(|op| match op {
                TraceOp::Create { path, inode } => {
                    created.insert(*inode, path.clone());
                    format!("create {path}")
                }
                TraceOp::Write { inode, .. } => format!("write {}", name_of(&created, *inode)),
                TraceOp::Fsync { inode, .. } => format!("fsync {}", name_of(&created, *inode)),
                TraceOp::FsyncDir { path, .. } => format!("fsync-dir {path}"),
                TraceOp::Rename { from, to, .. } => {
                    if let Some(inode) = created
                        .iter()
                        .find_map(|(inode, path)| (path == from).then_some(*inode))
                    {
                        created.insert(inode, to.clone());
                    }
                    format!("rename {from} -> {to}")
                }
                other => other.describe(),
            })
            .collect();
        let marks = recording
            .marks()
            .map(|(barrier, at)| (barrier.name().to_owned(), at))
            .collect();
        Run { ops, marks }
    }

    /// The name `inode` was last given in a rendered run ("?" before it has one).
    fn name_of(created: &BTreeMap<usize, String>, inode: usize) -> &str {
        created.get(&inode).map_or("?", String::as_str)
    }

    /// The faults of the registered writer mutant `name`.
    fn mutant(name: &str) -> WriterFaults {
        crate::lab::mutants::find(name)
            .expect("registered")
            .faults
            .writer
    }

    fn position(ops: &[String], what: impl Fn(&str) -> bool) -> usize {
        ops.iter()
            .position(|op| what(op))
            .unwrap_or_else(|| panic!("no such operation in {ops:#?}"))
    }

    #[test]
    fn the_correct_writer_passes_through_unchanged() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("store");
        let recorder = RecordingFs::new(dir.path()).expect("recorder");
        let state = synthetic_state(9, 1, 64);
        let four = Topology::new(4).expect("topology");
        publish_with(&recorder, &root, &state, four, &mut MarkingHooks(&recorder))
            .expect("publish");
        let direct = recorder.finish();
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("store");
        let recorder = RecordingFs::new(dir.path()).expect("recorder");
        let mutant = MutantFs::new(&recorder, &root, WriterFaults::NONE);
        publish_with(&mutant, &root, &state, four, &mut MarkingHooks(&recorder)).expect("publish");
        drop(mutant);
        let through = recorder.finish();
        assert_eq!(
            format!("{:?}", direct.trace.ops),
            format!("{:?}", through.trace.ops)
        );
        assert_eq!(direct.trace.data, through.trace.data);
        assert_eq!(direct.barriers, through.barriers);
        assert_eq!(direct.trace.acknowledged_at, through.trace.acknowledged_at);
    }

    /// Each fsync-dropping mutant drops exactly the operations its fault names (and at
    /// least one), and nothing else changes.
    #[test]
    fn each_dropped_fsync_is_the_one_its_fault_names() {
        type Dropped = fn(&str, Option<&str>) -> bool;
        // (the mutant, generations published, whether an operation is dropped given the
        // last rename before it)
        let cases: [(&str, u64, Dropped); 12] = [
            ("skip-layout-fsync", 1, |op, _| {
                op == "fsync-dir " || op == "fsync-dir store"
            }),
            ("skip-root-parent-fsync", 1, |op, _| op == "fsync-dir "),
            ("skip-objects-directory-fsync", 1, |op, _| {
                op == "fsync-dir store/objects"
            }),
            ("reuse-non-durable-directory", 2, |op, _| {
                ["fsync-dir ", "fsync-dir store", "fsync-dir store/objects"].contains(&op)
            }),
            ("skip-object-file-fsync", 1, |op, _| {
                op.starts_with("fsync store/staging/object-")
            }),
            ("skip-object-directory-fsync", 1, |op, last| {
                op.starts_with("fsync-dir store/objects/")
                    && last.is_some_and(|r| r.starts_with("rename store/staging/object-"))
            }),
            ("skip-manifest-file-fsync", 1, |op, _| {
                op.starts_with("fsync store/staging/manifest-")
            }),
            ("skip-manifest-directory-fsync", 1, |op, last| {
                op.starts_with("fsync-dir store/objects/")
                    && last.is_some_and(|r| r.starts_with("rename store/staging/manifest-"))
            }),
            ("skip-commit-file-fsync", 1, |op, _| {
                op.starts_with("fsync store/staging/commit-")
            }),
            ("skip-commits-directory-fsync", 1, |op, _| {
                op == "fsync-dir store/commits"
            }),
            ("skip-latest-file-fsync", 1, |op, _| {
                op.starts_with("fsync store/staging/latest-")
            }),
            ("skip-latest-directory-fsync", 1, |op, _| {
                op == "fsync-dir store/refs"
            }),
        ];
        for (name, generations, dropped) in cases {
            let faults = mutant(name);
            let correct = run(WriterFaults::NONE, generations).ops;
            let mut last_rename = None;
            let mut expected = Vec::new();
            for op in &correct {
                if !dropped(op, last_rename) {
                    expected.push(op.clone());
                }
                if op.starts_with("rename ") {
                    last_rename = Some(op.as_str());
                }
            }
            assert!(expected.len() < correct.len(), "{faults:?} drops nothing");
            assert_eq!(run(faults, generations).ops, expected, "{faults:?}");
        }
    }

    #[test]
    fn a_commit_written_in_place_appears_in_commits_without_a_rename() {
        let faulty = run(mutant("commit-written-in-place"), 1);
        let record = "store/commits/00000000000000000000.json";
        let written = position(&faulty.ops, |op| op == format!("create {record}"));
        let synced = position(&faulty.ops, |op| op == format!("fsync {record}"));
        assert!(written < synced);
        assert!(!faulty.ops.iter().any(|op| op.contains("staging/commit-")));
        let after_write = faulty.marks.iter().find(|(b, _)| b == "commit-after-write");
        // The barrier follows the record's create and the write of its bytes.
        assert_eq!(after_write.map(|(_, at)| *at), Some(written + 2));
    }

    #[test]
    fn a_commit_renamed_before_its_fsync_is_fsynced_in_commits() {
        let faulty = run(mutant("commit-rename-before-fsync"), 1);
        let record = "store/commits/00000000000000000000.json";
        let renamed = position(&faulty.ops, |op| {
            op.starts_with("rename store/staging/commit-") && op.ends_with(record)
        });
        let synced = position(&faulty.ops, |op| op == format!("fsync {record}"));
        assert_eq!(synced, renamed + 1);
        let after_fsync = faulty
            .marks
            .iter()
            .find(|(b, _)| b == "commit-after-file-fsync");
        assert_eq!(after_fsync.map(|(_, at)| *at), Some(synced + 1));
    }

    #[test]
    fn latest_written_early_precedes_the_commit_record_and_is_written_once() {
        let faulty = run(mutant("latest-before-commit"), 1);
        let into_latest: Vec<usize> = (0..faulty.ops.len())
            .filter(|&at| faulty.ops[at].ends_with("-> store/refs/LATEST"))
            .collect();
        let commit_temp = position(&faulty.ops, |op| {
            op.starts_with("create store/staging/commit-")
        });
        assert_eq!(into_latest.len(), 1, "{:#?}", faulty.ops);
        assert!(into_latest[0] < commit_temp);
        assert_eq!(faulty.ops[into_latest[0] + 1], "fsync-dir store/refs");
        let correct = run(WriterFaults::NONE, 1).ops;
        assert_eq!(faulty.ops.len(), correct.len());
    }

    #[test]
    fn objects_made_durable_after_the_commit_are_fsynced_right_after_commits() {
        let faulty = run(mutant("objects-durable-after-commit"), 1);
        let commits_synced = position(&faulty.ops, |op| op == "fsync-dir store/commits");
        let objects = faulty
            .ops
            .iter()
            .filter(|op| op.starts_with("rename store/staging/object-"))
            .count();
        let replayed = &faulty.ops[commits_synced + 1..commits_synced + 1 + 2 * objects];
        for pair in replayed.chunks(2) {
            assert!(pair[0].starts_with("fsync store/objects/"), "{pair:?}");
            assert!(pair[1].starts_with("fsync-dir store/objects/"), "{pair:?}");
        }
        assert!(!faulty.ops[..commits_synced]
            .iter()
            .any(|op| op.starts_with("fsync store/staging/object-")));
        assert_eq!(faulty.ops.len(), run(WriterFaults::NONE, 1).ops.len());
    }
}
