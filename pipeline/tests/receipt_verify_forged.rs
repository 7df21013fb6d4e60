//! `pipeline receipt verify` against forged receipts: each forgery is internally
//! consistent where it can be (digests recomputed, the Statement rebuilt), so it is
//! refused for its own reason, and the error names the shard, test or field.
//!
//! Consistency is checked with or without a repository; with `--repository`, the commit
//! and tree and the five carry-forward conditions of every carried shard are checked too.
mod receipt_support;

use std::path::PathBuf;

use pipeline::receipt::schema::{Outcome, TestEntry, TestOutcome};
use receipt_support::*;
use serde_json::json;

/// A merged receipt of two fresh lanes at HEAD: `core` (test a) and `other` (test b).
fn two_fresh(fx: &Fixture) -> PathBuf {
    let core = fx.record("core", "core", "alpha", &["a:ok"]);
    let other = fx.record("other", "other", "beta", &["b:ok"]);
    let (merged, output) = fx.merge(&[&core, &other], "merged.json", &[]);
    assert_success(&output);
    merged
}

const CORE_TEST: &str = "alpha/src/lib.rs::a";
const OTHER_TEST: &str = "beta/src/lib.rs::b";

/// The most lenient policy that still checks something: carried, unchecked, dirty all allowed.
fn lenient(fx: &Fixture) -> PathBuf {
    policy(
        fx,
        "lenient.json",
        json!({"allow_carried": true, "allow_unchecked_carry": true, "allow_dirty": true}),
    )
}

#[test]
fn a_fresh_shard_claiming_another_commit_is_refused_without_a_repository() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    let open = lenient(&fx);
    assert_success(&verify_receipt(&fx, &merged, &open, None, false));
    forge(&merged, |ext| {
        shard_mut(ext, "other").commit = "f".repeat(40)
    });
    let output = verify_receipt(&fx, &merged, &open, None, false);
    assert_refused(&output, "shard other was recorded at commit ffffffff");
    assert_refused(&output, "not marked carried");
}

#[test]
fn shard_counts_that_disagree_with_its_tests_are_refused() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    forge(&merged, |ext| shard_mut(ext, "core").counts.passed += 1);
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        "shard core records counts",
    );
}

#[test]
fn a_passing_shard_with_a_failed_test_is_refused() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    forge(&merged, |ext| {
        if let Some(entry) = ext.tests.get_mut(CORE_TEST) {
            entry.outcome = TestOutcome::Failed;
        }
        let core = shard_mut(ext, "core");
        core.counts.passed -= 1;
        core.counts.failed += 1;
    });
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        "shard core records PASSED, but some of its tests failed",
    );
}

#[test]
fn a_passing_session_with_a_failed_shard_is_refused() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    // The lane's command failed after its tests passed: the shard failed, the session did not.
    forge(&merged, |ext| {
        let other = shard_mut(ext, "other");
        other.exit.code = Some(101);
        other.outcome = Outcome::Failed;
    });
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        "the session records Passed, but shard other failed",
    );
}

#[test]
fn a_test_claimed_by_a_shard_the_table_does_not_give_it_to_is_refused() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    forge(&merged, |ext| {
        let other = shard_mut(ext, "other");
        other.test_ids.insert(0, CORE_TEST.to_owned());
        other.counts.passed += 1;
    });
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        &format!("shard other claims test {CORE_TEST}, which the test table gives to shard core"),
    );
}

#[test]
fn a_test_of_no_shard_is_refused() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    forge(&merged, |ext| {
        ext.tests.insert(
            "alpha/src/lib.rs::stray".to_owned(),
            TestEntry {
                shard: "core".to_owned(),
                outcome: TestOutcome::Passed,
            },
        );
    });
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        "belong to no shard's test list: alpha/src/lib.rs::stray",
    );
}

#[test]
fn a_dirty_flag_that_is_not_the_or_of_the_shards_is_refused() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    forge(&merged, |ext| ext.dirty = true);
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        "dirty flag is true, but the OR of its shards' is false",
    );
}

#[test]
fn a_carried_shard_whose_dirty_flag_was_rewritten_is_refused() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    forge(&merged, |ext| {
        shard_mut(ext, "core").dirty = true;
        ext.dirty = true;
    });
    assert_refused(
        &verify_receipt(&fx, &merged, &lenient(&fx), None, false),
        "carried shard core: dirty is true, but carried.original_dirty is false",
    );
}

#[test]
fn require_passed_refuses_a_failed_lane_naming_the_shard_and_test() {
    let fx = Fixture::new();
    let (failed, output) = fx.record_with("core", "core", &[], "alpha", &["a:ok", "z:FAILED"]);
    assert_eq!(output.status.code(), Some(1), "the lane failed");
    let open = policy(&fx, "open.json", json!({}));
    assert_success(&verify_receipt(&fx, &failed, &open, None, false));
    let strict = policy(&fx, "passed.json", json!({"require_passed": true}));
    assert_refused(
        &verify_receipt(&fx, &failed, &strict, None, false),
        "shard core failed (1 failed tests: alpha/src/lib.rs::z)",
    );
}

#[test]
fn carried_shards_need_a_repository_or_an_explicit_unchecked_policy() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    let carried = policy(&fx, "carried.json", json!({"allow_carried": true}));
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, false),
        "carried shard core: the carry-forward conditions were not checked",
    );
    let checked = verify_receipt(&fx, &merged, &carried, None, true);
    assert_success(&checked);
    assert!(String::from_utf8_lossy(&checked.stdout)
        .contains("carried shards core meet the five carry-forward conditions"));
    let unchecked = policy(
        &fx,
        "unchecked.json",
        json!({"allow_carried": true, "allow_unchecked_carry": true}),
    );
    let output = verify_receipt(&fx, &merged, &unchecked, None, false);
    assert_success(&output);
    assert!(String::from_utf8_lossy(&output.stdout)
        .contains("carried shards core: the carry-forward conditions were NOT checked"));
}

