//! The crash matrix: process kills at every barrier, power-loss states and corruption
//! cases on a synthetic multi-chunk state, with the recovery invariants of RFC 0001 §5 checked.
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use serde::Serialize;

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::{NoProgress, Progress};
use crate::core::rng::SplitMix64;
use crate::core::topology::Topology;

use crate::durable::fs::RealFs;
use crate::lab::corruption::{copy_tree, list_files, Damage, FileOffset};
use crate::lab::error::LabError;
use crate::lab::harness::{kill_publisher_at_occurrence, recover_in_child, KillReport};
use crate::lab::powerloss::{
    tree_digest, CrashState, Enumeration, EnumerationLimits, ImageEntry, KilledWriterFiles,
    MarkingHooks, Recording, RecordingFs,
};
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, NoHooks};
use crate::store::codec::{commit_rel_path, object_rel_path};
use crate::store::layout::synthetic_state;
use crate::store::recovery::{
    recover_faulty, verify_generation_with, LatestStatus, RecoveryFaults, RecoveryReport,
};
use crate::store::writer::{
    publish_with, reshard_with, WriterFaults, LATEST_REL_PATH, LAYOUT_DIRS,
};
use crate::store::ObjectCheck;
use crate::store::StoreError;

/// An invariant the crash matrix checks (RFC 0001 §5 and §8), one per kind of violation.
/// Every violation names the one it breaks; a mutant is killed only by a violation of the
/// invariant it is expected to break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// The checker itself ran (a temp dir was created, an image materialized, no checker
    /// thread panicked).
    CheckCompleted,
    /// Recovery answers: it never fails nor panics on a crash or corruption image.
    RecoveryCompletes,
    /// Recovery changes nothing in the store.
    RecoveryChangesNothing,
    /// Recovery gives the same answer every time (twice in a row, in a child process and
    /// in-process).
    RecoveryIsDeterministic,
    /// The selected generation loads, with the logical-state root it was published with.
    SelectedGenerationLoads,
    /// LATEST never changes recovery's answer.
    LatestNeverChangesTheAnswer,
    /// The selected generation is the previous one or the candidate.
    SelectedPreviousOrCandidate,
    /// The newest generation whose files are all intact is selected (a visible record
    /// whose objects verify is selected; a damaged one is not).
    NewestIntactSelected,
    /// Nothing committed is lost: the previous durable generation, the candidate once its
    /// `commits/` fsync (step 12) completed, and the record it committed.
    CommittedNotLost,
    /// LATEST is never `ahead` of the commits nor `garbage` after a crash (RFC 0001 §6).
    LatestNeverAheadOrGarbage,
    /// Once its `refs/` fsync (step 16) completed, LATEST is durable: a power cut leaves it
    /// `consistent`.
    LatestDurableAfterItsFsync,
    /// A name in `objects/` or `commits/` is visible only with its complete bytes.
    CompleteBytesVisible,
    /// A loader refuses a damaged generation.
    DamagedGenerationNeverLoads,
    /// A loader's error names the offending file.
    LoadErrorNamesTheFile,
    /// A killed publisher died of SIGKILL and was reaped.
    PublisherKilledAndReaped,
    /// A killed publisher's acknowledged events or performed operations are exactly those
    /// before the kill.
    KillTranscriptMatches,
    /// The candidate's commit record is visible after a kill exactly when the protocol
    /// says so (after the rename that installs it).
    CandidateVisibleAsTheProtocolSays,
    /// Enough random-instant kills landed before the publisher finished.
    RandomKillsLanded,
}

impl Invariant {
    /// Its kebab-case name, as the JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::CheckCompleted => "check-completed",
            Invariant::RecoveryCompletes => "recovery-completes",
            Invariant::RecoveryChangesNothing => "recovery-changes-nothing",
            Invariant::RecoveryIsDeterministic => "recovery-is-deterministic",
            Invariant::SelectedGenerationLoads => "selected-generation-loads",
            Invariant::LatestNeverChangesTheAnswer => "latest-never-changes-the-answer",
            Invariant::SelectedPreviousOrCandidate => "selected-previous-or-candidate",
            Invariant::NewestIntactSelected => "newest-intact-selected",
            Invariant::CommittedNotLost => "committed-not-lost",
            Invariant::LatestNeverAheadOrGarbage => "latest-never-ahead-or-garbage",
            Invariant::LatestDurableAfterItsFsync => "latest-durable-after-its-fsync",
            Invariant::CompleteBytesVisible => "complete-bytes-visible",
            Invariant::DamagedGenerationNeverLoads => "damaged-generation-never-loads",
            Invariant::LoadErrorNamesTheFile => "load-error-names-the-file",
            Invariant::PublisherKilledAndReaped => "publisher-killed-and-reaped",
            Invariant::KillTranscriptMatches => "kill-transcript-matches",
            Invariant::CandidateVisibleAsTheProtocolSays => {
                "candidate-visible-as-the-protocol-says"
            }
            Invariant::RandomKillsLanded => "random-kills-landed",
        }
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One invariant violated: which, and where and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The invariant broken.
    pub invariant: Invariant,
    /// Where (scenario, crash point, case) and how.
    pub detail: String,
}

impl Violation {
    /// A violation of `invariant`, described by `detail`.
    pub fn new(invariant: Invariant, detail: impl Into<String>) -> Self {
        Violation {
            invariant,
            detail: detail.into(),
        }
    }

    /// The same violation with `prefix: ` before its detail.
    pub fn within(self, prefix: &str) -> Self {
        Violation {
            detail: format!("{prefix}: {}", self.detail),
            ..self
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.invariant, self.detail)
    }
}

/// A fresh scratch directory: under `$SHARDLIFT_SCRATCH` if set, else `/dev/shm` (tmpfs:
/// the matrix creates and deletes thousands of small trees), else the system temp dir.
pub fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    let base = match std::env::var_os("SHARDLIFT_SCRATCH") {
        Some(dir) => std::path::PathBuf::from(dir),
        None if Path::new("/dev/shm").is_dir() => std::path::PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    match tempfile::Builder::new()
        .prefix("shardlift-")
        .tempdir_in(&base)
    {
        Ok(dir) => Ok(dir),
        Err(_) => tempfile::tempdir(),
    }
}

/// Chunk size of the synthetic state: 13 chunks, the last one short.
pub const MATRIX_CHUNK_ELEMENTS: u32 = 8192;

/// How the crash matrix runs.
#[derive(Clone, Debug)]
pub struct MatrixConfig {
    /// Seed of the synthetic states and of the sampled crash subsets.
    pub seed: u64,
    /// Most distinct states checked per power-loss scenario (0: all of them).
    pub max_states_per_scenario: usize,
    /// Threads that check crash states (default: the cores available, at most 8).
    pub threads: usize,
}

impl Default for MatrixConfig {
    fn default() -> Self {
        MatrixConfig {
            seed: 0x5eed,
            max_states_per_scenario: 0,
            threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8),
        }
    }
}

/// What a generation must look like to count as intact: each file and its digest.
#[derive(Clone, Debug)]
pub struct GenerationExpectation {
    /// The generation.
    pub generation: u64,
    /// The root of its logical state.
    pub logical_state_root: Digest,
    /// Each file it depends on (path relative to the store) and that file's SHA-256.
    pub files: Vec<(String, Digest)>,
}

/// The files a verified generation depends on (commit record, manifest, chunk objects).
pub fn generation_expectation(
    root: &Path,
    generation: u64,
) -> Result<GenerationExpectation, StoreError> {
    let verified = verify_generation_with(&RealFs, root, generation, false)?;
    let mut files = vec![
        (commit_rel_path(generation), verified.commit_digest),
        (
            object_rel_path(&verified.manifest_digest),
            verified.manifest_digest,
        ),
    ];
    for chunk in &verified.manifest.chunks {
        for (_, digest) in chunk.digests() {
            files.push((object_rel_path(&digest), digest));
        }
    }
    Ok(GenerationExpectation {
        generation,
        logical_state_root: verified.manifest.logical_state_root,
        files,
    })
}

