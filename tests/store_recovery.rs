//! Recovery, LATEST statuses, reshard, and the power-loss checker's teeth.
use std::path::Path;

use shardlift::core::digest::Digest;
use shardlift::core::topology::Topology;
use shardlift::lab::crash_model::EnumerationLimits;
use shardlift::lab::matrix::{
    build_corruption_base, corruption_case, corruption_cases, generation_expectation,
    power_loss_scenario, Action, CheckPlan, Invariant, ModelFaults, ScenarioOutcome,
};
use shardlift::lab::powerloss::tree_digest;
use shardlift::lab::recovery_mutants::RecoveryFaults;
use shardlift::lab::writer_mutants::WriterFaults;
use shardlift::store::codec::{self, commit_rel_path, LatestRecord, LATEST_SCHEMA, SCHEMA_VERSION};
use shardlift::store::layout::synthetic_state;
use shardlift::store::{self, LatestStatus, NoHooks, ObjectCheck, RecordingHooks};

fn two_generations() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let t = Topology::new(4).expect("t");
    store::publish(&root, &synthetic_state(5, 1, 30_000), t, &mut NoHooks).expect("g0");
    store::publish(&root, &synthetic_state(5, 2, 30_000), t, &mut NoHooks).expect("g1");
    (dir, root)
}

fn write_latest(root: &Path, generation: u64, commit: Digest) {
    let bytes = codec::encode(&LatestRecord {
        schema: LATEST_SCHEMA.into(),
        version: SCHEMA_VERSION,
        generation,
        commit,
    })
    .expect("encode");
    std::fs::write(root.join("refs/LATEST"), bytes).expect("write");
}

fn assert_selects_one(root: &Path, status: LatestStatus) {
    let before = tree_digest(root).expect("hash");
    let report = store::recover(root).expect("recover");
    assert_eq!(tree_digest(root).expect("hash"), before, "recovery wrote");
    assert_eq!(report.selected.as_ref().map(|s| s.generation), Some(1));
    assert_eq!(report.latest.status, status);
    assert_eq!(store::recover(root).expect("again"), report, "idempotent");
}

#[test]
fn publish_then_load_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let state = synthetic_state(1, 7, 8192);
    let mut hooks = RecordingHooks::default();
    let summary =
        store::publish(&root, &state, Topology::new(4).expect("t"), &mut hooks).expect("publish");
    assert_eq!(summary.committed.generation, 0);
    assert_eq!(hooks.events.len(), state.chunks().len() * 3 * 4 + 12);
    let (loaded, topology) = store::load_generation(&root, 0).expect("load");
    assert_eq!(loaded, state);
    assert_eq!(topology.workers(), 4);
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.latest.status, LatestStatus::Consistent);
}

#[test]
fn latest_consistent() {
    let (_d, root) = two_generations();
    assert_selects_one(&root, LatestStatus::Consistent);
}

#[test]
fn latest_missing() {
    let (_d, root) = two_generations();
    std::fs::remove_file(root.join("refs/LATEST")).expect("rm");
    assert_selects_one(&root, LatestStatus::Missing);
}

#[test]
fn latest_stale() {
    let (_d, root) = two_generations();
    let commit0 = Digest::of(&std::fs::read(root.join(commit_rel_path(0))).expect("c0"));
    write_latest(&root, 0, commit0);
    assert_selects_one(&root, LatestStatus::Stale);
}

#[test]
fn latest_ahead() {
    let (_d, root) = two_generations();
    write_latest(&root, 5, Digest::of(b"future"));
    assert_selects_one(&root, LatestStatus::Ahead);
}

#[test]
fn latest_garbage() {
    let (_d, root) = two_generations();
    std::fs::write(root.join("refs/LATEST"), b"\x00garbage").expect("write");
    assert_selects_one(&root, LatestStatus::Garbage);
}

#[test]
fn repair_latest_rewrites_only_the_hint() {
    let (_d, root) = two_generations();
    std::fs::remove_file(root.join("refs/LATEST")).expect("rm");
    let report = store::recover(&root).expect("recover");
    assert!(store::repair_latest(&root, &report).expect("repair"));
    assert_eq!(
        store::recover(&root).expect("recover").latest.status,
        LatestStatus::Consistent
    );
}

