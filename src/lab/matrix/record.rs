//! Recording an action: the writer (or two, or a killed one) run through the recording file system, and what each generation must look like.
use super::*;
use crate::store::barrier::HookStop;

/// A killed writer's leftovers in `staging/`: a torn object temp file under the exact name
/// this process's writer will try first for the next generation, and an unrelated one.
pub(super) fn plant_staging_garbage(root: &Path) -> Result<(), LabError> {
    let generation = crate::store::writer::next_generation(&RealFs, root)?;
    let staging = root.join("staging");
    let colliding = staging.join(format!("object-{}-{generation}-1.tmp", std::process::id()));
    std::fs::write(colliding, b"torn bytes of a killed writer")?;
    std::fs::write(staging.join("commit-1-0-1.tmp"), b"{\"schema\":")?;
    Ok(())
}

/// Copies `base` into `root`: the generation recovery selects there (the previous durable
/// one) and the logical state root of every valid generation.
pub(super) fn seed_from_base(
    base: &Path,
    root: &Path,
) -> Result<(Option<GenerationExpectation>, BTreeMap<u64, Digest>), LabError> {
    copy_tree(base, root)?;
    store_expectations(root)
}

/// The generation recovery selects in the store `root` (the one a writer's run must not
/// lose) and the logical state root of every valid generation there.
pub fn store_expectations(
    root: &Path,
) -> Result<(Option<GenerationExpectation>, BTreeMap<u64, Digest>), LabError> {
    let report = crate::store::recover(root)?;
    let mut roots = BTreeMap::new();
    for g in &report.valid_generations {
        let e = generation_expectation(root, *g)?;
        roots.insert(*g, e.logical_state_root);
    }
    let previous = match report.selected {
        Some(s) => Some(generation_expectation(root, s.generation)?),
        None => None,
    };
    Ok((previous, roots))
}

/// Stops a writer at its first commit barrier, as a kill there would.
pub(super) struct StopAtCommit;

impl BarrierHook for StopAtCommit {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        if event.barrier == Barrier::CommitAfterWrite {
            return Err("the killed writer's last step".into());
        }
        Ok(())
    }
}

/// Publishes `state` on `root` with the correct writer and stops it where a writer killed
/// at its commit point would stop: objects and manifest installed, no commit record.
pub fn publish_killed_at_commit(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<(), LabError> {
    match publish_with(&RealFs, root, state, topology, &mut StopAtCommit) {
        Err(StoreError::Stopped { .. }) => Ok(()),
        Err(error) => Err(error.into()),
        Ok(_) => Err(LabError::Model(
            "the killed writer's publish was not stopped at its commit".into(),
        )),
    }
}

/// Publishes `state` on `root` (not recorded) up to its commit record's write and returns
/// what that run added under `objects/`: the fan-out directories it created and its
/// installed objects, a killed writer's. At least one object must be new, or the scenario
/// would find nothing to check.
pub(super) fn install_as_killed_writer(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<(Vec<String>, Vec<String>), LabError> {
    let dirs_before = fan_out_dirs(root)?;
    let before = object_files(root)?;
    publish_killed_at_commit(root, state, topology)?;
    let added: Vec<String> = object_files(root)?
        .into_iter()
        .filter(|file| !before.contains(file))
        .collect();
    if added.is_empty() {
        return Err(LabError::Model(
            "the killed writer installed no object the store did not already hold".into(),
        ));
    }
    let dirs: Vec<String> = fan_out_dirs(root)?
        .into_iter()
        .filter(|dir| !dirs_before.contains(dir))
        .collect();
    Ok((dirs, added))
}

/// The files under `objects/`, relative to `root`.
pub(super) fn object_files(root: &Path) -> Result<BTreeSet<String>, LabError> {
    Ok(list_files(root)?
        .into_iter()
        .filter(|file| file.starts_with("objects/"))
        .collect())
}

/// The fan-out directories `objects/xx`, relative to `root`.
pub(super) fn fan_out_dirs(root: &Path) -> Result<BTreeSet<String>, LabError> {
    let mut dirs = BTreeSet::new();
    let objects = root.join("objects");
    if !objects.is_dir() {
        return Ok(dirs);
    }
    for entry in std::fs::read_dir(&objects)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            let name = entry.file_name();
            let name = name
                .to_str()
                .ok_or_else(|| LabError::Model("a fan-out directory name is not UTF-8".into()))?;
            dirs.insert(format!("objects/{name}"));
        }
    }
    Ok(dirs)
}