/// What a writer run under the power-loss model is.
#[derive(Clone, Debug)]
pub enum Action {
    /// Publish this state at this topology.
    Publish(Box<LogicalState>, Topology),
    /// Reshard this generation to this topology.
    Reshard(u64, Topology),
    /// Publish into a store whose layout directories a killed writer created and never
    /// made durable (they exist, empty, but a power cut may still remove them).
    PublishOverKilledLayout(Box<LogicalState>, Topology),
    /// Rewrite LATEST for the selected generation of a store that lost it.
    RepairLatest,
    /// Publish this state at this topology with nothing observing the object barriers,
    /// so the writer installs objects from several threads (RFC 0001 §4); the recording
    /// is the interleaving that happened.
    PublishConcurrent(Box<LogicalState>, Topology),
    /// Publish this state at this topology into a store where a killed writer already
    /// installed every object of it (it stopped at its commit record) and none of those
    /// objects' names is durable (nor, with [`KilledWriterFiles::NothingSynced`], their
    /// data or the fan-out directories it created): each is found at its address, so the
    /// publish's found-object fsync (RFC 0001 §4 step 3) and its step 4 alone make them
    /// durable. With `concurrent`, nothing observes the object barriers, so the writer
    /// installs from several threads (as [`Action::PublishConcurrent`]); without, in order.
    PublishOverKilledObjects {
        /// The state both writers publish.
        state: Box<LogicalState>,
        /// Its topology.
        topology: Topology,
        /// What the killed writer had made durable of its files.
        files: KilledWriterFiles,
        /// Whether the publish may install its objects concurrently.
        concurrent: bool,
    },
    /// Publish this state at this topology (a genesis publish) through the bare relative
    /// root `store`, the recorded directory standing for the working directory: its
    /// parent is `.`, which the writer must fsync like any other parent.
    PublishBareRelativeRoot(Box<LogicalState>, Topology),
    /// Publish this state at this topology into a store holding wrong bytes (the right
    /// length, one byte changed) at the address of one of its objects: the writer finds
    /// a file there that does not verify and must replace it.
    PublishOverWrongBytes(Box<LogicalState>, Topology),
    /// Two writers race for one generation: the second claims it, then the first
    /// publishes it whole, then the second goes on to its commit, which the protocol
    /// refuses (generation taken). The candidate is the first writer's.
    PublishRacing {
        /// The first writer's state, which commits.
        first: Box<LogicalState>,
        /// The second writer's state, whose commit finds the generation taken.
        second: Box<LogicalState>,
        /// Both writers' topology.
        topology: Topology,
    },
    /// Repair LATEST after a writer of this state at this topology was killed between its
    /// commit record's rename and its `commits/` fsync: the record is visible and verifies
    /// but its name is not durable, and LATEST still names the previous generation.
    RepairAfterKilledCommit(Box<LogicalState>, Topology),
}

/// Subset enumeration for a concurrent publish, and for one over a killed writer's
/// objects: its renames (or the killed writer's creates) all stay pending until the run's
/// one step 4, so every subset of up to ten of them (the default) would be 1 024 images
/// per crash point; from five on, each point gets the prefixes, every all-but-one and 16
/// seeded random subsets of what is pending.
pub const CONCURRENT_LIMITS: EnumerationLimits = EnumerationLimits {
    all_subsets_up_to: 4,
    samples: 16,
    seed: 0x5eed,
};

/// How the crash images of `action`'s run are enumerated, seeded with `seed`: the
/// concurrent limits where many operations stay pending at once (a concurrent publish's
/// renames, a killed writer's creates), the default elsewhere.
pub fn limits_for(action: &Action, seed: u64) -> EnumerationLimits {
    let limits = match action {
        Action::PublishConcurrent(..) | Action::PublishOverKilledObjects { .. } => {
            CONCURRENT_LIMITS
        }
        _ => EnumerationLimits::default(),
    };
    EnumerationLimits { seed, ..limits }
}

/// The publish over a killed writer's objects that the matrix and the found-object mutants
/// run on a base holding generation 0: a four-worker publish, in order, of a 12-object
/// state (32 768-element chunks, as the concurrent scenario's) that the killed writer had
/// installed whole, leaving `files` durable of it. With the matrix's 39-object state the
/// killed writer's pending creates give 21 359 distinct states (10 minutes); these 12
/// give about 2 600.
pub fn over_killed_objects(seed: u64, files: KilledWriterFiles) -> Result<Action, LabError> {
    Ok(Action::PublishOverKilledObjects {
        state: Box::new(synthetic_state(seed, 2, 32_768)),
        topology: topology(4)?,
        files,
        concurrent: false,
    })
}

/// The publish over generation 0 onto wrong bytes at one of its objects' addresses that
/// the matrix and the `trust-found-object-bytes` mutant run: a four-worker publish of a
/// 12-object state (32 768-element chunks).
pub fn over_wrong_bytes(seed: u64) -> Result<Action, LabError> {
    Ok(Action::PublishOverWrongBytes(
        Box::new(synthetic_state(seed, 5, 32_768)),
        topology(4)?,
    ))
}

/// The two writers racing for generation 1 over generation 0 that the matrix and the
/// `commit-rename-replaces` mutant run: the first publishes a 12-object state, the second
/// republishes generation 0's state on two workers (every object found, a new manifest
/// and record), so their records differ.
pub fn two_writers_racing(seed: u64) -> Result<Action, LabError> {
    let (a, _) = matrix_states(seed);
    Ok(Action::PublishRacing {
        first: Box::new(synthetic_state(seed, 6, 32_768)),
        second: Box::new(a),
        topology: topology(2)?,
    })
}

/// The LATEST repair over generation 0 after a writer of a 12-object state was killed
/// between its commit rename and its `commits/` fsync, that the matrix and the
/// `repair-without-commits-fsync` mutant run.
pub fn repair_after_killed_commit(seed: u64) -> Result<Action, LabError> {
    Ok(Action::RepairAfterKilledCommit(
        Box::new(synthetic_state(seed, 7, 32_768)),
        topology(4)?,
    ))
}

/// The result of one power-loss scenario.
#[derive(Clone, Debug, Default)]
pub struct ScenarioOutcome {
    /// Operations the recorded run issued.
    pub trace_operations: u64,
    /// Crash images generated from the trace (every prefix, admissible subsets, data
    /// variants), before deduplication.
    pub crash_images: u64,
    /// Distinct states among them, as recovery can see them (everything outside `staging/`).
    pub distinct_states: u64,
    /// States recovery was checked on (all distinct ones unless capped).
    pub states_checked: u64,
    /// What was enumerated: crash points, and subsets of pending operations applied out
    /// of all of them (exhaustive unless `sampled`).
    pub enumeration: Enumeration,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// The deliberate faults a model run is given: none for the matrix, one for each mutant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelFaults {
    /// Faults of the writer (publish, reshard).
    pub writer: WriterFaults,
    /// Faults of recovery.
    pub recovery: RecoveryFaults,
}

impl ModelFaults {
    /// No fault: the real protocol.
    pub const NONE: ModelFaults = ModelFaults {
        writer: WriterFaults::NONE,
        recovery: RecoveryFaults::NONE,
    };
}

fn recover_guarded(dir: &Path, faults: RecoveryFaults) -> Result<RecoveryReport, String> {
    match catch_unwind(AssertUnwindSafe(|| recover_faulty(&RealFs, dir, faults))) {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(e)) => Err(format!("recovery failed: {e}")),
        Err(_) => Err("recovery panicked".into()),
    }
}

/// Recovery (with `faults`, for the recovery mutants) twice with the tree hashed around
/// it; LATEST removed must not change the answer; the selected generation must load with
/// the expected root.
fn check_recovery_common(
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
            violations.push(Violation::new(
                Invariant::RecoveryCompletes,
                format!("{context}: {e}"),
            ));
            return None;
        }
    };
    let second = recover_guarded(dir, faults);
    let after = tree_digest(dir).ok();
    if before.is_none() || before != after {
        violations.push(Violation::new(
            Invariant::RecoveryChangesNothing,
            format!("{context}: recovery modified the store"),
        ));
    }
    if second.as_ref() != Ok(&first) {
        violations.push(Violation::new(
            Invariant::RecoveryIsDeterministic,
            format!("{context}: recovery is not idempotent"),
        ));
    }
    if let Some(selected) = &first.selected {
        match catch_unwind(AssertUnwindSafe(|| {
            crate::store::load_generation(dir, selected.generation)
        })) {
            Ok(Ok((state, _))) => {
                let root = state.logical_state_root();
                if roots.get(&selected.generation) != Some(&root) {
                    violations.push(Violation::new(
                        Invariant::SelectedGenerationLoads,
                        format!(
                            "{context}: generation {} loaded with root {root}, not the published one",
                            selected.generation
                        ),
                    ));
                }
            }
            Ok(Err(e)) => violations.push(Violation::new(
                Invariant::SelectedGenerationLoads,
                format!("{context}: selected generation does not load: {e}"),
            )),
            Err(_) => violations.push(Violation::new(
                Invariant::SelectedGenerationLoads,
                format!("{context}: load panicked"),
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
                _ => violations.push(Violation::new(
                    Invariant::LatestNeverChangesTheAnswer,
                    format!("{context}: LATEST changed the answer"),
                )),
            }
            let _ = std::fs::rename(&hidden, &latest);
        }
    }
    Some(first)
}

