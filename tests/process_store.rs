//! Process lane: real publisher and recovery children, and the CLI's exit codes.
use std::path::Path;
use std::process::Command;

use shardlift::core::topology::Topology;
use shardlift::lab::matrix::Invariant;
use shardlift::lab::powerloss::tree_digest;
use shardlift::lab::{kill_publisher_at, kill_publisher_at_occurrence, recover_in_child, LabError};
use shardlift::store::layout::synthetic_state;
use shardlift::store::{self, Barrier, NoHooks};

const EXE: &str = env!("CARGO_BIN_EXE_shardlift");

fn base() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store::publish(
        &root,
        &synthetic_state(2, 1, 30_000),
        Topology::new(4).expect("t"),
        &mut NoHooks,
    )
    .expect("g0");
    (dir, root)
}

fn kill_and_recover(barrier: Barrier, expected: u64) {
    let (_d, root) = base();
    let next = synthetic_state(2, 2, 30_000);
    let report = kill_publisher_at(
        Path::new(EXE),
        &root,
        &next,
        Topology::new(4).expect("t"),
        barrier,
    )
    .expect("kill");
    assert_eq!(report.signal, Some(9));
    assert!(report.reaped);
    assert_eq!(report.unacknowledged.barrier, barrier);
    assert_eq!(report.unacknowledged.seq, report.acknowledged.len() as u64);
    assert_eq!(report.candidate_visible, barrier.commit_visible());
    let before = tree_digest(&root).expect("hash");
    let recovered = recover_in_child(Path::new(EXE), &root).expect("recover");
    assert_eq!(tree_digest(&root).expect("hash"), before);
    assert_eq!(recovered.selected.map(|s| s.generation), Some(expected));
    assert_eq!(
        recover_in_child(Path::new(EXE), &root).expect("again"),
        store::recover(&root).expect("in-process")
    );
}

#[test]
fn kill_at_commit_after_file_fsync_keeps_the_previous_generation() {
    kill_and_recover(Barrier::CommitAfterFileFsync, 0);
}

#[test]
fn kill_at_commit_after_rename_selects_the_candidate() {
    kill_and_recover(Barrier::CommitAfterRename, 1);
}

#[test]
fn kill_at_every_barrier() {
    for barrier in Barrier::ALL {
        kill_and_recover(barrier, u64::from(barrier.commit_visible()));
    }
}

#[test]
fn target_not_reached() {
    let (_d, root) = base();
    let error = kill_publisher_at_occurrence(
        Path::new(EXE),
        &root,
        &synthetic_state(2, 2, 30_000),
        Topology::new(4).expect("t"),
        Barrier::CommitAfterRename,
        5,
    )
    .expect_err("only one commit per publish");
    assert!(
        matches!(error, LabError::TargetNotReached { .. }),
        "{error}"
    );
}

#[test]
fn child_failed_and_process_and_protocol_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    assert!(matches!(
        recover_in_child(Path::new(EXE), &missing),
        Err(LabError::ChildFailed(_))
    ));
    assert!(matches!(
        recover_in_child(&dir.path().join("no-such-exe"), &missing),
        Err(LabError::Process(_))
    ));
    let error = kill_publisher_at(
        Path::new("/bin/echo"),
        &missing,
        &synthetic_state(2, 2, 30_000),
        Topology::new(4).expect("t"),
        Barrier::CommitAfterRename,
    )
    .expect_err("echo is no publisher");
    assert!(matches!(error, LabError::ChildProtocol(_)), "{error}");
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(EXE)
        .args(args)
        .output()
        .expect("run shardlift")
}

