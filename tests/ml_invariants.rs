//! ML lane: the invariant suite's in-process scenarios, each with the negative test that
//! injects the violation it names; the elastic scenario's derivation fed violations
//! directly; the provenance guard; and the evidence artifact's verifier against
//! tampering, removal, extra files and other schema versions.
#![cfg(feature = "torch")]
mod common;
#[path = "common/scenario.rs"]
mod scenario;

use scenario::{passes_and_detects, verdict};

use std::path::Path;

use shardlift::core::digest::Digest;
use shardlift::core::logical::{Hyperparameters, LogicalState};
use shardlift::orchestrate::invariants::elastic::{
    elastic_observation, logged_failure_code, optimizer_sha256, ElasticExpectation, ElasticRun,
    MarkerRecord, WorkerReport, FAILURE_EXIT_CODE, MARKER_SCHEMA, REPORT_SCHEMA, REPORT_VERSION,
};
use shardlift::orchestrate::invariants::evidence::{
    self, derive, verify_artifact, EvidenceError, Observation, Provenance, SuiteStatus, Verdict,
};
use shardlift::orchestrate::invariants::provenance::{self, ObservedRuntime, REGISTERED_PAIRS};
use shardlift::orchestrate::invariants::registry::REGISTRY;
use shardlift::orchestrate::invariants::scenarios::slot_sha256;
use shardlift::supervise::process::ExitOutcome;

#[test]
fn s01_parameter_round_trip_detects_a_flipped_parameter_bit() {
    passes_and_detects("parameter-round-trip", "parameters_sha256", 5);
}

#[test]
fn s02_optimizer_slots_detect_a_perturbed_exp_avg_sq() {
    passes_and_detects("optimizer-slots-and-step", "exp_avg_sq_sha256", 5);
}

#[test]
fn s03_cursor_and_ledger_detect_an_advanced_cursor() {
    passes_and_detects("data-cursor-and-ledger", "cursor", 5);
    let (_, failed) = verdict("data-cursor-and-ledger", true, 5);
    assert!(failed.contains(&"next_batch_sample_ids_sha256".to_owned()));
}

#[test]
fn s04_logical_root_detects_a_changed_hyperparameter() {
    passes_and_detects("logical-state-root", "loaded_root", 5);
}

#[test]
fn s05_resumed_next_step_detects_a_reset_step_count() {
    passes_and_detects("resumed-next-step", "next_root", 5);
}

#[test]
fn s08_reshard_w4_to_w3_detects_a_rewritten_chunk() {
    passes_and_detects("reshard-w4-to-w3", "resharded_root", 5);
    // The rewrite is on disk and consistent: recovery still selects it (that check
    // passes), and the chunk objects the manifest names show the rewrite.
    let (_, failed) = verdict("reshard-w4-to-w3", true, 5);
    for check in ["objects_written", "chunk_objects_sha256", "w3_next_root"] {
        assert!(
            failed.contains(&check.to_owned()),
            "{check} not in {failed:?}"
        );
    }
    assert!(!failed.contains(&"recovery_selected_generation".to_owned()));
}

#[test]
fn s09_reshard_round_trip_detects_a_republished_chunk() {
    passes_and_detects("reshard-w3-to-w4-round-trip", "chunk_objects_sha256", 5);
    let (_, failed) = verdict("reshard-w3-to-w4-round-trip", true, 5);
    assert!(failed.contains(&"objects_written".to_owned()));
}

// ---- scenario 11: the derivation, fed what a good run gathers and then violations ----

fn state_pair() -> (LogicalState, LogicalState) {
    let state = LogicalState::genesis(Hyperparameters::with_seed(9));
    let mut next = state.clone();
    next.set_counters(
        state.step() + 1,
        state.cursor() + 192,
        state.ledger_digest(),
    );
    if let Some(chunk) = next.chunk_slots_mut(0) {
        chunk.parameters[0] += 1.0;
    }
    (state, next)
}

