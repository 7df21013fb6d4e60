//! Carry-forward (`merge --carry-from OLD --repo DIR`) and its dry run (`plan`): one test
//! per condition (a)..(e), fresh shards winning, and plan naming the changed file.
mod receipt_support;

use std::path::{Path, PathBuf};

use receipt_support::*;
use serde_json::json;

/// Old receipt: lanes `core` (scope `core` + extra `data/extra.txt`) and `other`.
fn old_receipt(fx: &Fixture) -> PathBuf {
    let (core, output) = fx.record_with(
        "core",
        "core",
        &["--fingerprint-extra-paths", "data/extra.txt"],
        "alpha",
        &["a1:ok", "a2:ok"],
    );
    assert_success(&output);
    let other = fx.record("other", "other", "beta", &["b1:ok"]);
    let (old, output) = fx.merge(&[&core, &other], "old.json", &[]);
    assert_success(&output);
    // Keep the old inputs out of the way of the fresh ones.
    std::fs::rename(&core, fx.out("old-core.json")).expect("move");
    std::fs::rename(&other, fx.out("old-other.json")).expect("move");
    old
}

/// Records a fresh `other` lane at HEAD and merges it carrying from `old`.
fn carry(fx: &Fixture, old: &Path) -> (serde_json::Value, String) {
    let fresh = fx.record("other", "other", "beta", &["b1:ok", "b2:ok"]);
    let repo = fx.repo().to_string_lossy().into_owned();
    let old = old.to_string_lossy().into_owned();
    let (out, output) = fx.merge(
        &[&fresh],
        "merged.json",
        &["--carry-from", &old, "--repo", &repo],
    );
    assert_success(&output);
    (
        read_json(&out),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn plan(fx: &Fixture, old: &Path) -> serde_json::Value {
    let output = fx.pipeline(&[
        "receipt",
        "plan",
        "--receipt",
        &old.to_string_lossy(),
        "--repo",
        &fx.repo().to_string_lossy(),
        "--json",
    ]);
    assert_success(&output);
    serde_json::from_slice(&output.stdout).expect("plan JSON")
}

fn plan_entry<'a>(plan: &'a serde_json::Value, shard: &str) -> &'a serde_json::Value {
    plan["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .find(|e| e["shard"] == shard)
        .expect("plan entry")
}

#[test]
fn unchanged_shard_is_carried_and_fresh_shards_win() {
    let fx = Fixture::new();
    let old = old_receipt(&fx);
    fx.write("other/c.rs", "c2\n");
    let head = fx.commit("change other");
    let (merged, _) = carry(&fx, &old);
    assert_eq!(shard_names(&merged), vec!["other", "core"]);
    let core = shard(&merged, "core").expect("core carried");
    assert_eq!(core["carried"]["original_dirty"], false);
    assert!(core["carried"]["from_receipt"].is_string());
    assert_ne!(core["commit"], head.as_str(), "keeps its original commit");
    let other = shard(&merged, "other").expect("fresh other");
    assert!(other["carried"].is_null(), "the fresh shard wins");
    assert_eq!(other["counts"]["passed"], 2);
    assert_eq!(merged["shardlift"]["commit"], head.as_str());
    assert_eq!(
        merged["shardlift"]["tests"].as_object().map(|t| t.len()),
        Some(4)
    );
    assert_eq!(
        merged["shardlift"]["tests"]["alpha/src/lib.rs::a1"]["shard"],
        "core"
    );
}

#[test]
fn condition_a_commit_must_be_current_or_an_ancestor() {
    let fx = Fixture::new();
    let base = fx.head();
    fx.git(&["checkout", "-q", "-b", "side"]);
    fx.write("README", "side\n");
    fx.commit("side");
    let old = old_receipt(&fx);
    fx.git(&["checkout", "-q", "main"]);
    assert_eq!(fx.head(), base);
    fx.write("other/c.rs", "c2\n");
    fx.commit("main moves on");
    let (merged, stderr) = carry(&fx, &old);
    assert!(shard(&merged, "core").is_none(), "{stderr}");
    assert!(stderr.contains("core: (a)"), "{stderr}");
    assert_eq!(
        plan_entry(&plan(&fx, &old), "core")["reasons"][0]["condition"],
        "not_ancestor"
    );
}

#[test]
fn condition_b_manifest_must_recompute_identically() {
    let fx = Fixture::new();
    let old = old_receipt(&fx);
    fx.write("core/a.rs", "a2\n");
    fx.commit("change core");
    let (merged, stderr) = carry(&fx, &old);
    assert!(shard(&merged, "core").is_none(), "{stderr}");
    assert!(
        stderr.contains("core: (b) narrow manifest changed: core/a.rs"),
        "{stderr}"
    );
}

#[test]
fn condition_b_includes_the_extra_paths() {
    let fx = Fixture::new();
    let old = old_receipt(&fx);
    fx.write("data/extra.txt", "extra2\n"); // ignored by git, named as an extra path
    let (merged, stderr) = carry(&fx, &old);
    assert!(shard(&merged, "core").is_none(), "{stderr}");
    assert!(stderr.contains("data/extra.txt"), "{stderr}");
}

#[test]
fn condition_c_shard_must_have_been_recorded_clean() {
    let fx = Fixture::new();
    fx.write("README", "uncommitted\n");
    let old = old_receipt(&fx);
    fx.write("README", "readme\n");
    let (merged, stderr) = carry(&fx, &old);
    assert!(shard(&merged, "core").is_none(), "{stderr}");
    assert!(stderr.contains("core: (c)"), "{stderr}");
}

#[test]
fn condition_d_no_test_id_may_duplicate_a_fresh_one() {
    let fx = Fixture::new();
    let old = old_receipt(&fx);
    // A fresh lane `other` now also runs alpha's a1.
    let fresh = fx.record("other", "other", "alpha", &["a1:ok"]);
    let repo = fx.repo().to_string_lossy().into_owned();
    let old_text = old.to_string_lossy().into_owned();
    let (out, output) = fx.merge(
        &[&fresh],
        "merged.json",
        &["--carry-from", &old_text, "--repo", &repo],
    );
    assert_success(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(shard(&read_json(&out), "core").is_none(), "{stderr}");
    assert!(stderr.contains("core: (d)"), "{stderr}");
}

#[test]
fn condition_e_claimed_test_ids_must_exist_in_the_old_receipt() {
    let fx = Fixture::new();
    let old = old_receipt(&fx);
    rewrite(&old, |v| {
        for shard in v["shardlift"]["shards"].as_array_mut().expect("shards") {
            if shard["name"] == "core" {
                shard["test_ids"]
                    .as_array_mut()
                    .expect("ids")
                    .push(json!("alpha/src/lib.rs::phantom"));
            }
        }
    });
    let (merged, stderr) = carry(&fx, &old);
    assert!(shard(&merged, "core").is_none(), "{stderr}");
    assert!(stderr.contains("core: (e)"), "{stderr}");
    assert!(stderr.contains("phantom"), "{stderr}");
}

#[test]
fn plan_names_the_changed_file_inside_the_manifest_only() {
    let fx = Fixture::new();
    let old = old_receipt(&fx);
    // A change outside `core`'s narrow manifest: core stays carryable, other goes stale.
    fx.write("other/c.rs", "c2\n");
    fx.commit("change other");
    let report = plan(&fx, &old);
    assert_eq!(plan_entry(&report, "core")["status"], "carryable");
    let other = plan_entry(&report, "other");
    assert_eq!(other["status"], "stale");
    assert_eq!(other["reasons"][0]["condition"], "manifest_changed");
    assert_eq!(other["reasons"][0]["changed"], json!(["other/c.rs"]));
    // A change inside it: core is stale with the file named.
    fx.write("core/b.rs", "b2\n");
    fx.commit("change core");
    let report = plan(&fx, &old);
    let core = plan_entry(&report, "core");
    assert_eq!(core["status"], "stale");
    assert_eq!(core["reasons"][0]["changed"], json!(["core/b.rs"]));
    // The text form names it too.
    let text = fx.pipeline(&[
        "receipt",
        "plan",
        "--receipt",
        &old.to_string_lossy(),
        "--repo",
        &fx.repo().to_string_lossy(),
    ]);
    assert_success(&text);
    assert!(String::from_utf8_lossy(&text.stdout)
        .contains("core: stale: (b) narrow manifest changed: core/b.rs"));
}
