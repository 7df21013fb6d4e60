//! RFC 0001 §4's concurrent object install: a publish that no hook observes installs its
//! objects from several threads and fsyncs their fan-out directories once, after every
//! object's rename. The power-loss model checks the interleaving that happened, and
//! catches the same concurrent writer when it skips either object fsync.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use shardlift::core::progress::NoProgress;
use shardlift::core::topology::Topology;
use shardlift::lab::corruption::list_files;
use shardlift::lab::crash_model::trace::TraceOp;
use shardlift::lab::matrix::{
    power_loss_scenario, Action, CheckPlan, Invariant, ModelFaults, ScenarioOutcome,
    CONCURRENT_LIMITS,
};
use shardlift::lab::powerloss::{
    tree_digest, KilledWriterFiles, MarkingHooks, Recording, RecordingFs,
};
use shardlift::lab::recovery_mutants::RecoveryFaults;
use shardlift::lab::writer_mutants::WriterFaults;
use shardlift::store::codec::commit_rel_path;
use shardlift::store::layout::synthetic_state;
use shardlift::store::writer::{publish_with, SyntheticSpec};
use shardlift::store::{self, NoHooks, RecordingHooks};

/// 16 384-element chunks: 7 chunks, 21 objects, more than the 16 installing threads.
const CHUNK_ELEMENTS: u32 = 16_384;

/// 32 768-element chunks (12 objects) for the power-loss checks: every rename stays
/// pending until the run's one step 4, so the model's images grow with the objects.
const MODEL_CHUNK_ELEMENTS: u32 = 32_768;

fn four() -> Topology {
    Topology::new(4).expect("topology")
}

fn base_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("base");
    store::publish(
        &root,
        &synthetic_state(5, 1, MODEL_CHUNK_ELEMENTS),
        four(),
        &mut NoHooks,
    )
    .expect("generation 0");
    (dir, root)
}

/// The power-loss model over `action` on a copy of `base`, with the concurrent
/// enumeration limits; `plan` says how many of its states are checked.
fn scenario_on(
    base: &Path,
    action: &Action,
    writer: WriterFaults,
    plan: CheckPlan,
) -> ScenarioOutcome {
    let faults = ModelFaults {
        writer,
        recovery: RecoveryFaults::NONE,
    };
    power_loss_scenario(Some(base), action, faults, CONCURRENT_LIMITS, plan).expect("scenario")
}

/// The power-loss model over one concurrent publish on `base`.
fn concurrent_scenario(base: &Path, writer: WriterFaults, plan: CheckPlan) -> ScenarioOutcome {
    let state = Box::new(synthetic_state(5, 2, MODEL_CHUNK_ELEMENTS));
    scenario_on(
        base,
        &Action::PublishConcurrent(state, four()),
        writer,
        plan,
    )
}

/// Records one genesis publish; `threads` lets the writer install concurrently.
fn record_publish(threads: bool) -> Recording {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    std::fs::create_dir(&root).expect("root");
    let recorder = RecordingFs::new(&root).expect("recorder");
    let recorder = if threads {
        recorder.allowing_threads()
    } else {
        recorder
    };
    publish_recorded(&recorder, &root, &synthetic_state(5, 1, CHUNK_ELEMENTS));
    recorder.finish()
}

/// Publishes `state` at W4 on `root` through `recorder`, the correct writer, marking its
/// barriers; concurrent when the recorder allows threads.
fn publish_recorded(
    recorder: &RecordingFs,
    root: &Path,
    state: &shardlift::core::logical::LogicalState,
) -> store::CommitSummary {
    publish_with(recorder, root, state, four(), &mut MarkingHooks(recorder)).expect("publish")
}

/// Positions of the renames into `objects/` (chunk objects and the manifest) and of the
/// fan-out directory fsyncs, with the directories renamed into.
struct ObjectOps {
    /// Where the manifest's temp file was written (step 5).
    manifest_write: Option<usize>,
    renames: Vec<usize>,
    fan_fsyncs: Vec<(usize, String)>,
    renamed_into: BTreeSet<String>,
    /// The directories of every rename but the last (the manifest's).
    chunk_rename_dirs: BTreeSet<String>,
}

