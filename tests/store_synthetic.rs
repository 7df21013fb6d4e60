//! Synthetic states scaled to benchmark size (`publish-synthetic --state-bytes`): they
//! publish, recover, reshard and load like any state; their objects are verified in
//! parallel, streamed, and a bad one is reported the same way every time (the first in
//! manifest order).
use std::path::{Path, PathBuf};

use shardlift::core::digest::Digest;
use shardlift::core::progress::RecordedProgress;
use shardlift::core::topology::Topology;
use shardlift::durable::fs::RealFs;
use shardlift::store::codec::{
    self, commit_rel_path, object_rel_path, CommitRecord, ManifestRecord,
    MAX_SYNTHETIC_OBJECT_BYTES,
};
use shardlift::store::layout::{synthetic_object, synthetic_state};
use shardlift::store::writer::{publish_synthetic_with, SyntheticSpec};
use shardlift::store::{self, ObjectCheck, RecordingHooks, StoreError};

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
    assert_eq!(summary.committed.generation, 0);
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
    let summary = store::reshard(&root, 0, Topology::new(3).expect("t"), ObjectCheck::Lengths)
        .expect("reshard");
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
        assert_eq!(
            report.rejected[0].kind,
            shardlift::store::RejectionKind::DigestMismatch
        );
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
    match store::reshard(&root, 0, Topology::new(2).expect("t"), ObjectCheck::Hashed) {
        Err(StoreError::DigestMismatch { path, .. }) => {
            assert!(path.ends_with(object_rel_path(&synthetic.objects[3])))
        }
        other => panic!("reshard of a bad generation: {other:?}"),
    }
    // Checking lengths only, the first object in manifest order that is absent or of
    // another length is reported: the removed one (the corrupt ones kept their lengths).
    for _ in 0..5 {
        match store::reshard(&root, 0, Topology::new(2).expect("t"), ObjectCheck::Lengths) {
            Err(StoreError::MissingObject { path, .. }) => {
                assert!(path.ends_with(object_rel_path(&synthetic.objects[9])))
            }
            other => panic!("length-checked reshard of a bad generation: {other:?}"),
        }
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
    assert_eq!(
        report.rejected[0].kind,
        shardlift::store::RejectionKind::SyntheticObjectSize
    );
    std::fs::remove_file(&last).expect("rm");
    let report = store::recover(&root).expect("recover");
    assert_eq!(
        report.rejected[0].kind,
        shardlift::store::RejectionKind::MissingObject
    );
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
            object_bytes: MAX_SYNTHETIC_OBJECT_BYTES as u32 + 1,
            total_bytes: 10,
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

/// Objects at the cap publish, recover and load: one of `MAX_SYNTHETIC_OBJECT_BYTES` and
/// the rest.
#[test]
fn objects_at_the_size_cap_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let spec = SyntheticSpec {
        seed: 5,
        object_bytes: MAX_SYNTHETIC_OBJECT_BYTES as u32,
        total_bytes: MAX_SYNTHETIC_OBJECT_BYTES + 100,
    };
    store::publish_synthetic(
        &root,
        &synthetic_state(2, 3, 8192),
        Topology::new(4).expect("t"),
        spec,
        &mut store::NoHooks,
        &mut shardlift::core::progress::NoProgress,
    )
    .expect("publish");
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    let first = std::fs::read(root.join(object_rel_path(&synthetic.objects[0]))).expect("read");
    assert_eq!(first.len() as u64, MAX_SYNTHETIC_OBJECT_BYTES);
    assert_eq!(Digest::of(&first), synthetic.objects[0]);
    assert_eq!(first, synthetic_object(5, 0, first.len()));
}

/// A forged but internally consistent generation whose one synthetic object is a byte
/// over the cap (the object at its address, the manifest at its digest, the commit record
/// naming it) is rejected as a malformed manifest before the object is read.
#[test]
fn a_forged_manifest_with_an_object_over_the_cap_is_rejected() {
    let (_dir, root) = published();
    let len = MAX_SYNTHETIC_OBJECT_BYTES as usize + 1;
    let object = synthetic_object(9, 0, len);
    let digest = Digest::of(&object);
    write_at(&root.join(object_rel_path(&digest)), &object);
    let mut forged = manifest(&root);
    let synthetic = forged.synthetic.as_mut().expect("synthetic");
    synthetic.object_bytes = len as u32;
    synthetic.total_bytes = len as u64;
    synthetic.objects = vec![digest];
    let manifest_bytes = codec::encode(&forged).expect("encode");
    let manifest_digest = Digest::of(&manifest_bytes);
    write_at(
        &root.join(object_rel_path(&manifest_digest)),
        &manifest_bytes,
    );
    let record_path = root.join(commit_rel_path(0));
    let mut record: CommitRecord =
        codec::decode(&record_path, &std::fs::read(&record_path).expect("read")).expect("decode");
    record.manifest = manifest_digest;
    std::fs::write(&record_path, codec::encode(&record).expect("encode")).expect("write");

    let report = store::recover(&root).expect("recover");
    assert!(report.selected.is_none());
    assert_eq!(report.rejected.len(), 1);
    assert_eq!(
        report.rejected[0].kind,
        shardlift::store::RejectionKind::MalformedManifest,
        "{}",
        report.rejected[0].reason
    );
    assert!(
        report.rejected[0].reason.contains("over the cap"),
        "{}",
        report.rejected[0].reason
    );
}

