//! `shardlift killer-demo --crash-store s3://…` against a real three-node Garage cluster
//! (lane `objectstore`, built with torch): the publisher is killed at both barriers on the
//! object store, recovery and the reshard run there, and every bundle is byte for byte the
//! bundle of the same run with a local crash store. A prefix in use, or a location that is
//! not `s3://`, is refused before any work.
#![cfg(feature = "torch")]
mod objectstore_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use objectstore_support::{fresh_url, open, shardlift_exe, shardlift_json};
use serde_json::Value;

const BUNDLE_FILES: [&str; 4] = [
    "reference-evaluation.json",
    "recovered-evaluation.json",
    "recovery-evidence.json",
    "audit.json",
];

fn killer_demo(run_directory: &Path, extra: &[&str]) -> Output {
    Command::new(shardlift_exe())
        .arg("killer-demo")
        .arg("--run-directory")
        .arg(run_directory)
        .arg("--cache-directory")
        .arg(shardlift::dataset::defaults::cache_directory())
        .args(extra)
        .output()
        .expect("run killer-demo")
}

/// One JSON record per barrier, keyed by barrier; panics unless the run succeeded.
fn records(output: &Output) -> BTreeMap<String, Value> {
    assert!(
        output.status.success(),
        "killer-demo failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut records = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let record: Value = serde_json::from_str(line).expect("one JSON record per line");
        let barrier = record["barrier"].as_str().expect("barrier").to_owned();
        records.insert(barrier, record);
    }
    assert_eq!(records.len(), 2, "one record per barrier");
    records
}

fn bundle_file(record: &Value, name: &str) -> Vec<u8> {
    let directory = PathBuf::from(record["bundle_directory"].as_str().expect("bundle"));
    std::fs::read(directory.join(name)).expect("read a bundle file")
}

#[test]
fn both_barriers_on_garage_reproduce_the_table_and_the_local_bundles_byte_for_byte() {
    let url = fresh_url("killer-demo");
    let scratch = tempfile::tempdir().expect("tempdir");
    let on_garage = records(&killer_demo(
        &scratch.path().join("garage"),
        &["--crash-store", &url],
    ));
    let local = records(&killer_demo(&scratch.path().join("local"), &[]));
    // What a fresh probe of this cluster finds (Garage ignores If-None-Match).
    let capability =
        serde_json::to_value(open(&fresh_url("killer-demo-probe"), true).conditional_create())
            .expect("capability as JSON");
    // barrier, candidate installed, selected generation, selected step, replay, final generation, final step
    let table = [
        ("commit-after-file-fsync", false, 0, 1, 1, 2, 2),
        ("commit-after-rename", true, 1, 2, 0, 3, 3),
    ];
    for (barrier, installed, generation, step, replay, final_generation, final_step) in table {
        let record = &on_garage[barrier];
        assert!(
            !scratch
                .path()
                .join("garage")
                .join(barrier)
                .join("crash-store")
                .exists(),
            "{barrier}: the crash store is on Garage, not in the run directory"
        );
        assert_eq!(record["status"], "passed", "{barrier}: {record}");
        assert_eq!(record["candidate_installed"], installed, "{barrier}");
        assert_eq!(record["selected_generation"], generation, "{barrier}");
        assert_eq!(record["selected_step"], step, "{barrier}");
        assert_eq!(record["replayed_batches"], replay, "{barrier}");
        assert_eq!(record["final_checkpoint"]["generation"], final_generation);
        assert_eq!(record["final_checkpoint"]["step"], final_step);
        let store_url = format!("{url}/{barrier}");
        assert_eq!(record["crash_store"]["location"], store_url.as_str());
        assert_eq!(record["crash_store"]["conditional_create"], capability);
        assert!(
            local[barrier].get("crash_store").is_none(),
            "a local run's record is unchanged"
        );
        // The same four files, byte for byte, whichever backend held the crash store.
        for name in BUNDLE_FILES {
            assert!(
                bundle_file(record, name) == bundle_file(&local[barrier], name),
                "{barrier}: {name} differs between the Garage and the local crash store"
            );
        }
        assert_eq!(record["audit_sha256"], local[barrier]["audit_sha256"]);
        let bundle = record["bundle_directory"].as_str().expect("bundle");
        let verified = Command::new(shardlift_exe())
            .args(["verify-bundle", "--bundle-directory", bundle])
            .output()
            .expect("run verify-bundle");
        assert!(verified.status.success(), "{barrier}: verify-bundle failed");
        // A fresh process recovering the crash store selects the final checkpoint.
        let (ok, report, stderr) =
            shardlift_json(&["store", "recover", "--store", &store_url, "--json"]);
        assert!(ok, "{barrier}: recover failed: {stderr}");
        assert_eq!(
            report["report"]["selected"]["generation"], final_generation,
            "{barrier}: {report}"
        );
    }
}

/// Every key under `url` (relative to it).
fn keys(url: &str) -> Vec<String> {
    open(url, false).client().list("").expect("list the prefix")
}

/// Both barriers: the second run's prefix holds a state, so neither run starts (every
/// refusal comes before any run), and both prefixes are as they were.
#[test]
fn a_crash_store_prefix_in_use_is_refused_before_any_run_and_left_unchanged() {
    let url = fresh_url("killer-demo-used");
    let used = format!("{url}/commit-after-rename");
    let (ok, _, stderr) =
        shardlift_json(&["store", "publish-synthetic", "--store", &used, "--json"]);
    assert!(ok, "publish-synthetic failed: {stderr}");
    let before = keys(&url);
    assert!(!before.is_empty());
    let scratch = tempfile::tempdir().expect("tempdir");
    let run_directory = scratch.path().join("runs");
    let output = killer_demo(&run_directory, &["--crash-store", &url]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{used} is not empty")), "{stderr}");
    assert!(output.stdout.is_empty(), "no record for a refused run");
    assert!(!run_directory.exists(), "no run was started");
    assert_eq!(keys(&url), before, "the store is unchanged");
}

#[test]
fn a_crash_store_that_is_not_an_s3_location_is_a_usage_error() {
    let scratch = tempfile::tempdir().expect("tempdir");
    for bad in ["/tmp/crash", "s3://", "s3://bucket/../up"] {
        let run_directory = scratch.path().join("run");
        let output = killer_demo(&run_directory, &["--crash-store", bad]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--crash-store"), "{bad}: {stderr}");
        assert!(!run_directory.exists(), "{bad}: nothing was started");
    }
}
