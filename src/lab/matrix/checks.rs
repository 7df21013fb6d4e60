//! The checks of one crash state: recovery's answer against what the writer made durable and acknowledged (RFC 0001 §5, §8).
use super::*;

pub(super) fn recover_guarded(
    dir: &Path,
    faults: RecoveryFaults,
) -> Result<RecoveryReport, String> {
    match catch_unwind(AssertUnwindSafe(|| recover_faulty(&RealFs, dir, faults))) {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(e)) => Err(format!("recovery failed: {e}")),
        Err(_) => Err("recovery panicked".into()),
    }
}

/// Recovery (with `faults`, for the recovery mutants) twice with the tree hashed around
/// it; LATEST removed must not change the answer; the selected generation must load with
/// the expected root.
pub(super) fn check_recovery_common(
    dir: &Path,
    roots: &BTreeMap<u64, Digest>,
    violations: &mut Vec<Violation>,
    context: &str,
    faults: RecoveryFaults,
) -> Option<RecoveryReport> {
    let before = tree_digest(dir).ok();
    let first = match recover_guarded(dir, faults) {
        Ok(r) => r,
        Err(e) => {
            violations.push(Violation::at(Invariant::RecoveryCompletes, context, e));
            return None;
        }
    };
    let second = recover_guarded(dir, faults);
    let after = tree_digest(dir).ok();
    if before.is_none() || before != after {
        violations.push(Violation::at(
            Invariant::RecoveryChangesNothing,
            context,
            "recovery modified the store",
        ));
    }
    if second.as_ref() != Ok(&first) {
        violations.push(Violation::at(
            Invariant::RecoveryIsDeterministic,
            context,
            "recovery is not idempotent",
        ));
    }
    if let Some(selected) = &first.selected {
        match catch_unwind(AssertUnwindSafe(|| {
            crate::store::load_generation(dir, selected.generation)
        })) {
            Ok(Ok((state, _))) => {
                let root = state.logical_state_root();
                if roots.get(&selected.generation) != Some(&root) {
                    violations.push(Violation::at(
                        Invariant::SelectedGenerationLoads,
                        context,
                        format!(
                            "generation {} loaded with root {root}, not the published one",
                            selected.generation
                        ),
                    ));
                }
            }
            Ok(Err(e)) => violations.push(Violation::at(
                Invariant::SelectedGenerationLoads,
                context,
                format!("selected generation does not load: {e}"),
            )),
            Err(_) => violations.push(Violation::at(
                Invariant::SelectedGenerationLoads,
                context,
                "load panicked",
            )),
        }
    }
    // LATEST never changes the answer: hide it and recover again.
    let latest = dir.join(LATEST_REL_PATH);
    if latest.exists() {
        let hidden = dir.join("refs/LATEST.hidden-by-checker");
        if std::fs::rename(&latest, &hidden).is_ok() {
            match recover_guarded(dir, faults) {
                Ok(r) if r.selected == first.selected => {}
                _ => violations.push(Violation::at(
                    Invariant::LatestNeverChangesTheAnswer,
                    context,
                    "LATEST changed the answer",
                )),
            }
            let _ = std::fs::rename(&hidden, &latest);
        }
    }
    Some(first)
}

/// Rename is the only way a name appears in `objects/` or `commits/` (RFC 0001 §4), so
/// a crash state may show such a name only with its complete bytes: an object whose bytes
/// are its address, a commit record that decodes. A writer that renames before the data is
/// durable, or writes in place, exposes torn bytes here even when recovery rejects them.
/// A file a killed writer left with its data unsynced ([`KilledWriterFiles::NothingSynced`])
/// is that writer's until this run fsyncs it or renames its commit record into place, and
/// is not counted against this run before then.
pub(super) fn torn_visible_files(
    recording: &Recording,
    state: &CrashState,
    files: &StateFiles<'_>,
    context: &str,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    // Once the run's commit record is renamed into place, a torn file next to it is the
    // run's: it committed without making that file durable.
    let committed = recording
        .acknowledgements_at(Barrier::CommitAfterRename)
        .is_some_and(|at| state.acknowledged >= at);
    for (path, bytes) in files {
        if let Some(StateEntry::File { inode, .. }) = state.entries.get(*path) {
            // A file of the durable starting image is not this run's to complete: bytes
            // planted there (a scenario's outside damage) are the store's, not a write of
            // the run.
            if recording.is_initial_inode(*inode) {
                continue;
            }
            if !committed && recording.torn_by_earlier_writer(*inode, state.crash_point) {
                continue;
            }
        }
        let Some(rel) = recording.in_store(path) else {
            continue;
        };
        violations.extend(incomplete_bytes(context, rel, bytes));
    }
    violations
}

