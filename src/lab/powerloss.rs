//! The power-loss model: record every file-system effect of a writer run, then rebuild
//! the states a power cut could leave (ALICE-style) and check recovery on each.
//!
//! Model (RFC 0001 §8, "Power loss"):
//! - a file's data is durable once the file is fsynced; before that a crash may leave it
//!   whole, empty, short (cut at a 512- or 4096-byte boundary) or zero-filled (its size
//!   persisted, all data or its last 4 KiB sector not);
//! - a create, mkdir, rename or remove is durable once the directory holding the new
//!   entry is fsynced; before that it may or may not have happened (any subset of the
//!   pending operations, applied in program order; a rename is atomic);
//! - an entry whose parent directory is absent is lost;
//! - the recorded directory itself is durable. The crash matrix records the store root's
//!   parent ([`RecordingFs::with_store_at`]), so the root's own entry is modelled: a
//!   writer that creates the root and never fsyncs its parent can lose the whole store.
//!
//! Torn data is modelled file by file: in the namespace where every pending operation
//! happened, each volatile file alone is short or zero-filled (the others whole), and
//! every volatile file is empty at once; elsewhere volatile files are whole or all
//! empty.
//!
//! Crash points: every operation boundary. Subsets of pending operations: all when there
//! are at most `EnumerationLimits::all_subsets_up_to` (10 for most scenarios, 4 for the
//! concurrent install, `matrix::CONCURRENT_LIMITS`, whose renames all stay pending until
//! its one directory-fsync step), else every prefix, every omit-one and seeded samples.
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::core::digest::{Digest, FramedHasher};
use crate::core::rng::SplitMix64;

use crate::durable::fs::{EntryKind, FileSystem, RealFs};
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, HookStop};

/// Names and what they hold, before data variants are chosen.
type Namespace = BTreeMap<String, Node>;

/// A namespace and its volatile files (path, inode): what one expansion into data
/// variants depends on.
type Expansion = (Namespace, Vec<(String, usize)>);

/// The writer's scratch directory, which recovery never reads.
const STAGING_DIR: &str = "staging";

/// One recorded file-system effect (paths relative to the recorded directory, the store
/// root or its parent, `/`-separated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A directory created.
    Mkdir {
        /// The directory.
        path: String,
    },
    /// A file created and written whole (one `write_new_file`).
    Create {
        /// The file.
        path: String,
        /// Its inode: an index into [`Recording::inodes`].
        inode: usize,
    },
    /// A file's data made durable.
    FsyncFile {
        /// The file's inode.
        inode: usize,
    },
    /// A directory's entries made durable.
    FsyncDir {
        /// The directory (`""` for the recorded directory).
        path: String,
    },
    /// A file renamed (with or without replacing the target).
    Rename {
        /// The old name.
        from: String,
        /// The new name.
        to: String,
        /// The renamed file's inode.
        inode: usize,
    },
    /// A file removed.
    Remove {
        /// The file.
        path: String,
    },
}

impl Op {
    /// The directory whose fsync makes this metadata operation durable.
    fn durable_in(&self) -> Option<&str> {
        match self {
            Op::Mkdir { path } | Op::Create { path, .. } | Op::Remove { path } => {
                Some(parent(path))
            }
            Op::Rename { to, .. } => Some(parent(to)),
            Op::FsyncFile { .. } | Op::FsyncDir { .. } => None,
        }
    }
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Node {
    Dir,
    File(usize),
}

#[derive(Default)]
struct Log {
    ops: Vec<Op>,
    names: HashMap<String, Node>,
    inodes: Vec<Vec<u8>>,
    marks: Vec<(Barrier, usize)>,
}

/// A recorded writer run.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The image before the run (all durable).
    pub initial: BTreeMap<String, ImageEntry>,
    /// The operations, in the order issued.
    pub ops: Vec<Op>,
    /// File contents by inode (each file is written once, at create).
    pub inodes: Vec<Vec<u8>>,
    /// Each barrier event and how many operations had been issued when it was reached.
    pub marks: Vec<(Barrier, usize)>,
    /// How many of `ops` an earlier, killed writer issued before the run (its non-durable
    /// directories and files; see [`RecordingFs::with_non_durable_entries`]).
    pub pre_run_ops: usize,
    /// The store root's path relative to the recorded directory (`""`: the recorded
    /// directory is the store root; see [`RecordingFs::with_store_at`]).
    pub store: String,
}

