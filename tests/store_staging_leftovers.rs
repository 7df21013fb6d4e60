//! A killed writer's temp files stay in `staging/` (recovery never reads there). A restarted
//! writer can get the killed one's pid (containers restart pids from 1) and so the same temp
//! names for the same uncommitted generation: it must step past them, never reuse or delete
//! them, and give up with a typed error after a bounded number of names. The name
//! sequence is deterministic in the observed (sequential) order; a concurrent publish
//! shares one counter among its threads, and steps past the same names. Each test's
//! outcome is the same whatever the threads' timing.
use std::path::Path;

use shardlift::core::topology::Topology;
use shardlift::lab::corruption::list_files;
use shardlift::store::layout::synthetic_state;
use shardlift::store::writer::{MAX_OBJECT_IO_THREADS, MAX_TEMP_NAME_ATTEMPTS};
use shardlift::store::{self, BarrierHook, InOrder, NoHooks, StoreError};

/// Publishes the state of `step` in the observed, sequential order.
fn publish_step(root: &Path, step: u64) -> Result<store::CommitSummary, StoreError> {
    publish_step_with(root, step, &mut InOrder)
}

fn publish_step_with(
    root: &Path,
    step: u64,
    hooks: &mut dyn BarrierHook,
) -> Result<store::CommitSummary, StoreError> {
    store::publish(
        root,
        &synthetic_state(5, step, 30_000),
        Topology::new(4).expect("topology"),
        hooks,
    )
}

/// Plants the first `count` temp names this process's writer would use for the first
/// object of `generation`.
fn plant_leftovers(root: &Path, generation: u64, count: u32) -> Vec<(String, Vec<u8>)> {
    (1..=count)
        .map(|n| {
            let name = format!("staging/object-{}-{generation}-{n}.tmp", std::process::id());
            let bytes = format!("torn leftover {n}").into_bytes();
            std::fs::write(root.join(&name), &bytes).expect("plant");
            (name, bytes)
        })
        .collect()
}

/// Every planted leftover is still there, byte for byte.
fn assert_leftovers_kept(root: &Path, leftovers: &[(String, Vec<u8>)]) {
    for (name, bytes) in leftovers {
        assert_eq!(
            &std::fs::read(root.join(name)).expect("kept"),
            bytes,
            "{name}"
        );
    }
}

/// A publish that found every temp name taken: the typed error naming `staging/`, no
/// file written, replaced or removed (a fan-out directory may have been made), and
/// recovery still selecting generation 0.
fn assert_gave_up_and_changed_no_file(
    root: &Path,
    before: &[(String, Vec<u8>)],
    error: &StoreError,
) {
    assert!(
        matches!(error, StoreError::Io { path, .. } if path.ends_with("staging")),
        "{error:?}"
    );
    assert!(error.to_string().contains("no free temp name"), "{error}");
    assert_eq!(files(root), before);
    let report = store::recover(root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
}

/// Every file under `root` with its bytes.
fn files(root: &Path) -> Vec<(String, Vec<u8>)> {
    list_files(root)
        .expect("list")
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(root.join(&name)).expect("read");
            (name, bytes)
        })
        .collect()
}

#[test]
fn a_writer_steps_past_temp_names_a_killed_writer_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    publish_step(&root, 1).expect("generation 0");
    let leftovers = plant_leftovers(&root, 1, 3);
    let summary = publish_step(&root, 2).expect("publish past the leftovers");
    assert_eq!(summary.committed.generation, 1);
    assert_leftovers_kept(&root, &leftovers);
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(1));
}

#[test]
fn a_writer_gives_up_after_the_bounded_number_of_taken_names_and_changes_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    publish_step(&root, 1).expect("generation 0");
    plant_leftovers(&root, 1, MAX_TEMP_NAME_ATTEMPTS);
    let before = files(&root);
    let error = publish_step(&root, 2).expect_err("every name is taken");
    assert_gave_up_and_changed_no_file(&root, &before, &error);
}

#[test]
fn a_concurrent_publish_steps_past_leftover_names_and_keeps_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    publish_step(&root, 1).expect("generation 0");
    // Fewer taken names than one thread's attempts: no thread can run out of names, so
    // the publish succeeds whatever the threads' timing.
    let leftovers = plant_leftovers(&root, 1, MAX_TEMP_NAME_ATTEMPTS - 1);
    let before = files(&root);
    let summary = publish_step_with(&root, 2, &mut NoHooks).expect("publish past them");
    assert_eq!(summary.committed.generation, 1);
    let after = files(&root);
    for (name, bytes) in &before {
        // LATEST is the one file a successful publish rewrites.
        if name != "refs/LATEST" {
            assert!(
                after.contains(&(name.clone(), bytes.clone())),
                "{name} changed"
            );
        }
    }
    assert_leftovers_kept(&root, &leftovers);
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(1));
    assert_eq!(report.latest.status, store::LatestStatus::Consistent);
}

#[test]
fn a_concurrent_publish_that_finds_every_name_taken_gives_up_and_changes_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    publish_step(&root, 1).expect("generation 0");
    // The threads draw names from one counter and each gives up after its bounded
    // attempts, so at most threads x attempts names are ever tried: plant all of them,
    // and every thread gives up whatever the timing.
    let threads = u32::try_from(MAX_OBJECT_IO_THREADS).expect("small");
    plant_leftovers(&root, 1, threads * MAX_TEMP_NAME_ATTEMPTS);
    let before = files(&root);
    let error = publish_step_with(&root, 2, &mut NoHooks).expect_err("every name is taken");
    assert_gave_up_and_changed_no_file(&root, &before, &error);
}