fn good_run(state: &LogicalState, next: &LogicalState) -> ElasticRun {
    let receipts = (Digest::of(b"commits"), Some(Digest::of(b"latest")));
    let report = |rank: u32, restart_count: u32| WorkerReport {
        schema: REPORT_SCHEMA.into(),
        version: REPORT_VERSION,
        rank,
        world_size: 2,
        restart_count,
        max_restarts: 1,
        saw_marker: true,
        loaded_generation: (restart_count > 0).then_some(0),
        parameters_sha256: Some(slot_sha256(state, |c| c.parameters())),
        optimizer_sha256: Some(optimizer_sha256(state)),
        cursor: Some(state.cursor()),
        loaded_root: Some(state.logical_state_root()),
        next_root: Some(next.logical_state_root()),
        next_ledger_digest: Some(next.ledger_digest()),
    };
    ElasticRun {
        launcher_exit: Some(ExitOutcome::Code(0)),
        launcher_timed_out: false,
        launcher_logged_failure_code: Some(FAILURE_EXIT_CODE),
        marker: Some(MarkerRecord {
            schema: MARKER_SCHEMA.into(),
            version: 1,
            rank: 1,
            restart_count: 0,
            exit_code: FAILURE_EXIT_CODE,
        }),
        rank0_attempt0: Some(report(0, 0)),
        finals: vec![report(0, 1), report(1, 1)],
        receipts_before: Some(receipts),
        receipts_after: Some(receipts),
        staging_before: 0,
        staging_after: 0,
        store_tree_before: Some(Digest::of(b"store")),
        store_tree_after: Some(Digest::of(b"store")),
        launch_attempts: 1,
    }
}

fn elastic_verdict(run: &ElasticRun, expected: &ElasticExpectation) -> (Verdict, Vec<String>) {
    let observation = elastic_observation(run, expected);
    let result = derive(&REGISTRY[10], &observation, Digest::of(b"x"));
    assert!(
        result.missing_checks.is_empty(),
        "{:?}",
        result.missing_checks
    );
    (result.verdict, result.failed_checks)
}

#[test]
fn s11_elastic_derivation_detects_each_violation() {
    let (state, next) = state_pair();
    let expected = ElasticExpectation {
        generation: 0,
        state: state.clone(),
        next: next.clone(),
    };
    let good = good_run(&state, &next);
    assert_eq!(elastic_verdict(&good, &expected).0, Verdict::Pass);

    type Mutation = fn(&mut ElasticRun);
    let cases: [(&str, Mutation); 13] = [
        ("rank1_restart_count", |r| r.finals[1].restart_count = 0),
        ("rank0_max_restarts", |r| r.finals[0].max_restarts = 3),
        ("marker_written_by_rank1_on_attempt0", |r| r.marker = None),
        ("rank0_saw_marker_before_teardown", |r| {
            r.rank0_attempt0 = None
        }),
        ("failure_exit_code_from_launcher_log", |r| {
            r.launcher_logged_failure_code = Some(1)
        }),
        ("rank1_loaded_generation", |r| {
            r.finals[1].loaded_generation = Some(1)
        }),
        ("rank1_next_root", |r| {
            r.finals[1].next_root = Some(Digest::of(b"other"))
        }),
        ("rank0_optimizer_sha256", |r| {
            r.finals[0].optimizer_sha256 = Some(Digest::of(b"other"))
        }),
        ("commit_receipts_sha256", |r| {
            r.receipts_after = Some((Digest::of(b"promoted"), Some(Digest::of(b"latest"))))
        }),
        ("publish_attempted", |r| {
            // An object written to the store, commit records and staging untouched.
            r.store_tree_after = Some(Digest::of(b"store with one more object"))
        }),
        ("publish_attempted", |r| r.store_tree_after = None),
        ("launcher_timed_out", |r| {
            r.launcher_timed_out = true;
            r.launcher_exit = None
        }),
        ("final_reports", |r| {
            r.finals.pop();
        }),
    ];
    for (check, mutate) in cases {
        let mut run = good.clone();
        mutate(&mut run);
        let (verdict, failed) = elastic_verdict(&run, &expected);
        assert_eq!(verdict, Verdict::Fail, "violation of {check} not detected");
        assert!(
            failed.iter().any(|c| c == check),
            "{check} not among {failed:?}"
        );
    }
}

#[test]
fn launcher_failure_line_is_parsed_for_the_named_rank_only() {
    let log = "[2026-01-01 00:00:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] \
               failed (exitcode: 91) local_rank: 1 (pid: 4242) of binary: /x/shardlift\n";
    assert_eq!(logged_failure_code(log, 1), Some(91));
    assert_eq!(logged_failure_code(log, 0), None);
    assert_eq!(logged_failure_code("no failure here\n", 1), None);
}

// ---- provenance guard ----