/// How much of its files a killed writer had made durable (see
/// [`RecordingFs::with_non_durable_entries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KilledWriterFiles {
    /// Each file's data was fsynced, its name not: RFC 0001 §4's writer killed between
    /// an object's rename (step 3) and its directory's fsync (step 4).
    DataSynced,
    /// Nothing was fsynced: a writer that skipped its fsyncs, or a copy of a store, whose
    /// files' data and names a power cut may both lose.
    NothingSynced,
}

/// A file-system implementation that performs every operation on a real directory and
/// records it.
pub struct RecordingFs {
    root: PathBuf,
    /// Locked for each operation from before it is performed until it is logged, so the
    /// log is the order in which the operations happened, whatever thread issued them.
    log: std::sync::Mutex<Log>,
    initial: BTreeMap<String, ImageEntry>,
    /// Whether threads may share it ([`FileSystem::shared`]): the store's writer then
    /// installs objects concurrently when no hook needs their barriers.
    threads_allowed: bool,
    /// Operations at the start of the log that an earlier, killed writer issued.
    pre_run_ops: usize,
    /// The store root relative to `root` (`""`: `root` is the store root).
    store: String,
}

/// One entry of a crash image: a directory, or a file holding the first `len` bytes of
/// an inode's data, with bytes from `zeroed_from` on read as zeros (the size reached the
/// disk, those data blocks did not).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImageEntry {
    /// A directory.
    Dir,
    /// A file.
    File {
        /// Its inode in the recording.
        inode: usize,
        /// Bytes of the inode's data it holds (the first ones).
        len: usize,
        /// Offset from which its bytes read as zeros, if any.
        zeroed_from: Option<usize>,
    },
}

/// A crash image: relative path → entry.
pub type Image = BTreeMap<String, ImageEntry>;

