//! Process lane: `shardlift killer-demo` end to end for both barriers, `verify-bundle`
//! on the result, every class of bundle tampering, and refusals before any work.
#![cfg(feature = "torch")]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;
use shardlift::core::canonical;
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::{
    audit_self_digest, AuditRecord, BoundFile, EvaluationRecord, RecoveryEvidenceRecord,
    WorkerExitEntry,
};

struct Runs {
    _root: tempfile::TempDir,
    records: BTreeMap<String, Value>,
    bundles: BTreeMap<String, PathBuf>,
}

/// Both barriers, run once per test binary with no --barrier (the README's main command
/// form, with a run directory so the test owns it).
fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let root = tempfile::tempdir().expect("tempdir");
        let run_directory = root.path().join("runs");
        let output = Command::new(common::shardlift_exe())
            .arg("killer-demo")
            .arg("--run-directory")
            .arg(&run_directory)
            .arg("--cache-directory")
            .arg(common::cache_directory())
            .output()
            .expect("run killer-demo");
        assert!(
            output.status.success(),
            "killer-demo failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut records = BTreeMap::new();
        let mut bundles = BTreeMap::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let record: Value = serde_json::from_str(line).expect("one JSON record per line");
            let barrier = record["barrier"].as_str().expect("barrier").to_owned();
            let bundle = PathBuf::from(
                record["bundle_directory"]
                    .as_str()
                    .expect("bundle_directory"),
            );
            assert!(bundle.starts_with(&run_directory));
            bundles.insert(barrier.clone(), bundle);
            records.insert(barrier, record);
        }
        assert_eq!(records.len(), 2, "one record per barrier");
        Runs {
            _root: root,
            records,
            bundles,
        }
    })
}

fn verify(bundle: &Path) -> Output {
    Command::new(common::shardlift_exe())
        .arg("verify-bundle")
        .arg("--bundle-directory")
        .arg(bundle)
        .output()
        .expect("run verify-bundle")
}