#[test]
fn provenance_guard_accepts_this_build_and_refuses_a_mismatched_pair() {
    let (observed, pair) = provenance::guard().expect("this build loads the registered libtorch");
    assert_eq!(pair, REGISTERED_PAIRS[0]);
    assert_eq!(observed.libtorch_version, "2.13.0");
    for mismatched in [
        ObservedRuntime {
            libtorch_version: "2.12.0".into(),
            ..observed.clone()
        },
        ObservedRuntime {
            tch_version: "0.25.0".into(),
            ..observed.clone()
        },
        ObservedRuntime {
            libtorch_cpu_sha256: Digest::of(b"another build"),
            ..observed.clone()
        },
    ] {
        let error = provenance::check_runtime(&mismatched, &REGISTERED_PAIRS)
            .expect_err("a mismatched pair must be refused");
        let text = error.to_string();
        assert!(
            text.contains("refusing to run") && text.contains("not a registered exact pair"),
            "{text}"
        );
    }
}

// ---- evidence artifact ----

fn synthetic_provenance() -> Provenance {
    let observed = ObservedRuntime {
        tch_version: REGISTERED_PAIRS[0].tch_version.into(),
        libtorch_version: REGISTERED_PAIRS[0].libtorch_version.into(),
        libtorch_build: "2.13.0+cu130".into(),
        libtorch_cpu_sha256: Digest::from_hex(REGISTERED_PAIRS[0].libtorch_cpu_sha256)
            .expect("hex"),
    };
    shardlift::orchestrate::invariants::provenance_record(&observed, &REGISTERED_PAIRS[0], None)
}

fn synthetic_observations(skip_elastic: bool) -> Vec<Observation> {
    REGISTRY
        .iter()
        .map(|spec| {
            if spec.ordinal == 11 && skip_elastic {
                return Observation::skipped(spec, "test");
            }
            let mut observation = Observation::new(spec);
            for check in spec.required_checks {
                observation.check(check, "x", "x");
            }
            observation
        })
        .collect()
}

fn write(dir: &Path, skip_elastic: bool) -> evidence::Summary {
    evidence::write_artifact(
        dir,
        &synthetic_provenance(),
        &synthetic_observations(skip_elastic),
    )
    .expect("written")
}

fn artifact_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).expect("mkdir");
    for name in artifact_files(from) {
        std::fs::copy(from.join(&name), to.join(&name)).expect("copy");
    }
}

#[test]
fn artifact_round_trips_and_skips_are_not_all_passed() {
    let root = tempfile::tempdir().expect("tempdir");
    let full = write(&root.path().join("full"), false);
    assert_eq!(full.status, SuiteStatus::AllPassed);
    assert_eq!((full.passed, full.failed, full.skipped), (11, 0, 0));
    assert_eq!(
        verify_artifact(&root.path().join("full")).expect("verifies"),
        full
    );
    let skipped = write(&root.path().join("skip"), true);
    assert_eq!(skipped.status, SuiteStatus::PassedWithSkips);
    assert_eq!((skipped.passed, skipped.skipped), (10, 1));
    verify_artifact(&root.path().join("skip")).expect("verifies");
    assert_eq!(artifact_files(&root.path().join("full")).len(), 2 * 11 + 4);
}

#[test]
fn failing_scenario_makes_the_suite_fail() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut observations = synthetic_observations(false);
    observations[4].checks[1].observed = "y".into();
    observations[6].checks.pop();
    let summary = evidence::write_artifact(
        &root.path().join("a"),
        &synthetic_provenance(),
        &observations,
    )
    .expect("written");
    assert_eq!(summary.status, SuiteStatus::Failed);
    assert_eq!(summary.failed, 2);
    verify_artifact(&root.path().join("a")).expect("a failing run still verifies as evidence");
}

#[test]
fn tampering_with_or_removing_any_file_is_refused_naming_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let original = root.path().join("original");
    write(&original, false);
    for (index, name) in artifact_files(&original).into_iter().enumerate() {
        let tampered = root.path().join(format!("t{index}"));
        copy_dir(&original, &tampered);
        let path = tampered.join(&name);
        let mut bytes = std::fs::read(&path).expect("read");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(&path, &bytes).expect("write");
        let error = verify_artifact(&tampered).expect_err("tampering must be refused");
        assert!(error.to_string().contains(&name), "{name}: {error}");

        let removed = root.path().join(format!("r{index}"));
        copy_dir(&original, &removed);
        std::fs::remove_file(removed.join(&name)).expect("remove");
        let error = verify_artifact(&removed).expect_err("removal must be refused");
        assert!(error.to_string().contains(&name), "{name}: {error}");
    }
    let extra = root.path().join("extra");
    copy_dir(&original, &extra);
    std::fs::write(extra.join("notes.txt"), b"hello").expect("write");
    let error = verify_artifact(&extra).expect_err("extra file");
    assert!(matches!(error, EvidenceError::Unlisted { ref file } if file == "notes.txt"));
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

