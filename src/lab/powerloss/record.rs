//! Recording a writer run: every file-system effect through [`RecordingFs`], barriers
//! marked in the log ([`MarkingHooks`]).
use super::*;

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