impl RecordingFs {
    /// Starts recording on an existing directory; its current contents are the durable
    /// initial image.
    pub fn new(root: &Path) -> std::io::Result<Self> {
        let mut log = Log::default();
        let mut initial = BTreeMap::new();
        for entry in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
            let entry = entry.map_err(std::io::Error::other)?;
            let rel = rel_string(root, entry.path())
                .ok_or_else(|| std::io::Error::other("path outside root"))?;
            if entry.file_type().is_dir() {
                log.names.insert(rel.clone(), Node::Dir);
                initial.insert(rel, ImageEntry::Dir);
            } else if entry.file_type().is_file() {
                let data = std::fs::read(entry.path())?;
                let inode = log.inodes.len();
                initial.insert(
                    rel.clone(),
                    ImageEntry::File {
                        inode,
                        len: data.len(),
                        zeroed_from: None,
                    },
                );
                log.inodes.push(data);
                log.names.insert(rel, Node::File(inode));
            }
        }
        Ok(RecordingFs {
            root: root.to_owned(),
            log: std::sync::Mutex::new(log),
            initial,
            threads_allowed: false,
            pre_run_ops: 0,
            store: String::new(),
        })
    }

    /// Starts recording on an existing directory whose listed sub-directories (relative,
    /// `/`-separated, empty, each existing) were created by an earlier writer that was
    /// killed before fsyncing their parents: they are not part of the durable initial
    /// image but pending `mkdir`s issued before the run, so a power cut may undo them
    /// unless this run makes them durable.
    pub fn with_non_durable_dirs(root: &Path, non_durable_dirs: &[&str]) -> std::io::Result<Self> {
        RecordingFs::with_non_durable_entries(
            root,
            non_durable_dirs,
            &[],
            KilledWriterFiles::DataSynced,
        )
    }

    /// Starts recording on an existing directory where an earlier writer, killed before it
    /// fsynced their parents, left `non_durable_dirs` (as in
    /// [`Self::with_non_durable_dirs`], empty but for listed files) and `non_durable_files`
    /// (relative, `/`-separated, each an existing file). Each such file is a pending create
    /// issued before the run: a power cut may drop its name until this run fsyncs its
    /// directory, and with [`KilledWriterFiles::NothingSynced`] its data may be lost or
    /// torn until this run fsyncs the file itself.
    pub fn with_non_durable_entries(
        root: &Path,
        non_durable_dirs: &[&str],
        non_durable_files: &[&str],
        synced: KilledWriterFiles,
    ) -> std::io::Result<Self> {
        let mut recorder = RecordingFs::new(root)?;
        let mut dirs: Vec<&str> = non_durable_dirs.to_vec();
        dirs.sort_unstable();
        let mut files: Vec<&str> = non_durable_files.to_vec();
        files.sort_unstable();
        let mut initial = std::mem::take(&mut recorder.initial);
        let mut pending_ops = Vec::with_capacity(dirs.len() + files.len());
        for file in files {
            match initial.remove(file) {
                Some(ImageEntry::File { inode, .. }) => {
                    // Synced data came first: the writer fsynced a temp file, then renamed
                    // it here (the temp name in `staging/` is not modelled).
                    if synced == KilledWriterFiles::DataSynced {
                        pending_ops.push(Op::FsyncFile { inode });
                    }
                    pending_ops.push(Op::Create {
                        path: file.to_owned(),
                        inode,
                    });
                }
                _ => {
                    return Err(std::io::Error::other(format!(
                        "{file} is not a file of the initial image"
                    )))
                }
            }
        }
        let mut dir_ops = Vec::with_capacity(dirs.len());
        for dir in &dirs {
            if initial.remove(*dir) != Some(ImageEntry::Dir) {
                return Err(std::io::Error::other(format!(
                    "{dir} is not a directory of the initial image"
                )));
            }
        }
        // Listed directories may nest (a killed writer's root and the layout in it).
        for dir in dirs {
            let prefix = format!("{dir}/");
            if initial.keys().any(|k| k.starts_with(&prefix)) {
                return Err(std::io::Error::other(format!(
                    "{dir} holds durable entries; only directories holding nothing but \
                     non-durable files are modelled"
                )));
            }
            dir_ops.push(Op::Mkdir {
                path: dir.to_owned(),
            });
        }
        // Program order: each directory before the files created in it.
        dir_ops.append(&mut pending_ops);
        recorder.pre_run_ops = dir_ops.len();
        recorder.lock_log().ops = dir_ops;
        recorder.initial = initial;
        Ok(recorder)
    }

    /// Names the store root the writer under recording uses: `store`, relative to the
    /// recorded directory (`/`-separated, one entry of it or deeper). Recording the store's
    /// parent puts the root's own entry in the model: a writer creates it under recording,
    /// and a power cut loses it unless the parent is fsynced (RFC 0001 §4,
    /// "Directories"). Paths inside `staging/` are then those under `store/staging/`.
    pub fn with_store_at(mut self, store: &str) -> Self {
        self.store = store.trim_matches('/').to_owned();
        self
    }

    /// `path` as the real file system sees it: a relative path names an entry of the
    /// recorded directory, as if that were the working directory (so a writer given the
    /// bare relative root `store` works there, and its "." is the recorded directory).
    fn resolve(&self, path: &Path) -> PathBuf {
        let joined = if path.is_relative() {
            self.root.join(path)
        } else {
            path.to_owned()
        };
        joined
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect()
    }

    fn rel(&self, path: &Path) -> std::io::Result<String> {
        rel_string(&self.root, &self.resolve(path))
            .ok_or_else(|| std::io::Error::other("path outside the recorded root"))
    }

    /// Lets threads share this recorder, so a writer that may install objects
    /// concurrently (RFC 0001 §4) does so here too; its log is one interleaving.
    pub fn allowing_threads(mut self) -> Self {
        self.threads_allowed = true;
        self
    }

    /// Whether threads may share this recorder.
    pub fn allows_threads(&self) -> bool {
        self.threads_allowed
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes that a barrier was reached (after the operations issued so far).
    pub fn mark(&self, barrier: Barrier) {
        let mut log = self.lock_log();
        let at = log.ops.len();
        log.marks.push((barrier, at));
    }

    /// The recording, once the run is over.
    pub fn finish(self) -> Recording {
        let log = self
            .log
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Recording {
            initial: self.initial,
            ops: log.ops,
            inodes: log.inodes,
            marks: log.marks,
            pre_run_ops: self.pre_run_ops,
            store: self.store,
        }
    }
}

fn rel_string(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let text = rel.to_str()?;
    Some(text.trim_end_matches('/').to_owned())
}

