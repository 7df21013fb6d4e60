//! `shardlift resume-test` end to end with a torch-free trainer that speaks the line
//! protocol itself (`tests/resume_test/tiny_trainer.py`, Python's standard library only):
//! real child processes, real SIGKILLs of the whole process tree, real restarts.
//!
//! - the correct trainer passes kills after two steps and at four seeded instants, and
//!   a restart killed again (`--kill-after-step 3,6`);
//! - the checker catches the broken ones: an RNG state not saved (the component named)
//!   and a restart that skips a step (the resume point named);
//! - bad input, each its own error kind and exit 2: no records, an undecodable record, a
//!   failing reference run, a used output directory, a kill after a step the reference
//!   never reached;
//! - a restart that hangs passes its deadline, is reported as failed (exit 1), and its
//!   whole process tree, including a helper in its own session, is gone.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const SHARDLIFT: &str = env!("CARGO_BIN_EXE_shardlift");

fn trainer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/resume_test/tiny_trainer.py")
}

fn resume_test(out: &Path, options: &[&str], mode: &str) -> Output {
    Command::new(SHARDLIFT)
        .arg("resume-test")
        .arg("--out")
        .arg(out)
        .args(options)
        .arg("--")
        .arg("python3")
        .arg(trainer())
        .arg(mode)
        .output()
        .expect("run shardlift resume-test")
}

fn verdict(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}); stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn first_divergence(verdict: &Value) -> &Value {
    verdict["sequences"]
        .as_array()
        .expect("sequences")
        .iter()
        .flat_map(|s| s["runs"].as_array().expect("runs"))
        .map(|run| &run["comparison"]["first_divergence"])
        .find(|d| !d.is_null())
        .expect("a divergence")
}

/// Runs `mode` and expects exit 2 with error kind `kind`.
fn expect_bad_input(options: &[&str], mode: &str, kind: &str) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = resume_test(&dir.path().join("out"), options, mode);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = verdict(&output);
    assert_eq!(report["error"], kind, "{report}");
    report
}

#[test]
fn the_correct_trainer_passes_kills_after_steps_and_at_seeded_instants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = [
        "--kill-after-step",
        "2",
        "--kill-after-step",
        "5",
        "--random-kills",
        "4",
        "--seed",
        "3",
    ];
    let output = resume_test(&dir.path().join("out"), &options, "correct");
    let report = verdict(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(report["passed"], true);
    assert_eq!(report["reference"]["first_step"], 1);
    assert_eq!(report["reference"]["last_step"], 8);
    let sequences = report["sequences"].as_array().expect("sequences");
    assert_eq!(sequences.len(), 6);
    // The deterministic kill lands right after step 2 is reported, before the trainer
    // saves step 2: the killed run reported nothing later, nothing was acknowledged, and
    // the restart started over at step 1.
    let after_two = &sequences[0];
    assert_eq!(after_two["runs"][0]["last_step"], 2);
    assert_eq!(
        after_two["restarts"][0]["acknowledged_before_kill"],
        Value::Null
    );
    assert_eq!(after_two["restarts"][0]["expected_first_step"], 1);
    assert_eq!(after_two["runs"][1]["first_step"], 1);
    assert_eq!(after_two["restarts"][0]["resumed"], "exact");
    // After step 5 the last acknowledged save is step 4.
    assert_eq!(sequences[1]["runs"][0]["last_step"], 5);
    assert_eq!(sequences[1]["restarts"][0]["acknowledged_before_kill"], 4);
    assert_eq!(sequences[1]["restarts"][0]["expected_first_step"], 5);
    assert_eq!(sequences[1]["runs"][1]["first_step"], 5);
    for sequence in sequences {
        for run in sequence["runs"].as_array().expect("runs") {
            assert!(
                run["comparison"]["first_divergence"].is_null(),
                "{sequence:#}"
            );
        }
    }
}

