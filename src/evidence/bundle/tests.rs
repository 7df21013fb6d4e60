//! The verifier against a synthetic, internally consistent bundle (no torch, no run):
//! it verifies as built; each forgery re-encodes the records canonically and recomputes
//! every digest and binding (through [`install`]), so only the check under test can
//! refuse it, and the error must name the offending file and field. The file-identity
//! checks interfere with the reads through [`verify_with`]'s hook.
use std::path::{Path, PathBuf};

use super::read::{IdentityField, ReadStage};
use super::verify::verify_with;
use super::*;
use crate::core::barrier::Barrier;
use crate::core::digest::Digest;
use crate::dataset::{Resource, FASHION_MNIST};

fn root(step: u64) -> Digest {
    Digest::of(format!("root at step {step}").as_bytes())
}

fn ledger(step: u64) -> Digest {
    Digest::of(format!("ledger at step {step}").as_bytes())
}

fn digests(step: u64, workers: u32) -> StateDigests {
    StateDigests {
        step,
        workers,
        logical_state_root: root(step),
        ledger_digest: ledger(step),
    }
}

/// The four records of a passing commit-after-rename run, unbound (install binds them).
#[derive(Clone)]
struct Fixture {
    reference: EvaluationRecord,
    recovered: EvaluationRecord,
    evidence: RecoveryEvidenceRecord,
    audit: AuditRecord,
}

fn evaluation(role: EvaluationRole, generation: u64, workers: u32) -> EvaluationRecord {
    let probe = vec![7u8; 128 * 10 * 4];
    EvaluationRecord {
        schema: EVALUATION_SCHEMA.into(),
        version: BUNDLE_VERSION,
        role: role.name().into(),
        barrier: Barrier::CommitAfterRename.name().into(),
        generation: Some(generation),
        step: 3,
        workers,
        logical_state_root: root(3),
        ledger_digest: ledger(3),
        test_images_sha256: FASHION_MNIST.get(Resource::TestImages).payload.sha256,
        test_labels_sha256: FASHION_MNIST.get(Resource::TestLabels).payload.sha256,
        correct: 7_000,
        total: 10_000,
        logit_probe_shape: [128, 10],
        logit_probe_sha256: Digest::of(&probe),
        logit_probe_f32le_hex: hex::encode(&probe),
    }
}

