//! `store::load_newest`, the loader that verifies from the highest generation down and
//! stops at the first that passes (RFC 0001 §5): it must load exactly the generation
//! recovery's full scan selects, pass over what the scan rejects with the same reasons,
//! never roll back past a read that failed, and leave the store's bytes unchanged.
use std::path::Path;

use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::durable::faulty::{FaultyFs, Operation};
use shardlift::lab::powerloss::tree_digest;
use shardlift::store::codec::{self, commit_rel_path, object_rel_path, CommitRecord};
use shardlift::store::layout::synthetic_state;
use shardlift::store::recovery::load_newest_with;
use shardlift::store::{self, NoHooks, StoreError};

fn state(seed: u64, step: u64) -> LogicalState {
    synthetic_state(seed, step, 30_000)
}

/// A store with generations 0 (W4) and 1 (W3) published by the real writer.
fn two_generations() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store::publish(
        &root,
        &state(11, 2),
        Topology::new(4).expect("t"),
        &mut NoHooks,
    )
    .expect("publish 0");
    store::publish(
        &root,
        &state(12, 3),
        Topology::new(3).expect("t"),
        &mut NoHooks,
    )
    .expect("publish 1");
    (dir, root)
}

/// Runs `f` and asserts the store tree is byte-identical before and after.
fn unchanged<T>(root: &Path, f: impl FnOnce() -> T) -> T {
    let before = tree_digest(root).expect("hash");
    let out = f();
    assert_eq!(
        tree_digest(root).expect("hash"),
        before,
        "store was modified"
    );
    out
}

/// Loads the newest generation and checks it against recovery's scan of the same store:
/// the same generation, the state `load_generation` returns for it, the same rejections.
fn load_agrees_with_recovery(root: &Path) -> Option<u64> {
    let newest = unchanged(root, || store::load_newest(root).expect("load newest"));
    let report = store::recover(root).expect("recover");
    let loaded_generation = newest.loaded.as_ref().map(|l| l.generation);
    assert_eq!(
        loaded_generation,
        report.selected.as_ref().map(|s| s.generation),
        "the loader and recovery's scan chose different generations"
    );
    if let Some(loaded) = &newest.loaded {
        let (state, topology) =
            store::load_generation(root, loaded.generation).expect("load generation");
        assert_eq!(
            loaded.state.logical_state_root(),
            state.logical_state_root()
        );
        assert!(loaded.state == state, "the loaded state differs");
        assert_eq!(loaded.topology, topology);
    }
    // The loader sees only the records above its answer; those the scan rejected there.
    let above: Vec<_> = report
        .rejected
        .iter()
        .filter(|r| r.generation > loaded_generation)
        .rev()
        .cloned()
        .collect();
    assert_eq!(newest.rejected, above);
    loaded_generation
}

#[test]
fn the_newest_valid_generation_is_the_one_recovery_selects() {
    let (_dir, root) = two_generations();
    assert_eq!(load_agrees_with_recovery(&root), Some(1));
    let newest = store::load_newest(&root).expect("load");
    let loaded = newest.loaded.expect("a generation");
    assert!(loaded.state == state(12, 3), "not the published state");
    assert_eq!(loaded.topology.workers(), 3);
    assert!(newest.rejected.is_empty());
}

/// Replaces generation 1's commit record with a forged one whose step disagrees with its
/// manifest: well formed, canonical, its manifest digest right, only the binding wrong.
fn forge_generation_one_step(root: &Path) {
    let path = root.join(commit_rel_path(1));
    let bytes = std::fs::read(&path).expect("record");
    let mut commit: CommitRecord = codec::decode(&path, &bytes).expect("decode");
    commit.step += 1;
    std::fs::write(&path, codec::encode(&commit).expect("encode")).expect("write");
}

#[test]
fn a_forged_newest_record_is_passed_over_with_recoverys_reason() {
    let (_dir, root) = two_generations();
    forge_generation_one_step(&root);
    assert_eq!(load_agrees_with_recovery(&root), Some(0));
    let newest = store::load_newest(&root).expect("load");
    assert_eq!(newest.rejected.len(), 1);
    assert_eq!(newest.rejected[0].generation, Some(1));
    assert_eq!(newest.rejected[0].file, "commits/00000000000000000001.json");
}

#[test]
fn a_flipped_byte_in_the_newest_generation_falls_back_as_recovery_does() {
    let (_dir, root) = two_generations();
    let path = root.join(commit_rel_path(1));
    let bytes = std::fs::read(&path).expect("record");
    let commit: CommitRecord = codec::decode(&path, &bytes).expect("decode");
    let manifest = root.join(object_rel_path(&commit.manifest));
    let mut manifest_bytes = std::fs::read(&manifest).expect("manifest");
    let last = manifest_bytes.len() - 2;
    manifest_bytes[last] ^= 0x01;
    std::fs::write(&manifest, manifest_bytes).expect("write");
    assert_eq!(load_agrees_with_recovery(&root), Some(0));
}

#[test]
fn no_valid_record_loads_nothing_and_reports_every_record() {
    let (_dir, root) = two_generations();
    forge_generation_one_step(&root);
    let path = root.join(commit_rel_path(0));
    std::fs::write(&path, b"{}").expect("write");
    assert_eq!(load_agrees_with_recovery(&root), None);
    let newest = store::load_newest(&root).expect("load");
    let generations: Vec<_> = newest.rejected.iter().map(|r| r.generation).collect();
    assert_eq!(generations, vec![Some(1), Some(0)], "highest first");
}

#[test]
fn a_read_that_fails_on_the_newest_record_never_rolls_back() {
    let (_dir, root) = two_generations();
    let fs = FaultyFs::failing_named(Operation::ReadFile, "00000000000000000001");
    let error = unchanged(&root, || {
        load_newest_with(&fs, &root).expect_err("an I/O error never rolls back")
    });
    assert!(
        matches!(error, StoreError::RecoveryReadFailed { generation: 1, .. }),
        "{error}"
    );
    assert_eq!(error.kind(), "recovery-read-failed");
}

#[test]
fn a_missing_store_is_no_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let error = store::load_newest(&dir.path().join("absent")).expect_err("no store");
    assert_eq!(error.kind(), "no-store");
}