/// Runs `action` on the store `root` (the entry [`STORE_DIR_NAME`] of `parent`) through
/// a file system recording `parent`: the generation it committed and the recorded
/// operations.
pub(super) fn record_action(
    parent: &Path,
    root: &Path,
    action: &Action,
    faults: WriterFaults,
) -> Result<(GenerationExpectation, Recording), LabError> {
    let fs = prepare_recording(parent, root, action)?;
    let (generation, candidate) = run_recorded(&fs, root, action, faults)?;
    let candidate = match candidate {
        Some(candidate) => candidate,
        None => recorded_expectation(root, generation)?,
    };
    let recording = fs.finish();
    refuse_a_sequential_concurrent_run(action, faults, &recording)?;
    Ok((candidate, recording))
}

/// Leaves in `root` what `action` starts from (a killed writer's leftovers, a removed
/// LATEST, planted bytes) and returns the file system that records `parent` from there.
fn prepare_recording(parent: &Path, root: &Path, action: &Action) -> Result<RecordingFs, LabError> {
    let in_parent = |rel: &str| format!("{STORE_DIR_NAME}/{rel}");
    let recorder = |fs: RecordingFs| fs.with_store_at(STORE_DIR_NAME);
    Ok(match action {
        Action::PublishOverKilledLayout(..) => {
            // The killed writer created the layout (and the root, when there was none) and
            // fsynced none of it.
            let mut dirs: Vec<String> = LAYOUT_DIRS.iter().map(|d| in_parent(d)).collect();
            if !root.exists() {
                std::fs::create_dir(root)?;
                dirs.push(STORE_DIR_NAME.to_owned());
            }
            for dir in LAYOUT_DIRS {
                std::fs::create_dir(root.join(dir))?;
            }
            let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
            recorder(RecordingFs::with_non_durable_dirs(parent, &dirs)?)
        }
        Action::RepairLatest => {
            std::fs::remove_file(root.join(LATEST_REL_PATH))?;
            recorder(RecordingFs::new(parent)?)
        }
        Action::PublishConcurrent(..) => recorder(RecordingFs::new(parent)?.allowing_threads()),
        Action::PublishOverKilledObjects {
            state,
            topology,
            files,
            concurrent,
        } => {
            let (dirs, objects) = install_as_killed_writer(root, state, *topology)?;
            // A killed RFC writer fsynced `objects/` for each fan-out directory before
            // renaming into it; one that synced nothing may have left them non-durable.
            let dirs: Vec<String> = match files {
                KilledWriterFiles::DataSynced => Vec::new(),
                KilledWriterFiles::NothingSynced => dirs.iter().map(|d| in_parent(d)).collect(),
            };
            let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
            let objects: Vec<String> = objects.iter().map(|o| in_parent(o)).collect();
            let objects: Vec<&str> = objects.iter().map(String::as_str).collect();
            let fs = recorder(RecordingFs::with_non_durable_entries(
                parent, &dirs, &objects, *files,
            )?);
            if *concurrent {
                fs.allowing_threads()
            } else {
                fs
            }
        }
        Action::PublishOverWrongBytes(state, topology) => {
            plant_wrong_bytes(root, state, *topology)?;
            recorder(RecordingFs::new(parent)?)
        }
        Action::RepairAfterKilledCommit(state, topology) => {
            let record = commit_as_killed_writer(root, state, *topology)?;
            recorder(RecordingFs::with_non_durable_entries(
                parent,
                &[],
                &[in_parent(&record).as_str()],
                KilledWriterFiles::DataSynced,
            )?)
        }
        Action::Publish(..)
        | Action::Reshard(..)
        | Action::PublishBareRelativeRoot(..)
        | Action::PublishRacing { .. } => recorder(RecordingFs::new(parent)?),
    })
}