impl FileSystem for RecordingFs {
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        RealFs.create_dir(&self.resolve(path))?;
        log.names.insert(rel.clone(), Node::Dir);
        log.ops.push(Op::Mkdir { path: rel });
        Ok(())
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        RealFs.write_new_file(&self.resolve(path), bytes, read_only)?;
        let inode = log.inodes.len();
        log.inodes.push(bytes.to_vec());
        log.names.insert(rel.clone(), Node::File(inode));
        log.ops.push(Op::Create { path: rel, inode });
        Ok(())
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        match log.names.get(&rel) {
            Some(Node::File(inode)) => {
                let inode = *inode;
                log.ops.push(Op::FsyncFile { inode });
                Ok(())
            }
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        }
    }

    fn fsync_dir(&self, path: &Path) -> std::io::Result<()> {
        // The recorded directory itself is durable by assumption (the model images only
        // what is below it), so fsyncing one of its ancestors changes nothing the model
        // sees.
        let path = self.resolve(path);
        if self.root.starts_with(&path) && self.root != path {
            return RealFs.fsync_dir(&path);
        }
        let path = path.as_path();
        let rel = self.rel(path)?;
        self.lock_log().ops.push(Op::FsyncDir { path: rel });
        Ok(())
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let (rel_from, rel_to) = (self.rel(from)?, self.rel(to)?);
        let mut log = self.lock_log();
        RealFs.rename_noreplace(&self.resolve(from), &self.resolve(to))?;
        note_rename(&mut log, rel_from, rel_to);
        Ok(())
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let (rel_from, rel_to) = (self.rel(from)?, self.rel(to)?);
        let mut log = self.lock_log();
        RealFs.rename_replace(&self.resolve(from), &self.resolve(to))?;
        note_rename(&mut log, rel_from, rel_to);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        RealFs.remove_file(&self.resolve(path))?;
        log.names.remove(&rel);
        log.ops.push(Op::Remove { path: rel });
        Ok(())
    }

    fn read_file(&self, path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
        RealFs.read_file(&self.resolve(path), cap)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        RealFs.list_dir(&self.resolve(path))
    }

    fn entry_kind(&self, path: &Path) -> std::io::Result<Option<EntryKind>> {
        RealFs.entry_kind(&self.resolve(path))
    }

    fn regular_file_len(&self, path: &Path) -> std::io::Result<Option<u64>> {
        RealFs.regular_file_len(&self.resolve(path))
    }

    fn regular_file_lens_in(
        &self,
        dir: &Path,
        names: &[&str],
    ) -> std::io::Result<Vec<Option<u64>>> {
        RealFs.regular_file_lens_in(&self.resolve(dir), names)
    }

    fn shared(&self) -> Option<&(dyn FileSystem + Sync)> {
        self.threads_allowed.then_some(self)
    }
}

fn note_rename(log: &mut Log, from: String, to: String) {
    if let Some(Node::File(inode)) = log.names.remove(&from) {
        log.names.insert(to.clone(), Node::File(inode));
        log.ops.push(Op::Rename { from, to, inode });
    }
}

/// Hooks that mark barriers in a recording.
pub struct MarkingHooks<'a>(pub &'a RecordingFs);

impl BarrierHook for MarkingHooks<'_> {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        self.0.mark(event.barrier);
        Ok(())
    }

    /// Marks are only needed for the commit barriers, which every writer reports; a
    /// recorder that allows threads lets the writer install objects concurrently.
    fn observes(&self) -> bool {
        !self.0.allows_threads()
    }
}

/// How many crash images to derive, and how to sample.
#[derive(Clone, Copy, Debug)]
pub struct EnumerationLimits {
    /// Enumerate all subsets when at most this many operations are pending.
    pub all_subsets_up_to: usize,
    /// Seeded random subsets per crash point when there are more.
    pub samples: usize,
    /// Seed of the sampled subsets.
    pub seed: u64,
}

impl Default for EnumerationLimits {
    fn default() -> Self {
        EnumerationLimits {
            all_subsets_up_to: 10,
            samples: 16,
            seed: 0x5eed,
        }
    }
}

/// What [`Recording::crash_states_counted`] enumerated: per crash point (every operation
/// boundary), the subsets of its pending operations it applied, out of all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Enumeration {
    /// Crash points (operation boundaries, the start included).
    pub crash_points: u64,
    /// Most operations pending at one crash point.
    pub max_pending: u64,
    /// Whether some crash point had more pending operations than
    /// [`EnumerationLimits::all_subsets_up_to`], so only some of its subsets were applied
    /// (prefixes, all-but-one and seeded samples): the enumeration is then not exhaustive.
    pub sampled: bool,
    /// Distinct subsets of pending operations applied, summed over the crash points.
    pub subsets_checked: u64,
    /// Subsets of pending operations there are, summed over the crash points (2^pending
    /// each), saturating at `u64::MAX`. Equal to `subsets_checked` when not `sampled`.
    pub subsets_total: u64,
}

impl Enumeration {
    fn add_crash_point(&mut self, pending: usize, tried: usize, limits: EnumerationLimits) {
        self.crash_points += 1;
        self.max_pending = self.max_pending.max(pending as u64);
        self.sampled |= pending > limits.all_subsets_up_to;
        self.subsets_checked = self.subsets_checked.saturating_add(tried as u64);
        let all = if pending < 64 {
            1u64 << pending
        } else {
            u64::MAX
        };
        self.subsets_total = self.subsets_total.saturating_add(all);
    }
}

/// A crash image together with the crash point it came from.
#[derive(Clone, Debug)]
pub struct CrashState {
    /// Operations issued before the crash.
    pub crash_point: usize,
    /// The image recovery is run on.
    pub image: Image,
}

