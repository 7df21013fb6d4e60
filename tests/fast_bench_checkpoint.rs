//! `shardlift bench checkpoint` in the torch-free build: a small state, one repetition,
//! the disk and ShardLift sides (the PyTorch peers run in the slow lane); the report's
//! schema, every ratio recomputed from the figures it names, and one test per bad input,
//! each refused before anything is written. The peer protocol is tested against forged
//! peers (real processes that answer wrongly).
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const SMALL_STATE_BYTES: &str = "16777216";

fn bench(dir: &Path, args: &[&str], torchrun: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardlift"));
    command
        .args(["bench", "checkpoint", "--dir"])
        .arg(dir)
        .args(args)
        .env_remove("SHARDLIFT_TORCHRUN");
    if let Some(torchrun) = torchrun {
        command.arg("--torchrun").arg(torchrun);
    }
    command.output().expect("run shardlift")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The value at `figures.NAME.FIELD` of `report`.
fn figure_field(report: &Value, path: &str) -> f64 {
    let mut parts = path.split('.');
    assert_eq!(parts.next(), Some("figures"), "{path}");
    let (Some(name), Some(field), None) = (parts.next(), parts.next(), parts.next()) else {
        panic!("{path} is not figures.NAME.FIELD");
    };
    report["figures"][name][field]
        .as_f64()
        .unwrap_or_else(|| panic!("{path} is not in the report"))
}

fn sum(report: &Value, terms: &Value) -> f64 {
    let terms = terms.as_array().expect("a list of figures");
    assert!(!terms.is_empty());
    terms
        .iter()
        .map(|t| figure_field(report, t.as_str().expect("a figure path")))
        .sum()
}

/// Every ratio with a value equals its numerator's figures over its denominator's; every
/// null one says which figure is missing. Returns the names of the ratios with values.
fn check_ratios(report: &Value) -> Vec<String> {
    let mut computed = Vec::new();
    for (name, ratio) in report["ratios"].as_object().expect("ratios") {
        match ratio["value"].as_f64() {
            Some(value) => {
                let expected =
                    sum(report, &ratio["numerator"]) / sum(report, &ratio["denominator"]);
                assert!(
                    (value - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                    "{name}: {value} is not {expected} from {ratio}"
                );
                computed.push(name.clone());
            }
            None => {
                let missing = ratio["missing"].as_str().expect("a null ratio says why");
                assert!(missing.contains("was not measured"), "{name}: {missing}");
            }
        }
    }
    computed
}

fn check_figure(report: &Value, name: &str, state_bytes: u64, repetitions: usize) {
    let figure = &report["figures"][name];
    assert_eq!(
        figure["bytes"].as_u64(),
        Some(state_bytes),
        "{name}: {figure}"
    );
    let samples: Vec<f64> = figure["samples_s"]
        .as_array()
        .unwrap_or_else(|| panic!("{name} has no samples: {figure}"))
        .iter()
        .map(|s| s.as_f64().expect("seconds"))
        .collect();
    assert_eq!(samples.len(), repetitions, "{name}");
    assert!(samples.iter().all(|s| *s > 0.0), "{name}: {samples:?}");
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let max = samples.iter().copied().fold(0.0, f64::max);
    assert_eq!(figure["min_s"].as_f64(), Some(min), "{name}");
    assert_eq!(figure["max_s"].as_f64(), Some(max), "{name}");
    let median = figure["median_s"].as_f64().expect("median");
    assert!(min <= median && median <= max, "{name}");
}

#[test]
fn disk_and_shardlift_sides_report_every_figure_and_ratios_recomputable_from_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = bench(
        dir.path(),
        &[
            "--state-bytes",
            SMALL_STATE_BYTES,
            "--repetitions",
            "1",
            "--without-python-peers",
            "--json",
        ],
        None,
    );
    assert!(output.status.success(), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("stdout is the report");
    assert_eq!(report["schema"], "shardlift.bench.checkpoint");
    assert_eq!(report["version"], 1);
    assert!(report["peers"].is_null());
    let state_bytes = report["state_bytes"].as_u64().expect("state_bytes");
    assert_eq!(state_bytes, 16_777_216 / 12 * 12);
    assert_eq!(
        report["tensors"],
        3 * 2,
        "two layers of weights and two moments"
    );
    for name in [
        "disk_write",
        "disk_read_cold",
        "shardlift_publish",
        "shardlift_recover_cold",
        "shardlift_load_cold",
        "shardlift_reshard_w3",
    ] {
        check_figure(&report, name, state_bytes, 1);
    }
    for name in [
        "bound_objects_as_files_write",
        "bound_objects_as_files_read_cold",
        "bound_objects_as_files_read_cold_io_threads",
        "bound_sha256_single_core",
        "bound_sha256_parallel",
        "bound_synthetic_objects_made",
    ] {
        check_figure(&report, name, state_bytes, 1);
    }
    let written = report["figures"]["shardlift_reshard_w3"]["bytes_written"]
        .as_u64()
        .expect("the reshard's bytes written");
    assert!(
        written > 0 && written < 64 << 10,
        "a manifest and a record: {written}"
    );
    let computed = check_ratios(&report);
    for name in [
        "publish_over_disk_write",
        "load_over_disk_read",
        "recover_over_disk_read",
        "bound_objects_as_files_over_disk_write",
        "publish_over_bound_objects_as_files",
        "bound_reads_plus_hashing_over_disk_read",
        "bound_reads_plus_hashing_over_recover",
    ] {
        assert!(computed.contains(&name.to_owned()), "{name} has no value");
    }
    for name in [
        "publish_speedup_over_dcp_save",
        "load_speedup_over_dcp_load",
        "reshard_speedup_over_dcp",
        "reshard_bytes_written",
        "bound_load_speedup_over_dcp_load_by_hashing",
        "bound_load_speedup_over_dcp_load_by_reads",
    ] {
        assert!(
            report["ratios"][name]["value"].is_null(),
            "{name} without peers"
        );
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bench checkpoint: repetition 1/1"),
        "{stderr}"
    );
    assert!(entries(dir.path()).is_empty(), "the scratch is removed");
}

#[test]
fn the_ratio_check_catches_a_ratio_that_does_not_follow_from_its_figures() {
    let mut report = serde_json::json!({
        "figures": {"a": {"median_s": 2.0}, "b": {"median_s": 4.0}},
        "ratios": {"a_over_b": {"value": 0.5, "numerator": ["figures.a.median_s"],
                                "denominator": ["figures.b.median_s"]}},
    });
    assert_eq!(check_ratios(&report), vec!["a_over_b".to_owned()]);
    report["ratios"]["a_over_b"]["value"] = Value::from(2.0);
    let swapped = std::panic::catch_unwind(|| check_ratios(&report));
    assert!(
        swapped.is_err(),
        "a ratio the figures do not give must fail"
    );
}

/// A refused run: exit status 1, `message` on stderr, nothing written under `dir`.
fn assert_refused(dir: &Path, output: &Output, message: &str) {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(message), "{message:?} not in {stderr}");
    if dir.is_dir() {
        assert!(entries(dir).is_empty(), "{:?}", entries(dir));
    }
}

#[test]
fn a_zero_state_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = bench(
        dir.path(),
        &["--state-bytes", "0", "--without-python-peers"],
        None,
    );
    assert_refused(dir.path(), &output, "--state-bytes 0 is out of range");
}

