//! Synthetic states scaled to benchmark size (`publish-synthetic --state-bytes`): they
//! publish, recover, reshard and load like any state; their objects are verified in
//! parallel, streamed, and a bad one is reported the same way every time (the first in
//! manifest order).
use std::path::{Path, PathBuf};

use shardlift::core::digest::Digest;
use shardlift::core::progress::RecordedProgress;
use shardlift::core::topology::Topology;
use shardlift::durable::fs::RealFs;
use shardlift::store::codec::{object_rel_path, ManifestRecord};
use shardlift::store::layout::{synthetic_object, synthetic_state};
use shardlift::store::writer::{publish_synthetic_with, SyntheticSpec};
use shardlift::store::{self, RecordingHooks, StoreError, WriterFaults};

const SPEC: SyntheticSpec = SyntheticSpec {
    seed: 9,
    object_bytes: 4096,
    total_bytes: 10 * 4096 + 100,
};

fn published() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let state = synthetic_state(2, 3, 8192);
    let mut progress = RecordedProgress::default();
    let summary = store::publish_synthetic(
        &root,
        &state,
        Topology::new(4).expect("t"),
        SPEC,
        &mut store::NoHooks,
        &mut progress,
    )
    .expect("publish");
    assert_eq!(summary.generation, 0);
    let objects = state.chunks().len() as u64 * 3 + SPEC.object_count();
    assert_eq!(
        progress.events.first().map(String::as_str),
        Some(format!("phase publish {objects}").as_str())
    );
    assert_eq!(
        progress.events.iter().rev().nth(1),
        Some(&format!("advance {objects}"))
    );
    (dir, root)
}

fn manifest(root: &Path) -> ManifestRecord {
    let verified = shardlift::store::recovery::verify_generation(&RealFs, root, 0).expect("verify");
    verified.manifest
}

fn corrupt(root: &Path, digest: Digest) {
    let path = root.join(object_rel_path(&digest));
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[0] ^= 1;
    std::fs::remove_file(&path).expect("rm");
    std::fs::write(&path, bytes).expect("write");
}

#[test]
fn a_scaled_state_round_trips_and_reshards_without_new_objects() {
    let (_dir, root) = published();
    let m = manifest(&root);
    let synthetic = m.synthetic.clone().expect("synthetic objects listed");
    assert_eq!(synthetic.objects.len() as u64, SPEC.object_count());
    for (i, digest) in synthetic.objects.iter().enumerate() {
        let bytes = synthetic_object(SPEC.seed, i as u64, SPEC.object_len(i as u64) as usize);
        assert_eq!(Digest::of(&bytes), *digest);
    }
    assert_eq!(SPEC.object_len(10), 100);
    let (state, _) = store::load_generation(&root, 0).expect("load");
    assert_eq!(state, synthetic_state(2, 3, 8192));
    let summary = store::reshard(&root, 0, Topology::new(3).expect("t")).expect("reshard");
    assert_eq!(summary.objects_written, 0);
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.valid_generations, vec![0, 1]);
    let resharded = shardlift::store::recovery::verify_generation(&RealFs, &root, 1).expect("g1");
    assert_eq!(resharded.manifest.synthetic, m.synthetic);
    assert_eq!(resharded.manifest.workers, 3);
}

#[test]
fn the_first_bad_object_in_manifest_order_is_reported_every_time() {
    let (_dir, root) = published();
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    corrupt(&root, synthetic.objects[7]);
    corrupt(&root, synthetic.objects[3]);
    std::fs::remove_file(root.join(object_rel_path(&synthetic.objects[9]))).expect("rm");
    for _ in 0..5 {
        let report = store::recover(&root).expect("recover");
        assert!(report.selected.is_none());
        assert_eq!(report.rejected.len(), 1);
        assert_eq!(report.rejected[0].kind, "digest-mismatch");
        assert!(
            report.rejected[0]
                .reason
                .contains(&object_rel_path(&synthetic.objects[3])),
            "{}",
            report.rejected[0].reason
        );
        match store::load_generation(&root, 0) {
            Err(StoreError::DigestMismatch { path, .. }) => {
                assert!(path.ends_with(object_rel_path(&synthetic.objects[3])))
            }
            other => panic!("{other:?}"),
        }
    }
    match store::reshard(&root, 0, Topology::new(2).expect("t")) {
        Err(StoreError::DigestMismatch { .. }) => {}
        other => panic!("reshard of a bad generation: {other:?}"),
    }
}

#[test]
fn a_missing_or_extended_object_is_rejected() {
    let (_dir, root) = published();
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    let last = root.join(object_rel_path(&synthetic.objects[10]));
    let mut bytes = std::fs::read(&last).expect("read");
    bytes.push(0);
    std::fs::remove_file(&last).expect("rm");
    std::fs::write(&last, &bytes).expect("write");
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.rejected[0].kind, "synthetic-object-size");
    std::fs::remove_file(&last).expect("rm");
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.rejected[0].kind, "missing-object");
}