/// The files of one crash state: path (relative to the recorded directory) → bytes.
pub(super) type StateFiles<'a> = BTreeMap<&'a str, &'a [u8]>;

/// The violation of a file at `rel` (relative to the store) that shows `bytes` without
/// them being complete ([`complete_bytes`]); `None` when they are.
pub fn incomplete_bytes(context: &str, rel: &str, bytes: &[u8]) -> Option<Violation> {
    (!complete_bytes(rel, bytes)).then(|| {
        Violation::at(
            Invariant::CompleteBytesVisible,
            context,
            format!(
                "{rel} is visible with incomplete bytes ({} bytes)",
                bytes.len()
            ),
        )
    })
}

/// Whether a file at `rel` (relative to the store) shows complete bytes: an object whose
/// bytes are its address, a commit record that decodes; any other file passes.
pub fn complete_bytes(rel: &str, bytes: &[u8]) -> bool {
    if let Some(address) = rel.strip_prefix("objects/") {
        Digest::of(bytes).to_hex() == address.replace('/', "")
    } else if rel.starts_with("commits/") && rel.ends_with(".json") {
        crate::store::codec::decode::<crate::store::codec::CommitRecord>(Path::new(rel), bytes)
            .is_ok()
    } else {
        true
    }
}

/// Whether every file of `expectation` is readable through `read` (a path relative to the
/// store) with its digest.
pub fn intact_with<B: AsRef<[u8]>>(
    expectation: &GenerationExpectation,
    read: impl Fn(&str) -> Option<B>,
) -> bool {
    expectation
        .files
        .iter()
        .all(|(path, digest)| read(path).is_some_and(|bytes| Digest::of(bytes.as_ref()) == *digest))
}

pub(super) fn intact(
    recording: &Recording,
    files: &StateFiles<'_>,
    expectation: &GenerationExpectation,
) -> bool {
    intact_with(expectation, |path| {
        files.get(recording.store_path(path).as_str()).copied()
    })
}

pub(super) struct ScenarioChecks<'a> {
    /// The recorded writer run.
    pub(super) recording: &'a Recording,
    /// What its crash states are held to.
    pub(super) expectations: StoreExpectations<'a>,
    /// Acknowledgements a state follows once the candidate's `commits/` fsync (step 12)
    /// completed ([`Recording::acknowledgements_at`]).
    pub(super) durable_from: Option<usize>,
    /// Acknowledgements a state follows once LATEST's `refs/` fsync (step 16) completed.
    pub(super) latest_durable_from: Option<usize>,
}

/// What a crash state of one writer run is held to: the generations it may show and how
/// recovery runs (with a recovery mutant's faults, or none).
pub struct StoreExpectations<'a> {
    /// Faults of recovery.
    pub recovery: RecoveryFaults,
    /// The generation recovery selected before the run, if any.
    pub previous: Option<&'a GenerationExpectation>,
    /// The generation the run committed.
    pub candidate: &'a GenerationExpectation,
    /// The logical-state root of every generation a state may select.
    pub roots: BTreeMap<u64, Digest>,
}

/// One crash state as the invariants see it, however it was made (the model's image, a
/// kernel's recovered disk).
pub struct StoreStateView<'a> {
    /// Where it came from, for the violations' details.
    pub context: &'a str,
    /// The store's directory in the state (`None`: the store root itself is absent).
    pub store_dir: Option<&'a Path>,
    /// Every file of the candidate is there with its digest.
    pub candidate_intact: bool,
    /// Every file of the previous generation is there with its digest.
    pub previous_intact: bool,
    /// The crash came after the candidate's `commits/` fsync (step 12) completed.
    pub candidate_durable: bool,
    /// The crash came after LATEST's `refs/` fsync (step 16) completed.
    pub latest_durable: bool,
}