/// Runs `action`'s writer on `root` through `fs`: the generation it committed, and for a
/// race the first writer's expectation (the second never commits).
fn run_recorded(
    fs: &RecordingFs,
    root: &Path,
    action: &Action,
    faults: WriterFaults,
) -> Result<(u64, Option<GenerationExpectation>), LabError> {
    let mut hooks = MarkingHooks(fs);
    // The writer's own file system: the recorder, with the mutant's faults (if any).
    let mutant = |root: &Path| MutantFs::new(fs, root, faults);
    let generation = match action {
        Action::Publish(state, topology)
        | Action::PublishOverKilledLayout(state, topology)
        | Action::PublishConcurrent(state, topology)
        | Action::PublishOverWrongBytes(state, topology)
        | Action::PublishOverKilledObjects {
            state, topology, ..
        } => {
            publish_with(&mutant(root), root, state, *topology, &mut hooks)?
                .committed
                .generation
        }
        Action::PublishBareRelativeRoot(state, topology) => {
            // The recorder resolves a relative path in the recorded directory, as if it
            // were the working directory: the writer's root is the bare name.
            let bare = Path::new(STORE_DIR_NAME);
            publish_with(&mutant(bare), bare, state, *topology, &mut hooks)?
                .committed
                .generation
        }
        Action::Reshard(generation, topology) => {
            reshard_with(
                fs,
                root,
                *generation,
                *topology,
                ObjectCheck::Lengths,
                &mut hooks,
                &mut NoProgress,
            )?
            .committed
            .generation
        }
        Action::RepairLatest | Action::RepairAfterKilledCommit(..) => {
            let report = crate::store::recovery::recover_with(fs, root)?;
            let selected = report.selected.ok_or_else(|| {
                LabError::Model("a LATEST repair needs a valid generation".into())
            })?;
            crate::store::writer::Writer::repair_latest(
                &mutant(root),
                root,
                &mut hooks,
                selected.generation,
                selected.commit_digest,
            )?;
            selected.generation
        }
        Action::PublishRacing {
            first,
            second,
            topology,
        } => {
            let (generation, expectation) = run_race(fs, root, (first, second), *topology, faults)?;
            return Ok((generation, Some(expectation)));
        }
    };
    Ok((generation, None))
}

/// Two writers racing for one generation: the first runs inside the second's first
/// barrier ([`RaceHook`]); the second must find the generation taken (or, with a
/// replacing rename, commit over it). The first writer's generation and expectation.
fn run_race(
    fs: &RecordingFs,
    root: &Path,
    (first, second): (&LogicalState, &LogicalState),
    topology: Topology,
    faults: WriterFaults,
) -> Result<(u64, GenerationExpectation), LabError> {
    let mut race = RaceHook {
        fs,
        root,
        first,
        topology,
        faults,
        committed: None,
    };
    let second_writer = MutantFs::new(fs, root, faults);
    match publish_with(&second_writer, root, second, topology, &mut race) {
        // The protocol: the second writer finds the generation taken.
        Err(StoreError::GenerationTaken { .. }) => {}
        // A writer whose rename replaces goes on and commits over it.
        Ok(_) if faults.commit_rename_replaces => {}
        Ok(summary) => {
            return Err(LabError::Model(format!(
                "the second racing writer committed generation {} too",
                summary.committed.generation
            )))
        }
        Err(error) => return Err(error.into()),
    }
    race.committed
        .ok_or_else(|| LabError::Model("the first racing writer never ran".into()))?
}

/// The concurrent scenario must check a concurrent run: a writer that went sequential
/// (a hook that observes, a file system threads may not share) reports object barriers.
fn refuse_a_sequential_concurrent_run(
    action: &Action,
    faults: WriterFaults,
    recording: &Recording,
) -> Result<(), LabError> {
    let concurrent = matches!(
        action,
        Action::PublishConcurrent(..)
            | Action::PublishOverKilledObjects {
                concurrent: true,
                ..
            }
    );
    if concurrent && faults.allow_concurrent_install() {
        if let Some(barrier) = recording
            .barriers
            .iter()
            .find(|barrier| barrier.name().starts_with("object-"))
        {
            return Err(LabError::Model(format!(
                "the concurrent-install scenario ran sequentially: it reported {}",
                barrier.name()
            )));
        }
    }
    Ok(())
}