impl Recording {
    /// `path` (relative to the recorded directory) relative to the store root, if it is
    /// the root or below it.
    pub fn in_store<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.store.is_empty() {
            return Some(path);
        }
        if path == self.store {
            return Some("");
        }
        path.strip_prefix(self.store.as_str())?.strip_prefix('/')
    }

    /// `rel` (relative to the store root, `/`-separated) relative to the recorded
    /// directory.
    pub fn store_path(&self, rel: &str) -> String {
        match (self.store.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_owned(),
            (false, true) => self.store.clone(),
            (false, false) => format!("{}/{rel}", self.store),
        }
    }

    /// Whether `path` (relative to the recorded directory) is the store's `staging/` or
    /// inside it: recovery never reads there.
    fn in_staging(&self, path: &str) -> bool {
        self.in_store(path)
            .is_some_and(|rel| rel == STAGING_DIR || rel.starts_with("staging/"))
    }

    /// Whether an image holds the store root (a directory).
    pub fn has_store_root(&self, image: &Image) -> bool {
        self.store.is_empty() || image.get(&self.store) == Some(&ImageEntry::Dir)
    }

    /// Whether `inode` is a file of the durable starting image (not written by the run nor
    /// by a killed writer before it).
    pub fn is_initial_inode(&self, inode: usize) -> bool {
        self.initial
            .values()
            .any(|entry| matches!(entry, ImageEntry::File { inode: i, .. } if *i == inode))
    }

    /// Whether the file `inode` is one an earlier, killed writer left before the run
    /// (a pre-run create) whose data no operation of `ops[..crash_point]` fsynced: its
    /// torn bytes are that writer's, not the run's.
    pub fn torn_by_earlier_writer(&self, inode: usize, crash_point: usize) -> bool {
        let pre_run = &self.ops[..self.pre_run_ops.min(self.ops.len())];
        let created_before = pre_run
            .iter()
            .any(|op| matches!(op, Op::Create { inode: i, .. } if *i == inode));
        if !created_before {
            return false;
        }
        !self.ops[..crash_point.min(self.ops.len())]
            .iter()
            .any(|op| matches!(op, Op::FsyncFile { inode: i } if *i == inode))
    }

    /// Every distinct crash image over all crash points, pending subsets and data variants.
    pub fn crash_states(&self, limits: EnumerationLimits) -> Vec<CrashState> {
        self.crash_states_counted(limits).0
    }

    /// As [`Recording::crash_states`], with what was enumerated to get them.
    pub fn crash_states_counted(
        &self,
        limits: EnumerationLimits,
    ) -> (Vec<CrashState>, Enumeration) {
        let mut enumeration = Enumeration::default();
        // Each image once, at the latest crash point that produces it: the checks that
        // depend on the crash point (a generation must survive once its commits/ fsync was
        // issued) are strictest there.
        let mut seen: HashMap<Image, usize> = HashMap::new();
        // A namespace with the same volatile files yields the same data variants wherever
        // it recurs, so each is expanded once; where it recurs, its images move to the
        // later crash point.
        let mut expanded: HashMap<Expansion, Vec<usize>> = HashMap::new();
        let mut out: Vec<CrashState> = Vec::new();
        let mut rng = SplitMix64::keyed(limits.seed, "shardlift/powerloss/subsets", 0);
        for crash_point in 0..=self.ops.len() {
            let prefix = &self.ops[..crash_point];
            let (durable, pending) = self.classify(prefix);
            let tried = subsets(pending.len(), limits, &mut rng);
            enumeration.add_crash_point(pending.len(), tried.len(), limits);
            for subset in tried {
                let chosen: HashSet<usize> = subset.iter().map(|&i| pending[i]).collect();
                let namespace = self.apply(prefix, &durable, &chosen);
                let volatile = self.volatile_files(prefix, &namespace);
                let key = (namespace, volatile);
                if let Some(indices) = expanded.get(&key) {
                    for &index in indices {
                        out[index].crash_point = crash_point;
                    }
                    continue;
                }
                let every_pending_applied = subset.len() == pending.len();
                let mut indices = Vec::new();
                for image in self.data_variants(&key.0, &key.1, every_pending_applied) {
                    let index = match seen.get(&image) {
                        Some(&index) => {
                            out[index].crash_point = crash_point;
                            index
                        }
                        None => {
                            seen.insert(image.clone(), out.len());
                            out.push(CrashState { crash_point, image });
                            out.len() - 1
                        }
                    };
                    indices.push(index);
                }
                expanded.insert(key, indices);
            }
        }
        (out, enumeration)
    }

    /// Which metadata ops of the prefix are durable, and the indices of pending ones.
    /// Pending operations on names inside `staging/` are applied in every image instead of
    /// multiplying images: recovery never looks there (RFC 0001 §5; the scenarios start
    /// from a `staging/` holding a killed writer's garbage to show it), so images that
    /// differ only there are one state to recovery.
    fn classify(&self, prefix: &[Op]) -> (Vec<bool>, Vec<usize>) {
        let mut durable = vec![false; prefix.len()];
        let mut pending = Vec::new();
        for (i, op) in prefix.iter().enumerate() {
            let Some(dir) = op.durable_in() else {
                continue;
            };
            if self.in_staging(dir) {
                durable[i] = true;
                continue;
            }
            let synced = prefix[i + 1..]
                .iter()
                .any(|later| matches!(later, Op::FsyncDir { path } if path == dir));
            if synced {
                durable[i] = true;
            } else {
                pending.push(i);
            }
        }
        (durable, pending)
    }

    fn apply(
        &self,
        prefix: &[Op],
        durable: &[bool],
        chosen: &HashSet<usize>,
    ) -> BTreeMap<String, Node> {
        let mut names: BTreeMap<String, Node> = self
            .initial
            .iter()
            .map(|(k, v)| {
                let node = match v {
                    ImageEntry::Dir => Node::Dir,
                    ImageEntry::File { inode, .. } => Node::File(*inode),
                };
                (k.clone(), node)
            })
            .collect();
        for (i, op) in prefix.iter().enumerate() {
            if !(durable[i] || chosen.contains(&i)) {
                continue;
            }
            match op {
                Op::Mkdir { path } => {
                    names.insert(path.clone(), Node::Dir);
                }
                Op::Create { path, inode } => {
                    names.insert(path.clone(), Node::File(*inode));
                }
                Op::Rename { from, to, inode } => {
                    if names.get(from) == Some(&Node::File(*inode)) {
                        names.remove(from);
                    }
                    names.insert(to.clone(), Node::File(*inode));
                }
                Op::Remove { path } => {
                    names.remove(path);
                }
                Op::FsyncFile { .. } | Op::FsyncDir { .. } => {}
            }
        }
        // Entries whose parent directory is absent are lost (BTreeMap order visits
        // parents before children).
        let mut reachable: BTreeMap<String, Node> = BTreeMap::new();
        for (path, node) in names {
            let p = parent(&path);
            if p.is_empty() || reachable.get(p) == Some(&Node::Dir) {
                reachable.insert(path, node);
            }
        }
        reachable
    }

    /// Files of `names` whose data a crash may lose or tear: created by this run and not
    /// fsynced in `prefix`. Files in `staging/` are left whole: recovery never reads them.
    fn volatile_files(
        &self,
        prefix: &[Op],
        names: &BTreeMap<String, Node>,
    ) -> Vec<(String, usize)> {
        let initial_inodes: HashSet<usize> = self
            .initial
            .values()
            .filter_map(|e| match e {
                ImageEntry::File { inode, .. } => Some(*inode),
                ImageEntry::Dir => None,
            })
            .collect();
        let synced: HashSet<usize> = prefix
            .iter()
            .filter_map(|op| match op {
                Op::FsyncFile { inode } => Some(*inode),
                _ => None,
            })
            .collect();
        names
            .iter()
            .filter_map(|(path, node)| match node {
                Node::File(inode)
                    if !initial_inodes.contains(inode)
                        && !synced.contains(inode)
                        && !self.in_staging(path) =>
                {
                    Some((path.clone(), *inode))
                }
                _ => None,
            })
            .collect()
    }

    /// The images of one namespace: every file whole, every volatile file empty, and (with
    /// `each_torn`) each volatile file alone short or zero-filled. Each-torn variants are
    /// taken where every pending operation happened, the namespace with the most names
    /// visible; tearing them in every subset too multiplies images past what a run can
    /// check while showing recovery the same torn files.
    fn data_variants(
        &self,
        names: &BTreeMap<String, Node>,
        volatile: &[(String, usize)],
        each_torn: bool,
    ) -> Vec<Image> {
        let full: Image = names
            .iter()
            .map(|(path, node)| {
                let entry = match node {
                    Node::Dir => ImageEntry::Dir,
                    Node::File(inode) => ImageEntry::File {
                        inode: *inode,
                        len: self.inodes[*inode].len(),
                        zeroed_from: None,
                    },
                };
                (path.clone(), entry)
            })
            .collect();
        let mut variants = vec![full.clone()];
        let mut all_empty = full.clone();
        for (path, inode) in volatile {
            let len = self.inodes[*inode].len();
            let file = |len, zeroed_from| ImageEntry::File {
                inode: *inode,
                len,
                zeroed_from,
            };
            // Short: only the first sectors (or none) reached the disk.
            let mut lengths = vec![0usize];
            for boundary in [512usize, 4096] {
                if len > boundary {
                    lengths.push((len - 1) / boundary * boundary);
                }
            }
            lengths.sort_unstable();
            lengths.dedup();
            let mut torn: Vec<ImageEntry> = lengths.into_iter().map(|l| file(l, None)).collect();
            // Zero-filled: the size reached the disk, the last 4 KiB sector's data (or all
            // of it) did not.
            if len > 0 {
                torn.push(file(len, Some(0)));
                if len > 4096 {
                    torn.push(file(len, Some((len - 1) / 4096 * 4096)));
                }
            }
            for entry in torn.into_iter().filter(|_| each_torn) {
                let mut image = full.clone();
                image.insert(path.clone(), entry);
                variants.push(image);
            }
            all_empty.insert(path.clone(), file(0, None));
        }
        if volatile.len() > 1 {
            variants.push(all_empty);
        }
        variants
    }

    /// What recovery can see of an image: every entry outside `staging/` with its kind and
    /// bytes. Two images with the same digest are one state to recovery.
    pub fn visible_digest(&self, image: &Image) -> Digest {
        let mut hasher = FramedHasher::new("shardlift/powerloss/visible-image/v1");
        for (path, entry) in image {
            if self.in_staging(path) {
                continue;
            }
            hasher.field(path.as_bytes());
            match entry {
                ImageEntry::Dir => {
                    hasher.field(b"<dir>");
                }
                ImageEntry::File { .. } => {
                    match self.file_bytes(image, path) {
                        Some(bytes) => hasher.field(&bytes),
                        None => hasher.field(b"<bad inode>"),
                    };
                }
            }
        }
        hasher.finish()
    }

    /// The bytes an image holds at `path`, if it is a file.
    pub fn file_bytes<'a>(&'a self, image: &Image, path: &str) -> Option<Cow<'a, [u8]>> {
        match image.get(path)? {
            ImageEntry::File {
                inode,
                len,
                zeroed_from,
            } => {
                let bytes = self.inodes.get(*inode)?.get(..*len)?;
                match zeroed_from {
                    None => Some(Cow::Borrowed(bytes)),
                    Some(from) => {
                        let mut owned = bytes.to_vec();
                        owned.get_mut(*from..)?.fill(0);
                        Some(Cow::Owned(owned))
                    }
                }
            }
            ImageEntry::Dir => None,
        }
    }

    /// Writes an image as a real directory tree under `dir` (which must exist, empty).
    pub fn materialize(&self, image: &Image, dir: &Path) -> std::io::Result<()> {
        for (path, entry) in image {
            let target = dir.join(path);
            match entry {
                ImageEntry::Dir => std::fs::create_dir(&target)?,
                ImageEntry::File { .. } => {
                    let data = self
                        .file_bytes(image, path)
                        .ok_or_else(|| std::io::Error::other("bad inode"))?;
                    std::fs::write(&target, data)?;
                }
            }
        }
        Ok(())
    }

    /// Operation count at the first occurrence of `barrier`, if reached.
    pub fn mark_of(&self, barrier: Barrier) -> Option<usize> {
        self.marks
            .iter()
            .find(|(b, _)| *b == barrier)
            .map(|(_, at)| *at)
    }
}