fn fixture() -> Fixture {
    let barrier = Barrier::CommitAfterRename.name().to_owned();
    let sessions: Vec<SessionEntry> = [
        ("genesis", 4, 0, 1),
        ("reference", 4, 1, 3),
        ("crash", 4, 1, 2),
        ("recovered", 4, 2, 3),
        ("resharded", 3, 2, 3),
    ]
    .into_iter()
    .map(|(name, workers, start_step, end_step)| SessionEntry {
        name: name.into(),
        workers,
        start_step,
        end_step,
    })
    .collect();
    let worker_exits = sessions
        .iter()
        .flat_map(|s| {
            (0..s.workers).map(|rank| WorkerExitEntry {
                session: s.name.clone(),
                rank,
                outcome: CLEAN_WORKER_EXIT.into(),
            })
        })
        .collect::<Vec<_>>();
    let final_checkpoint = CheckpointEntry {
        generation: 3,
        step: 3,
        workers: 3,
    };
    let comparisons = Comparisons {
        logical_state_roots_equal: true,
        ledger_digests_equal: true,
        logit_probe_equal: true,
    };
    let evidence = RecoveryEvidenceRecord {
        schema: RECOVERY_EVIDENCE_SCHEMA.into(),
        version: BUNDLE_VERSION,
        barrier: barrier.clone(),
        seed: 7,
        sessions,
        kill: KillEntry {
            target_barrier: barrier.clone(),
            acknowledged_events: vec!["commit-after-file-fsync".into()],
            unacknowledged_event: barrier.clone(),
            signal: 9,
            reaped: true,
            candidate_generation: 1,
            candidate_installed: true,
        },
        recovery: RecoveryEntry {
            selected_generation: 1,
            selected_step: 2,
            selected_commit_sha256: Digest::of(b"commit 1"),
            valid_generations: vec![0, 1],
            latest_status: "missing".into(),
            rejected: vec![],
        },
        replayed_batches: 0,
        target_step: 3,
        reference: (1..=3).map(|step| digests(step, 4)).collect(),
        reference_checkpoint: CheckpointEntry {
            generation: 2,
            step: 3,
            workers: 4,
        },
        recovered_w4: digests(3, 4),
        reshard: ReshardEntry {
            source_generation: 1,
            generation: 2,
            workers_before: 4,
            workers_after: 3,
            committed_root: root(2),
            source_root_from_chunks: root(2),
            resharded_root_from_chunks: root(2),
            chunk_objects_written: 0,
        },
        resharded_w3: digests(3, 3),
        final_checkpoint: final_checkpoint.clone(),
        comparisons,
        reference_evaluation_sha256: Digest([0; 32]),
        recovered_evaluation_sha256: Digest([0; 32]),
        worker_exits,
    };
    let audit = AuditRecord {
        schema: AUDIT_SCHEMA.into(),
        version: BUNDLE_VERSION,
        barrier,
        status: RunStatus::Passed.name().into(),
        candidate_installed: true,
        selected_generation: 1,
        selected_step: 2,
        replayed_batches: 0,
        final_checkpoint,
        comparisons,
        worker_exits: 19,
        files: vec![],
        build: BuildEntry {
            shardlift_version: "0".into(),
            tch_version: "0".into(),
            libtorch_version: "0".into(),
            source_revision: None,
            dataset_payload_sha256: FASHION_MNIST
                .resources
                .iter()
                .map(|r| r.payload.sha256)
                .collect(),
        },
        nonclaims: NONCLAIMS.iter().map(|s| (*s).to_owned()).collect(),
        self_sha256: Digest([0; 32]),
    };
    Fixture {
        reference: evaluation(EvaluationRole::Reference, 2, 4),
        recovered: evaluation(EvaluationRole::Recovered, 3, 3),
        evidence,
        audit,
    }
}

/// Installs `fixture` (every binding computed afresh) into a new directory.
fn installed(scratch: &tempfile::TempDir, fixture: Fixture) -> PathBuf {
    let directory = scratch.path().join("bundle");
    install(
        &directory,
        &fixture.reference,
        &fixture.recovered,
        fixture.evidence,
        fixture.audit,
    )
    .expect("install");
    directory
}

/// A consistent forgery: `edit` the records, then re-encode and re-bind all of them.
fn forged(edit: impl FnOnce(&mut Fixture)) -> (tempfile::TempDir, PathBuf) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut records = fixture();
    edit(&mut records);
    let directory = installed(&scratch, records);
    (scratch, directory)
}

/// The error `verify` gives a consistent forgery; it must be `inconsistent` and name
/// every string in `names`.
fn inconsistency(edit: impl FnOnce(&mut Fixture), names: &[&str]) {
    let (_scratch, directory) = forged(edit);
    let error = verify(&directory).expect_err("the forgery verified");
    assert_eq!(error.kind(), "inconsistent", "{error}");
    let message = error.to_string();
    for name in names {
        assert!(message.contains(name), "{message:?} does not name {name}");
    }
}

#[test]
fn the_synthetic_bundle_verifies() {
    let (_scratch, directory) = forged(|_| {});
    let summary = verify(&directory).expect("verifies");
    assert_eq!(summary.run_status, "passed");
}

#[test]
fn an_unclean_worker_exit_is_inconsistent() {
    inconsistency(
        |f| f.evidence.worker_exits[5].outcome = "signal:9".into(),
        &["signal:9", "reference"],
    );
}

