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
    /// Whether threads may share it ([`FileSystem::shared`]): the store's writer then
    /// installs objects concurrently when no hook needs their barriers.
    threads_allowed: bool,
    /// Operations at the start of the log that an earlier, killed writer issued.
    pre_run_ops: usize,
    /// The store root relative to `root` (`""`: `root` is the store root).
    store: String,
}

/// The recording so far: the trace (its initial image included), what each name refers
/// to now, and the barriers reached.
#[derive(Default)]
struct Log {
    trace: Trace,
    names: HashMap<String, Node>,
    barriers: Vec<Barrier>,
}

impl Log {
    /// A new file of `bytes` at `path`: a create and one write of the whole contents.
    fn create(&mut self, path: String, bytes: &[u8]) {
        let inode = self.new_inode();
        self.names.insert(path.clone(), Node::File(inode));
        self.trace.ops.push(TraceOp::Create { path, inode });
        self.write_whole(inode, bytes);
    }

    fn new_inode(&mut self) -> InodeId {
        let inode = self.trace.inode_count;
        self.trace.inode_count += 1;
        inode
    }

    fn write_whole(&mut self, inode: InodeId, bytes: &[u8]) {
        let data_at = self.trace.data.len();
        self.trace.data.extend_from_slice(bytes);
        self.trace.ops.push(TraceOp::Write {
            inode,
            offset: 0,
            len: bytes.len() as u64,
            data_at,
        });
    }
}

impl RecordingFs {
    /// Starts recording on an existing directory; its current contents are the durable
    /// initial image.
    pub fn new(root: &Path) -> std::io::Result<Self> {
        let mut log = Log::default();
        for entry in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
            let entry = entry.map_err(std::io::Error::other)?;
            let rel = rel_string(root, entry.path())
                .ok_or_else(|| std::io::Error::other("path outside root"))?;
            if entry.file_type().is_dir() {
                log.names.insert(rel.clone(), Node::Dir);
                log.trace.initial.insert(rel, InitialEntry::Dir);
            } else if entry.file_type().is_file() {
                let data = std::fs::read(entry.path())?;
                let inode = log.new_inode();
                log.trace.initial_contents.push(data);
                log.trace
                    .initial
                    .insert(rel.clone(), InitialEntry::File(inode));
                log.names.insert(rel, Node::File(inode));
            }
        }
        Ok(RecordingFs {
            root: root.to_owned(),
            log: std::sync::Mutex::new(log),
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
        let log = recorder
            .log
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut file_inodes = Vec::with_capacity(files.len());
        for file in files {
            match log.trace.initial.remove(file) {
                Some(InitialEntry::File(inode)) => file_inodes.push((file, inode)),
                _ => {
                    return Err(std::io::Error::other(format!(
                        "{file} is not a file of the initial image"
                    )))
                }
            }
        }
        for dir in &dirs {
            if log.trace.initial.remove(*dir) != Some(InitialEntry::Dir) {
                return Err(std::io::Error::other(format!(
                    "{dir} is not a directory of the initial image"
                )));
            }
        }
        // Listed directories may nest (a killed writer's root and the layout in it).
        // Program order: each directory before the files created in it.
        for dir in dirs {
            let prefix = format!("{dir}/");
            if log.trace.initial.keys().any(|k| k.starts_with(&prefix)) {
                return Err(std::io::Error::other(format!(
                    "{dir} holds durable entries; only directories holding nothing but \
                     non-durable files are modelled"
                )));
            }
            log.trace.ops.push(TraceOp::Mkdir {
                path: dir.to_owned(),
            });
        }
        for (file, inode) in file_inodes {
            log.trace.ops.push(TraceOp::Create {
                path: file.to_owned(),
                inode,
            });
            // Synced data stays the inode's durable contents: the writer fsynced a temp
            // file, then renamed it here (the temp name in `staging/` is not modelled), so
            // only the name may be lost. Unsynced data is the killed writer's write.
            if synced == KilledWriterFiles::NothingSynced {
                let bytes = std::mem::take(&mut log.trace.initial_contents[inode]);
                log.write_whole(inode, &bytes);
            }
        }
        recorder.pre_run_ops = log.trace.ops.len();
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

    /// Notes that a barrier was reached (after the operations issued so far): the
    /// trace's next acknowledgement.
    pub fn mark(&self, barrier: Barrier) {
        let mut log = self.lock_log();
        let at = log.trace.ops.len();
        log.trace.acknowledged_at.push(at);
        log.barriers.push(barrier);
    }

    /// The recording, once the run is over.
    pub fn finish(self) -> Recording {
        let log = self
            .log
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Recording {
            trace: log.trace,
            barriers: log.barriers,
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
        log.trace.ops.push(TraceOp::Mkdir { path: rel });
        Ok(())
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        RealFs.write_new_file(&self.resolve(path), bytes, read_only)?;
        log.create(rel, bytes);
        Ok(())
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        match log.names.get(&rel) {
            Some(Node::File(inode)) => {
                let inode = *inode;
                let entered_after = log.trace.ops.len();
                log.trace.ops.push(TraceOp::Fsync {
                    inode,
                    entered_after,
                });
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
        let mut log = self.lock_log();
        let entered_after = log.trace.ops.len();
        log.trace.ops.push(TraceOp::FsyncDir {
            path: rel,
            entered_after,
        });
        Ok(())
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let (rel_from, rel_to) = (self.rel(from)?, self.rel(to)?);
        let mut log = self.lock_log();
        RealFs.rename_noreplace(&self.resolve(from), &self.resolve(to))?;
        note_rename(&mut log, rel_from, rel_to, true);
        Ok(())
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let (rel_from, rel_to) = (self.rel(from)?, self.rel(to)?);
        let mut log = self.lock_log();
        RealFs.rename_replace(&self.resolve(from), &self.resolve(to))?;
        note_rename(&mut log, rel_from, rel_to, false);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        let rel = self.rel(path)?;
        let mut log = self.lock_log();
        RealFs.remove_file(&self.resolve(path))?;
        log.names.remove(&rel);
        log.trace.ops.push(TraceOp::Unlink { path: rel });
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

fn note_rename(log: &mut Log, from: String, to: String, noreplace: bool) {
    if let Some(Node::File(inode)) = log.names.remove(&from) {
        log.names.insert(to.clone(), Node::File(inode));
        log.trace.ops.push(TraceOp::Rename {
            from,
            to,
            noreplace,
        });
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