#[test]
fn a_state_over_the_cap_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let over = ((16u64 << 30) + 1).to_string();
    let output = bench(
        dir.path(),
        &["--state-bytes", &over, "--without-python-peers"],
        None,
    );
    assert_refused(
        dir.path(),
        &output,
        &format!("--state-bytes {over} is out of range"),
    );
}

#[test]
fn zero_repetitions_and_too_many_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for count in ["0", "21"] {
        let args = ["--repetitions", count, "--without-python-peers"];
        let output = bench(dir.path(), &args, None);
        assert_refused(
            dir.path(),
            &output,
            &format!("--repetitions {count} is out of range"),
        );
    }
}

#[test]
fn a_dir_that_is_a_file_or_missing_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let output = bench(&file, &["--without-python-peers"], None);
    assert_refused(&file, &output, "is not a directory");
    assert_eq!(std::fs::read(&file).expect("read"), b"x");
    let missing = dir.path().join("missing");
    let output = bench(&missing, &["--without-python-peers"], None);
    assert_refused(&missing, &output, "is not a directory");
    assert!(!missing.exists());
}

#[test]
fn without_the_python_torch_and_without_the_flag_the_bench_says_how_to_get_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = bench(dir.path(), &["--state-bytes", SMALL_STATE_BYTES], None);
    assert_refused(
        dir.path(),
        &output,
        "pass --torchrun \"$(ci/python-torch)\"",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--without-python-peers"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");

    let nowhere = dir.path().join("no-venv/bin/torchrun");
    let output = bench(
        dir.path(),
        &["--state-bytes", SMALL_STATE_BYTES],
        Some(&nowhere),
    );
    assert_refused(dir.path(), &output, "no-venv/bin/python does not exist");
}