/// Rename is the only way a name appears in `objects/` or `commits/` (RFC 0001 §4), so
/// a crash image may show such a name only with its complete bytes: an object whose bytes
/// are its address, a commit record that decodes. A writer that renames before the data is
/// durable, or writes in place, exposes torn bytes here even when recovery rejects them.
/// A file a killed writer left with its data unsynced ([`KilledWriterFiles::NothingSynced`])
/// is that writer's until this run fsyncs it or renames its commit record into place, and
/// is not counted against this run before then.
fn torn_visible_files(recording: &Recording, state: &CrashState, context: &str) -> Vec<Violation> {
    let mut violations = Vec::new();
    // Once the run's commit record is renamed into place, a torn file next to it is the
    // run's: it committed without making that file durable.
    let committed = recording
        .mark_of(Barrier::CommitAfterRename)
        .is_some_and(|at| state.crash_point >= at);
    for (path, entry) in &state.image {
        if let ImageEntry::File { inode, .. } = entry {
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
        let Some(bytes) = recording.file_bytes(&state.image, path) else {
            continue;
        };
        let torn = !complete_bytes(rel, &bytes);
        if torn {
            violations.push(Violation::new(
                Invariant::CompleteBytesVisible,
                format!(
                    "{context}: {rel} is visible with incomplete bytes ({} bytes)",
                    bytes.len()
                ),
            ));
        }
    }
    violations
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

fn intact(recording: &Recording, state: &CrashState, expectation: &GenerationExpectation) -> bool {
    intact_with(expectation, |path| {
        recording.file_bytes(&state.image, &recording.store_path(path))
    })
}

struct ScenarioChecks<'a> {
    recording: &'a Recording,
    expectations: StoreExpectations<'a>,
    /// Operations issued when the candidate's `commits/` fsync (step 12) completed.
    durable_from: Option<usize>,
    /// Operations issued when LATEST's `refs/` fsync (step 16) completed.
    latest_durable_from: Option<usize>,
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

fn check_crash_state(
    checks: &ScenarioChecks<'_>,
    state: &CrashState,
    violations: &mut Vec<Violation>,
) {
    let context = format!("power-loss state at op {}", state.crash_point);
    let Ok(dir) = scratch_dir() else {
        violations.push(Violation::new(
            Invariant::CheckCompleted,
            format!("{context}: cannot create a temp dir"),
        ));
        return;
    };
    if let Err(e) = checks.recording.materialize(&state.image, dir.path()) {
        violations.push(Violation::new(
            Invariant::CheckCompleted,
            format!("{context}: cannot materialize: {e}"),
        ));
        return;
    }
    violations.extend(torn_visible_files(checks.recording, state, &context));
    let store_dir = dir.path().join(&checks.recording.store);
    let expectations = &checks.expectations;
    let view = StoreStateView {
        context: &context,
        store_dir: checks
            .recording
            .has_store_root(&state.image)
            .then_some(store_dir.as_path()),
        candidate_intact: intact(checks.recording, state, expectations.candidate),
        previous_intact: expectations
            .previous
            .is_some_and(|p| intact(checks.recording, state, p)),
        candidate_durable: checks
            .durable_from
            .is_some_and(|from| state.crash_point >= from),
        latest_durable: checks
            .latest_durable_from
            .is_some_and(|from| state.crash_point >= from),
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
        violations.push(Violation::new(
            Invariant::SelectedPreviousOrCandidate,
            format!("{context}: selected {selected:?}, neither previous nor candidate"),
        ));
    }
    if selected != expected {
        violations.push(Violation::new(
            Invariant::NewestIntactSelected,
            format!(
                "{context}: selected {selected:?} but the fully intact newest generation is {expected:?}"
            ),
        ));
    }
    let lost = if view.store_dir.is_some() {
        ""
    } else {
        " (the store root itself is absent)"
    };
    if previous.is_some() && !previous_ok {
        violations.push(Violation::new(
            Invariant::CommittedNotLost,
            format!("{context}: the previous durable generation was lost{lost}"),
        ));
    }
    // Committed means its record and every file it names survive, not only a record of
    // that generation: a second writer's record replacing it loses it too.
    let kept = selected == Some(candidate.generation) && candidate_ok;
    if view.candidate_durable && !kept {
        violations.push(Violation::new(
            Invariant::CommittedNotLost,
            format!(
                "{context}: generation {} was lost after its commits/ fsync{lost}",
                candidate.generation
            ),
        ));
    }
    if matches!(latest, Some(LatestStatus::Ahead | LatestStatus::Garbage)) {
        violations.push(Violation::new(
            Invariant::LatestNeverAheadOrGarbage,
            format!("{context}: LATEST is {latest:?}: the writer exposed a hint ahead of durable commits"),
        ));
    }
    if view.latest_durable && latest != Some(LatestStatus::Consistent) {
        violations.push(Violation::new(
            Invariant::LatestDurableAfterItsFsync,
            format!("{context}: LATEST is {latest:?} after its refs/ fsync completed"),
        ));
    }
}

/// Where the matrix puts the store under the recorded directory: the recorder images the
/// store root's parent, so the root's own entry is one the model may lose.
pub const STORE_DIR_NAME: &str = "store";

/// Records one writer run on a copy of `base` (or a store the run creates) and checks
/// recovery on every distinct derived crash state (at most `max_states` when nonzero,
/// sampled evenly). The recorded directory is the store root's parent: the root is part
/// of the model, created by the run when there is no base. A copied base also gets a
/// killed writer's garbage in `staging/`, named as this process's own writer would name
/// its first temp file (a restarted container reuses pids).
pub fn power_loss_scenario(
    base: Option<&Path>,
    action: &Action,
    faults: ModelFaults,
    limits: EnumerationLimits,
    plan: CheckPlan,
) -> Result<ScenarioOutcome, LabError> {
    let work = scratch_dir()?;
    let root = work.path().join(STORE_DIR_NAME);
    let (previous, mut roots) = match base {
        Some(base) => {
            std::fs::create_dir(&root)?;
            let seeded = seed_from_base(base, &root)?;
            plant_staging_garbage(&root)?;
            seeded
        }
        None => (None, BTreeMap::new()),
    };
    let (candidate, recording) = record_action(work.path(), &root, action, faults.writer)?;
    roots.insert(candidate.generation, candidate.logical_state_root);
    let durable_from = recording.mark_of(Barrier::CommitAfterDirectoryFsync);
    let latest_durable_from = recording.mark_of(Barrier::LatestAfterDirectoryFsync);
    let (images, enumeration) = recording.crash_states_counted(limits);
    let crash_images = images.len() as u64;
    let distinct = distinct_states(&recording, images);
    let distinct_count = distinct.len() as u64;
    let mut states = sample_evenly(distinct, plan.max_states);
    if plan.stop_after_violations.is_some() {
        // Hunting a mutant: a seeded shuffle spreads the first checks over the whole run.
        let mut rng = SplitMix64::keyed(limits.seed, "shardlift/lab/mutant-order", 0);
        for i in (1..states.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            states.swap(i, j);
        }
    }
    let checks = ScenarioChecks {
        recording: &recording,
        expectations: StoreExpectations {
            recovery: faults.recovery,
            previous: previous.as_ref(),
            candidate: &candidate,
            roots,
        },
        durable_from,
        latest_durable_from,
    };
    let (violations, states_checked) = check_crash_states(&checks, &states, plan);
    Ok(ScenarioOutcome {
        trace_operations: recording.ops.len() as u64,
        crash_images,
        distinct_states: distinct_count,
        states_checked,
        enumeration,
        violations,
    })
}

/// One state per recovery-visible image. Every check but one depends only on what
/// recovery can see; that one (a generation must survive once its `commits/` fsync was
/// issued) depends on the crash point, so each state keeps the latest crash point that
/// produced it, where the check is strictest.
fn distinct_states(recording: &Recording, images: Vec<CrashState>) -> Vec<CrashState> {
    let mut by_view: BTreeMap<Digest, CrashState> = BTreeMap::new();
    for state in images {
        let view = recording.visible_digest(&state.image);
        match by_view.get_mut(&view) {
            Some(kept) if kept.crash_point >= state.crash_point => {}
            Some(kept) => *kept = state,
            None => {
                by_view.insert(view, state);
            }
        }
    }
    let mut states: Vec<CrashState> = by_view.into_values().collect();
    states.sort_by_key(|s| s.crash_point);
    states
}

/// A killed writer's leftovers in `staging/`: a torn object temp file under the exact name
/// this process's writer will try first for the next generation, and an unrelated one.
fn plant_staging_garbage(root: &Path) -> Result<(), LabError> {
    let generation = crate::store::writer::next_generation(&RealFs, root)?;
    let staging = root.join("staging");
    let colliding = staging.join(format!("object-{}-{generation}-1.tmp", std::process::id()));
    std::fs::write(colliding, b"torn bytes of a killed writer")?;
    std::fs::write(staging.join("commit-1-0-1.tmp"), b"{\"schema\":")?;
    Ok(())
}

/// Copies `base` into `root`: the generation recovery selects there (the previous durable
/// one) and the logical state root of every valid generation.
fn seed_from_base(
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
struct StopAtCommit;

impl BarrierHook for StopAtCommit {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), String> {
        if event.barrier == Barrier::CommitAfterWrite {
            return Err("the killed writer's last step".into());
        }
        Ok(())
    }
}

/// Publishes `state` on `root` (not recorded) up to its commit record's write and returns
/// what that run added under `objects/`: the fan-out directories it created and its
/// installed objects, a killed writer's. At least one object must be new, or the scenario
/// would find nothing to check.
fn install_as_killed_writer(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<(Vec<String>, Vec<String>), LabError> {
    let dirs_before = fan_out_dirs(root)?;
    let before = object_files(root)?;
    match publish_with(
        &RealFs,
        root,
        state,
        topology,
        &mut StopAtCommit,
        WriterFaults::NONE,
    ) {
        Err(StoreError::Stopped { .. }) => {}
        Err(error) => return Err(error.into()),
        Ok(_) => {
            return Err(LabError::Model(
                "the killed writer's publish was not stopped at its commit".into(),
            ))
        }
    }
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
fn object_files(root: &Path) -> Result<BTreeSet<String>, LabError> {
    Ok(list_files(root)?
        .into_iter()
        .filter(|file| file.starts_with("objects/"))
        .collect())
}

/// The fan-out directories `objects/xx`, relative to `root`.
fn fan_out_dirs(root: &Path) -> Result<BTreeSet<String>, LabError> {
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
fn record_action(
    parent: &Path,
    root: &Path,
    action: &Action,
    faults: WriterFaults,
) -> Result<(GenerationExpectation, Recording), LabError> {
    let in_parent = |rel: &str| format!("{STORE_DIR_NAME}/{rel}");
    let recorder = |fs: RecordingFs| fs.with_store_at(STORE_DIR_NAME);
    let fs = match action {
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
    };
    let mut candidate = None;
    let generation = {
        let mut hooks = MarkingHooks(&fs);
        match action {
            Action::Publish(state, topology)
            | Action::PublishOverKilledLayout(state, topology)
            | Action::PublishConcurrent(state, topology)
            | Action::PublishOverWrongBytes(state, topology)
            | Action::PublishOverKilledObjects {
                state, topology, ..
            } => publish_with(&fs, root, state, *topology, &mut hooks, faults)?.generation,
            Action::PublishBareRelativeRoot(state, topology) => {
                // The recorder resolves a relative path in the recorded directory, as if it
                // were the working directory: the writer's root is the bare name.
                let bare = Path::new(STORE_DIR_NAME);
                publish_with(&fs, bare, state, *topology, &mut hooks, faults)?.generation
            }
            Action::Reshard(generation, topology) => {
                reshard_with(
                    &fs,
                    root,
                    *generation,
                    *topology,
                    ObjectCheck::Lengths,
                    &mut hooks,
                    &mut NoProgress,
                )?
                .generation
            }
            Action::RepairLatest | Action::RepairAfterKilledCommit(..) => {
                let report = crate::store::recovery::recover_with(&fs, root)?;
                let selected = report.selected.ok_or_else(|| {
                    LabError::Model("a LATEST repair needs a valid generation".into())
                })?;
                crate::store::writer::Writer::repair_latest_with(
                    &fs,
                    root,
                    &mut hooks,
                    selected.generation,
                    selected.commit_digest,
                    faults,
                )?;
                selected.generation
            }
            Action::PublishRacing {
                first,
                second,
                topology,
            } => {
                let mut race = RaceHook {
                    fs: &fs,
                    root,
                    first,
                    topology: *topology,
                    faults,
                    committed: None,
                };
                match publish_with(&fs, root, second, *topology, &mut race, faults) {
                    // The protocol: the second writer finds the generation taken.
                    Err(StoreError::GenerationTaken { .. }) => {}
                    // A writer whose rename replaces goes on and commits over it.
                    Ok(_) if faults.commit_rename_replaces => {}
                    Ok(summary) => {
                        return Err(LabError::Model(format!(
                            "the second racing writer committed generation {} too",
                            summary.generation
                        )))
                    }
                    Err(error) => return Err(error.into()),
                }
                let (generation, expectation) = race
                    .committed
                    .ok_or_else(|| LabError::Model("the first racing writer never ran".into()))??;
                candidate = Some(expectation);
                generation
            }
        }
    };
    let candidate = match candidate {
        Some(candidate) => candidate,
        None => recorded_expectation(root, generation)?,
    };
    let recording = fs.finish();
    // The concurrent scenario must check a concurrent run: a writer that went sequential
    // (a hook that observes, a file system threads may not share) reports object barriers.
    let concurrent = matches!(
        action,
        Action::PublishConcurrent(..)
            | Action::PublishOverKilledObjects {
                concurrent: true,
                ..
            }
    );
    if concurrent && faults.allow_concurrent_install() {
        if let Some((barrier, _)) = recording
            .marks
            .iter()
            .find(|(barrier, _)| barrier.name().starts_with("object-"))
        {
            return Err(LabError::Model(format!(
                "the concurrent-install scenario ran sequentially: it reported {}",
                barrier.name()
            )));
        }
    }
    Ok((candidate, recording))
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
struct RaceHook<'a> {
    fs: &'a RecordingFs,
    root: &'a Path,
    first: &'a LogicalState,
    topology: Topology,
    faults: WriterFaults,
    /// The first writer's generation and what it committed, once it ran.
    committed: Option<Result<(u64, GenerationExpectation), LabError>>,
}

impl BarrierHook for RaceHook<'_> {
    fn reached(&mut self, _event: &BarrierEvent) -> Result<(), String> {
        if self.committed.is_none() {
            let mut hooks = MarkingHooks(self.fs);
            let first = publish_with(
                self.fs,
                self.root,
                self.first,
                self.topology,
                &mut hooks,
                self.faults,
            )
            .map_err(LabError::from)
            .and_then(|summary| {
                recorded_expectation(self.root, summary.generation)
                    .map(|expectation| (summary.generation, expectation))
            });
            self.committed = Some(first);
        }
        Ok(())
    }
}

/// Plants wrong bytes (the right length, one byte changed) at the address of one object
/// of `state` that `root` does not hold, as outside damage would: the publish finds a file
/// at that address whose bytes do not verify, and must replace it (RFC 0001 §4).
fn plant_wrong_bytes(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<(), LabError> {
    let scratch = scratch_dir()?;
    let elsewhere = scratch.path().join(STORE_DIR_NAME);
    publish_with(
        &RealFs,
        &elsewhere,
        state,
        topology,
        &mut NoHooks,
        WriterFaults::NONE,
    )?;
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
struct StopAfterCommitRename;

impl BarrierHook for StopAfterCommitRename {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), String> {
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
fn commit_as_killed_writer(
    root: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<String, LabError> {
    let generation = crate::store::writer::next_generation(&RealFs, root)?;
    match publish_with(
        &RealFs,
        root,
        state,
        topology,
        &mut StopAfterCommitRename,
        WriterFaults::NONE,
    ) {
        Err(StoreError::Stopped { .. }) => Ok(commit_rel_path(generation)),
        Err(error) => Err(error.into()),
        Ok(_) => Err(LabError::Model(
            "the killed writer's publish was not stopped at its commit rename".into(),
        )),
    }
}

/// At most `max_states` of `states`, evenly spaced (all of them when `max_states` is 0).
fn sample_evenly(states: Vec<CrashState>, max_states: usize) -> Vec<CrashState> {
    if states.len() > max_states && max_states > 0 {
        let stride = states.len() as f64 / max_states as f64;
        (0..max_states)
            .filter_map(|i| states.get((i as f64 * stride) as usize).cloned())
            .collect()
    } else {
        states
    }
}

/// How a scenario's states are checked.
#[derive(Clone, Copy, Debug)]
pub struct CheckPlan {
    /// Check at most this many distinct states, sampled evenly (0: all of them).
    pub max_states: usize,
    /// Threads checking states.
    pub threads: usize,
    /// Stop once this many violations are found (a mutant is killed by the first one of
    /// its expected invariant); `None` checks every state.
    pub stop_after_violations: Option<usize>,
    /// Count only violations of this invariant towards `stop_after_violations` (`None`:
    /// every violation counts).
    pub stop_counting: Option<Invariant>,
}

impl CheckPlan {
    /// Every distinct state, on `threads` threads.
    pub fn exhaustive(threads: usize) -> Self {
        CheckPlan {
            max_states: 0,
            threads,
            stop_after_violations: None,
            stop_counting: None,
        }
    }
}

/// Checks crash states on `plan.threads` threads (thread `t` takes states `t`, `t + n`,
/// ...), stopping early only when the plan says so.
fn check_crash_states(
    checks: &ScenarioChecks<'_>,
    states: &[CrashState],
    plan: CheckPlan,
) -> (Vec<Violation>, u64) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = plan.threads.max(1);
    let found_total = AtomicUsize::new(0);
    let found_total = &found_total;
    let mut violations = Vec::new();
    let mut checked_total = 0u64;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|first| {
                scope.spawn(move || {
                    let mut found = Vec::new();
                    let mut checked = 0u64;
                    for state in states.iter().skip(first).step_by(threads) {
                        if plan
                            .stop_after_violations
                            .is_some_and(|stop| found_total.load(Ordering::Relaxed) >= stop)
                        {
                            break;
                        }
                        let before = found.len();
                        check_crash_state(checks, state, &mut found);
                        checked += 1;
                        let counted = found[before..]
                            .iter()
                            .filter(|v| plan.stop_counting.is_none_or(|i| v.invariant == i))
                            .count();
                        found_total.fetch_add(counted, Ordering::Relaxed);
                    }
                    (found, checked)
                })
            })
            .collect();
        for handle in handles {
            match handle.join() {
                Ok((found, checked)) => {
                    violations.extend(found);
                    checked_total += checked;
                }
                Err(_) => violations.push(Violation::new(
                    Invariant::CheckCompleted,
                    "a checker thread panicked",
                )),
            }
        }
    });
    (violations, checked_total)
}

/// The synthetic states the matrix uses: A (step 3) and B (step 4).
pub fn matrix_states(seed: u64) -> (LogicalState, LogicalState) {
    (
        synthetic_state(seed, 3, MATRIX_CHUNK_ELEMENTS),
        synthetic_state(seed, 4, MATRIX_CHUNK_ELEMENTS),
    )
}

fn topology(workers: u32) -> Result<Topology, LabError> {
    Ok(Topology::new(workers)?)
}

/// Kills a publisher at `barrier` (occurrence `occurrence`) on a copy of `base` and checks
/// the transcript and a fresh child's recovery.
pub fn process_kill_case(
    exe: &Path,
    base: Option<&Path>,
    state: &LogicalState,
    barrier: Barrier,
    occurrence: u32,
) -> Result<Vec<Violation>, LabError> {
    let work = scratch_dir()?;
    let root = work.path().join("store");
    let (previous, mut roots) = match base {
        Some(base) => {
            std::fs::create_dir(&root)?;
            kill_base(base, &root)?
        }
        None => (None, BTreeMap::new()),
    };
    roots.insert(previous.map_or(0, |p| p + 1), state.logical_state_root());
    let context = format!("kill at {barrier}#{occurrence}");
    let report = kill_publisher_at_occurrence(exe, &root, state, topology(4)?, barrier, occurrence)
        .map_err(LabError::during(context.clone()))?;
    let mut violations = kill_transcript_violations(&report, barrier, occurrence, &context);
    if !root.exists() {
        // Killed before the layout existed: nothing to recover.
        return Ok(violations);
    }
    let expected = if report.candidate_visible {
        Some(report.candidate_generation)
    } else {
        previous
    };
    violations.extend(child_recovery_violations(
        exe, &root, &roots, expected, &context,
    )?);
    Ok(violations)
}

/// Copies `base` into `root`: the generation recovery selects there and the logical state
/// root of every valid generation.
pub(crate) fn kill_base(
    base: &Path,
    root: &Path,
) -> Result<(Option<u64>, BTreeMap<u64, Digest>), LabError> {
    copy_tree(base, root)?;
    let report = crate::store::recover(root)?;
    let mut roots = BTreeMap::new();
    for g in &report.valid_generations {
        roots.insert(*g, generation_expectation(root, *g)?.logical_state_root);
    }
    Ok((report.selected.map(|s| s.generation), roots))
}

/// The publisher died of SIGKILL right after the last acknowledged event, and its
/// candidate is visible exactly when the protocol says so.
fn kill_transcript_violations(
    report: &KillReport,
    barrier: Barrier,
    occurrence: u32,
    context: &str,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    if report.signal != Some(9) || !report.reaped {
        violations.push(Violation::new(
            Invariant::PublisherKilledAndReaped,
            format!(
                "{context}: publisher not killed by signal 9 and reaped (reaped: {}, {:?})",
                report.reaped, report.exit
            ),
        ));
    }
    if report.unacknowledged.barrier != barrier
        || report.unacknowledged.occurrence != occurrence
        || report.unacknowledged.seq != report.acknowledged.len() as u64
        || report
            .acknowledged
            .iter()
            .enumerate()
            .any(|(i, e)| e.seq != i as u64)
    {
        violations.push(Violation::new(
            Invariant::KillTranscriptMatches,
            format!("{context}: acknowledged transcript does not end right before the target"),
        ));
    }
    if report.candidate_visible != barrier.commit_visible() {
        violations.push(Violation::new(
            Invariant::CandidateVisibleAsTheProtocolSays,
            format!(
                "{context}: candidate visible = {}, protocol says {}",
                report.candidate_visible,
                barrier.commit_visible()
            ),
        ));
    }
    violations
}

/// A fresh child's recovery leaves the store unchanged, selects `expected`, exposes no
/// LATEST ahead of the commits, and agrees with an in-process recovery that passes the
/// common checks against `roots` (the published root of each generation).
pub fn child_recovery_violations(
    exe: &Path,
    root: &Path,
    roots: &BTreeMap<u64, Digest>,
    expected: Option<u64>,
    context: &str,
) -> Result<Vec<Violation>, LabError> {
    let mut violations = Vec::new();
    let before = tree_digest(root)?;
    let first = recover_in_child(exe, root).map_err(LabError::during(context))?;
    if tree_digest(root)? != before {
        violations.push(Violation::new(
            Invariant::RecoveryChangesNothing,
            format!("{context}: recovery modified the store"),
        ));
    }
    let selected = first.selected.as_ref().map(|s| s.generation);
    if selected != expected {
        violations.push(Violation::new(
            Invariant::NewestIntactSelected,
            format!("{context}: selected {selected:?}, expected {expected:?}"),
        ));
    }
    if matches!(
        first.latest.status,
        LatestStatus::Ahead | LatestStatus::Garbage
    ) {
        violations.push(Violation::new(
            Invariant::LatestNeverAheadOrGarbage,
            format!("{context}: LATEST is {:?}", first.latest.status),
        ));
    }
    // The in-process checks (idempotence, LATEST never changes the answer, the selected
    // generation loads with its published root) count like every other: a failed
    // in-process recovery is recorded by `check_recovery_common` itself.
    let in_process =
        check_recovery_common(root, roots, &mut violations, context, RecoveryFaults::NONE);
    if in_process.is_some_and(|r| r.selected != first.selected) {
        violations.push(Violation::new(
            Invariant::RecoveryIsDeterministic,
            format!("{context}: in-process and child recovery disagree"),
        ));
    }
    Ok(violations)
}

/// The healthy store the corruption cases damage: generation 0 = A on 4 workers,
/// 1 = B on 4 workers, 2 = B resharded to 3 workers; LATEST names 2.
pub fn build_corruption_base(root: &Path, seed: u64) -> Result<(), LabError> {
    let (a, b) = matrix_states(seed);
    publish_with(
        &RealFs,
        root,
        &a,
        topology(4)?,
        &mut NoHooks,
        WriterFaults::default(),
    )?;
    publish_with(
        &RealFs,
        root,
        &b,
        topology(4)?,
        &mut NoHooks,
        WriterFaults::default(),
    )?;
    reshard_with(
        &RealFs,
        root,
        1,
        topology(3)?,
        ObjectCheck::Lengths,
        &mut NoHooks,
        &mut NoProgress,
    )?;
    Ok(())
}

/// Every corruption case for a healthy store.
pub fn corruption_cases(base: &Path) -> Result<Vec<Damage>, LabError> {
    let mut cases = per_file_damage(&list_files(base)?);
    let g2 = generation_expectation(base, 2)?;
    let g1 = generation_expectation(base, 1)?;
    let g0 = generation_expectation(base, 0)?;
    cases.extend(misdirected_writes(&g0, &g1, &g2));
    cases.extend(latest_rewrites(&g0)?);
    cases.extend(clutter());
    Ok(cases)
}

/// Every file bit-flipped in the middle, half-truncated and deleted; the first file of
/// each top-level kind also flipped at both ends and truncated to nothing.
fn per_file_damage(files: &[String]) -> Vec<Damage> {
    let mut cases = Vec::new();
    let mut seen_kind = std::collections::BTreeSet::new();
    for file in files {
        cases.push(Damage::BitFlip {
            file: file.clone(),
            offset: FileOffset::Middle,
        });
        cases.push(Damage::Truncate {
            file: file.clone(),
            keep_per_mille: 500,
        });
        cases.push(Damage::Delete { file: file.clone() });
        let kind = file.split('/').next().unwrap_or("").to_owned();
        if seen_kind.insert(kind) {
            for offset in [FileOffset::First, FileOffset::Last] {
                cases.push(Damage::BitFlip {
                    file: file.clone(),
                    offset,
                });
            }
            cases.push(Damage::Truncate {
                file: file.clone(),
                keep_per_mille: 0,
            });
        }
    }
    cases
}

/// Misdirected writes: a chunk object, a manifest and a commit record overwritten with
/// another file's bytes.
fn misdirected_writes(
    g0: &GenerationExpectation,
    g1: &GenerationExpectation,
    g2: &GenerationExpectation,
) -> [Damage; 4] {
    let misdirect = |file: &(String, Digest), source: &(String, Digest)| Damage::Misdirect {
        file: file.0.clone(),
        source: source.0.clone(),
    };
    [
        misdirect(&g2.files[2], &g2.files[3]),
        misdirect(&g2.files[1], &g1.files[1]),
        misdirect(&g2.files[0], &g1.files[0]),
        misdirect(&g1.files[4], &g0.files[4]),
    ]
}

/// LATEST rewritten: stale (generation 0), ahead (generation 7), and not a record.
fn latest_rewrites(g0: &GenerationExpectation) -> Result<[Damage; 3], LabError> {
    let latest = |generation: u64, commit: Digest| {
        crate::store::codec::encode(&crate::store::codec::LatestRecord {
            schema: crate::store::codec::LATEST_SCHEMA.into(),
            version: crate::store::codec::SCHEMA_VERSION,
            generation,
            commit,
        })
    };
    let write = |bytes: Vec<u8>| Damage::Write {
        file: LATEST_REL_PATH.into(),
        bytes,
    };
    Ok([
        write(latest(0, g0.files[0].1)?),
        write(latest(7, g0.files[0].1)?),
        write(b"not a record".to_vec()),
    ])
}

/// Leftover temp files, unknown entries, and a directory where a commit record belongs.
fn clutter() -> Vec<Damage> {
    let mut cases: Vec<Damage> = [
        ("staging/object-1-1.tmp", &b"partial"[..]),
        ("commits/00000000000000000003.json.tmp", b"{"),
        ("commits/README", b"unknown"),
        ("commits/00000000000000000009.json", b"garbage"),
        ("objects/zz/unknown", b"unknown"),
        ("objects/unknown", b"unknown"),
        ("unknown-at-root", b"unknown"),
        ("refs/LATEST.tmp", b"x"),
    ]
    .into_iter()
    .map(|(file, bytes)| Damage::Write {
        file: file.into(),
        bytes: bytes.to_vec(),
    })
    .collect();
    cases.push(Damage::Mkdir {
        dir: "commits/00000000000000000005.json".into(),
    });
    cases
}

/// Applies one damage to a copy of `base` and checks recovery (with `faults`, for the
/// recovery mutants).
pub fn corruption_case(
    base: &Path,
    damage: &Damage,
    expectations: &[GenerationExpectation],
    faults: RecoveryFaults,
) -> Result<Vec<Violation>, LabError> {
    let work = scratch_dir()?;
    let root = work.path().join("store");
    std::fs::create_dir(&root)?;
    copy_tree(base, &root)?;
    damage.apply(&root)?;
    let context = damage.describe();
    let mut violations = Vec::new();
    let roots: BTreeMap<u64, Digest> = expectations
        .iter()
        .map(|e| (e.generation, e.logical_state_root))
        .collect();
    let Some(report) = check_recovery_common(&root, &roots, &mut violations, &context, faults)
    else {
        return Ok(violations);
    };
    let intact = |e: &GenerationExpectation| {
        e.files.iter().all(|(path, digest)| {
            std::fs::read(root.join(path)).is_ok_and(|bytes| Digest::of(&bytes) == *digest)
        })
    };
    let expected = expectations
        .iter()
        .filter(|e| intact(e))
        .map(|e| e.generation)
        .max();
    let selected = report.selected.as_ref().map(|s| s.generation);
    if selected != expected {
        violations.push(Violation::new(
            Invariant::NewestIntactSelected,
            format!("{context}: selected {selected:?}, expected {expected:?}"),
        ));
    }
    for e in expectations.iter().filter(|e| !intact(e)) {
        match crate::store::load_generation(&root, e.generation) {
            Ok(_) => violations.push(Violation::new(
                Invariant::DamagedGenerationNeverLoads,
                format!("{context}: damaged generation {} loaded", e.generation),
            )),
            Err(error) if error.path().is_none() => violations.push(Violation::new(
                Invariant::LoadErrorNamesTheFile,
                format!("{context}: error names no file: {error}"),
            )),
            Err(_) => {}
        }
    }
    Ok(violations)
}

/// Counts of one power-loss scenario.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioFigures {
    /// The scenario's name.
    pub name: &'static str,
    /// See [`ScenarioOutcome::trace_operations`].
    pub trace_operations: u64,
    /// See [`ScenarioOutcome::crash_images`].
    pub crash_images: u64,
    /// See [`ScenarioOutcome::distinct_states`].
    pub distinct_states: u64,
    /// See [`ScenarioOutcome::states_checked`].
    pub states_checked: u64,
    /// Whether some crash point had more pending operations than the enumeration limit,
    /// so its subsets were sampled (prefixes, all-but-one, seeded samples), not all
    /// applied: the scenario's enumeration is then not exhaustive.
    pub sampled: bool,
    /// The limit: every subset is applied where at most this many operations are pending.
    pub all_subsets_up_to: u64,
    /// Most operations pending at one crash point.
    pub max_pending: u64,
    /// Distinct subsets of pending operations applied, summed over the crash points.
    pub subsets_checked: u64,
    /// Subsets there are (2^pending per crash point), summed over the crash points,
    /// saturating at `u64::MAX`; equal to `subsets_checked` when not `sampled`.
    pub subsets_total: u64,
}

/// What one phase of the matrix ran (kills, states or cases) and the violations it found.
pub struct PhaseTally {
    /// Kills, states or cases run.
    pub count: u64,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// Process kills: every barrier, plus the last occurrence of each object barrier and a
/// genesis publish killed around the commit rename.
pub fn process_kill_phase(
    exe: &Path,
    base: &Path,
    a: &LogicalState,
    b: &LogicalState,
    progress: &mut dyn Progress,
) -> Result<PhaseTally, LabError> {
    let objects_per_state = u32::try_from(b.chunks().len() * 3).map_err(|_| {
        LabError::Model(format!(
            "{} chunks do not fit the barrier count",
            b.chunks().len()
        ))
    })?;
    let mut kills: Vec<(Option<&Path>, Barrier, u32)> = Barrier::ALL
        .iter()
        .map(|&barrier| (Some(base), barrier, 1))
        .collect();
    for barrier in &Barrier::ALL[..4] {
        kills.push((Some(base), *barrier, objects_per_state));
    }
    for barrier in [Barrier::CommitAfterFileFsync, Barrier::CommitAfterRename] {
        kills.push((None, barrier, 1));
    }
    let mut violations = Vec::new();
    progress.phase("crash-matrix: kills at barriers", Some(kills.len() as u64));
    for (i, (from, barrier, occurrence)) in kills.iter().enumerate() {
        let state = if from.is_some() { b } else { a };
        violations.extend(process_kill_case(exe, *from, state, *barrier, *occurrence)?);
        progress.advance(i as u64 + 1);
    }
    progress.finish();
    Ok(PhaseTally {
        count: kills.len() as u64,
        violations,
    })
}

/// What the power-loss phase found.
pub struct PowerLossTally {
    /// Each scenario's counts, in the order run.
    pub scenarios: Vec<ScenarioFigures>,
    /// Violations of every scenario, each detail prefixed with its scenario's name.
    pub violations: Vec<Violation>,
}

/// Power loss: genesis publish, publish over a durable generation, reshard, a
/// deduplicating republish, a genesis publish with small chunks, a publish into a layout a
/// killed writer left non-durable, a LATEST repair, a publish over a generation with
/// objects installed concurrently, a publish onto the objects a killed writer of the
/// same state installed and never synced (found at their addresses, made durable only by
/// this run), a genesis publish through a bare relative root, a publish onto wrong bytes
/// at one of its objects' addresses, two writers racing for one generation, and a LATEST
/// repair after a writer killed between its commit rename and its `commits/` fsync.
pub fn power_loss_phase(
    base: &Path,
    a: &LogicalState,
    b: &LogicalState,
    config: &MatrixConfig,
    faults: ModelFaults,
    progress: &mut dyn Progress,
) -> Result<PowerLossTally, LabError> {
    let scenarios: [(&'static str, Option<&Path>, Action); 13] = [
        (
            "genesis publish",
            None,
            Action::Publish(Box::new(a.clone()), topology(4)?),
        ),
        (
            "publish over generation 0",
            Some(base),
            Action::Publish(Box::new(b.clone()), topology(4)?),
        ),
        (
            "reshard generation 0 to 3 workers",
            Some(base),
            Action::Reshard(0, topology(3)?),
        ),
        (
            "republish generation 0's state (deduplicated objects)",
            Some(base),
            Action::Publish(Box::new(a.clone()), topology(2)?),
        ),
        (
            "genesis publish, 4096-element chunks",
            None,
            Action::Publish(
                Box::new(synthetic_state(config.seed, 9, 4096)),
                topology(3)?,
            ),
        ),
        (
            "publish into a layout a killed writer left non-durable",
            None,
            Action::PublishOverKilledLayout(Box::new(a.clone()), topology(4)?),
        ),
        ("repair a missing LATEST", Some(base), Action::RepairLatest),
        (
            // 32 768-element chunks: 12 objects. Every rename stays pending until the
            // run's one step 4, so the images grow with the objects; 12 keep it minutes.
            "publish over generation 0, objects installed concurrently",
            Some(base),
            Action::PublishConcurrent(
                Box::new(synthetic_state(config.seed, 4, 32_768)),
                topology(4)?,
            ),
        ),
        (
            // The killed writer installed every object of generation 1 and died before
            // its commit record; none of its data, names or new fan-out directories is
            // durable. Every object takes the found-and-verified path, so only the run's
            // found-object fsyncs and its step 4 can make generation 1 survive.
            "publish over generation 0 onto a killed writer's unsynced objects",
            Some(base),
            over_killed_objects(config.seed, KilledWriterFiles::NothingSynced)?,
        ),
        (
            // The root's own entry is made durable by fsyncing ".", the recorded directory.
            "genesis publish through a bare relative root",
            None,
            Action::PublishBareRelativeRoot(Box::new(a.clone()), topology(4)?),
        ),
        (
            // The writer finds a file at one object's address that does not verify and
            // replaces it (RFC 0001 §4 step 3).
            "publish over generation 0 onto wrong bytes at an object's address",
            Some(base),
            over_wrong_bytes(config.seed)?,
        ),
        (
            // The second writer's commit finds generation 1 taken and fails.
            "two writers racing for generation 1",
            Some(base),
            two_writers_racing(config.seed)?,
        ),
        (
            "repair LATEST after a writer killed before its commits/ fsync",
            Some(base),
            repair_after_killed_commit(config.seed)?,
        ),
    ];
    let mut tally = PowerLossTally {
        scenarios: Vec::new(),
        violations: Vec::new(),
    };
    progress.phase(
        "crash-matrix: power-loss scenarios",
        Some(scenarios.len() as u64),
    );
    for (done, (name, from, action)) in scenarios.iter().enumerate() {
        crate::lab::error::stop_if_interrupted()?;
        let outcome = power_loss_scenario(
            *from,
            action,
            faults,
            limits_for(action, config.seed),
            CheckPlan {
                max_states: config.max_states_per_scenario,
                threads: config.threads,
                stop_after_violations: None,
                stop_counting: None,
            },
        )?;
        let limits = limits_for(action, config.seed);
        tally.scenarios.push(ScenarioFigures {
            name,
            trace_operations: outcome.trace_operations,
            crash_images: outcome.crash_images,
            distinct_states: outcome.distinct_states,
            states_checked: outcome.states_checked,
            sampled: outcome.enumeration.sampled,
            all_subsets_up_to: limits.all_subsets_up_to as u64,
            max_pending: outcome.enumeration.max_pending,
            subsets_checked: outcome.enumeration.subsets_checked,
            subsets_total: outcome.enumeration.subsets_total,
        });
        let named = outcome.violations.into_iter().map(|v| v.within(name));
        tally.violations.extend(named);
        progress.advance(done as u64 + 1);
    }
    progress.finish();
    Ok(tally)
}

/// What the corruption phase ran and found.
pub struct CorruptionTally {
    /// Cases run.
    pub count: u64,
    /// Cases per kind of file damaged (commit record, manifest, object, ...).
    pub by_file_kind: BTreeMap<&'static str, u64>,
    /// Cases per kind of damage ([`crate::lab::corruption::Damage::label`]).
    pub by_damage: BTreeMap<&'static str, u64>,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// Corruption: every case applied to a copy of a healthy three-generation store, with
/// recovery given `faults` (none, except for the recovery mutants).
pub fn corruption_phase(
    corrupt_base: &Path,
    config: &MatrixConfig,
    faults: RecoveryFaults,
    progress: &mut dyn Progress,
) -> Result<CorruptionTally, LabError> {
    build_corruption_base(corrupt_base, config.seed)?;
    let expectations = (0..3)
        .map(|g| generation_expectation(corrupt_base, g))
        .collect::<Result<Vec<_>, _>>()?;
    let cases = corruption_cases(corrupt_base)?;
    progress.phase("crash-matrix: corruption cases", Some(cases.len() as u64));
    let mut tally = CorruptionTally {
        count: cases.len() as u64,
        by_file_kind: BTreeMap::new(),
        by_damage: BTreeMap::new(),
        violations: Vec::new(),
    };
    for (done, damage) in cases.iter().enumerate() {
        crate::lab::error::stop_if_interrupted()?;
        let kind = file_kind(damage.target(), &expectations);
        *tally.by_file_kind.entry(kind).or_default() += 1;
        *tally.by_damage.entry(damage.label()).or_default() += 1;
        tally.violations.extend(corruption_case(
            corrupt_base,
            damage,
            &expectations,
            faults,
        )?);
        progress.advance(done as u64 + 1);
    }
    progress.finish();
    Ok(tally)
}

/// What a store path holds: a commit record, a manifest or chunk object of a known
/// generation, LATEST, a temp file, or something no generation names.
fn file_kind(path: &str, expectations: &[GenerationExpectation]) -> &'static str {
    let named = |index: Option<usize>| {
        expectations.iter().any(|e| match index {
            Some(i) => e.files.get(i).is_some_and(|(p, _)| p == path),
            None => e.files.iter().skip(2).any(|(p, _)| p == path),
        })
    };
    if named(Some(0)) {
        "commit_record"
    } else if named(Some(1)) {
        "manifest"
    } else if named(None) {
        "chunk_object"
    } else if path == LATEST_REL_PATH {
        "latest"
    } else if path.ends_with(".tmp") {
        "temp_file"
    } else {
        "unknown_entry"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generation 0 (state A on four workers) in a scratch store.
    fn base() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = scratch_dir().expect("scratch");
        let root = dir.path().join("base");
        let (a, _) = matrix_states(0x5eed);
        publish_with(
            &RealFs,
            &root,
            &a,
            topology(4).expect("topology"),
            &mut NoHooks,
            WriterFaults::NONE,
        )
        .expect("base");
        (dir, root)
    }

    fn run(base: Option<&Path>, action: &Action, writer: WriterFaults) -> ScenarioOutcome {
        let faults = ModelFaults {
            writer,
            recovery: RecoveryFaults::NONE,
        };
        power_loss_scenario(
            base,
            action,
            faults,
            limits_for(action, 0x5eed),
            CheckPlan::exhaustive(2),
        )
        .expect("scenario")
    }

    fn invariants(outcome: &ScenarioOutcome) -> BTreeSet<Invariant> {
        outcome.violations.iter().map(|v| v.invariant).collect()
    }

    /// Whether some checked state lacks the store root after the publish's commits/ fsync.
    fn root_lost_after_commit(outcome: &ScenarioOutcome) -> bool {
        outcome.violations.iter().any(|v| {
            v.invariant == Invariant::CommittedNotLost
                && v.detail.contains("the store root itself is absent")
        })
    }

    #[test]
    fn a_writer_that_skips_the_root_parent_fsync_can_lose_the_root_and_the_correct_one_cannot() {
        let (a, _) = matrix_states(0x5eed);
        let four = topology(4).expect("topology");
        let skip = WriterFaults {
            skip_root_parent_fsync: true,
            ..WriterFaults::NONE
        };
        for action in [
            Action::Publish(Box::new(a.clone()), four),
            Action::PublishBareRelativeRoot(Box::new(a.clone()), four),
        ] {
            let correct = run(None, &action, WriterFaults::NONE);
            assert!(correct.violations.is_empty(), "{:#?}", correct.violations);
            assert!(!root_lost_after_commit(&correct));
            let broken = run(None, &action, skip);
            assert!(root_lost_after_commit(&broken), "{:#?}", broken.violations);
        }
    }

    #[test]
    fn the_new_scenarios_hold_for_the_correct_writer_and_say_what_they_enumerated() {
        let (_dir, base) = base();
        for action in [
            over_wrong_bytes(0x5eed).expect("action"),
            two_writers_racing(0x5eed).expect("action"),
            repair_after_killed_commit(0x5eed).expect("action"),
        ] {
            let outcome = run(Some(&base), &action, WriterFaults::NONE);
            assert!(outcome.violations.is_empty(), "{:#?}", outcome.violations);
            assert!(outcome.states_checked > 0);
            let e = outcome.enumeration;
            assert_eq!(e.crash_points, outcome.trace_operations + 1);
            assert!(e.subsets_checked >= e.crash_points);
            assert_eq!(e.sampled, e.subsets_checked < e.subsets_total, "{e:?}");
        }
    }

    #[test]
    fn each_new_writer_fault_breaks_its_invariant_in_its_scenario() {
        let (_dir, base) = base();
        let (_, b) = matrix_states(0x5eed);
        let cases = [
            (
                over_wrong_bytes(0x5eed).expect("action"),
                WriterFaults {
                    skip_found_object_check: true,
                    ..WriterFaults::NONE
                },
                Invariant::CommittedNotLost,
            ),
            (
                two_writers_racing(0x5eed).expect("action"),
                WriterFaults {
                    commit_rename_replaces: true,
                    ..WriterFaults::NONE
                },
                Invariant::CommittedNotLost,
            ),
            (
                repair_after_killed_commit(0x5eed).expect("action"),
                WriterFaults {
                    repair_without_commits_fsync: true,
                    ..WriterFaults::NONE
                },
                Invariant::LatestNeverAheadOrGarbage,
            ),
            (
                Action::Publish(Box::new(b), topology(4).expect("topology")),
                WriterFaults {
                    skip_latest_directory_fsync: true,
                    ..WriterFaults::NONE
                },
                Invariant::LatestDurableAfterItsFsync,
            ),
        ];
        for (action, faults, invariant) in cases {
            let outcome = run(Some(&base), &action, faults);
            assert!(
                invariants(&outcome).contains(&invariant),
                "{faults:?}: {:#?}",
                outcome.violations
            );
        }
    }

    #[test]
    fn only_the_dropped_refs_fsync_shows_a_stale_latest_after_step_16() {
        // RFC 0001 §6 lets a crash leave LATEST stale: without its refs/ fsync no other
        // invariant sees the writer, only LATEST's durability after step 16.
        let (_dir, base) = base();
        let (_, b) = matrix_states(0x5eed);
        let action = Action::Publish(Box::new(b), topology(4).expect("topology"));
        let outcome = run(
            Some(&base),
            &action,
            WriterFaults {
                skip_latest_directory_fsync: true,
                ..WriterFaults::NONE
            },
        );
        assert_eq!(
            invariants(&outcome),
            BTreeSet::from([Invariant::LatestDurableAfterItsFsync]),
            "{:#?}",
            outcome.violations
        );
    }

    #[test]
    fn the_wrong_bytes_scenario_takes_the_replacing_branch() {
        let (_dir, base) = base();
        let work = scratch_dir().expect("scratch");
        let root = work.path().join(STORE_DIR_NAME);
        std::fs::create_dir(&root).expect("root");
        copy_tree(&base, &root).expect("copy");
        let action = over_wrong_bytes(0x5eed).expect("action");
        let (_, recording) =
            record_action(work.path(), &root, &action, WriterFaults::NONE).expect("record");
        // A file of the starting image in objects/ is renamed over: the planted bytes.
        let replaced = recording.ops.iter().any(|op| match op {
            crate::lab::powerloss::Op::Rename { to, .. } => {
                recording.initial.contains_key(to)
                    && recording
                        .in_store(to)
                        .is_some_and(|r| r.starts_with("objects/"))
            }
            _ => false,
        });
        assert!(replaced, "no object was replaced");
    }

    #[test]
    fn the_second_racing_writer_finds_the_generation_taken() {
        let (_dir, base) = base();
        let work = scratch_dir().expect("scratch");
        let root = work.path().join(STORE_DIR_NAME);
        std::fs::create_dir(&root).expect("root");
        copy_tree(&base, &root).expect("copy");
        let action = two_writers_racing(0x5eed).expect("action");
        let (candidate, recording) =
            record_action(work.path(), &root, &action, WriterFaults::NONE).expect("record");
        assert_eq!(candidate.generation, 1);
        // The first writer's record is the one on disk, and only one commit was marked.
        let verified = generation_expectation(&root, 1).expect("generation 1");
        assert_eq!(verified.files, candidate.files);
        let commits = recording
            .marks
            .iter()
            .filter(|(b, _)| *b == Barrier::CommitAfterDirectoryFsync)
            .count();
        assert_eq!(commits, 1);
    }
}
