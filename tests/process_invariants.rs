//! Process lane: the invariant scenarios that spawn real children (publisher killed with
//! SIGKILL, recovery in a fresh process), each with the negative test for the violation
//! it names; and the `invariants run|verify` commands end to end (without the elastic
//! case, which needs Python torch and lives in the slow lane).
#![cfg(feature = "torch")]
mod common;
#[path = "common/scenario.rs"]
mod scenario;

use scenario::{passes_and_detects, verdict};

use std::path::Path;
use std::process::Command;

#[test]
fn s06_pointer_stability_detects_latest_advanced_before_the_commit_rename() {
    passes_and_detects("pointer-stable-across-failed-attempt", "latest_sha256", 6);
}

#[test]
fn s07_no_promotion_detects_retry_then_commit_after_a_failed_fsync() {
    passes_and_detects("no-promotion-after-failure", "selected_generation", 6);
    let (_, failed) = verdict("no-promotion-after-failure", true, 6);
    assert!(failed.contains(&"candidate_commit_present".to_owned()));
}

#[test]
fn s10_stale_latest_detects_a_recovery_that_trusts_latest() {
    passes_and_detects("stale-latest-ignored", "selected_generation", 6);
}

fn shardlift(args: &[&str]) -> std::process::Output {
    Command::new(common::shardlift_exe())
        .args(args)
        .env_remove("SHARDLIFT_TORCHRUN")
        .env("SHARDLIFT_CACHE_DIR", common::cache_directory())
        .output()
        .expect("spawn shardlift")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

#[test]
fn run_without_elastic_records_a_skip_and_verify_accepts_then_refuses_tampering() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = root.path().join("evidence");
    let cache = common::cache_directory();
    let run = shardlift(&[
        "invariants",
        "run",
        "--skip-elastic",
        "--out",
        path_str(&out),
        "--cache-directory",
        path_str(&cache),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "run failed: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json summary");
    assert_eq!(summary["status"], "passed-with-skips");
    assert_eq!(summary["passed"], 10);
    assert_eq!(summary["skipped"], 1);
    assert_eq!(summary["scenarios"][10]["verdict"], "skipped");

    let verify = shardlift(&["invariants", "verify", "--dir", path_str(&out)]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    // The evidence holds no paths or native checkpoint files.
    for entry in std::fs::read_dir(&out).expect("list") {
        let entry = entry.expect("entry");
        let text = std::fs::read_to_string(entry.path()).expect("text");
        for forbidden in [path_str(root.path()), "/tmp/", path_str(&cache), "objects/"] {
            assert!(
                !text.contains(forbidden),
                "{:?} contains {forbidden:?}",
                entry.file_name()
            );
        }
    }

    let victim = out.join("observation-05-resumed-next-step.json");
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[10] ^= 0x20;
    std::fs::write(&victim, &bytes).expect("write");
    let verify = shardlift(&["invariants", "verify", "--dir", path_str(&out)]);
    assert_eq!(verify.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(
        stderr.contains("observation-05-resumed-next-step.json"),
        "{stderr}"
    );
}

#[test]
fn run_refuses_to_start_without_a_launcher_or_skip_and_never_reuses_a_directory() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = root.path().join("evidence");
    let run = shardlift(&["invariants", "run", "--out", path_str(&out)]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("--skip-elastic") && stderr.contains("ci/python-torch"),
        "{stderr}"
    );
    assert!(!out.exists());

    std::fs::create_dir(&out).expect("mkdir");
    let run = shardlift(&[
        "invariants",
        "run",
        "--skip-elastic",
        "--out",
        path_str(&out),
    ]);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("already exists"));
}

#[test]
fn the_scenarios_tested_here_are_the_ones_that_spawn_processes() {
    for id in [
        "pointer-stable-across-failed-attempt",
        "no-promotion-after-failure",
        "stale-latest-ignored",
    ] {
        let spec = shardlift::orchestrate::invariants::registry::spec(id).expect("registered");
        assert!(spec.spawns_processes, "{id} belongs in the ml lane");
    }
}