#[test]
fn both_barriers_reproduce_the_recorded_table() {
    let runs = runs();
    // barrier, candidate installed, selected generation, selected step, replay, final generation, final step
    let table = [
        ("commit-after-file-fsync", false, 0, 1, 1, 2, 2),
        ("commit-after-rename", true, 1, 2, 0, 3, 3),
    ];
    for (barrier, installed, generation, step, replay, final_generation, final_step) in table {
        let record = &runs.records[barrier];
        assert_eq!(record["status"], "passed", "{record}");
        assert_eq!(record["candidate_installed"], installed, "{barrier}");
        assert_eq!(record["selected_generation"], generation, "{barrier}");
        assert_eq!(record["selected_step"], step, "{barrier}");
        assert_eq!(record["replayed_batches"], replay, "{barrier}");
        assert_eq!(
            record["final_checkpoint"]["generation"], final_generation,
            "{barrier}"
        );
        assert_eq!(record["final_checkpoint"]["step"], final_step, "{barrier}");
        assert_eq!(record["final_checkpoint"]["workers"], 3, "{barrier}");
        assert_eq!(record["logit_probe_equal"], true);
        assert_eq!(record["logical_state_roots_equal"], true);
        assert_eq!(record["ledger_digests_equal"], true);
        assert_eq!(record["worker_exits"], 19);
        assert_eq!(record["audit_sha256"].as_str().map(str::len), Some(64));

        let output = verify(&runs.bundles[barrier]);
        assert!(
            output.status.success(),
            "verify-bundle: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let summary: Value = serde_json::from_slice(&output.stdout).expect("summary JSON");
        assert_eq!(summary["status"], "verified");
        assert_eq!(summary["barrier"], barrier);
        assert_eq!(summary["audit_sha256"], record["audit_sha256"]);
        // The run's stores are beside its bundle: both checkpoints were evaluated again.
        assert_eq!(
            summary["reevaluation"],
            serde_json::json!({
                "reevaluated": ["reference-evaluation.json", "recovered-evaluation.json"],
                "not_reevaluated": []
            }),
            "{barrier}"
        );
    }
}

#[test]
fn the_evidence_records_nineteen_reaped_worker_exits_and_a_sigkill() {
    let runs = runs();
    for bundle in runs.bundles.values() {
        let evidence: Value = serde_json::from_slice(
            &std::fs::read(bundle.join("recovery-evidence.json")).expect("read"),
        )
        .expect("json");
        let exits = evidence["worker_exits"].as_array().expect("exits");
        assert_eq!(exits.len(), 19);
        assert!(exits.iter().all(|e| e["outcome"] == "code:0"));
        let sessions: Vec<(String, u64)> = evidence["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap_or("").to_owned(),
                    s["workers"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        let expected = [
            ("genesis", 4),
            ("reference", 4),
            ("crash", 4),
            ("recovered", 4),
            ("resharded", 3),
        ];
        assert_eq!(sessions, expected.map(|(n, w)| (n.to_owned(), w)).to_vec());
        assert_eq!(evidence["kill"]["signal"], 9);
        assert_eq!(evidence["kill"]["reaped"], true);
        assert_eq!(
            evidence["kill"]["unacknowledged_event"],
            evidence["kill"]["target_barrier"]
        );
        let acknowledged = evidence["kill"]["acknowledged_events"]
            .as_array()
            .expect("events");
        assert!(acknowledged
            .iter()
            .all(|e| e != &evidence["kill"]["target_barrier"]));
        assert_eq!(evidence["reshard"]["chunk_objects_written"], 0);
        // The reshard's roots: two recomputed from chunk objects loaded back from the
        // store, and the commit record's, all equal to the reference at the selected step.
        let reshard = &evidence["reshard"];
        let selected_step = evidence["recovery"]["selected_step"].clone();
        let reference_root = evidence["reference"]
            .as_array()
            .expect("reference")
            .iter()
            .find(|d| d["step"] == selected_step)
            .map(|d| d["logical_state_root"].clone())
            .expect("reference at the selected step");
        for root in [
            "committed_root",
            "source_root_from_chunks",
            "resharded_root_from_chunks",
        ] {
            assert_eq!(reshard[root], reference_root, "{root}");
        }
        // The reference is evaluated from its checkpoint in the reference store.
        let reference: Value = serde_json::from_slice(
            &std::fs::read(bundle.join("reference-evaluation.json")).expect("read"),
        )
        .expect("json");
        assert_eq!(
            reference["generation"],
            evidence["reference_checkpoint"]["generation"]
        );
        assert!(reference["generation"].is_u64());
        // No paths in what is compared.
        let text = String::from_utf8_lossy(
            &std::fs::read(bundle.join("recovery-evidence.json")).expect("read"),
        )
        .into_owned();
        assert!(
            !text.contains("/tmp") && !text.contains("/root"),
            "a path leaked into the evidence"
        );
    }
}

/// A copy of a bundle to tamper with, and a digest of every byte in it.
fn copy_bundle(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        std::fs::copy(entry.path(), &target).expect("copy");
        let mut permissions = std::fs::metadata(&target).expect("meta").permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        permissions.set_readonly(false);
        std::fs::set_permissions(&target, permissions).expect("chmod");
    }
}

/// Every entry of `dir`: whether it is a regular file, and a regular file's bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, (bool, Vec<u8>)> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| {
            let entry = entry.expect("entry");
            let path = entry.path();
            let is_file = path.symlink_metadata().expect("meta").file_type().is_file();
            let bytes = if is_file {
                std::fs::read(&path).expect("read")
            } else {
                Vec::new()
            };
            (
                entry.file_name().to_string_lossy().into_owned(),
                (is_file, bytes),
            )
        })
        .collect()
}

/// Applies `tamper` to a fresh copy of the rename bundle and returns verify-bundle's
/// error kind, checking that verification changed nothing.
fn rejected_kind(tamper: impl FnOnce(&Path)) -> String {
    rejected(tamper).0
}

/// As [`rejected_kind`], with the error message.
fn rejected(tamper: impl FnOnce(&Path)) -> (String, String) {
    rejected_copy_of(&runs().bundles["commit-after-rename"], tamper)
}

/// As [`rejected`], on a copy of the bundle at `source`.
fn rejected_copy_of(source: &Path, tamper: impl FnOnce(&Path)) -> (String, String) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let bundle = scratch.path().join("bundle");
    copy_bundle(source, &bundle);
    tamper(&bundle);
    let before = snapshot(&bundle);
    let output = verify(&bundle);
    assert_eq!(output.status.code(), Some(1), "tampered bundle accepted");
    assert_eq!(
        snapshot(&bundle),
        before,
        "verify-bundle modified the bundle"
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("rejection JSON");
    assert_eq!(report["status"], "rejected");
    (
        report["error_kind"]
            .as_str()
            .expect("error_kind")
            .to_owned(),
        report["error"].as_str().expect("error").to_owned(),
    )
}