/// Index subsets of `0..n` to try.
pub(crate) fn subsets(
    n: usize,
    limits: EnumerationLimits,
    rng: &mut SplitMix64,
) -> Vec<Vec<usize>> {
    if n <= limits.all_subsets_up_to {
        return (0u32..(1u32 << n))
            .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
            .collect();
    }
    let mut out: Vec<Vec<usize>> = (0..=n).map(|k| (0..k).collect()).collect();
    for omit in 0..n {
        out.push((0..n).filter(|&i| i != omit).collect());
    }
    for _ in 0..limits.samples {
        out.push((0..n).filter(|_| rng.next_u64() & 1 == 1).collect());
    }
    // Each subset once, in the order first drawn (a sample may repeat a prefix).
    let mut drawn = HashSet::new();
    out.retain(|subset| drawn.insert(subset.clone()));
    out
}

/// Digest of a directory tree (paths, kinds, contents, permission bits), for checking
/// that recovery changes nothing.
pub fn tree_digest(dir: &Path) -> std::io::Result<Digest> {
    use std::os::unix::fs::PermissionsExt;
    let mut hasher = FramedHasher::new("shardlift/store/tree/v1");
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(dir)
            .map_err(std::io::Error::other)?;
        hasher.field(rel.as_os_str().as_encoded_bytes());
        let meta = entry.metadata().map_err(std::io::Error::other)?;
        hasher.u64(u64::from(meta.permissions().mode()));
        if entry.file_type().is_file() {
            hasher.field(&std::fs::read(entry.path())?);
        } else {
            hasher.field(b"<dir>");
        }
    }
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A store root holding `objects/ab/` and one 5 000-byte file in it.
    fn one_object() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        std::fs::create_dir_all(root.join("objects/ab")).expect("dirs");
        std::fs::write(root.join("objects/ab/cd"), vec![7u8; 5000]).expect("file");
        (dir, root)
    }

    /// The lengths `objects/ab/cd` has over every crash image of a run that did nothing
    /// (`None`: the name is absent).
    fn lengths_seen(recorder: RecordingFs) -> BTreeSet<Option<usize>> {
        let recording = recorder.finish();
        recording
            .crash_states(EnumerationLimits::default())
            .iter()
            .map(|state| match state.image.get("objects/ab/cd") {
                Some(ImageEntry::File {
                    len, zeroed_from, ..
                }) => Some(if zeroed_from.is_some() {
                    usize::MAX
                } else {
                    *len
                }),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_enumeration_says_what_it_applied() {
        let limits = EnumerationLimits {
            all_subsets_up_to: 3,
            samples: 4,
            seed: 1,
        };
        let mut e = Enumeration::default();
        let mut rng = SplitMix64::keyed(1, "test", 0);
        for pending in [0usize, 3, 5] {
            let tried = subsets(pending, limits, &mut rng);
            let distinct: HashSet<&Vec<usize>> = tried.iter().collect();
            assert_eq!(distinct.len(), tried.len(), "each subset once");
            e.add_crash_point(pending, tried.len(), limits);
        }
        assert_eq!(e.crash_points, 3);
        assert_eq!(e.max_pending, 5);
        assert!(e.sampled);
        assert_eq!(e.subsets_total, 1 + 8 + 32);
        // 1 + 8 exhaustive; at 5 pending: 6 prefixes, 5 all-but-one (one is a prefix),
        // and up to 4 samples.
        assert!(e.subsets_checked >= 1 + 8 + 10 && e.subsets_checked < e.subsets_total);
        let mut huge = Enumeration::default();
        huge.add_crash_point(64, 1, limits);
        huge.add_crash_point(3, 8, limits);
        assert_eq!(huge.subsets_total, u64::MAX, "saturates");
    }

    #[test]
    fn a_killed_writers_renamed_file_may_vanish_but_never_tears() {
        let (_dir, root) = one_object();
        let recorder = RecordingFs::with_non_durable_entries(
            &root,
            &[],
            &["objects/ab/cd"],
            KilledWriterFiles::DataSynced,
        )
        .expect("recorder");
        assert_eq!(
            lengths_seen(recorder),
            BTreeSet::from([None, Some(5000)]),
            "absent or whole"
        );
    }

    #[test]
    fn a_killed_writers_unsynced_file_may_vanish_or_tear() {
        let (_dir, root) = one_object();
        let recorder = RecordingFs::with_non_durable_entries(
            &root,
            &[],
            &["objects/ab/cd"],
            KilledWriterFiles::NothingSynced,
        )
        .expect("recorder");
        let seen = lengths_seen(recorder);
        for expected in [None, Some(5000), Some(0), Some(4096), Some(usize::MAX)] {
            assert!(seen.contains(&expected), "{expected:?} not in {seen:?}");
        }
    }

    #[test]
    fn a_listed_entry_that_is_not_in_the_image_is_refused() {
        let (_dir, root) = one_object();
        for (dirs, files) in [
            (&[][..], &["objects/ab/missing"][..]),
            (&[][..], &["objects/ab"][..]),
            (&["objects/ab/cd"][..], &[][..]),
            // A directory still holding a durable file.
            (&["objects/ab"][..], &[][..]),
        ] {
            let refused = RecordingFs::with_non_durable_entries(
                &root,
                dirs,
                files,
                KilledWriterFiles::NothingSynced,
            );
            assert!(refused.is_err(), "{dirs:?} {files:?} accepted");
        }
        // Listing the file too makes the directory one the model handles.
        RecordingFs::with_non_durable_entries(
            &root,
            &["objects/ab"],
            &["objects/ab/cd"],
            KilledWriterFiles::NothingSynced,
        )
        .expect("an empty-but-for-listed-files directory");
    }
}