#[test]
fn reshard_roots_are_derived_from_the_recomputed_roots() {
    // The resharded generation's chunks give another root than the source's; the
    // commit record's root agrees with the source (as the writer copies it).
    inconsistency(
        |f| f.evidence.reshard.resharded_root_from_chunks = Digest::of(b"rewritten chunk"),
        &[
            "comparisons",
            "recovery-evidence.json reshard.resharded_root_from_chunks",
            "reshard.source_root_from_chunks",
        ],
    );
    // The commit record states a root that no loaded chunks give.
    inconsistency(
        |f| f.evidence.reshard.committed_root = Digest::of(b"claimed"),
        &["reshard.committed_root != "],
    );
    // Both recomputed roots agree with each other, but not with the reference at the
    // selected step that the source generation must be.
    inconsistency(
        |f| {
            let other = Digest::of(b"another state");
            let reshard = &mut f.evidence.reshard;
            reshard.committed_root = other;
            reshard.source_root_from_chunks = other;
            reshard.resharded_root_from_chunks = other;
        },
        &["reshard.source_root_from_chunks != recovery-evidence.json reference[step 2]"],
    );
}

#[test]
fn a_failed_reshard_root_recorded_as_failed_verifies_as_a_failed_run() {
    // The same fact with honest claims is not a forgery: a failed run, verified.
    let (_scratch, directory) = forged(|f| {
        f.evidence.reshard.resharded_root_from_chunks = Digest::of(b"rewritten chunk");
        f.evidence.comparisons.logical_state_roots_equal = false;
        f.audit.comparisons.logical_state_roots_equal = false;
        f.audit.status = RunStatus::Failed.name().into();
    });
    assert_eq!(verify(&directory).expect("verifies").run_status, "failed");
}

#[test]
fn the_reshard_entry_must_match_recovery_and_the_sessions() {
    inconsistency(
        |f| f.evidence.reshard.source_generation = 0,
        &["reshard.source_generation"],
    );
    inconsistency(
        |f| f.evidence.reshard.generation = 1,
        &["reshard.generation", "final_checkpoint.generation"],
    );
    inconsistency(
        |f| f.evidence.reshard.workers_after = 4,
        &["reshard.workers_before/after"],
    );
}

#[test]
fn the_reference_evaluation_must_be_of_the_reference_checkpoint() {
    inconsistency(
        |f| f.reference.generation = None,
        &[
            "reference-evaluation.json generation",
            "reference_checkpoint",
        ],
    );
    inconsistency(
        |f| f.evidence.reference_checkpoint.step = 2,
        &["reference_checkpoint"],
    );
    inconsistency(
        |f| f.reference.ledger_digest = ledger(2),
        &["reference-evaluation.json logical_state_root/ledger_digest"],
    );
}

#[test]
fn the_recovered_evaluation_must_be_of_the_final_checkpoint() {
    inconsistency(
        |f| f.recovered.workers = 4,
        &["recovered-evaluation.json", "final_checkpoint"],
    );
}

// ---- evaluation figures ----

/// The error `verify` gives a consistent forgery (every digest recomputed by install).
fn refused(edit: impl FnOnce(&mut Fixture)) -> BundleError {
    let (_scratch, directory) = forged(edit);
    verify(&directory).expect_err("the forgery verified")
}

/// Replaces `record`'s logit probe with `probe`, its digest recomputed.
fn set_probe(record: &mut EvaluationRecord, probe: &[u8]) {
    record.logit_probe_f32le_hex = hex::encode(probe);
    record.logit_probe_sha256 = Digest::of(probe);
}

#[test]
fn a_recovered_evaluation_with_one_more_correct_answer_is_refused() {
    // Both evaluations are of one state (equal roots and ledgers) on the pinned split,
    // so their correct counts must be equal; every digest in the bundle is recomputed.
    let error = refused(|f| f.recovered.correct += 1);
    assert!(
        matches!(
            &error,
            BundleError::EvaluationsDisagree { field: "correct", reference, recovered }
                if reference == "7000" && recovered == "7001"
        ),
        "{error}"
    );
    assert_eq!(error.kind(), "evaluations-disagree");
}