#[test]
fn the_seam_sees_the_sequential_writers_operations_in_order() {
    // Hashing runs ahead on other threads; the barriers (and with them the file-system
    // operations) come in the RFC's order: chunk objects, synthetic objects, manifest,
    // commit, LATEST.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let state = synthetic_state(2, 3, 8192);
    let mut hooks = RecordingHooks::default();
    publish_synthetic_with(
        &RealFs,
        &root,
        &state,
        Topology::new(4).expect("t"),
        SPEC,
        &mut hooks,
        WriterFaults::NONE,
        &mut shardlift::core::progress::NoProgress,
    )
    .expect("publish");
    let objects = state.chunks().len() * 3 + SPEC.object_count() as usize;
    assert_eq!(hooks.events.len(), objects * 4 + 12);
    let m = manifest(&root);
    let synthetic = m.synthetic.expect("synthetic");
    let expected: Vec<String> = m
        .chunks
        .iter()
        .flat_map(|c| [c.parameters, c.exp_avg, c.exp_avg_sq])
        .chain(synthetic.objects.iter().copied())
        .map(|d| object_rel_path(&d))
        .collect();
    let seen: Vec<String> = hooks.events[..objects * 4]
        .iter()
        .step_by(4)
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(seen, expected);
    for (i, e) in hooks.events.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
    }
}

#[test]
fn impossible_sizes_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    for spec in [
        SyntheticSpec {
            seed: 0,
            object_bytes: 0,
            total_bytes: 10,
        },
        SyntheticSpec {
            seed: 0,
            object_bytes: 10,
            total_bytes: 0,
        },
        SyntheticSpec {
            seed: 0,
            object_bytes: u32::MAX,
            total_bytes: 10,
        },
    ] {
        let err = store::publish_synthetic(
            &root,
            &synthetic_state(1, 0, 8192),
            Topology::new(4).expect("t"),
            spec,
            &mut store::NoHooks,
            &mut shardlift::core::progress::NoProgress,
        )
        .expect_err("refused");
        assert_eq!(err.kind(), "invalid-synthetic");
    }
    assert!(!root.exists());
}

/// A scaled state of 40 synthetic objects: three verification batches of 16, 16 and 8.
const FORTY_OBJECTS: SyntheticSpec = SyntheticSpec {
    seed: 4,
    object_bytes: 4096,
    total_bytes: 40 * 4096,
};

fn published_forty() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store::publish_synthetic(
        &root,
        &synthetic_state(2, 3, 8192),
        Topology::new(4).expect("t"),
        FORTY_OBJECTS,
        &mut store::NoHooks,
        &mut shardlift::core::progress::NoProgress,
    )
    .expect("publish");
    (dir, root)
}

/// `commits/` (names and bytes) and `refs/LATEST`.
fn authority(root: &Path) -> (Vec<(String, Vec<u8>)>, Vec<u8>) {
    let mut commits: Vec<(String, Vec<u8>)> = std::fs::read_dir(root.join("commits"))
        .expect("commits")
        .map(|entry| {
            let entry = entry.expect("entry");
            let bytes = std::fs::read(entry.path()).expect("read");
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    commits.sort();
    (
        commits,
        std::fs::read(root.join("refs/LATEST")).expect("LATEST"),
    )
}

#[test]
fn a_reshard_reports_verification_batch_by_batch_then_its_commit() {
    let (_dir, root) = published_forty();
    let mut progress = RecordedProgress::default();
    let summary = store::reshard_reporting(&root, 0, Topology::new(3).expect("t"), &mut progress)
        .expect("reshard");
    assert_eq!(summary.generation, 1);
    assert_eq!(
        progress.events,
        [
            "phase verifying generation 0 ?",
            "advance 16",
            "advance 32",
            "advance 40",
            "finish",
            "phase committing the reshard ?",
            "finish",
        ]
    );
}

#[test]
fn a_refused_reshard_reports_no_commit_phase_and_changes_no_record() {
    let (_dir, root) = published_forty();
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    corrupt(&root, synthetic.objects[20]);
    let before = authority(&root);
    let mut progress = RecordedProgress::default();
    match store::reshard_reporting(&root, 0, Topology::new(3).expect("t"), &mut progress) {
        Err(StoreError::DigestMismatch { path, .. }) => {
            assert!(path.ends_with(object_rel_path(&synthetic.objects[20])))
        }
        other => panic!("reshard of a corrupt source: {other:?}"),
    }
    // The first batch verified; the second holds the corrupt object, so the phase is
    // left unfinished and the commit phase never starts.
    assert_eq!(
        progress.events,
        ["phase verifying generation 0 ?", "advance 16"]
    );
    assert_eq!(authority(&root), before);
}