#[test]
fn a_flipped_bit_in_any_file_is_rejected() {
    for name in [
        "reference-evaluation.json",
        "recovered-evaluation.json",
        "recovery-evidence.json",
        "audit.json",
    ] {
        // Flip a bit in the middle of the file and one near each end.
        for position in [0.5f64, 0.1, 0.9] {
            let kind = rejected_kind(|bundle| {
                let path = bundle.join(name);
                let mut bytes = std::fs::read(&path).expect("read");
                let index = ((bytes.len() as f64) * position) as usize;
                bytes[index] ^= 0x04;
                std::fs::write(&path, bytes).expect("write");
            });
            assert!(
                [
                    "malformed",
                    "non-canonical",
                    "binding-mismatch",
                    "self-digest-mismatch",
                    "inconsistent"
                ]
                .contains(&kind.as_str()),
                "{name} at {position}: {kind}"
            );
        }
    }
}

#[test]
fn each_structural_tampering_has_its_own_error_kind() {
    assert_eq!(
        rejected_kind(|b| std::fs::remove_file(b.join("reference-evaluation.json")).expect("rm")),
        "missing-file"
    );
    assert_eq!(
        rejected_kind(|b| std::fs::remove_file(b.join("audit.json")).expect("rm")),
        "incomplete"
    );
    assert_eq!(
        rejected_kind(|b| std::fs::write(b.join("notes.txt"), b"extra").expect("write")),
        "unexpected-file"
    );
    assert_eq!(
        rejected_kind(|b| {
            let target = b.join("recovered-evaluation.json");
            let moved = b.with_file_name("moved.json");
            std::fs::rename(&target, &moved).expect("mv");
            std::os::unix::fs::symlink(&moved, &target).expect("symlink");
        }),
        "symlink"
    );
    assert_eq!(
        rejected_kind(|b| {
            let target = b.join("recovered-evaluation.json");
            std::fs::remove_file(&target).expect("rm");
            std::fs::create_dir(&target).expect("mkdir");
        }),
        "not-regular-file"
    );
}

#[test]
fn a_record_from_another_run_breaks_the_binding() {
    let runs = runs();
    let other = runs.bundles["commit-after-file-fsync"].join("reference-evaluation.json");
    let kind = rejected_kind(|b| {
        std::fs::copy(&other, b.join("reference-evaluation.json")).expect("copy");
    });
    assert_eq!(kind, "binding-mismatch");
}

#[test]
fn equivalent_but_non_canonical_json_is_rejected() {
    let kind = rejected_kind(|b| {
        let path = b.join("recovery-evidence.json");
        let value: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        // Same JSON value, other bytes (pretty-printed).
        std::fs::write(&path, serde_json::to_vec_pretty(&value).expect("encode")).expect("write");
    });
    assert_eq!(kind, "non-canonical");
}

/// Edits the decoded evidence and audit, then re-encodes both canonically and recomputes
/// every binding (the evidence's digest in the audit, the audit's self digest): the
/// result is internally consistent, so only a check of the claims themselves can refuse it.
fn forge_consistently(
    bundle: &Path,
    edit: impl FnOnce(&mut RecoveryEvidenceRecord, &mut AuditRecord),
) {
    let evidence_path = bundle.join("recovery-evidence.json");
    let audit_path = bundle.join("audit.json");
    let mut evidence: RecoveryEvidenceRecord =
        canonical::decode(&std::fs::read(&evidence_path).expect("read")).expect("evidence");
    let mut audit: AuditRecord =
        canonical::decode(&std::fs::read(&audit_path).expect("read")).expect("audit");
    edit(&mut evidence, &mut audit);
    let evidence_bytes = canonical::encode(&evidence).expect("encode");
    for file in &mut audit.files {
        if file.name == "recovery-evidence.json" {
            *file = BoundFile {
                name: file.name.clone(),
                bytes: evidence_bytes.len() as u64,
                sha256: Digest::of(&evidence_bytes),
            };
        }
    }
    audit.self_sha256 = audit_self_digest(&audit).expect("self digest");
    std::fs::write(&evidence_path, evidence_bytes).expect("write");
    std::fs::write(&audit_path, canonical::encode(&audit).expect("encode")).expect("write");
}