fn write_json(path: &Path, value: &serde_json::Value) {
    std::fs::write(
        path,
        serde_json_canonicalizer::to_vec(value).expect("encode"),
    )
    .expect("write");
}

/// Brings the manifest entry of `file` in line with its current bytes.
fn remanifest(dir: &Path, file: &str) {
    let manifest_path = dir.join(evidence::MANIFEST_FILE);
    let mut manifest = read_json(&manifest_path);
    let bytes = std::fs::read(dir.join(file)).expect("read");
    for entry in manifest["files"].as_array_mut().expect("files") {
        if entry["file"] == file {
            entry["sha256"] = serde_json::json!(Digest::of(&bytes).to_hex());
            entry["bytes"] = serde_json::json!(bytes.len());
        }
    }
    write_json(&manifest_path, &manifest);
}

/// Rewrites one record with another schema version, re-encoded canonically, and
/// re-manifests it so only the version is wrong.
fn rewrite_version(dir: &Path, file: &str, version: u32) {
    let path = dir.join(file);
    let mut value = read_json(&path);
    value["version"] = serde_json::json!(version);
    write_json(&path, &value);
    if file != evidence::MANIFEST_FILE {
        remanifest(dir, file);
    }
}

#[test]
fn older_and_newer_schema_versions_are_refused_with_a_clear_message() {
    let root = tempfile::tempdir().expect("tempdir");
    let original = root.path().join("original");
    write(&original, false);
    for (file, version) in [
        (evidence::MANIFEST_FILE, 0),
        (evidence::MANIFEST_FILE, 2),
        (evidence::SUMMARY_FILE, 0),
        (evidence::SUMMARY_FILE, 2),
        ("observation-03-data-cursor-and-ledger.json", 2),
    ] {
        let dir = root.path().join(format!("{file}-{version}"));
        copy_dir(&original, &dir);
        rewrite_version(&dir, file, version);
        let text = verify_artifact(&dir)
            .expect_err("other version")
            .to_string();
        assert!(
            text.contains(file)
                && text.contains(&format!("version {version} is not supported"))
                && text.contains("exactly version 1"),
            "{text}"
        );
    }
}

#[test]
fn a_result_that_does_not_follow_from_its_observation_is_refused() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut observations = synthetic_observations(false);
    observations[1].checks[0].observed = "y".into();
    let dir = root.path().join("a");
    evidence::write_artifact(&dir, &synthetic_provenance(), &observations).expect("written");
    // Forge the result and the summary consistently, and re-manifest both: only the
    // derivation check can catch it.
    let file = "result-02-optimizer-slots-and-step.json";
    let mut result = read_json(&dir.join(file));
    result["verdict"] = serde_json::json!("pass");
    result["failed_checks"] = serde_json::json!([]);
    write_json(&dir.join(file), &result);
    let result_sha256 = Digest::of(&std::fs::read(dir.join(file)).expect("read")).to_hex();
    let summary_path = dir.join(evidence::SUMMARY_FILE);
    let mut summary = read_json(&summary_path);
    summary["entries"][1]["verdict"] = serde_json::json!("pass");
    summary["entries"][1]["result_sha256"] = serde_json::json!(result_sha256);
    summary["passed"] = serde_json::json!(11);
    summary["failed"] = serde_json::json!(0);
    summary["status"] = serde_json::json!("all-passed");
    write_json(&summary_path, &summary);
    remanifest(&dir, file);
    remanifest(&dir, evidence::SUMMARY_FILE);
    let text = verify_artifact(&dir).expect_err("forged").to_string();
    assert!(
        text.contains(file) && text.contains("does not follow"),
        "{text}"
    );
}

#[test]
fn only_the_elastic_case_may_be_skipped() {
    for spec in REGISTRY.iter() {
        let result = derive(spec, &Observation::skipped(spec, "test"), Digest::of(b"x"));
        let expected = if spec.id == "elastic-restart" {
            Verdict::Skipped
        } else {
            Verdict::Fail
        };
        assert_eq!(result.verdict, expected, "{}", spec.id);
    }
}