fn object_ops(recording: &Recording) -> ObjectOps {
    let mut ops = ObjectOps {
        manifest_write: None,
        renames: Vec::new(),
        fan_fsyncs: Vec::new(),
        renamed_into: BTreeSet::new(),
        chunk_rename_dirs: BTreeSet::new(),
    };
    let mut rename_dirs = Vec::new();
    for (at, op) in recording.trace.ops.iter().enumerate() {
        match op {
            TraceOp::Create { path, .. } if path.starts_with("staging/manifest-") => {
                ops.manifest_write.get_or_insert(at);
            }
            TraceOp::Rename { to, .. } if to.starts_with("objects/") => {
                ops.renames.push(at);
                let fan = to.rsplit_once('/').map(|(dir, _)| dir.to_owned());
                ops.renamed_into.extend(fan.clone());
                rename_dirs.extend(fan);
            }
            TraceOp::FsyncDir { path, .. } if path.starts_with("objects/") => {
                ops.fan_fsyncs.push((at, path.clone()));
            }
            _ => {}
        }
    }
    rename_dirs.pop();
    ops.chunk_rename_dirs = rename_dirs.into_iter().collect();
    ops
}

#[test]
fn an_unobserved_publish_fsyncs_each_fan_out_directory_once_after_every_rename() {
    let concurrent = object_ops(&record_publish(true));
    // The last rename into objects/ is the manifest's, followed by its own directory
    // fsync (step 8); every chunk object's step 4 comes after the last chunk rename.
    let chunk_renames = &concurrent.renames[..concurrent.renames.len() - 1];
    assert_eq!(chunk_renames.len(), 21, "21 chunk objects renamed");
    let last_chunk_rename = *chunk_renames.last().expect("renames");
    // Step 4 is every fan-out fsync before the manifest's rename; all of them come after
    // the last chunk rename and before step 5, the manifest's write.
    let step4: Vec<&(usize, String)> = concurrent
        .fan_fsyncs
        .iter()
        .filter(|(at, _)| *at < *concurrent.renames.last().expect("manifest rename"))
        .collect();
    let manifest_write = concurrent.manifest_write.expect("the manifest was written");
    assert!(step4
        .iter()
        .all(|(at, _)| *at > last_chunk_rename && *at < manifest_write));
    let fsynced: BTreeSet<&str> = step4.iter().map(|(_, dir)| dir.as_str()).collect();
    assert_eq!(fsynced.len(), step4.len(), "each fan-out directory once");
    // Exactly the directories the chunk objects went into: the manifest's rename (the
    // last) is followed by its own fsync, step 8.
    let chunk_dirs: BTreeSet<&str> = concurrent
        .chunk_rename_dirs
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(fsynced, chunk_dirs);
    assert!(fsynced.len() >= 10, "{} fan-out directories", fsynced.len());

    // Observed (sequential) publish of the same state: one directory fsync per object,
    // right after its rename, so the two orders really differ.
    let sequential = object_ops(&record_publish(false));
    assert_eq!(sequential.renames.len(), concurrent.renames.len());
    assert_eq!(sequential.fan_fsyncs.len(), sequential.renames.len());
    assert!(sequential
        .renames
        .iter()
        .zip(&sequential.fan_fsyncs)
        .all(|(rename, (fsync, _))| fsync > rename));
    assert_eq!(sequential.renamed_into, concurrent.renamed_into);
}

/// A mutant is killed by its first violation; states are checked in a seeded shuffle.
fn hunting_plan() -> CheckPlan {
    CheckPlan {
        max_states: 0,
        threads: 2,
        stop_after_violations: Some(1),
        stop_counting: None,
    }
}

#[test]
fn a_concurrent_and_a_sequential_publish_leave_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = synthetic_state(5, 3, CHUNK_ELEMENTS);
    let spec = SyntheticSpec {
        seed: 4,
        object_bytes: 4096,
        total_bytes: 300 * 4096 + 17,
    };
    let publish = |name: &str, hooks: &mut dyn store::BarrierHook| {
        let root = dir.path().join(name);
        let summary = store::publish_synthetic(&root, &state, four(), spec, hooks, &mut NoProgress)
            .expect("publish");
        (summary, tree_digest(&root).expect("tree digest"))
    };
    let mut recorded = RecordingHooks::default();
    let sequential = publish("sequential", &mut recorded);
    let concurrent = publish("concurrent", &mut NoHooks);
    assert_eq!(sequential, concurrent);
    assert_eq!(concurrent.0.objects_written, 21 + 301);
    // The sequential run reported its four barriers for every object; the other none.
    let object_events = recorded
        .events
        .iter()
        .filter(|e| e.barrier.name().starts_with("object-"))
        .count();
    assert_eq!(object_events, 4 * (21 + 301));
}