/// What a generation's commit record and manifest name (read from `root`, the objects
/// not verified): the files it needs intact. The candidate of a writer that committed
/// without checking what it found is described this way, since it never verifies.
pub fn recorded_expectation(
    root: &Path,
    generation: u64,
) -> Result<GenerationExpectation, LabError> {
    use crate::store::codec::{decode, CommitRecord, ManifestRecord};
    let commit_rel = commit_rel_path(generation);
    let commit_bytes = std::fs::read(root.join(&commit_rel))?;
    let record: CommitRecord = decode(Path::new(&commit_rel), &commit_bytes)?;
    let manifest_rel = object_rel_path(&record.manifest);
    let manifest_bytes = std::fs::read(root.join(&manifest_rel))?;
    let manifest: ManifestRecord = decode(Path::new(&manifest_rel), &manifest_bytes)?;
    let mut files = vec![
        (commit_rel, Digest::of(&commit_bytes)),
        (manifest_rel, record.manifest),
    ];
    for chunk in &manifest.chunks {
        for (_, digest) in chunk.digests() {
            files.push((object_rel_path(&digest), digest));
        }
    }
    Ok(GenerationExpectation {
        generation,
        logical_state_root: manifest.logical_state_root,
        files,
    })
}

/// The hook of the second of two racing writers: at its first barrier (its generation
/// claimed, nothing committed) the first writer publishes the same generation whole, with
/// the recorder's marks; the second then goes on to its commit.
pub(super) struct RaceHook<'a> {
    fs: &'a RecordingFs,
    root: &'a Path,
    first: &'a LogicalState,
    topology: Topology,
    faults: WriterFaults,
    /// The first writer's generation and what it committed, once it ran.
    committed: Option<Result<(u64, GenerationExpectation), LabError>>,
}

impl BarrierHook for RaceHook<'_> {
    fn reached(&mut self, _event: &BarrierEvent) -> Result<(), HookStop> {
        if self.committed.is_none() {
            let mut hooks = MarkingHooks(self.fs);
            let first = publish_with(
                &MutantFs::new(self.fs, self.root, self.faults),
                self.root,
                self.first,
                self.topology,
                &mut hooks,
            )
            .map_err(LabError::from)
            .and_then(|summary| {
                recorded_expectation(self.root, summary.committed.generation)
                    .map(|expectation| (summary.committed.generation, expectation))
            });
            self.committed = Some(first);
        }
        Ok(())
    }
}

/// Plants wrong bytes (the right length, one byte changed) at the address of one object
/// of `state` that `root` does not hold, as outside damage would: the publish finds a file
/// at that address whose bytes do not verify, and must replace it (RFC 0001 §4).
pub(super) fn plant_wrong_bytes(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<(), LabError> {
    let scratch = scratch_dir()?;
    let elsewhere = scratch.path().join(STORE_DIR_NAME);
    publish_with(&RealFs, &elsewhere, state, topology, &mut NoHooks)?;
    let held = object_files(root)?;
    let target = object_files(&elsewhere)?
        .into_iter()
        .find(|file| !held.contains(file))
        .ok_or_else(|| LabError::Model("every object of the state is already held".into()))?;
    let mut bytes = std::fs::read(elsewhere.join(&target))?;
    let middle = bytes.len() / 2;
    let byte = bytes
        .get_mut(middle)
        .ok_or_else(|| LabError::Model(format!("{target} is empty")))?;
    *byte ^= 0xff;
    let path = root.join(&target);
    if let Some(fan_dir) = path.parent() {
        std::fs::create_dir_all(fan_dir)?;
    }
    std::fs::write(path, bytes)?;
    Ok(())
}

/// Stops a writer right after its commit record's rename, before its `commits/` fsync.
pub(super) struct StopAfterCommitRename;

impl BarrierHook for StopAfterCommitRename {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        if event.barrier == Barrier::CommitAfterRename {
            return Err("the killed writer's last step".into());
        }
        Ok(())
    }
}

/// Publishes `state` on `root` (not recorded) up to its commit record's rename, as a
/// writer killed before its `commits/` fsync: every object and the manifest durable, the
/// record visible with its data durable, its name not. Returns the record's path relative
/// to `root`.
pub(super) fn commit_as_killed_writer(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<String, LabError> {
    let generation = crate::store::writer::next_generation(&RealFs, root)?;
    match publish_with(&RealFs, root, state, topology, &mut StopAfterCommitRename) {
        Err(StoreError::Stopped { .. }) => Ok(commit_rel_path(generation)),
        Err(error) => Err(error.into()),
        Ok(_) => Err(LabError::Model(
            "the killed writer's publish was not stopped at its commit rename".into(),
        )),
    }
}