#[test]
fn a_shard_carried_from_a_commit_that_does_not_exist_is_refused_with_a_repository() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    forge(&merged, |ext| {
        shard_mut(ext, "core").commit = "0".repeat(40)
    });
    let carried = policy(&fx, "carried.json", json!({"allow_carried": true}));
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, true),
        &format!(
            "carried shard core fails the carry-forward conditions: (a) commit {} is not",
            "0".repeat(40)
        ),
    );
}

#[test]
fn condition_a_a_shard_carried_from_a_side_branch_is_refused() {
    let fx = Fixture::new();
    fx.git(&["checkout", "-q", "-b", "side"]);
    fx.write("README", "side\n");
    let side = fx.commit("side");
    fx.git(&["checkout", "-q", "main"]);
    let merged = with_carried(&fx);
    forge(&merged, |ext| shard_mut(ext, "core").commit = side.clone());
    let carried = policy(&fx, "carried.json", json!({"allow_carried": true}));
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, true),
        &format!("carried shard core fails the carry-forward conditions: (a) commit {side}"),
    );
}

#[test]
fn condition_b_a_carried_manifest_that_does_not_recompute_is_refused() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    let other_blob = fx.git(&["rev-parse", "HEAD:other/c.rs"]);
    forge(&merged, |ext| {
        shard_mut(ext, "core")
            .manifest
            .blobs
            .insert("core/a.rs".to_owned(), other_blob.clone());
    });
    let carried = policy(&fx, "carried.json", json!({"allow_carried": true}));
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, true),
        "carried shard core fails the carry-forward conditions: (b) narrow manifest changed: core/a.rs",
    );
}

#[test]
fn condition_c_a_carried_shard_recorded_dirty_is_refused_even_when_dirt_is_allowed() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    forge(&merged, |ext| {
        let core = shard_mut(ext, "core");
        core.dirty = true;
        if let Some(carried) = core.carried.as_mut() {
            carried.original_dirty = true;
        }
        ext.dirty = true;
    });
    let carried = policy(
        &fx,
        "carried.json",
        json!({"allow_carried": true, "allow_dirty": true}),
    );
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, true),
        "carried shard core fails the carry-forward conditions: (c) recorded from a dirty tree",
    );
}

#[test]
fn condition_d_a_carried_shard_claiming_a_fresh_test_is_refused() {
    // In one receipt a test ID has one owner, so (d) is the consistency check that the
    // test table gives each claimed test to the claiming shard.
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    forge(&merged, |ext| {
        let core = shard_mut(ext, "core");
        core.test_ids.push(OTHER_TEST.to_owned());
        core.counts.passed += 1;
    });
    let carried = policy(&fx, "carried.json", json!({"allow_carried": true}));
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, true),
        &format!("shard core claims test {OTHER_TEST}, which the test table gives to shard other"),
    );
}

#[test]
fn condition_e_a_carried_shard_claiming_an_unknown_test_is_refused() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    forge(&merged, |ext| {
        let core = shard_mut(ext, "core");
        core.test_ids.push("alpha/src/lib.rs::phantom".to_owned());
        core.counts.passed += 1;
    });
    let carried = policy(&fx, "carried.json", json!({"allow_carried": true}));
    assert_refused(
        &verify_receipt(&fx, &merged, &carried, None, true),
        "shard core claims test alpha/src/lib.rs::phantom, which the test table does not hold",
    );
}

#[test]
fn a_receipt_of_a_commit_the_repository_lacks_is_refused_naming_it() {
    let fx = Fixture::new();
    fx.write("README", "only in this history\n");
    fx.commit("only here");
    let merged = two_fresh(&fx);
    let commit = read_json(&merged)["shardlift"]["commit"]
        .as_str()
        .expect("commit")
        .to_owned();
    let elsewhere = Fixture::new();
    std::fs::copy(&merged, elsewhere.out("merged.json")).expect("copy");
    let open = policy(&elsewhere, "open.json", json!({}));
    assert_refused(
        &verify_receipt(&elsewhere, &elsewhere.out("merged.json"), &open, None, true),
        &format!("the receipt's commit {commit} is not in the repository"),
    );
}

#[test]
fn a_receipt_recording_another_tree_is_refused_with_a_repository() {
    let fx = Fixture::new();
    let merged = two_fresh(&fx);
    let earlier = fx.git(&["rev-parse", "HEAD^{tree}"]);
    fx.write("README", "later\n");
    fx.commit("later");
    let head = fx.head();
    let later_tree = fx.git(&["rev-parse", "HEAD^{tree}"]);
    // Re-dated to the later commit, keeping the earlier tree: consistent on its own.
    forge(&merged, |ext| {
        ext.commit = head.clone();
        for shard in &mut ext.shards {
            shard.commit = head.clone();
        }
    });
    let open = policy(&fx, "open.json", json!({}));
    assert_success(&verify_receipt(&fx, &merged, &open, None, false));
    assert_refused(
        &verify_receipt(&fx, &merged, &open, None, true),
        &format!(
            "records tree {earlier} for commit {head}, but the repository has tree {later_tree}"
        ),
    );
}