/// A forged peer: a `python` beside a `torchrun` in `venv`, a shell script that answers
/// the first request with `first_reply` (or nothing), then `later_replies` lines.
fn forged_peer(venv: &Path, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = venv.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let python = bin.join("python");
    std::fs::write(&python, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin.join("torchrun")
}

const HELLO: &str = r#"read line; echo '{"ok": true, "torch": "forged", "safetensors": "forged"}'; read line; echo '{"ok": true}'"#;

fn run_with_forged_peer(body: &str, extra: &[&str]) -> (tempfile::TempDir, Output) {
    let venv = tempfile::tempdir().expect("tempdir");
    let torchrun = forged_peer(venv.path(), body);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = vec!["--state-bytes", SMALL_STATE_BYTES, "--repetitions", "1"];
    args.extend_from_slice(extra);
    let output = bench(dir.path(), &args, Some(&torchrun));
    assert!(
        entries(dir.path()).is_empty(),
        "scratch left: {:?}",
        entries(dir.path())
    );
    (venv, output)
}

fn assert_peer_error(output: &Output, message: &str) {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the Python peer"), "{stderr}");
    assert!(stderr.contains(message), "{message:?} not in {stderr}");
}

#[test]
fn a_peer_that_answers_garbage_is_a_peer_error() {
    let (_venv, output) = run_with_forged_peer("read line; echo 'not json'", &[]);
    assert_peer_error(&output, "(hello): undecodable reply");
}

#[test]
fn a_peer_that_exits_without_answering_is_a_peer_error() {
    let (_venv, output) = run_with_forged_peer(&format!("{HELLO}; exit 0"), &[]);
    assert_peer_error(&output, "exited");
}

#[test]
fn a_peer_whose_save_reply_has_no_seconds_is_a_peer_error() {
    let body =
        format!(r#"{HELLO}; while read line; do echo '{{"ok": true, "bytes_written": 1}}'; done"#);
    let (_venv, output) = run_with_forged_peer(&body, &[]);
    assert_peer_error(&output, "(save): a reply without seconds");
}

#[test]
fn a_peer_that_reports_a_failure_is_a_peer_error_naming_it() {
    let body = format!(
        r#"{HELLO}; while read line; do echo '{{"ok": false, "error": "OSError: disk full"}}'; done"#
    );
    let (_venv, output) = run_with_forged_peer(&body, &[]);
    assert_peer_error(&output, "(save): OSError: disk full");
}

#[test]
fn a_peer_that_does_not_answer_in_time_is_a_peer_error() {
    let body = format!("{HELLO}; exec sleep 30");
    let started = std::time::Instant::now();
    let (_venv, output) = run_with_forged_peer(&body, &["--peer-timeout-ms", "300"]);
    assert_peer_error(&output, "no reply within 300 ms");
    assert!(
        started.elapsed().as_secs() < 25,
        "the forged peer was not waited for"
    );
}
