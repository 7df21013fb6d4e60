//! A killed writer's temp files stay in `staging/` (recovery never reads there). A restarted
//! writer can get the killed one's pid (containers restart pids from 1) and so the same temp
//! names for the same uncommitted generation: it must step past them, never reuse or delete
//! them, and give up with a typed error after a bounded number of names.
use std::path::Path;

use shardlift::core::topology::Topology;
use shardlift::lab::corruption::list_files;
use shardlift::store::layout::synthetic_state;
use shardlift::store::writer::MAX_TEMP_NAME_ATTEMPTS;
use shardlift::store::{self, NoHooks, StoreError};

fn publish_step(root: &Path, step: u64) -> Result<store::CommitSummary, StoreError> {
    store::publish(
        root,
        &synthetic_state(5, step, 30_000),
        Topology::new(4).expect("topology"),
        &mut NoHooks,
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
    assert_eq!(summary.generation, 1);
    for (name, bytes) in &leftovers {
        assert_eq!(
            &std::fs::read(root.join(name)).expect("kept"),
            bytes,
            "{name}"
        );
    }
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
    assert!(
        matches!(&error, StoreError::Io { path, .. } if path.ends_with("staging")),
        "{error:?}"
    );
    assert!(error.to_string().contains("no free temp name"), "{error}");
    // No file was written, replaced or removed (a fan-out directory may have been made).
    assert_eq!(files(&root), before);
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
}