/// `shardlift store reshard` of generation 0 onto `workers` (plus `extra`), which must
/// succeed: its JSON report and, checked in order, its progress phases on stderr (phase
/// lines: stderr is no terminal) — the source check (`verb` generation 0), then the commit.
fn reshard_generation_0(
    store: &str,
    workers: &str,
    extra: &[&str],
    verb: &str,
) -> serde_json::Value {
    let mut args = vec![
        "store",
        "reshard",
        "--store",
        store,
        "--generation",
        "0",
        "--workers",
        workers,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let position = |prefix: &str| {
        lines
            .iter()
            .position(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' line in {stderr}"))
    };
    let source = format!("{verb} generation 0");
    let source_done = format!("{source}: done in");
    assert!(position(&source) < position(&source_done));
    assert!(position(&source_done) < position("committing the reshard"));
    assert!(position("committing the reshard") < position("committing the reshard: done in"));
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn cli_recover_and_reshard_json() {
    let (_d, root) = base();
    let store = root.to_str().expect("utf8");
    let summary = reshard_generation_0(store, "3", &[], "checking");
    assert_eq!(summary["generation"], 1);
    assert_eq!(summary["source_objects"], "lengths");
    // --verify-objects re-hashes the source first.
    let summary = reshard_generation_0(store, "2", &["--verify-objects"], "verifying");
    assert_eq!(summary["generation"], 2);
    assert_eq!(summary["source_objects"], "hashed");
    let out = run(&["store", "recover", "--store", store, "--json"]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["report"]["selected"]["generation"], 2);
    assert_eq!(report["report"]["latest"]["status"], "consistent");
}

#[test]
fn cli_errors_exit_non_zero_and_modify_nothing() {
    let (_d, root) = base();
    let store = root.to_str().expect("utf8");
    let before = tree_digest(&root).expect("hash");
    for args in [
        vec![
            "store",
            "reshard",
            "--store",
            store,
            "--generation",
            "7",
            "--workers",
            "3",
            "--json",
        ],
        vec!["store", "verify", "--store", store, "--generation", "3"],
        vec![
            "store",
            "recover",
            "--store",
            "/nonexistent/shardlift-store",
            "--json",
        ],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
    // A worker count outside 1..=12 is a wrong command line: clap refuses it (exit 2).
    let out = run(&[
        "store",
        "reshard",
        "--store",
        store,
        "--generation",
        "0",
        "--workers",
        "0",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(2), "--workers 0");
    assert!(!out.stderr.is_empty());
    assert_eq!(tree_digest(&root).expect("hash"), before);
}

/// The full matrix (slow lane): `cargo test --no-default-features -- --ignored`.
#[test]
#[ignore]
fn crash_matrix_passes() {
    let out = run(&["crash-matrix", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let count = |key: &str| count_of(&summary, key);
    assert_eq!(summary["violations"], serde_json::json!([]));
    assert_eq!(summary["barriers"].as_array().expect("a").len(), 16);
    assert!(count("barrier_kills") >= 16);
    // One real kill before every operation of the recorded publish.
    assert!(count("trace_operations") > 16);
    assert_eq!(count("op_boundary_kills"), count("trace_operations"));
    assert!(count("random_kills") >= 100);
    assert!(count("distinct_states") > 0);
    assert!(count("distinct_states") <= count("crash_images"));
    let scenarios = summary["power_loss_scenarios"].as_array().expect("a");
    assert_eq!(scenarios.len(), 13);
    for scenario in scenarios {
        // Every distinct state was checked.
        assert_eq!(scenario["states_checked"], scenario["distinct_states"]);
        // What was enumerated is said: exhaustive exactly when not sampled.
        let (checked, total) = (
            count_of(scenario, "subsets_checked"),
            count_of(scenario, "subsets_total"),
        );
        assert!(checked > 0 && checked <= total, "{scenario}");
        let sampled = scenario["sampled"].as_bool().expect("sampled");
        assert_eq!(sampled, checked < total, "{scenario}");
        assert_eq!(
            sampled,
            count_of(scenario, "max_pending") > count_of(scenario, "all_subsets_up_to"),
            "{scenario}"
        );
    }
    assert!(count("corruption_cases") >= 50);
    let by_kind: u64 = summary["corruption_by_file_kind"]
        .as_object()
        .expect("map")
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(by_kind, count("corruption_cases"));
    assert!(summary["caveat"]
        .as_str()
        .is_some_and(|c| c.contains("page cache")));
    let mutants = &summary["mutants"];
    assert_eq!(mutants["total"].as_u64().expect("n"), 23);
    assert_eq!(mutants["killed"], mutants["total"]);
    assert_eq!(mutants["survived"], serde_json::json!([]));
    // Every registered mutant ran, in order, was checked against at least one state or
    // corruption case, and was caught by a violation of the invariant it is expected to
    // break, next to the rule it breaks. (Each one's `--mutant` run is the same
    // `run_mutant`; the process lane runs seven of them through the CLI.)
    let names = run(&["crash-matrix", "--list-mutants"]);
    assert!(names.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&names.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let details = mutants["details"].as_array().expect("details");
    let reported: Vec<&str> = details
        .iter()
        .map(|d| d["name"].as_str().expect("name"))
        .collect();
    assert_eq!(reported, names);
    for detail in details {
        let name = &detail["name"];
        assert!(
            detail["breaks"].as_str().is_some_and(|b| !b.is_empty()),
            "{name}"
        );
        let expected = detail["expected_invariant"].as_str().expect("expected");
        let killed_by = detail["killed_by"].as_array().expect("killed_by");
        assert!(!killed_by.is_empty(), "{name} survived");
        for violation in killed_by {
            assert_eq!(violation["invariant"], expected, "{name}");
            assert!(
                violation["detail"].as_str().is_some_and(|d| !d.is_empty()),
                "{name}"
            );
        }
        assert!(
            count_of(detail, "crash_states") + count_of(detail, "corruption_cases") > 0,
            "{name} checked nothing"
        );
    }
}

fn count_of(value: &serde_json::Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {value}"))
}

/// Each mutant run alone exits 1 and names the invariant it broke; an unknown name is a
/// clear error. (The costly mutants run in the slow lane's full crash-matrix.)
#[test]
fn single_mutants_exit_one_naming_the_broken_invariant() {
    let names = run(&["crash-matrix", "--list-mutants"]);
    assert!(names.status.success());
    let listed = String::from_utf8_lossy(&names.stdout).lines().count();
    assert_eq!(listed, 23, "{listed} mutants");
    for (mutant, invariant, detail) in [
        (
            "commit-written-in-place",
            "complete-bytes-visible",
            "is visible with incomplete bytes",
        ),
        (
            "skip-commits-directory-fsync",
            "committed-not-lost",
            "was lost after its commits/ fsync",
        ),
        (
            "latest-before-commit",
            "latest-never-ahead-or-garbage",
            "LATEST is Some(Ahead)",
        ),
        (
            "reuse-non-durable-directory",
            "committed-not-lost",
            "was lost after its commits/ fsync",
        ),
        (
            "skip-found-object-directory-fsync",
            "committed-not-lost",
            "was lost after its commits/ fsync",
        ),
        (
            "recovery-trusts-latest",
            "latest-never-changes-the-answer",
            "LATEST changed the answer",
        ),
        (
            "recovery-skips-object-digests",
            "selected-generation-loads",
            "selected generation does not load",
        ),
    ] {
        let out = run(&["crash-matrix", "--mutant", mutant, "--json"]);
        assert_eq!(out.status.code(), Some(1), "{mutant} survived");
        let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(outcome["killed"], true);
        assert_eq!(outcome["expected_invariant"], invariant, "{mutant}");
        let killed_by = outcome["killed_by"].as_array().expect("list");
        assert!(!killed_by.is_empty(), "{mutant}");
        assert!(
            killed_by.iter().all(|v| v["invariant"] == invariant),
            "{mutant}: {killed_by:?}"
        );
        assert!(
            killed_by
                .iter()
                .any(|v| v["detail"].as_str().is_some_and(|s| s.contains(detail))),
            "{mutant}: {killed_by:?}"
        );
    }
    let unknown = run(&["crash-matrix", "--mutant", "no-such-mutant"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("the mutants are"));
}

/// The kill section's in-process recovery checks count: a generation whose published root
/// the checker was told differently (as if recovery loaded other bytes) is reported. The
/// old matrix passed these checks a throwaway list and reported nothing.
#[test]
fn kill_section_recovery_checks_are_counted() {
    use shardlift::core::digest::Digest;
    use shardlift::lab::matrix::child_recovery_violations;
    let (_dir, root) = base();
    let report = store::recover(&root).expect("recover");
    let selected = report.selected.expect("a generation").generation;
    let mut roots = std::collections::BTreeMap::new();
    let true_root = store::load_generation(&root, selected)
        .expect("load")
        .0
        .logical_state_root();
    roots.insert(selected, true_root);
    let clean = child_recovery_violations(EXE.as_ref(), &root, &roots, Some(selected), "clean")
        .expect("checks run");
    assert!(clean.is_empty(), "{clean:?}");
    roots.insert(selected, Digest([7; 32]));
    let injected =
        child_recovery_violations(EXE.as_ref(), &root, &roots, Some(selected), "injected")
            .expect("checks run");
    assert!(
        injected
            .iter()
            .any(|v| v.invariant == Invariant::SelectedGenerationLoads
                && v.detail.contains("not the published one")),
        "{injected:?}"
    );
}

/// A store whose parent-side prediction of the next generation is wrong (by one).
struct MispredictingStore<'a>(shardlift::lab::LocalStore<'a>);

impl shardlift::lab::ChildStore for MispredictingStore<'_> {
    fn argument(&self) -> &Path {
        self.0.argument()
    }

    fn next_generation(&self) -> Result<u64, LabError> {
        Ok(self.0.next_generation()? + 1)
    }

    fn commit_visible(&self, generation: u64) -> Result<bool, LabError> {
        self.0.commit_visible(generation)
    }
}

/// The harness predicts the generation a publisher child will commit (its kill reports
/// name it); a child that commits another one is a protocol violation, not a success.
/// Control: the true prediction publishes generation 1.
#[test]
fn a_child_that_commits_another_generation_than_predicted_is_refused() {
    use shardlift::lab::{publish_in_child_on, ChildStore, LocalStore};
    let (_d, root) = base();
    let topology = Topology::new(4).expect("t");
    let control = publish_in_child_on(
        Path::new(EXE),
        &LocalStore(&root),
        &synthetic_state(2, 2, 30_000),
        topology,
    )
    .expect("the control publishes");
    assert_eq!(control.committed.generation, 1);
    let wrong = MispredictingStore(LocalStore(&root));
    assert_eq!(wrong.next_generation().expect("predict"), 3);
    match publish_in_child_on(
        Path::new(EXE),
        &wrong,
        &synthetic_state(2, 3, 30_000),
        topology,
    ) {
        Err(LabError::ChildProtocol(message)) => {
            assert!(message.contains("predicted generation 3"), "{message}")
        }
        other => panic!("expected a protocol violation, got {other:?}"),
    }
}