#[test]
fn different_probes_of_one_state_are_refused_even_as_a_failed_run() {
    // The claims are honest about the probes differing (a failed run); but one state on
    // one split cannot give two probes, so the records contradict each other.
    let error = refused(|f| {
        let mut probe = vec![7u8; 128 * 10 * 4];
        probe[17] ^= 1;
        set_probe(&mut f.recovered, &probe);
        f.evidence.comparisons.logit_probe_equal = false;
        f.audit.comparisons.logit_probe_equal = false;
        f.audit.status = RunStatus::Failed.name().into();
    });
    assert!(
        matches!(
            &error,
            BundleError::EvaluationsDisagree {
                field: "logit_probe_f32le_hex",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn evaluations_of_different_states_may_differ_in_a_failed_run() {
    // The final checkpoint is another state: its evaluation may differ, and the run is
    // recorded (and verifies) as failed.
    let (_scratch, directory) = forged(|f| {
        let other = Digest::of(b"another final state");
        f.recovered.logical_state_root = other;
        f.evidence.resharded_w3.logical_state_root = other;
        f.recovered.correct += 1;
        let mut probe = vec![7u8; 128 * 10 * 4];
        probe[0] ^= 1;
        set_probe(&mut f.recovered, &probe);
        for comparisons in [&mut f.evidence.comparisons, &mut f.audit.comparisons] {
            comparisons.logical_state_roots_equal = false;
            comparisons.logit_probe_equal = false;
        }
        f.audit.status = RunStatus::Failed.name().into();
    });
    assert_eq!(verify(&directory).expect("verifies").run_status, "failed");
}

#[test]
fn a_total_other_than_the_pinned_test_count_is_refused() {
    // Both evaluations agree with each other, but not with the pinned split's 10,000
    // images (its labels payload: 10,008 bytes less the 8-byte IDX header).
    let error = refused(|f| {
        f.reference.total += 1;
        f.recovered.total += 1;
    });
    assert!(
        matches!(
            &error,
            BundleError::EvaluationSize { name, field: "total", recorded: 10_001, expected: 10_000 }
                if *name == REFERENCE_EVALUATION
        ),
        "{error}"
    );
    assert_eq!(error.kind(), "evaluation-size");
}

#[test]
fn a_probe_of_another_shape_is_refused() {
    // 64 rows, consistently encoded: the probe must hold the first 128 test images.
    let error = refused(|f| {
        let probe = vec![7u8; 64 * 10 * 4];
        for record in [&mut f.reference, &mut f.recovered] {
            record.logit_probe_shape = [64, 10];
            set_probe(record, &probe);
        }
    });
    assert!(
        matches!(
            &error,
            BundleError::EvaluationSize {
                field: "logit_probe_shape[0]",
                recorded: 64,
                expected: 128,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn an_evaluation_on_an_unpinned_test_split_is_refused() {
    let error = refused(|f| {
        for record in [&mut f.reference, &mut f.recovered] {
            record.test_labels_sha256 = Digest::of(b"other labels");
        }
    });
    assert!(
        matches!(
            &error,
            BundleError::UnpinnedDataset { name, field, .. }
                if *name == REFERENCE_EVALUATION && field == "test_labels_sha256"
        ),
        "{error}"
    );
    assert_eq!(error.kind(), "unpinned-dataset");
}

#[test]
fn an_audit_naming_other_dataset_payloads_is_refused() {
    let error = refused(|f| f.audit.build.dataset_payload_sha256[0] = Digest::of(b"other"));
    assert!(
        matches!(
            &error,
            BundleError::UnpinnedDataset { name, field, .. }
                if *name == AUDIT && field == "build.dataset_payload_sha256[0]"
        ),
        "{error}"
    );
    let error = refused(|f| {
        f.audit.build.dataset_payload_sha256.pop();
    });
    assert_eq!(error.kind(), "unpinned-dataset", "{error}");
}

#[test]
fn the_synthetic_bundle_verifies_against_its_own_pins_only() {
    // The same bundle against other pins: its evaluations name another test split.
    let (_scratch, directory) = forged(|_| {});
    let other = crate::dataset::PinTable::with_pins(FASHION_MNIST.resources.map(|r| {
        let mut payload = r.payload;
        payload.sha256 = Digest::of(r.name.as_bytes());
        (r.gzip, payload)
    }));
    let error = verify_pinned(&directory, &other).expect_err("verified against other pins");
    assert_eq!(error.kind(), "unpinned-dataset", "{error}");
    assert!(verify_pinned(&directory, &FASHION_MNIST).is_ok());
}

#[cfg(not(feature = "torch"))]
#[test]
fn without_torch_nothing_is_reevaluated_and_the_report_says_so() {
    use super::reevaluate::{reevaluate, RunStores, SkipReason};
    let (_scratch, directory) = forged(|_| {});
    let verified = verify_pinned(&directory, &FASHION_MNIST).expect("verifies");
    let mut loads = 0;
    let report = reevaluate(&verified, &RunStores::beside(&directory), &mut || {
        loads += 1;
        Err(crate::dataset::DatasetError::CachedFileMissing {
            name: "t10k-labels-idx1-ubyte".into(),
            path: PathBuf::new(),
        })
    })
    .expect("reports");
    assert_eq!(loads, 0, "the test split was loaded without an engine");
    assert!(report.reevaluated.is_empty() && !report.complete());
    assert_eq!(
        report
            .not_reevaluated
            .iter()
            .map(|n| (n.name, n.reason))
            .collect::<Vec<_>>(),
        [
            (REFERENCE_EVALUATION, SkipReason::NoTorchEngine),
            (RECOVERED_EVALUATION, SkipReason::NoTorchEngine)
        ]
    );
}

// ---- file identity ----

fn verify_kind(directory: &Path, hook: &mut dyn FnMut(ReadStage, &Path)) -> BundleError {
    verify_with(directory, &FASHION_MNIST, hook).expect_err("verified despite the interference")
}

#[test]
fn a_symlinked_bundle_file_is_refused() {
    let (scratch, directory) = forged(|_| {});
    let member = directory.join(RECOVERED_EVALUATION);
    let moved = scratch.path().join("elsewhere.json");
    std::fs::rename(&member, &moved).expect("mv");
    std::os::unix::fs::symlink(&moved, &member).expect("symlink");
    let error = verify(&directory).expect_err("a symlink verified");
    assert!(
        matches!(&error, BundleError::Symlink { name } if name == RECOVERED_EVALUATION),
        "{error}"
    );
    assert_eq!(error.kind(), "symlink");
}

#[test]
fn a_symlink_swapped_in_before_the_open_is_refused() {
    // lstat saw a regular file; by the open the name is a symlink: O_NOFOLLOW refuses it.
    let (scratch, directory) = forged(|_| {});
    let target = scratch.path().join("target.json");
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::BeforeOpen && path.ends_with(AUDIT) {
            std::fs::rename(path, &target).expect("mv");
            std::os::unix::fs::symlink(&target, path).expect("symlink");
        }
    });
    assert!(
        matches!(&error, BundleError::Symlink { name } if name == AUDIT),
        "{error}"
    );
}

#[test]
fn a_symlinked_bundle_directory_is_refused() {
    let (scratch, directory) = forged(|_| {});
    let link = scratch.path().join("link");
    std::os::unix::fs::symlink(&directory, &link).expect("symlink");
    let error = verify(&link).expect_err("a symlinked directory verified");
    assert_eq!(error.kind(), "not-a-directory", "{error}");
}

#[test]
fn a_fifo_or_directory_in_place_of_a_file_is_refused() {
    let (_scratch, directory) = forged(|_| {});
    let member = directory.join(REFERENCE_EVALUATION);
    std::fs::remove_file(&member).expect("rm");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &member,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let error = verify(&directory).expect_err("a FIFO verified");
    assert!(
        matches!(&error, BundleError::NotRegularFile { name } if name == REFERENCE_EVALUATION),
        "{error}"
    );
    std::fs::remove_file(&member).expect("rm");
    std::fs::create_dir(&member).expect("mkdir");
    assert_eq!(
        verify(&directory).expect_err("a directory verified").kind(),
        "not-regular-file"
    );
}

#[test]
fn a_file_replaced_between_lstat_and_open_is_refused() {
    // Same bytes, another inode: the identity, not the content, shows the swap.
    let (scratch, directory) = forged(|_| {});
    let copy = scratch.path().join("copy.json");
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::BeforeOpen && path.ends_with(RECOVERY_EVIDENCE) {
            std::fs::copy(path, &copy).expect("copy");
            std::fs::rename(&copy, path).expect("replace");
        }
    });
    assert!(
        matches!(&error, BundleError::Replaced { name, field: IdentityField::Inode } if name == RECOVERY_EVIDENCE),
        "{error}"
    );
    assert_eq!(error.kind(), "file-replaced");
    assert!(error.to_string().contains("inode"));
}

#[test]
fn a_file_replaced_after_the_read_is_refused() {
    // The bytes read were the original's, but the name now names another file.
    let (scratch, directory) = forged(|_| {});
    let copy = scratch.path().join("copy.json");
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::AfterRead && path.ends_with(REFERENCE_EVALUATION) {
            std::fs::copy(path, &copy).expect("copy");
            std::fs::rename(&copy, path).expect("replace");
        }
    });
    assert!(
        matches!(&error, BundleError::Replaced { name, .. } if name == REFERENCE_EVALUATION),
        "{error}"
    );
}

fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn a_file_growing_while_read_is_refused() {
    let (_scratch, directory) = forged(|_| {});
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::BeforeRead && path.ends_with(AUDIT) {
            make_writable(path);
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .expect("open");
            std::io::Write::write_all(&mut file, b" ").expect("append");
        }
    });
    assert!(
        matches!(&error, BundleError::ChangedWhileRead { name, field: IdentityField::Size } if name == AUDIT),
        "{error}"
    );
    assert_eq!(error.kind(), "file-changed");
}