fn chunk_object_count(root: &Path) -> usize {
    walkdir::WalkDir::new(root.join("objects"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .count()
}

#[test]
fn reshard_w4_to_w3_keeps_the_root_and_writes_no_chunk_object() {
    let (_d, root) = two_generations();
    let (source, _) = store::load_generation(&root, 1).expect("load");
    let objects_before = chunk_object_count(&root);
    let summary = store::reshard(&root, 1, Topology::new(3).expect("t"), ObjectCheck::Lengths)
        .expect("reshard");
    assert_eq!(summary.committed.generation, 2);
    assert_eq!(summary.objects_written, 0);
    // Exactly one new object: the manifest.
    assert_eq!(chunk_object_count(&root), objects_before + 1);
    let (resharded, topology) = store::load_generation(&root, 2).expect("load");
    assert_eq!(topology.workers(), 3);
    assert_eq!(resharded.logical_state_root(), source.logical_state_root());
    assert_eq!(resharded, source);
    let report = store::recover(&root).expect("recover");
    assert_eq!(
        report.selected.map(|s| (s.generation, s.workers)),
        Some((2, 3))
    );
}

#[test]
fn reshard_of_an_invalid_source_fails_and_writes_nothing() {
    let (_d, root) = two_generations();
    let manifest = generation_expectation(&root, 1).expect("e").files[2]
        .0
        .clone();
    let path = root.join(manifest);
    let mut perms = std::fs::metadata(&path).expect("meta").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).expect("chmod");
    std::fs::write(&path, b"bad").expect("write");
    let before = tree_digest(&root).expect("hash");
    // Re-hashing names the digest; the default length check names the size. Neither
    // writes anything.
    for (objects, kind) in [
        (ObjectCheck::Hashed, "digest-mismatch"),
        (ObjectCheck::Lengths, "chunk-size"),
    ] {
        let error = store::reshard(&root, 1, Topology::new(3).expect("t"), objects)
            .expect_err("invalid source");
        assert_eq!(error.kind(), kind);
        assert_eq!(tree_digest(&root).expect("hash"), before);
    }
}

fn small_limits() -> EnumerationLimits {
    EnumerationLimits {
        samples: 4,
        ..EnumerationLimits::default()
    }
}

fn base_store() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("base");
    store::publish(
        &root,
        &synthetic_state(3, 1, 50_000),
        Topology::new(4).expect("t"),
        &mut NoHooks,
    )
    .expect("g0");
    (dir, root)
}

fn action() -> Action {
    Action::Publish(
        Box::new(synthetic_state(3, 2, 50_000)),
        Topology::new(4).expect("t"),
    )
}

#[test]
fn power_loss_correct_writer_has_no_violations() {
    let (_d, base) = base_store();
    let outcome = power_loss_scenario(
        Some(&base),
        &action(),
        ModelFaults::NONE,
        small_limits(),
        CheckPlan::exhaustive(2),
    )
    .expect("scenario");
    assert!(
        outcome.states_checked >= 20,
        "{} states",
        outcome.states_checked
    );
    assert_eq!(outcome.states_checked, outcome.distinct_states);
    assert!(outcome.violations.is_empty(), "{:#?}", outcome.violations);
}

/// The power-loss model over `base` against a writer with `faults`, every state checked.
fn writer_mutant_scenario(base: &Path, faults: WriterFaults) -> ScenarioOutcome {
    let faults = ModelFaults {
        writer: faults,
        recovery: RecoveryFaults::NONE,
    };
    power_loss_scenario(
        Some(base),
        &action(),
        faults,
        small_limits(),
        CheckPlan::exhaustive(2),
    )
    .expect("scenario")
}

#[test]
fn power_loss_catches_a_writer_that_skips_the_commits_fsync() {
    let (_d, base) = base_store();
    let faults = WriterFaults {
        skip_commit_directory_fsync: true,
        ..WriterFaults::default()
    };
    let outcome = writer_mutant_scenario(&base, faults);
    assert!(
        outcome
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::CommittedNotLost
                && v.detail.contains("lost after its commits/ fsync")),
        "{:#?}",
        outcome.violations
    );
}

#[test]
fn power_loss_catches_a_writer_that_advances_latest_first() {
    let (_d, base) = base_store();
    let faults = WriterFaults {
        latest_before_commit_rename: true,
        ..WriterFaults::default()
    };
    let outcome = writer_mutant_scenario(&base, faults);
    assert!(
        outcome
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::LatestNeverAheadOrGarbage
                && v.detail.contains("LATEST is Some(Ahead)")),
        "{:#?}",
        outcome.violations
    );
}

#[test]
fn corruption_sample_falls_back_to_verified_generations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("base");
    build_corruption_base(&base, 1).expect("base");
    let expectations: Vec<_> = (0..3)
        .map(|g| generation_expectation(&base, g).expect("e"))
        .collect();
    let cases = corruption_cases(&base).expect("cases");
    assert!(cases.len() >= 50, "{} cases", cases.len());
    // Every 5th case here; the crash matrix runs them all.
    for damage in cases.iter().step_by(5) {
        let violations =
            corruption_case(&base, damage, &expectations, RecoveryFaults::NONE).expect("case");
        assert!(violations.is_empty(), "{violations:#?}");
    }
}

#[test]
fn the_default_reshard_still_hashes_and_decodes_the_source_manifest() {
    // ObjectCheck::Lengths reads no chunk byte, but the commit record and the manifest are
    // verified in full: a manifest rewritten with other bytes is refused by its digest.
    let (_d, root) = two_generations();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(commit_rel_path(1))).expect("record"))
            .expect("json");
    let digest = Digest::from_hex(record["manifest"].as_str().expect("manifest")).expect("hex");
    let path = root.join(codec::object_rel_path(&digest));
    let mut bytes = std::fs::read(&path).expect("read");
    let last = bytes.len() - 2;
    bytes[last] ^= 0x01;
    std::fs::remove_file(&path).expect("rm");
    std::fs::write(&path, &bytes).expect("write");
    let before = tree_digest(&root).expect("hash");
    let error = store::reshard(&root, 1, Topology::new(3).expect("t"), ObjectCheck::Lengths)
        .expect_err("a manifest that is not its address");
    assert_eq!(error.kind(), "digest-mismatch");
    assert!(error.to_string().contains(&codec::object_rel_path(&digest)));
    assert_eq!(tree_digest(&root).expect("hash"), before);
}