#[test]
fn every_crash_point_of_a_concurrent_publish_recovers() {
    let (_dir, base) = base_store();
    let outcome = concurrent_scenario(&base, WriterFaults::NONE, CheckPlan::exhaustive(2));
    assert!(outcome.states_checked >= 20, "{outcome:?}");
    assert_eq!(outcome.states_checked, outcome.distinct_states);
    assert!(outcome.violations.is_empty(), "{:#?}", outcome.violations);
}

#[test]
fn every_crash_point_of_a_concurrent_republish_of_the_same_state_recovers() {
    // Every object is already there: each thread takes the found-and-verified path (the
    // temp file removed, the object fsynced), and step 4 fsyncs their directories. The
    // base is durable, so this cannot catch a writer that skips those fsyncs: the
    // killed-objects tests below can.
    let (_dir, base) = base_store();
    let action = Action::PublishConcurrent(
        Box::new(synthetic_state(5, 1, MODEL_CHUNK_ELEMENTS)),
        Topology::new(2).expect("topology"),
    );
    let outcome = scenario_on(&base, &action, WriterFaults::NONE, CheckPlan::exhaustive(2));
    assert!(outcome.states_checked >= 2, "{outcome:?}");
    assert!(outcome.violations.is_empty(), "{:#?}", outcome.violations);
}

/// The power-loss model over a publish of `synthetic_state(5, 2, …)`, from several threads
/// and then in order, into a store where a killed writer had installed all of that state's
/// objects, none of their names durable (nor, with `NothingSynced`, their data or the
/// fan-out directories it made): every object takes the found-and-verified path. The
/// correct writer's every state is checked; a mutant's until one violation is found.
fn over_killed_objects(files: KilledWriterFiles, writer: WriterFaults) -> Vec<ScenarioOutcome> {
    let plan = if writer == WriterFaults::NONE {
        CheckPlan::exhaustive(2)
    } else {
        hunting_plan()
    };
    [true, false]
        .into_iter()
        .map(|concurrent| {
            let (_dir, base) = base_store();
            let action = Action::PublishOverKilledObjects {
                state: Box::new(synthetic_state(5, 2, MODEL_CHUNK_ELEMENTS)),
                topology: four(),
                files,
                concurrent,
            };
            scenario_on(&base, &action, writer, plan)
        })
        .collect()
}

fn assert_recovers_everywhere(outcomes: &[ScenarioOutcome]) {
    for outcome in outcomes {
        // The killed writer's 12 objects are pending creates before the run: crash
        // points among them, and images that drop each, are checked too.
        assert!(outcome.states_checked >= 500, "{outcome:?}");
        assert_eq!(outcome.states_checked, outcome.distinct_states);
        assert!(outcome.violations.is_empty(), "{:#?}", outcome.violations);
    }
}

fn assert_loses_generation_1(outcomes: &[ScenarioOutcome]) {
    for outcome in outcomes {
        assert!(
            outcome
                .violations
                .iter()
                .any(|v| v.invariant == Invariant::CommittedNotLost
                    && v.detail
                        .contains("generation 1 was lost after its commits/ fsync")),
            "{:#?}",
            outcome.violations
        );
    }
}

#[test]
fn every_crash_point_of_a_publish_over_a_killed_writers_renamed_objects_recovers() {
    assert_recovers_everywhere(&over_killed_objects(
        KilledWriterFiles::DataSynced,
        WriterFaults::NONE,
    ));
}

#[test]
fn every_crash_point_of_a_publish_over_a_killed_writers_unsynced_objects_recovers() {
    assert_recovers_everywhere(&over_killed_objects(
        KilledWriterFiles::NothingSynced,
        WriterFaults::NONE,
    ));
}

#[test]
fn a_publish_that_trusts_a_found_objects_name_is_caught() {
    // A killed RFC writer's objects: data synced, renames pending until its step 4.
    let skips_directory = WriterFaults {
        skip_found_object_directory_fsync: true,
        ..WriterFaults::NONE
    };
    assert_loses_generation_1(&over_killed_objects(
        KilledWriterFiles::DataSynced,
        skips_directory,
    ));
}