#[test]
fn a_file_rewritten_in_place_while_read_is_refused() {
    // Same size, same bytes even: only the modification time shows the write.
    let (_scratch, directory) = forged(|_| {});
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::AfterRead && path.ends_with(RECOVERED_EVALUATION) {
            make_writable(path);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .expect("open");
            let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
            file.set_modified(later).expect("set mtime");
        }
    });
    assert!(
        matches!(&error, BundleError::ChangedWhileRead { name, field: IdentityField::ModificationTime } if name == RECOVERED_EVALUATION),
        "{error}"
    );
}

#[test]
fn a_file_changed_between_lstat_and_open_is_refused() {
    let (_scratch, directory) = forged(|_| {});
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::BeforeOpen && path.ends_with(REFERENCE_EVALUATION) {
            make_writable(path);
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .expect("open");
            std::io::Write::write_all(&mut file, b"\n").expect("append");
        }
    });
    assert!(
        matches!(&error, BundleError::ChangedWhileRead { name, field: IdentityField::Size } if name == REFERENCE_EVALUATION),
        "{error}"
    );
}

// ---- exclusive ownership ----

fn assert_shared(error: &BundleError, member: &str) {
    assert!(
        matches!(error, BundleError::SharedFile { name, links: 2 } if name == member),
        "{error}"
    );
    assert_eq!(error.kind(), "shared-file");
}

