//! Support of the kernel-mode tests (`tests/process_kernel_*.rs`): running
//! `shardlift crash-test` on a file system, reading its report, finding a QEMU left
//! behind, and the logical state root of a synthetic publish.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub const SHARDLIFT: &str = env!("CARGO_BIN_EXE_shardlift");

/// `shardlift crash-test --file-system FILE_SYSTEM --json --out OUT EXTRA... -- WRITER...`.
pub fn crash_test_on(file_system: &str, out: &Path, extra: &[&str], writer: &[&str]) -> Output {
    Command::new(SHARDLIFT)
        .args([
            "crash-test",
            "--file-system",
            file_system,
            "--json",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .arg("--")
        .args(writer)
        .output()
        .expect("run shardlift crash-test")
}

/// The JSON report on stdout.
pub fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The command lines of processes that name `out` (a QEMU left behind), other than
/// `crash-test` itself.
pub fn running_under(out: &Path) -> Vec<String> {
    let needle = out.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(&needle) && !text.contains("crash-test") {
                found.push(text);
            }
        }
    }
    found
}

/// ShardLift's publish of generation 1 over generation 0 (`--sequential`: one order
/// every run) on `file_system`, held to the model (`staging/` unread), the check
/// demanding the new generation once the publisher has exited. Run in `dir`.
pub fn publish_over_generation(file_system: &str, dir: &Path) -> Output {
    std::fs::create_dir(dir.join("roots")).expect("roots");
    let old = root_of(&dir.join("roots"), 0);
    let new = root_of(&dir.join("roots"), 1);
    let setup = format!("{SHARDLIFT} store publish-synthetic --store . --seed 1 --step 0");
    let check = format!(
        "if [ \"$SHARDLIFT_ACKED\" -gt 0 ]; then exec {SHARDLIFT} store recover --store . \
         --expect-root {new}; else exec {SHARDLIFT} store recover --store . \
         --expect-root {old} --expect-root {new}; fi"
    );
    let extra = [
        "--setup",
        &setup,
        "--check",
        &check,
        "--hold-model",
        "--unread",
        "staging",
    ];
    let publish = "store publish-synthetic --store . --seed 1 --step 1 --sequential";
    let writer: Vec<&str> = std::iter::once(SHARDLIFT)
        .chain(publish.split(' '))
        .collect();
    crash_test_on(file_system, &dir.join("out"), &extra, &writer)
}

/// The logical state root of `store publish-synthetic --seed 1 --step STEP`, published
/// into `store`.
pub fn root_of(store: &Path, step: u64) -> String {
    let output = Command::new(SHARDLIFT)
        .args(["store", "publish-synthetic", "--json", "--seed", "1"])
        .args(["--step", &step.to_string(), "--store"])
        .arg(store)
        .output()
        .expect("publish");
    assert!(output.status.success(), "{}", stderr(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).expect("summary");
    summary["logical_state_root"]
        .as_str()
        .expect("root")
        .to_owned()
}