#[test]
fn a_consistent_forgery_that_only_rebinds_verifies() {
    // The forging itself breaks nothing: with no edit, the re-bound bundle verifies.
    let runs = runs();
    let scratch = tempfile::tempdir().expect("tempdir");
    let bundle = scratch.path().join("bundle");
    copy_bundle(&runs.bundles["commit-after-rename"], &bundle);
    forge_consistently(&bundle, |_, _| {});
    let output = verify(&bundle);
    assert!(output.status.success());
    // A copy has no stores beside it: the report says that nothing was evaluated again.
    let summary: Value = serde_json::from_slice(&output.stdout).expect("summary JSON");
    assert_eq!(
        summary["reevaluation"],
        serde_json::json!({
            "reevaluated": [],
            "not_reevaluated": [
                {"name": "reference-evaluation.json", "reason": "store-absent"},
                {"name": "recovered-evaluation.json", "reason": "store-absent"}
            ]
        })
    );
}

/// Edits the decoded recovered evaluation, then re-encodes it and recomputes every digest
/// that binds it (the evidence's, the audit's and the audit's self digest).
fn forge_recovered_evaluation(bundle: &Path, edit: impl FnOnce(&mut EvaluationRecord)) {
    let path = bundle.join("recovered-evaluation.json");
    let mut record: EvaluationRecord =
        canonical::decode(&std::fs::read(&path).expect("read")).expect("evaluation");
    edit(&mut record);
    let bytes = canonical::encode(&record).expect("encode");
    std::fs::write(&path, &bytes).expect("write");
    forge_consistently(bundle, |evidence, audit| {
        evidence.recovered_evaluation_sha256 = Digest::of(&bytes);
        for file in &mut audit.files {
            if file.name == "recovered-evaluation.json" {
                file.bytes = bytes.len() as u64;
                file.sha256 = Digest::of(&bytes);
            }
        }
    });
}

#[test]
fn a_consistent_forgery_with_one_more_correct_answer_is_refused() {
    // Both evaluations are of one state on the pinned test split: their correct counts
    // must be equal, whatever the digests say. The committed bundle verifies as it is and
    // after the re-binding alone, so only the new check refuses the forgery.
    let committed = common::committed_bundle();
    assert!(verify(&committed).status.success());
    let scratch = tempfile::tempdir().expect("tempdir");
    let rebound = scratch.path().join("bundle");
    copy_bundle(&committed, &rebound);
    forge_recovered_evaluation(&rebound, |_| {});
    assert!(verify(&rebound).status.success());
    let (kind, error) = rejected_copy_of(&committed, |b| {
        forge_recovered_evaluation(b, |record| record.correct += 1)
    });
    assert_eq!(kind, "evaluations-disagree");
    assert!(error.contains("correct"), "{error}");
}

#[test]
fn stores_beside_a_bundle_without_the_test_split_are_reported_not_reevaluated() {
    // A run directory with both stores present but a dataset cache without the pinned
    // test split: the bundle verifies, and the record says why nothing was evaluated
    // again, naming no path.
    let scratch = tempfile::tempdir().expect("tempdir");
    let run = scratch.path().join("run");
    let bundle = run.join("bundle");
    copy_bundle(&common::committed_bundle(), &bundle);
    for store in ["reference-store", "crash-store"] {
        std::fs::create_dir(run.join(store)).expect("mkdir");
    }
    let cache = scratch.path().join("cache");
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let output = Command::new(common::shardlift_exe())
        .arg("verify-bundle")
        .arg("--bundle-directory")
        .arg(&bundle)
        .arg("--cache-directory")
        .arg(&cache)
        .output()
        .expect("run verify-bundle");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("summary JSON");
    assert_eq!(summary["status"], "verified");
    assert_eq!(
        summary["reevaluation"],
        serde_json::json!({
            "reevaluated": [],
            "not_reevaluated": [
                {"name": "reference-evaluation.json", "reason": "test-split-unavailable"},
                {"name": "recovered-evaluation.json", "reason": "test-split-unavailable"}
            ]
        })
    );
    let scratch_path = scratch.path().to_string_lossy();
    assert!(
        !stdout.contains(scratch_path.as_ref()) && !stderr.contains(scratch_path.as_ref()),
        "{stdout}{stderr}"
    );
}

#[test]
fn a_consistent_forgery_with_an_unclean_worker_exit_is_inconsistent() {
    // The acceptance case: records re-encoded canonically, one worker exit
    // changed to signal:9, every digest and binding recomputed.
    let (kind, error) = rejected(|b| {
        forge_consistently(b, |evidence, _| {
            evidence.worker_exits[5].outcome = "signal:9".to_owned();
        })
    });
    assert_eq!(kind, "inconsistent");
    assert!(
        error.contains("worker_exits[5].outcome") && error.contains("signal:9"),
        "{error}"
    );
}