#[test]
fn a_bundle_file_hard_linked_from_outside_the_bundle_is_refused() {
    // Same inode, same bytes: only the link count shows that another name, outside the
    // bundle, can change them.
    let (scratch, directory) = forged(|_| {});
    std::fs::hard_link(
        directory.join(RECOVERY_EVIDENCE),
        scratch.path().join("outside.json"),
    )
    .expect("link");
    let error = verify(&directory).expect_err("a shared file verified");
    assert_shared(&error, RECOVERY_EVIDENCE);
}

#[test]
fn a_hard_link_made_between_lstat_and_open_is_refused() {
    let (scratch, directory) = forged(|_| {});
    let outside = scratch.path().join("outside.json");
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::BeforeOpen && path.ends_with(AUDIT) {
            std::fs::hard_link(path, &outside).expect("link");
        }
    });
    assert_shared(&error, AUDIT);
}

#[test]
fn a_hard_link_made_while_the_file_is_read_is_refused() {
    let (scratch, directory) = forged(|_| {});
    let outside = scratch.path().join("outside.json");
    let error = verify_kind(&directory, &mut |stage, path| {
        if stage == ReadStage::AfterRead && path.ends_with(REFERENCE_EVALUATION) {
            std::fs::hard_link(path, &outside).expect("link");
        }
    });
    assert_shared(&error, REFERENCE_EVALUATION);
}
