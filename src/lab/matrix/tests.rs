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
    let replaced = recording.trace.ops.iter().any(|op| match op {
        crate::lab::crash_model::trace::TraceOp::Rename { to, .. } => {
            recording.trace.initial.contains_key(to)
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
        .barriers
        .iter()
        .filter(|b| **b == Barrier::CommitAfterDirectoryFsync)
        .count();
    assert_eq!(commits, 1);
}