fn write_at(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("fan-out directory")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
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

/// The `advance` counts of recorded progress events, and whether they strictly increase.
fn advances(events: &[String]) -> (Vec<u64>, bool) {
    let counts: Vec<u64> = events
        .iter()
        .filter_map(|e| e.strip_prefix("advance ")?.parse().ok())
        .collect();
    let increasing = counts.windows(2).all(|w| w[0] < w[1]);
    (counts, increasing)
}

#[test]
fn a_reshard_reports_its_source_check_then_its_commit() {
    let (_dir, root) = published_forty();
    // Re-hashing reports the synthetic objects batch by batch.
    let mut progress = RecordedProgress::default();
    let summary = store::reshard_reporting(
        &root,
        0,
        Topology::new(3).expect("t"),
        ObjectCheck::Hashed,
        &mut progress,
    )
    .expect("reshard");
    assert_eq!(summary.committed.generation, 1);
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
    // The length check reports every object it checked (chunk payloads and synthetic
    // objects), a fan-out directory at a time, up to all of them.
    let objects = synthetic_state(2, 3, 8192).chunks().len() as u64 * 3 + 40;
    let mut progress = RecordedProgress::default();
    let summary = store::reshard_reporting(
        &root,
        0,
        Topology::new(3).expect("t"),
        ObjectCheck::Lengths,
        &mut progress,
    )
    .expect("reshard");
    assert_eq!(summary.committed.generation, 2);
    let events = &progress.events;
    assert_eq!(events[0], "phase checking generation 0 ?");
    let (counts, increasing) = advances(events);
    assert!(increasing, "{events:?}");
    assert_eq!(counts.last(), Some(&objects), "{events:?}");
    assert_eq!(
        events[events.len() - 3..],
        ["finish", "phase committing the reshard ?", "finish"]
    );
}

#[test]
fn a_refused_reshard_reports_no_commit_phase_and_changes_no_record() {
    let (_dir, root) = published_forty();
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    corrupt(&root, synthetic.objects[20]);
    let before = authority(&root);
    let mut progress = RecordedProgress::default();
    match store::reshard_reporting(
        &root,
        0,
        Topology::new(3).expect("t"),
        ObjectCheck::Hashed,
        &mut progress,
    ) {
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

#[test]
fn a_length_checked_reshard_refuses_an_object_of_another_length_and_changes_no_record() {
    let (_dir, root) = published_forty();
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    let path = root.join(object_rel_path(&synthetic.objects[20]));
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.truncate(bytes.len() - 1);
    std::fs::remove_file(&path).expect("rm");
    std::fs::write(&path, &bytes).expect("write");
    let before = authority(&root);
    let mut progress = RecordedProgress::default();
    match store::reshard_reporting(
        &root,
        0,
        Topology::new(3).expect("t"),
        ObjectCheck::Lengths,
        &mut progress,
    ) {
        Err(StoreError::SyntheticObjectSize {
            index,
            expected,
            found,
            ..
        }) => assert_eq!((index, found + 1), (20, expected)),
        other => panic!("length-checked reshard of a truncated object: {other:?}"),
    }
    // Every length was read; the phase is left unfinished and no commit phase starts.
    let events = &progress.events;
    assert_eq!(events[0], "phase checking generation 0 ?");
    assert!(advances(events).1, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e != "finish" && !e.contains("committing")),
        "{events:?}"
    );
    assert_eq!(authority(&root), before);
}

#[test]
fn a_length_checked_reshard_commits_over_a_same_length_corruption_that_recovery_then_rejects() {
    // RFC 0001 §7: the default check reads no object byte, so a same-length change passes
    // it; the reshard commits placement only, and recovery (which hashes every byte)
    // selects neither the source nor the reshard: no bad byte is loaded.
    let (_dir, root) = published_forty();
    let synthetic = manifest(&root).synthetic.expect("synthetic");
    corrupt(&root, synthetic.objects[20]);
    let summary = store::reshard(&root, 0, Topology::new(3).expect("t"), ObjectCheck::Lengths)
        .expect("the length check passes");
    assert_eq!(summary.committed.generation, 1);
    let report = store::recover(&root).expect("recover");
    assert!(report.selected.is_none(), "{report:?}");
    assert_eq!(report.rejected.len(), 2);
    for rejection in &report.rejected {
        assert_eq!(
            rejection.kind,
            shardlift::store::RejectionKind::DigestMismatch
        );
        assert!(rejection
            .reason
            .contains(&object_rel_path(&synthetic.objects[20])));
    }
    assert!(matches!(
        store::load_generation(&root, 1),
        Err(StoreError::DigestMismatch { .. })
    ));
}