#[test]
fn a_consistent_forgery_of_a_resharded_root_is_inconsistent() {
    // The root recomputed from the resharded generation's chunks differs from the
    // source's, while the comparisons still claim every root equal.
    let (kind, error) = rejected(|b| {
        forge_consistently(b, |evidence, _| {
            evidence.reshard.resharded_root_from_chunks = Digest::of(b"a rewritten chunk");
        })
    });
    assert_eq!(kind, "inconsistent");
    assert!(
        error.contains("reshard.resharded_root_from_chunks"),
        "{error}"
    );
}

#[test]
fn a_consistent_forgery_with_a_missing_worker_exit_is_inconsistent() {
    let kind = rejected_kind(|b| {
        forge_consistently(b, |evidence, audit| {
            evidence.worker_exits.pop();
            audit.worker_exits -= 1;
        })
    });
    assert_eq!(kind, "inconsistent");
}

#[test]
fn a_consistent_forgery_of_the_final_placement_is_inconsistent() {
    // Final checkpoint and last session both claim 4 workers: no constant says 3, the
    // recorded session table does.
    let kind = rejected_kind(|b| {
        forge_consistently(b, |evidence, audit| {
            if let Some(last) = evidence.sessions.last_mut() {
                last.workers = 4;
            }
            evidence.worker_exits.push(WorkerExitEntry {
                session: "resharded".to_owned(),
                rank: 3,
                outcome: "code:0".to_owned(),
            });
            evidence.final_checkpoint.workers = 4;
            audit.final_checkpoint.workers = 4;
            audit.worker_exits += 1;
        })
    });
    assert_eq!(kind, "inconsistent");
}

fn killer_demo(args: &[&str]) -> Output {
    Command::new(common::shardlift_exe())
        .arg("killer-demo")
        .args(args)
        .output()
        .expect("run killer-demo")
}

#[test]
fn refusals_come_before_any_work() {
    let scratch = tempfile::tempdir().expect("tempdir");
    // An existing run directory.
    let existing = scratch.path().join("existing");
    std::fs::create_dir(&existing).expect("mkdir");
    std::fs::write(existing.join("keep"), b"x").expect("write");
    let output = killer_demo(&[
        "--barrier",
        "commit-after-rename",
        "--run-directory",
        existing.to_str().expect("utf8"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("already exists"));
    assert_eq!(
        std::fs::read_dir(&existing).expect("ls").count(),
        1,
        "the existing directory was touched"
    );

    // A world-writable cache directory.
    let cache = scratch.path().join("cache");
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let run = scratch.path().join("run-a");
    let output = killer_demo(&[
        "--barrier",
        "commit-after-rename",
        "--run-directory",
        run.to_str().expect("utf8"),
        "--cache-directory",
        cache.to_str().expect("utf8"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        !run.exists(),
        "work started despite a world-writable cache directory"
    );

    // A cache directory owned by another user (the tests run as root, which may chown).
    let foreign = scratch.path().join("foreign-cache");
    std::fs::create_dir(&foreign).expect("mkdir");
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).expect("chown to nobody");
    let output = killer_demo(&[
        "--barrier",
        "commit-after-rename",
        "--run-directory",
        run.to_str().expect("utf8"),
        "--cache-directory",
        foreign.to_str().expect("utf8"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("owned"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !run.exists(),
        "work started despite a cache directory owned by someone else"
    );

    // A dirty checkout.
    let repository = scratch.path().join("repo");
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .arg("-C")
            .arg(&repository)
            .args(args)
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    };
    std::fs::create_dir(&repository).expect("mkdir");
    git(&["init", "-q"]);
    std::fs::write(repository.join("tracked"), b"1").expect("write");
    git(&["add", "tracked"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "commit",
        "-qm",
        "init",
    ]);
    let head = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&repository)
            .args(["rev-parse", "HEAD"])
            .output()
            .expect("git")
            .stdout,
    )
    .expect("utf8");
    std::fs::write(repository.join("untracked"), b"2").expect("write");
    let run = scratch.path().join("run-b");
    let output = killer_demo(&[
        "--barrier",
        "commit-after-rename",
        "--run-directory",
        run.to_str().expect("utf8"),
        "--repository",
        repository.to_str().expect("utf8"),
        "--expected-revision",
        head.trim(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("untracked"),
        "the dirty file is not named"
    );
    assert!(!run.exists(), "work started despite a dirty checkout");
}
