//! One test per `StoreError` kind reachable in-process: the right typed variant, and the
//! stored data left unchanged. (Process-side kinds are in store_process.rs.)
use std::path::Path;

use shardlift::core::digest::Digest;
use shardlift::core::logical::{ChunkState, LogicalState, LogicalStateError};
use shardlift::core::topology::Topology;
use shardlift::durable::faulty::{FaultyFs, Operation};
use shardlift::lab::powerloss::tree_digest;
use shardlift::store::codec::{
    self, commit_rel_path, object_rel_path, CommitRecord, LatestRecord, ManifestRecord,
};
use shardlift::store::layout::synthetic_state;
use shardlift::store::writer::publish_with;
use shardlift::store::{self, FnHook, NoHooks, ObjectCheck, RejectionKind, StoreError};

fn state() -> LogicalState {
    synthetic_state(11, 2, 30_000)
}

fn store_with_genesis() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store::publish(&root, &state(), Topology::new(4).expect("t"), &mut NoHooks).expect("publish");
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

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

fn genesis_records(root: &Path) -> (CommitRecord, ManifestRecord) {
    let bytes = std::fs::read(root.join(commit_rel_path(0))).expect("commit");
    let commit: CommitRecord = codec::decode(Path::new("c"), &bytes).expect("decode");
    let mbytes = std::fs::read(root.join(object_rel_path(&commit.manifest))).expect("manifest");
    let manifest: ManifestRecord = codec::decode(Path::new("m"), &mbytes).expect("decode");
    (commit, manifest)
}

/// Installs a crafted manifest (as an object) and commit record as generation 1.
fn craft(
    root: &Path,
    edit_manifest: impl FnOnce(&mut ManifestRecord),
    edit_commit: impl FnOnce(&mut CommitRecord),
) {
    let (mut commit, mut manifest) = genesis_records(root);
    edit_manifest(&mut manifest);
    let mbytes = codec::encode(&manifest).expect("encode");
    let digest = Digest::of(&mbytes);
    write_file(&root.join(object_rel_path(&digest)), &mbytes);
    commit.generation = 1;
    commit.manifest = digest;
    commit.workers = manifest.workers;
    commit.step = manifest.step;
    commit.logical_state_root = manifest.logical_state_root;
    edit_commit(&mut commit);
    write_file(
        &root.join(commit_rel_path(1)),
        &codec::encode(&commit).expect("encode"),
    );
}

fn load_error(root: &Path, generation: u64) -> StoreError {
    unchanged(root, || {
        store::load_generation(root, generation).expect_err("must fail")
    })
}

fn recover_rejects(root: &Path, generation: u64, kind: RejectionKind) {
    let report = unchanged(root, || store::recover(root).expect("recover"));
    let rejection = report
        .rejected
        .iter()
        .find(|r| r.generation == Some(generation))
        .expect("rejected");
    assert_eq!(rejection.kind, kind);
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
}

#[test]
fn no_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope");
    assert!(matches!(
        store::recover(&missing),
        Err(StoreError::NoStore { .. })
    ));
    assert!(matches!(
        store::load_generation(&missing, 0),
        Err(StoreError::NoStore { .. })
    ));
    assert!(matches!(
        store::reshard(
            &missing,
            0,
            Topology::new(3).expect("t"),
            ObjectCheck::Lengths
        ),
        Err(StoreError::NoStore { .. })
    ));
    assert!(!missing.exists());
}

#[test]
fn io_error_when_commits_is_not_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("commits"), b"not a dir").expect("write");
    let error = unchanged(&root, || store::recover(&root).expect_err("fails"));
    assert!(matches!(error, StoreError::Io { .. }), "{error}");
}

