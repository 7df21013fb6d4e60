//! Slow lane: the two PyTorch checkpoint writers of `evidence/crash-test/` (DCP `save`
//! and `torch.save` + `os.replace`, the hash-locked torch 2.13.0) on a real ext4 of the
//! pinned kernel. The guest cannot boot a Python with torch, so each writer is recorded
//! on the host and its file operations replayed in the guest (`crash-test --replay`), the
//! file system made from the recorded starting image; every state is held to the model
//! of the same recording (`--hold-model`).
//!
//! Each writer runs twice: with the model evidence's check (the old or the new
//! checkpoint loads), and with `check-acked` (the new one once the save had returned).
//! The comparison with the model is written to `evidence/crash-test/kernel-ext4-*.json`
//! with `SHARDLIFT_UPDATE_CRASH_TEST_EVIDENCE=1`. The kernel's state counts depend on
//! when its journal commits fall, so a run is compared with the committed evidence by
//! what must not move: every state among the model's, and each check's verdict (some
//! state fails, or none does).
//!
//! Built only without the torch feature (the guest boots the `shardlift` binary); the
//! slow lane runs it from the torch-free build.
#![cfg(not(feature = "torch"))]
mod common;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

const SHARDLIFT: &str = env!("CARGO_BIN_EXE_shardlift");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One kernel run of `script` (`tests/crash_test/SCRIPT`) with its `check` mode.
fn kernel_run(python: &Path, script: &str, check: &str) -> Value {
    let script = repo().join("tests/crash_test").join(script);
    let (py, script) = (python.display(), script.display());
    let scratch = tempfile::tempdir().expect("tempdir");
    let output = Command::new(SHARDLIFT)
        .args([
            "crash-test",
            "--file-system",
            "ext4",
            "--replay",
            "--hold-model",
        ])
        .arg("--out")
        .arg(scratch.path().join("out"))
        .arg("--json")
        .args(["--setup", &format!("{py} {script} save 1")])
        .args(["--check", &format!("{py} {script} {check} 2>/dev/null")])
        .arg("--")
        .args([&py.to_string(), &script.to_string(), "save", "2"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run crash-test");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{script} {check}: no report ({e}): {stderr}"));
    let failing = report["failing_states"].as_u64().expect("failing_states");
    assert_eq!(
        output.status.code(),
        Some(if failing == 0 { 0 } else { 1 }),
        "{stderr}"
    );
    assert_eq!(report["file_system"], "ext4");
    assert!(report["states"].as_u64() > Some(0), "{report:#}");
    // The replay and the model come from one recording: a state outside the model is a
    // bug in the model (or in the replay).
    assert_eq!(report["outside_model_states"], 0, "{report:#}");
    report
}

/// What one check's run showed: its counts, and a verdict that must not move.
fn check_record(report: &Value) -> Value {
    let failing = report["failing_states"].as_u64().unwrap_or(0);
    let messages: std::collections::BTreeSet<String> = report["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["output_tail"].as_str())
        .filter_map(|tail| tail.lines().rev().find(|l| !l.trim().is_empty()))
        .map(|l| l.trim().to_owned())
        .collect();
    json!({
        "verdict": if failing > 0 { "some states fail" } else { "every state passes" },
        "states": report["states"],
        "flush_points": report["flush_points"],
        "reordered_states": report["reordered_states"],
        "torn_states": report["torn_states"],
        "failing_states": failing,
        "failure_messages": messages,
        "model_states": report["model_states"],
        "outside_model_states": report["outside_model_states"],
    })
}

/// The stable part of a record: what the comparison with the committed evidence uses.
fn stable(record: &Value) -> Value {
    let mut stable = record.clone();
    for check in ["check", "check-acked"] {
        if let Some(run) = stable["kernel"][check].as_object_mut() {
            run.retain(|k, _| k == "verdict" || k == "outside_model_states");
        }
    }
    stable
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch and a kernel guest per run"]
fn torch_writers_on_ext4_against_the_model() {
    let python = common::python_torch();
    for (name, script) in [
        ("torch-dcp-save", "torch_dcp.py"),
        ("torch-save-replace", "torch_save.py"),
    ] {
        let model_path = repo().join(format!("evidence/crash-test/{name}.json"));
        let model: Value = serde_json::from_slice(
            &std::fs::read(&model_path).unwrap_or_else(|e| panic!("{}: {e}", model_path.display())),
        )
        .expect("model evidence");
        let plain = kernel_run(&python, script, "check");
        let acked = kernel_run(&python, script, "check-acked");
        assert_eq!(
            plain["model_states"], model["states"],
            "{name}: the model of this recording has the committed evidence's states"
        );
        let release = plain["kernel"]["release"].clone();
        let record = json!({
            "schema": "shardlift-crash-test-kernel-example",
            "version": 1,
            "example": name,
            "file_system": "ext4",
            "kernel_release": release,
            "mode": "recorded on the host, replayed in the guest (--replay), held to the model (--hold-model)",
            "setup": format!("python tests/crash_test/{script} save 1"),
            "writer": format!("python tests/crash_test/{script} save 2"),
            "model": {
                "evidence": format!("evidence/crash-test/{name}.json"),
                "check": model["check"],
                "states": model["states"],
                "failing_states": model["failing_states"],
            },
            "kernel": {
                "check": check_record(&plain),
                "check-acked": check_record(&acked),
            },
        });
        eprintln!(
            "{name}: model {} of {} failing; ext4 `check` {} of {} failing, `check-acked` {} of {}",
            model["failing_states"],
            model["states"],
            plain["failing_states"],
            plain["states"],
            acked["failing_states"],
            acked["states"]
        );
        compare_or_update(&format!("kernel-ext4-{name}"), &record);
    }
}

fn compare_or_update(name: &str, record: &Value) {
    let path = repo().join(format!("evidence/crash-test/{name}.json"));
    if std::env::var_os("SHARDLIFT_UPDATE_CRASH_TEST_EVIDENCE").is_some() {
        let bytes = serde_json_canonicalizer::to_vec(record).expect("canonical JSON");
        std::fs::write(&path, &bytes).expect("write evidence");
        return;
    }
    let committed: Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("committed evidence");
    assert_eq!(
        stable(record),
        stable(&committed),
        "{name}: the run's verdicts differ from {}:\n{record:#}",
        path.display()
    );
}