#[test]
fn a_publish_that_trusts_a_found_objects_data_is_caught() {
    // Objects a writer left without any fsync: only the found-object fsync saves them.
    let skips_file = WriterFaults {
        skip_found_object_fsync: true,
        ..WriterFaults::NONE
    };
    assert_loses_generation_1(&over_killed_objects(
        KilledWriterFiles::NothingSynced,
        skips_file,
    ));
}

#[test]
fn the_killed_writers_objects_are_pending_creates_the_publish_makes_durable() {
    // The recorder's side of the scenario: the killed writer's files are not in the
    // durable initial image but pending creates, and the publish fsyncs each of them
    // and each of their directories after it found them.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let state = synthetic_state(5, 2, MODEL_CHUNK_ELEMENTS);
    store::publish(&root, &state, four(), &mut NoHooks).expect("killed writer's objects");
    std::fs::remove_file(root.join(commit_rel_path(0))).expect("commit");
    let objects: Vec<String> = list_files(&root)
        .expect("list the store")
        .into_iter()
        .filter(|file| file.starts_with("objects/"))
        .collect();
    let pending: Vec<&str> = objects.iter().map(String::as_str).collect();
    let recorder = RecordingFs::with_non_durable_entries(
        &root,
        &[],
        &pending,
        KilledWriterFiles::NothingSynced,
    )
    .expect("recorder")
    .allowing_threads();
    let report = publish_recorded(&recorder, &root, &state);
    assert_eq!(report.committed.generation, 0);
    let recording = recorder.finish();
    for object in &objects {
        assert!(
            !recording.trace.initial.contains_key(object),
            "{object} is durable"
        );
    }
    // The killed writer's ops: each object created and written whole, never fsynced.
    let killed_ops = 2 * objects.len();
    assert_eq!(recording.pre_run_ops, killed_ops);
    let mut created = BTreeSet::new();
    let mut inodes = Vec::new();
    for pair in recording.trace.ops[..killed_ops].chunks(2) {
        match pair {
            [TraceOp::Create { path, inode }, TraceOp::Write {
                inode: written,
                offset: 0,
                len,
                data_at,
            }] if written == inode => {
                created.insert(path.clone());
                inodes.push(*inode);
                assert_eq!(
                    recording.trace.write_bytes(*data_at, *len),
                    Some(&std::fs::read(root.join(path)).expect("object bytes")[..])
                );
            }
            other => panic!("the run's first ops are the killed writer's writes: {other:?}"),
        }
    }
    let mut synced = BTreeSet::new();
    let mut synced_dirs = BTreeSet::new();
    for op in &recording.trace.ops[killed_ops..] {
        match op {
            TraceOp::Fsync { inode, .. } => {
                synced.insert(*inode);
            }
            TraceOp::FsyncDir { path, .. } => {
                synced_dirs.insert(path.clone());
            }
            TraceOp::Rename { to, .. } => assert!(!to.starts_with("objects/"), "renamed {to}"),
            _ => {}
        }
    }
    assert_eq!(created, objects.iter().cloned().collect::<BTreeSet<_>>());
    for (object, inode) in objects.iter().zip(&inodes) {
        assert!(synced.contains(inode), "{object} never fsynced");
        let fan = object
            .rsplit_once('/')
            .map(|(dir, _)| dir)
            .expect("fan-out");
        assert!(synced_dirs.contains(fan), "{fan} never fsynced");
    }
}

#[test]
fn a_concurrent_publish_without_its_fan_out_directory_fsyncs_is_caught() {
    let (_dir, base) = base_store();
    let outcome = concurrent_scenario(
        &base,
        WriterFaults {
            skip_object_directory_fsync: true,
            ..WriterFaults::NONE
        },
        hunting_plan(),
    );
    assert!(
        outcome
            .violations
            .iter()
            .any(|v| v.detail.contains("generation 1")),
        "{:#?}",
        outcome.violations
    );
}

#[test]
fn a_concurrent_publish_without_its_object_file_fsyncs_is_caught() {
    let (_dir, base) = base_store();
    let outcome = concurrent_scenario(
        &base,
        WriterFaults {
            skip_object_file_fsync: true,
            ..WriterFaults::NONE
        },
        hunting_plan(),
    );
    assert!(!outcome.violations.is_empty(), "no violation found");
}
