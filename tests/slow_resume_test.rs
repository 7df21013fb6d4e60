//! Slow lane: `shardlift resume-test` on the shipped PyTorch examples
//! (`examples/resume-test/train.py`) with the hash-locked torch of `ci/python-torch`, on
//! CPU:
//! - the correct job passes kills after five distinct steps and at ten seeded instants,
//!   at least one of them inside its checkpoint save (the report names it);
//! - each broken job exits 1 and the verdict names the first divergent step and the
//!   component (RNG not saved, sampler position not saved, scheduler not saved,
//!   optimizer state not saved, checkpoint taken before the optimizer step), or the
//!   failed restart (a checkpoint written in place, torn by a kill inside its save);
//! - the two-process torchrun job (gloo) passes at the same size, and a restart on one
//!   process is reported as diverged, with what diverged.
mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const SHARDLIFT: &str = env!("CARGO_BIN_EXE_shardlift");

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/resume-test/train.py")
}

fn resume_test(options: &[&str], command: &[OsString]) -> (Output, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(SHARDLIFT)
        .arg("resume-test")
        .arg("--out")
        .arg(dir.path().join("out"))
        .args(options)
        .arg("--")
        .args(command)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run shardlift resume-test");
    let verdict = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}); stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, verdict)
}

fn python_example(broken: Option<&str>) -> Vec<OsString> {
    let mut command = vec![
        common::python_torch().into_os_string(),
        example().into_os_string(),
    ];
    if let Some(broken) = broken {
        command.push("--break".into());
        command.push(broken.into());
    }
    command
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .expect("array")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// Runs `broken` with a kill after step 4 (its last acknowledged save is step 3) and
/// returns the restart's first divergence, which must be at step 4.
fn first_divergence_of(broken: &str) -> Value {
    let (output, verdict) = resume_test(&["--kill-after-step", "4"], &python_example(Some(broken)));
    assert_eq!(output.status.code(), Some(1), "{verdict:#}");
    assert_eq!(verdict["passed"], false);
    let sequence = &verdict["sequences"][0];
    assert_eq!(
        sequence["restarts"][0]["acknowledged_before_kill"], 3,
        "{sequence:#}"
    );
    assert_eq!(sequence["restarts"][0]["resumed"], "exact", "{sequence:#}");
    assert!(sequence["runs"][0]["comparison"]["first_divergence"].is_null());
    let divergence = sequence["runs"][1]["comparison"]["first_divergence"].clone();
    assert_eq!(divergence["step"], 4, "{divergence:#}");
    divergence
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch), about 31 runs"]
fn the_correct_example_passes_five_step_kills_and_ten_random_instants() {
    let mut options = vec!["--random-kills", "10", "--seed", "7"];
    for step in ["2", "4", "9", "13", "21"] {
        options.extend(["--kill-after-step", step]);
    }
    let (output, verdict) = resume_test(&options, &python_example(None));
    assert_eq!(output.status.code(), Some(0), "{verdict:#}");
    assert_eq!(verdict["passed"], true);
    assert_eq!(
        verdict["sequences"].as_array().expect("sequences").len(),
        15
    );
    assert!(
        verdict["interrupted"].as_u64().expect("count") >= 14,
        "{verdict:#}"
    );
    let inside = strings(&verdict["kills_inside_save"]);
    assert!(
        !inside.is_empty(),
        "no kill landed inside a save: {verdict:#}"
    );
    assert!(inside.iter().all(|name| name.starts_with("random-kill-")));
    assert!(
        verdict["reference"]["probe_overhead"]["mean_us"]
            .as_f64()
            .expect("us")
            > 0.0
    );
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn an_rng_state_not_saved_is_named() {
    let divergence = first_divergence_of("rng");
    assert!(
        strings(&divergence["components"]).contains(&"rng.torch_cpu"),
        "{divergence:#}"
    );
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn a_sampler_position_not_saved_is_named() {
    let divergence = first_divergence_of("sampler");
    assert!(
        strings(&divergence["components"]).contains(&"batch"),
        "{divergence:#}"
    );
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn a_scheduler_not_saved_is_named() {
    let divergence = first_divergence_of("scheduler");
    // The first step after the restart differs in the scheduler alone.
    assert_eq!(
        strings(&divergence["components"]),
        vec!["scheduler"],
        "{divergence:#}"
    );
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn optimizer_state_not_saved_is_named() {
    let divergence = first_divergence_of("optimizer");
    let components = strings(&divergence["components"]);
    assert!(
        components.contains(&"optimizer.0.weight.exp_avg"),
        "{divergence:#}"
    );
    assert!(!components.contains(&"batch"), "{divergence:#}");
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn a_checkpoint_taken_before_the_optimizer_step_is_named() {
    let divergence = first_divergence_of("save-before-step");
    let components = strings(&divergence["components"]);
    assert!(components.contains(&"param.0.weight"), "{divergence:#}");
    assert!(!components.contains(&"batch"), "{divergence:#}");
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn a_checkpoint_written_in_place_is_torn_by_a_kill_inside_its_save() {
    let (output, verdict) = resume_test(
        &["--random-kills", "6", "--seed", "5"],
        &python_example(Some("in-place")),
    );
    assert_eq!(output.status.code(), Some(1), "{verdict:#}");
    let torn: Vec<&Value> = verdict["sequences"]
        .as_array()
        .expect("sequences")
        .iter()
        .filter(|s| !s["kill_inside_save"].is_null() && s["passed"] == false)
        .collect();
    assert!(
        !torn.is_empty(),
        "no kill inside a save failed the restart: {verdict:#}"
    );
    // The restart could not load the torn checkpoint: it failed, and its output says so.
    let restart = &torn[0]["runs"][1];
    assert_ne!(restart["outcome"]["code"], 0, "{restart:#}");
    assert!(
        restart["output_tail"]
            .as_str()
            .expect("tail")
            .contains("Error"),
        "{restart:#}"
    );
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch and torchrun (ci/python-torch)"]
fn the_torchrun_example_resumes_at_the_same_size_and_a_smaller_restart_is_reported() {
    let command: Vec<OsString> = vec![
        common::torchrun().into_os_string(),
        "--standalone".into(),
        "--nproc-per-node=2".into(),
        example().into_os_string(),
        "--ddp".into(),
    ];
    let (output, verdict) = resume_test(
        &["--kill-after-step", "4", "--restart-nproc", "1"],
        &command,
    );
    assert_eq!(output.status.code(), Some(1), "{verdict:#}");
    let same_size = &verdict["sequences"][0];
    assert_eq!(same_size["name"], "kill-after-step-4");
    assert_eq!(same_size["passed"], true, "{same_size:#}");
    // torchrun starts its workers in sessions of their own: both were found and killed.
    let descendants = same_size["runs"][0]["descendants_killed"].as_u64();
    assert!(descendants.is_some_and(|n| n >= 2), "{same_size:#}");
    let smaller = &verdict["sequences"][1];
    assert_eq!(smaller["name"], "kill-after-step-4-restart-nproc-1");
    assert_eq!(smaller["passed"], false);
    assert_eq!(smaller["runs"][1]["nproc"], 1);
    let divergence = &smaller["runs"][1]["comparison"]["first_divergence"];
    assert_eq!(divergence["step"], 4, "{divergence:#}");
    assert!(
        strings(&divergence["components"]).contains(&"batch"),
        "{divergence:#}"
    );
}

#[test]
#[ignore = "slow lane: the hash-locked Python torch (ci/python-torch)"]
fn every_fourth_step_is_digested_and_the_probe_overhead_is_reported() {
    let options = ["--every", "4", "--kill-after-step", "9"];
    let (output, verdict) = resume_test(&options, &python_example(None));
    assert_eq!(output.status.code(), Some(0), "{verdict:#}");
    assert_eq!(verdict["every"], 4);
    let overhead = &verdict["reference"]["probe_overhead"];
    // Steps 4, 8, ..., 24 of 24 carry digests; the others only their step number.
    assert_eq!(overhead["digested_steps"], 6, "{overhead:#}");
    assert!(overhead["mean_us"].as_f64().expect("us") > 0.0);
    assert!(overhead["mean_step_interval_ms"].as_f64().expect("ms") > 0.0);
    // The kill lands right after step 9, before its save: the restart resumes at step 7
    // (after the save of step 6) and is compared at the digested steps 8, 12, ..., 24.
    let restart = &verdict["sequences"][0]["runs"][1];
    assert_eq!(restart["first_step"], 7);
    assert_eq!(restart["comparison"]["steps_compared"], 5, "{restart:#}");
}