#[test]
fn a_restart_killed_again_resumes_from_its_own_last_save() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = resume_test(
        &dir.path().join("out"),
        &["--kill-after-step", "3,6"],
        "correct",
    );
    let report = verdict(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    let sequence = &report["sequences"][0];
    assert_eq!(sequence["name"], "kill-after-step-3-6");
    let runs = sequence["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "{sequence:#}");
    assert_eq!(
        (runs[0]["end"].as_str(), runs[0]["last_step"].as_u64()),
        (Some("killed"), Some(3))
    );
    assert_eq!(
        (runs[1]["end"].as_str(), runs[1]["last_step"].as_u64()),
        (Some("killed"), Some(6))
    );
    assert_eq!(runs[2]["end"], "exited");
    // The first restart resumes after the save of step 2, the second after step 4's
    // (step 6 was killed before its save).
    let restarts = sequence["restarts"].as_array().expect("restarts");
    assert_eq!(restarts[0]["expected_first_step"], 3);
    assert_eq!(restarts[1]["acknowledged_before_kill"], 4);
    assert_eq!(restarts[1]["expected_first_step"], 5);
    assert_eq!(runs[2]["first_step"], 5);
}

#[test]
fn an_unparsable_kill_step_is_an_error() {
    expect_bad_input(&["--kill-after-step", "3,x"], "correct", "usage");
}

#[test]
fn an_rng_state_not_saved_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = resume_test(
        &dir.path().join("out"),
        &["--kill-after-step", "3"],
        "forget-rng",
    );
    let report = verdict(&output);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(report["passed"], false);
    let divergence = first_divergence(&report);
    assert_eq!(divergence["step"], 3);
    let components: Vec<&str> = divergence["components"]
        .as_array()
        .expect("components")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(components.contains(&"rng.python"), "{divergence}");
}

#[test]
fn a_restart_that_skips_a_step_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = resume_test(
        &dir.path().join("out"),
        &["--kill-after-step", "3"],
        "skip-step",
    );
    let report = verdict(&output);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    let sequence = &report["sequences"][0];
    assert_eq!(sequence["restarts"][0]["expected_first_step"], 3);
    assert_eq!(sequence["restarts"][0]["resumed"], "skipped_steps");
    assert_eq!(sequence["runs"][1]["first_step"], 4);
}

#[test]
fn a_command_that_never_calls_the_probe_is_an_error() {
    expect_bad_input(&["--kill-after-step", "3"], "no-probe", "no-records");
}

#[test]
fn an_undecodable_record_is_an_error() {
    let report = expect_bad_input(&[], "garbage", "undecodable-record");
    assert!(
        report["message"]
            .as_str()
            .expect("message")
            .contains("record 1"),
        "{report}"
    );
}

#[test]
fn a_failing_reference_run_is_an_error() {
    let report = expect_bad_input(&[], "fail", "reference-failed");
    assert!(
        report["message"]
            .as_str()
            .expect("message")
            .contains("exit code 3"),
        "{report}"
    );
}

#[test]
fn a_kill_after_a_step_the_reference_never_reached_is_an_error() {
    expect_bad_input(&["--kill-after-step", "8"], "correct", "usage");
}

#[test]
fn a_used_output_directory_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("keep"), b"data").expect("write");
    let output = resume_test(dir.path(), &[], "correct");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(verdict(&output)["error"], "output-not-empty");
    assert_eq!(
        std::fs::read(dir.path().join("keep")).expect("kept"),
        b"data"
    );
}

/// Processes whose command line names `marker`.
fn processes_naming(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                found.push(text);
            }
        }
    }
    found
}

#[test]
fn a_hanging_restart_passes_its_deadline_and_its_whole_tree_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let options = ["--kill-after-step", "3", "--run-timeout-ms", "3000"];
    let output = resume_test(&out, &options, "hang-restart");
    let report = verdict(&output);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    let restart = &report["sequences"][0]["runs"][1];
    assert_eq!(restart["end"], "deadline", "{restart}");
    assert_eq!(restart["timeout_ms"], 3000);
    // The helper (a Python sleeping 600 s, its working directory as an argument) ran in
    // its own session; the kill found it through /proc and it is gone too.
    let marker = out.join("kill-after-step-3").join("work");
    assert_eq!(
        processes_naming(&marker.display().to_string()),
        Vec::<String>::new()
    );
}