#[test]
fn fsync_failure_aborts_the_generation() {
    let (_dir, root) = store_with_genesis();
    let other = synthetic_state(12, 3, 30_000);
    // The commit record's file fsync is the 3·chunks + 2nd fsync: fail exactly there.
    let chunk_fsyncs = other.chunks().len() * 3 + 1;
    let fs = FaultyFs::failing(Operation::FsyncFile, chunk_fsyncs);
    let error = publish_with(
        &fs,
        &root,
        &other,
        Topology::new(4).expect("t"),
        &mut NoHooks,
    )
    .expect_err("aborts");
    assert!(
        matches!(error, StoreError::FsyncFailed { generation: 1, .. }),
        "{error}"
    );
    assert!(
        !root.join(commit_rel_path(1)).exists(),
        "no commit after a failed fsync"
    );
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
}

#[test]
fn too_large() {
    let (_dir, root) = store_with_genesis();
    write_file(&root.join(commit_rel_path(1)), &vec![b' '; 5000]);
    assert!(matches!(load_error(&root, 1), StoreError::TooLarge { .. }));
    recover_rejects(&root, 1, RejectionKind::TooLarge);
}

#[test]
fn undecodable() {
    let (_dir, root) = store_with_genesis();
    write_file(&root.join(commit_rel_path(1)), b"{\"schema\":");
    assert!(matches!(
        load_error(&root, 1),
        StoreError::Undecodable { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::Undecodable);
}

#[test]
fn wrong_schema() {
    let (_dir, root) = store_with_genesis();
    let latest = std::fs::read(root.join("refs/LATEST")).expect("latest");
    write_file(&root.join(commit_rel_path(1)), &latest);
    assert!(matches!(
        load_error(&root, 1),
        StoreError::WrongSchema { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::WrongSchema);
}

#[test]
fn unsupported_version() {
    let (_dir, root) = store_with_genesis();
    let text =
        String::from_utf8(std::fs::read(root.join(commit_rel_path(0))).expect("c")).expect("utf8");
    let text = text.replace("\"version\":1", "\"version\":2");
    write_file(&root.join(commit_rel_path(1)), text.as_bytes());
    assert!(matches!(
        load_error(&root, 1),
        StoreError::UnsupportedVersion { ref found, .. } if found == "2"
    ));
    recover_rejects(&root, 1, RejectionKind::UnsupportedVersion);
}

#[test]
fn not_canonical() {
    let (_dir, root) = store_with_genesis();
    let (mut commit, _) = genesis_records(&root);
    commit.generation = 1;
    let mut bytes = codec::encode(&commit).expect("encode");
    bytes.push(b'\n');
    write_file(&root.join(commit_rel_path(1)), &bytes);
    assert!(matches!(
        load_error(&root, 1),
        StoreError::NotCanonical { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::NotCanonical);
}

#[test]
fn missing_object() {
    let (_dir, root) = store_with_genesis();
    craft(
        &root,
        |m| m.chunks[0].exp_avg = Digest::of(b"nothing stored"),
        |_| {},
    );
    assert!(matches!(
        load_error(&root, 1),
        StoreError::MissingObject { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::MissingObject);
}

#[test]
fn digest_mismatch() {
    let (_dir, root) = store_with_genesis();
    let (_, manifest) = genesis_records(&root);
    let path = root.join(object_rel_path(&manifest.chunks[1].parameters));
    std::fs::remove_file(&path).expect("rm");
    write_file(&path, &vec![0u8; 120_000]);
    let error = load_error(&root, 0);
    assert!(
        matches!(&error, StoreError::DigestMismatch { path: p, .. } if p == &path),
        "{error}"
    );
}

#[test]
fn generation_name_mismatch() {
    let (_dir, root) = store_with_genesis();
    std::fs::copy(root.join(commit_rel_path(0)), root.join(commit_rel_path(1))).expect("copy");
    assert!(matches!(
        load_error(&root, 1),
        StoreError::GenerationNameMismatch {
            named: 1,
            recorded: 0,
            ..
        }
    ));
    recover_rejects(&root, 1, RejectionKind::GenerationNameMismatch);
}

#[test]
fn binding_mismatch() {
    let (_dir, root) = store_with_genesis();
    craft(&root, |_| {}, |c| c.step += 1);
    assert!(matches!(
        load_error(&root, 1),
        StoreError::BindingMismatch { what: "step", .. }
    ));
    recover_rejects(&root, 1, RejectionKind::BindingMismatch);
}

#[test]
fn malformed_manifest() {
    let (_dir, root) = store_with_genesis();
    craft(&root, |m| m.chunks.swap(0, 1), |_| {});
    assert!(matches!(
        load_error(&root, 1),
        StoreError::MalformedManifest { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::MalformedManifest);
}

#[test]
fn ownership_mismatch() {
    let (_dir, root) = store_with_genesis();
    craft(&root, |m| m.ownership = vec![0; m.chunks.len()], |_| {});
    assert!(matches!(
        load_error(&root, 1),
        StoreError::OwnershipMismatch { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::OwnershipMismatch);
}

#[test]
fn chunk_size() {
    let (_dir, root) = store_with_genesis();
    // Point chunk 0's first payload at the (shorter) last chunk's payload: the digest
    // verifies, the length does not.
    craft(
        &root,
        |m| {
            let last = m.chunks[m.chunks.len() - 1].parameters;
            m.chunks[0].parameters = last;
        },
        |_| {},
    );
    assert!(matches!(
        load_error(&root, 1),
        StoreError::ChunkSize { id: 0, .. }
    ));
    recover_rejects(&root, 1, RejectionKind::ChunkSize);
}

#[test]
fn malformed_state() {
    let (_dir, root) = store_with_genesis();
    craft(&root, |m| m.hyperparameters.micro_batch_size = 0, |_| {});
    assert!(matches!(
        load_error(&root, 1),
        StoreError::MalformedState { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::MalformedState);
}

#[test]
fn root_mismatch() {
    let (_dir, root) = store_with_genesis();
    craft(
        &root,
        |m| m.logical_state_root = Digest::of(b"another root"),
        |_| {},
    );
    assert!(matches!(
        load_error(&root, 1),
        StoreError::RootMismatch { .. }
    ));
    recover_rejects(&root, 1, RejectionKind::RootMismatch);
}

#[test]
fn invalid_state() {
    // A `LogicalState` exists only through its validating constructors, so publish cannot
    // be handed a chunk with a short slot; the refusal comes where the state is built.
    let good = state();
    let mut chunks = good.chunks().to_vec();
    let short = &chunks[1];
    let refused = ChunkState::new(
        short.id(),
        short.parameters().to_vec(),
        short.exp_avg()[1..].to_vec(),
        short.exp_avg_sq().to_vec(),
    );
    assert!(matches!(
        refused,
        Err(LogicalStateError::ChunkLength {
            id: 1,
            slot: "exp_avg",
            ..
        })
    ));
    chunks.pop();
    let refused = LogicalState::from_parts(
        *good.hyperparameters(),
        good.step(),
        good.cursor(),
        good.ledger_digest(),
        chunks,
    );
    assert!(matches!(refused, Err(LogicalStateError::ChunkCount { .. })));
}

#[test]
fn invalid_topology() {
    // A `Topology` exists only through its validating constructor, so publish and reshard
    // cannot be handed 0 or 13 workers; the refusal surfaces as the store's typed error.
    for workers in [0, 13] {
        let refused = Topology::new(workers).expect_err("invalid");
        assert!(matches!(
            StoreError::from(refused),
            StoreError::InvalidTopology(_)
        ));
    }
}

#[test]
fn generation_not_found() {
    let (_dir, root) = store_with_genesis();
    assert!(matches!(
        load_error(&root, 9),
        StoreError::GenerationNotFound { generation: 9, .. }
    ));
    let error = unchanged(&root, || {
        store::reshard(&root, 9, Topology::new(3).expect("t"), ObjectCheck::Lengths)
            .expect_err("no source")
    });
    assert!(matches!(error, StoreError::GenerationNotFound { .. }));
}

/// Runs `f` on another thread; fails if it has not returned within 20 seconds (a read that
/// blocks on a FIFO would otherwise hang the run instead of failing it).
fn returns_promptly<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(f()));
    receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the store read blocked")
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .expect("mkfifo");
}

#[test]
fn not_regular_file_a_fifo_record_or_latest_is_refused_without_blocking() {
    let (_dir, root) = store_with_genesis();
    // Generation 1's commit record is a FIFO no process writes; LATEST is one too.
    mkfifo(&root.join(commit_rel_path(1)));
    let latest = root.join("refs/LATEST");
    std::fs::remove_file(&latest).expect("rm LATEST");
    mkfifo(&latest);
    let owned = root.clone();
    let error = returns_promptly(move || load_error(&owned, 1));
    assert!(
        matches!(&error, StoreError::NotRegularFile { path } if path == &root.join(commit_rel_path(1))),
        "{error}"
    );
    assert_eq!(error.kind(), "not-regular-file");
    let owned = root.clone();
    let report =
        returns_promptly(move || unchanged(&owned, || store::recover(&owned).expect("recover")));
    let rejection = report
        .rejected
        .iter()
        .find(|r| r.generation == Some(1))
        .expect("generation 1 rejected");
    assert_eq!(
        rejection.kind,
        shardlift::store::RejectionKind::NotRegularFile
    );
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
    assert_eq!(report.latest.status, store::LatestStatus::Garbage);
}

#[test]
fn not_regular_file_a_symlinked_object_is_never_followed() {
    let (dir, root) = store_with_genesis();
    let (_, manifest) = genesis_records(&root);
    // The link points at a copy of the object's own bytes: following it would verify.
    let path = root.join(object_rel_path(&manifest.chunks[0].parameters));
    let copy = dir.path().join("outside");
    std::fs::copy(&path, &copy).expect("copy");
    std::fs::remove_file(&path).expect("rm");
    std::os::unix::fs::symlink(&copy, &path).expect("symlink");
    let error = load_error(&root, 0);
    assert!(
        matches!(&error, StoreError::NotRegularFile { path: p } if p == &path),
        "{error}"
    );
    let report = unchanged(&root, || store::recover(&root).expect("recover"));
    assert_eq!(report.selected, None);
    assert_eq!(
        report.rejected[0].kind,
        shardlift::store::RejectionKind::NotRegularFile
    );
    // The reshard's metadata check (RFC 0001 §7) names the same reason, and commits
    // nothing: for a symlinked object, a directory in its place, and (missing-object) no
    // entry at all.
    let reshard_error = || {
        unchanged(&root, || {
            store::reshard(&root, 0, Topology::new(3).expect("t"), ObjectCheck::Lengths)
                .expect_err("refused")
        })
    };
    let error = reshard_error();
    assert!(
        matches!(&error, StoreError::NotRegularFile { path: p } if p == &path),
        "{error}"
    );
    std::fs::remove_file(&path).expect("rm");
    std::fs::create_dir(&path).expect("mkdir");
    let error = reshard_error();
    assert!(
        matches!(&error, StoreError::NotRegularFile { path: p } if p == &path),
        "{error}"
    );
    std::fs::remove_dir(&path).expect("rmdir");
    let error = reshard_error();
    assert!(
        matches!(&error, StoreError::MissingObject { path: p, .. } if p == &path),
        "{error}"
    );
}

#[test]
fn generation_taken_never_replaces_a_record() {
    let (_dir, root) = store_with_genesis();
    let before = std::fs::read(root.join(commit_rel_path(0))).expect("read");
    let other = synthetic_state(12, 3, 30_000);
    let error = publish_with(
        &FaultyFs::default().hiding_listing_of(root.join("commits")),
        &root,
        &other,
        Topology::new(3).expect("t"),
        &mut NoHooks,
    )
    .expect_err("taken");
    assert!(
        matches!(error, StoreError::GenerationTaken { generation: 0, .. }),
        "{error}"
    );
    assert_eq!(
        std::fs::read(root.join(commit_rel_path(0))).expect("read"),
        before
    );
    let latest: LatestRecord = codec::decode(
        Path::new("l"),
        &std::fs::read(root.join("refs/LATEST")).expect("l"),
    )
    .expect("decode");
    assert_eq!(latest.commit, Digest::of(&before), "LATEST not advanced");
}

#[test]
fn generation_overflow() {
    let (_dir, root) = store_with_genesis();
    let last = root.join(commit_rel_path(codec::MAX_GENERATION));
    write_file(&last, b"junk");
    let error = unchanged(&root, || {
        store::publish(&root, &state(), Topology::new(4).expect("t"), &mut NoHooks)
            .expect_err("overflow")
    });
    assert!(matches!(error, StoreError::GenerationOverflow), "{error}");
}

#[test]
fn a_name_past_the_generation_range_is_clutter_that_never_blocks_a_publish() {
    let (_dir, root) = store_with_genesis();
    write_file(&root.join("commits/18446744073709551615.json"), b"junk");
    let summary = store::publish(&root, &state(), Topology::new(3).expect("t"), &mut NoHooks)
        .expect("a junk name above the range does not make the store unpublishable");
    assert_eq!(summary.committed.generation, 1);
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.valid_generations, vec![0, 1]);
    assert_eq!(
        report.ignored,
        vec!["commits/18446744073709551615.json".to_owned()]
    );
}

/// Generation 1 published over the genesis store; returns its summary.
fn second_generation(root: &Path) -> store::CommitSummary {
    store::publish(
        root,
        &synthetic_state(12, 3, 30_000),
        Topology::new(3).expect("t"),
        &mut NoHooks,
    )
    .expect("publish")
}

/// Recovery through a file system on which every read of a file whose name starts with
/// `prefix` fails with EIO: it must fail naming generation 1 and the file, never answer 0.
fn recovery_fails_on_an_unreadable(root: &Path, prefix: &str, file: &Path) {
    let fs = FaultyFs::failing_named(Operation::ReadFile, prefix);
    let error = unchanged(root, || {
        store::recovery::recover_with(&fs, root).expect_err("an I/O error never rolls back")
    });
    match &error {
        StoreError::RecoveryReadFailed {
            generation: 1,
            source,
        } => assert!(
            matches!(source.as_ref(), StoreError::Io { path, .. } if path == file),
            "{error}"
        ),
        other => panic!("expected recovery-read-failed for generation 1, got {other}"),
    }
    assert_eq!(error.kind(), "recovery-read-failed");
    assert_eq!(error.path(), Some(file));
    // The same store, read without the fault, selects generation 1.
    let report = store::recover(root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(1));
}

#[test]
fn recovery_read_failed_on_the_newest_commit_record() {
    let (_dir, root) = store_with_genesis();
    second_generation(&root);
    let record = root.join(commit_rel_path(1));
    recovery_fails_on_an_unreadable(&root, "00000000000000000001", &record);
}

#[test]
fn recovery_read_failed_on_an_object_of_the_newest_generation() {
    let (_dir, root) = store_with_genesis();
    let summary = second_generation(&root);
    let manifest = root.join(object_rel_path(&summary.committed.manifest_digest));
    let name = manifest
        .file_name()
        .and_then(|n| n.to_str())
        .expect("object name")
        .to_owned();
    recovery_fails_on_an_unreadable(&root, &name, &manifest);
}

/// Publishes generation 1 over the genesis store through a file system on which every
/// `operation` on a file whose name starts with `prefix` fails; returns the error.
fn publish_second_failing(root: &Path, operation: Operation, prefix: &str) -> StoreError {
    publish_with(
        &FaultyFs::failing_named(operation, prefix),
        root,
        &synthetic_state(12, 3, 30_000),
        Topology::new(3).expect("t"),
        &mut NoHooks,
    )
    .expect_err("the injected fault stops the publish")
}

#[test]
fn committed_latest_not_advanced_says_the_generation_is_committed() {
    let (_dir, root) = store_with_genesis();
    let latest_before = std::fs::read(root.join("refs/LATEST")).expect("latest");
    // LATEST's rename is the first step after the commit point that can fail here.
    let error = publish_second_failing(&root, Operation::RenameReplace, "latest");
    assert!(
        matches!(
            &error,
            StoreError::CommittedLatestNotAdvanced { generation: 1, source }
                if matches!(source.as_ref(), StoreError::Io { .. })
        ),
        "{error}"
    );
    assert_eq!(error.kind(), "committed-latest-not-advanced");
    assert_eq!(
        std::fs::read(root.join("refs/LATEST")).expect("latest"),
        latest_before,
        "LATEST untouched"
    );
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(1), "committed");
    assert_eq!(report.latest.status, store::LatestStatus::Stale);
}

#[test]
fn a_failure_before_the_commit_point_is_not_reported_as_committed() {
    let (_dir, root) = store_with_genesis();
    let error = publish_second_failing(&root, Operation::RenameNoreplace, "commit");
    assert!(matches!(error, StoreError::Io { .. }), "{error}");
    let report = store::recover(&root).expect("recover");
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
}

#[test]
fn a_latest_repair_makes_the_selected_record_durable_before_writing_latest() {
    let (_dir, root) = store_with_genesis();
    let summary = second_generation(&root);
    std::fs::remove_file(root.join("refs/LATEST")).expect("rm LATEST");
    // Fail the fsync of `commits/`: the repair must stop there, before LATEST exists.
    let fs = FaultyFs::failing_named(Operation::FsyncDir, "commits");
    let error = store::writer::Writer::repair_latest(
        &fs,
        &root,
        &mut NoHooks,
        summary.committed.generation,
        summary.committed.commit_digest,
    )
    .expect_err("the commits/ fsync fails");
    assert!(
        matches!(&error, StoreError::FsyncFailed { path, .. } if path.ends_with("commits")),
        "{error}"
    );
    assert!(
        !root.join("refs/LATEST").exists(),
        "LATEST written before commits/ was durable"
    );
    let report = store::recover(&root).expect("recover");
    assert!(store::repair_latest(&root, &report).expect("repair"));
    assert_eq!(
        store::recover(&root).expect("recover").latest.status,
        store::LatestStatus::Consistent
    );
}

#[test]
fn stopped_by_a_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let mut hook = FnHook(|e: &shardlift::store::BarrierEvent| {
        if e.barrier == shardlift::store::Barrier::CommitAfterFileFsync {
            Err("stop here".into())
        } else {
            Ok(())
        }
    });
    let error = store::publish(&root, &state(), Topology::new(4).expect("t"), &mut hook)
        .expect_err("stopped");
    assert!(matches!(
        error,
        StoreError::Stopped {
            barrier: shardlift::store::Barrier::CommitAfterFileFsync,
            ..
        }
    ));
    assert!(store::recover(&root).expect("recover").selected.is_none());
}

#[test]
fn bad_handoff() {
    use shardlift::lab::handoff::{decode_handoff, encode_handoff};
    let good = encode_handoff(&state(), Topology::new(4).expect("t")).expect("encode");
    let (back, topology) = decode_handoff(Path::new("h"), &good).expect("round trip");
    assert_eq!(back, state());
    assert_eq!(topology.workers(), 4);
    for bad in [&b"nope"[..], &good[..good.len() - 1]] {
        assert!(matches!(
            decode_handoff(Path::new("h"), bad),
            Err(StoreError::BadHandoff { .. })
        ));
    }
    let mut extra = good.clone();
    extra.push(0);
    assert!(matches!(
        decode_handoff(Path::new("h"), &extra),
        Err(StoreError::BadHandoff { .. })
    ));
    // A flipped payload bit breaks the seal first...
    let mut flipped = good.clone();
    let last_payload_byte = flipped.len() - 33;
    flipped[last_payload_byte] ^= 1;
    assert!(matches!(
        decode_handoff(Path::new("h"), &flipped),
        Err(StoreError::BadHandoff { .. })
    ));
    // ...and, resealed, still fails its payload digest.
    flipped.truncate(flipped.len() - 32);
    let seal = shardlift::core::digest::Digest::of(&flipped);
    flipped.extend_from_slice(&seal.0);
    assert!(matches!(
        decode_handoff(Path::new("h"), &flipped),
        Err(StoreError::DigestMismatch { .. })
    ));
}