pub(super) fn check_crash_state(
    checks: &ScenarioChecks<'_>,
    state: &CrashState,
    violations: &mut Vec<Violation>,
) {
    let context = format!("power-loss state at op {}", state.crash_point);
    let Ok(dir) = scratch_dir() else {
        violations.push(Violation::at(
            Invariant::CheckCompleted,
            &context,
            "cannot create a temp dir",
        ));
        return;
    };
    let entries = checks.recording.files(state);
    if let Err((path, e)) = write_state_files(&entries, dir.path()) {
        violations.push(Violation::at(
            Invariant::CheckCompleted,
            &context,
            format!("cannot materialize {path}: {e}"),
        ));
        return;
    }
    let files: StateFiles<'_> = entries
        .iter()
        .filter_map(|(path, bytes)| Some((path.as_str(), bytes.as_deref()?)))
        .collect();
    violations.extend(torn_visible_files(
        checks.recording,
        state,
        &files,
        &context,
    ));
    let store_dir = dir.path().join(&checks.recording.store);
    let expectations = &checks.expectations;
    let view = StoreStateView {
        context: &context,
        store_dir: checks
            .recording
            .has_store_root(state)
            .then_some(store_dir.as_path()),
        candidate_intact: intact(checks.recording, &files, expectations.candidate),
        previous_intact: expectations
            .previous
            .is_some_and(|p| intact(checks.recording, &files, p)),
        candidate_durable: checks
            .durable_from
            .is_some_and(|from| state.acknowledged >= from),
        latest_durable: checks
            .latest_durable_from
            .is_some_and(|from| state.acknowledged >= from),
    };
    check_store_state(expectations, &view, violations);
}

/// The recovery invariants of RFC 0001 §5 on one crash state: recovery completes, changes
/// nothing, is deterministic and ignores LATEST; it selects the newest intact generation,
/// which loads; nothing committed is lost; LATEST is never ahead or garbage, and durable
/// once its fsync completed.
pub fn check_store_state(
    expectations: &StoreExpectations<'_>,
    view: &StoreStateView<'_>,
    violations: &mut Vec<Violation>,
) {
    let context = view.context;
    // Without its root the state holds no store: nothing is selected, nothing to recover.
    let (selected, latest) = match view.store_dir {
        Some(store_dir) => {
            let Some(report) = check_recovery_common(
                store_dir,
                &expectations.roots,
                violations,
                context,
                expectations.recovery,
            ) else {
                return;
            };
            (
                report.selected.as_ref().map(|s| s.generation),
                Some(report.latest.status),
            )
        }
        None => (None, None),
    };
    check_selected_generation(expectations, view, selected, violations);
    check_latest(view, latest, violations);
}

/// Recovery selected the newest fully intact generation (the candidate's, else the
/// previous one's), never another, and lost no generation that was committed.
fn check_selected_generation(
    expectations: &StoreExpectations<'_>,
    view: &StoreStateView<'_>,
    selected: Option<u64>,
    violations: &mut Vec<Violation>,
) {
    let context = view.context;
    let candidate = expectations.candidate;
    let previous = expectations.previous;
    let candidate_ok = view.candidate_intact;
    let previous_ok = previous.is_some() && view.previous_intact;
    let expected = if candidate_ok {
        Some(candidate.generation)
    } else if previous_ok {
        previous.map(|p| p.generation)
    } else {
        None
    };
    let allowed = [previous.map(|p| p.generation), Some(candidate.generation)];
    if selected.is_some() && !allowed.contains(&selected) {
        violations.push(Violation::at(
            Invariant::SelectedPreviousOrCandidate,
            context,
            format!("selected {selected:?}, neither previous nor candidate"),
        ));
    }
    if selected != expected {
        violations.push(Violation::at(
            Invariant::NewestIntactSelected,
            context,
            format!("selected {selected:?} but the fully intact newest generation is {expected:?}"),
        ));
    }
    let lost = if view.store_dir.is_some() {
        ""
    } else {
        " (the store root itself is absent)"
    };
    if previous.is_some() && !previous_ok {
        violations.push(Violation::at(
            Invariant::CommittedNotLost,
            context,
            format!("the previous durable generation was lost{lost}"),
        ));
    }
    // Committed means its record and every file it names survive, not only a record of
    // that generation: a second writer's record replacing it loses it too.
    let kept = selected == Some(candidate.generation) && candidate_ok;
    if view.candidate_durable && !kept {
        violations.push(Violation::at(
            Invariant::CommittedNotLost,
            context,
            format!(
                "generation {} was lost after its commits/ fsync{lost}",
                candidate.generation
            ),
        ));
    }
}

/// LATEST is never ahead of durable commits or garbage, and consistent once its refs/
/// fsync completed.
fn check_latest(
    view: &StoreStateView<'_>,
    latest: Option<LatestStatus>,
    violations: &mut Vec<Violation>,
) {
    let context = view.context;
    if matches!(latest, Some(LatestStatus::Ahead | LatestStatus::Garbage)) {
        violations.push(Violation::at(
            Invariant::LatestNeverAheadOrGarbage,
            context,
            format!("LATEST is {latest:?}: the writer exposed a hint ahead of durable commits"),
        ));
    }
    if view.latest_durable && latest != Some(LatestStatus::Consistent) {
        violations.push(Violation::at(
            Invariant::LatestDurableAfterItsFsync,
            context,
            format!("LATEST is {latest:?} after its refs/ fsync completed"),
        ));
    }
}
