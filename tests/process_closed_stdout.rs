//! A reader that closes stdout early (`shardlift … --json | head -c1`) must end each
//! command quietly with status 141 — no panic, no backtrace — and must not undo what the
//! command already did. Each command runs with a stdout pipe whose read end is closed
//! before the command starts, so its first write fails with EPIPE: unlike a real `head`,
//! which may read after the whole result fits in the pipe's buffer, this cannot race.
mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The documented status for a closed stdout (`cli::EXIT_CLOSED_STDOUT`).
const EXIT_CLOSED_STDOUT: i32 = 141;

/// Runs `shardlift ARGS` with stdout's reader already gone.
fn run_with_closed_stdout(args: &[&str], cwd: &Path) -> Output {
    let (reader, writer) = rustix::pipe::pipe().expect("pipe");
    drop(reader);
    Command::new(common::shardlift_exe())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("spawn shardlift")
}

/// Runs `shardlift ARGS` normally; it must succeed.
fn run_ok(args: &[&str], cwd: &Path) -> String {
    let output = Command::new(common::shardlift_exe())
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("spawn shardlift");
    assert!(
        output.status.success(),
        "shardlift {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 stdout")
}

fn assert_quiet_exit(args: &[&str], output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "shardlift {args:?} complained about the closed pipe: {stderr}"
    );
    assert_eq!(
        output.status.code(),
        Some(EXIT_CLOSED_STDOUT),
        "shardlift {args:?} exit status; stderr: {stderr}"
    );
}

/// Runs the command with a closed stdout and checks the quiet exit.
fn check(args: &[&str], cwd: &Path) {
    let output = run_with_closed_stdout(args, cwd);
    assert_quiet_exit(args, &output);
}

/// A scratch directory holding a store with one published synthetic generation.
fn published_store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    run_ok(
        &["store", "publish-synthetic", "--store", "store", "--json"],
        dir.path(),
    );
    dir
}

#[test]
fn store_publish_synthetic_ends_quietly_and_keeps_its_generation() {
    let dir = tempfile::tempdir().expect("tempdir");
    check(
        &["store", "publish-synthetic", "--store", "store", "--json"],
        dir.path(),
    );
    // The publish itself completed before the result was printed.
    let recovered = run_ok(
        &["store", "recover", "--store", "store", "--json"],
        dir.path(),
    );
    assert!(recovered.contains("\"generation\": 0"), "{recovered}");
}

#[test]
fn store_recover_ends_quietly() {
    let dir = published_store();
    check(
        &["store", "recover", "--store", "store", "--json"],
        dir.path(),
    );
    check(&["store", "recover", "--store", "store"], dir.path());
}

#[test]
fn store_verify_ends_quietly() {
    let dir = published_store();
    check(
        &[
            "store",
            "verify",
            "--store",
            "store",
            "--generation",
            "0",
            "--json",
        ],
        dir.path(),
    );
}

#[test]
fn store_reshard_ends_quietly_and_keeps_its_generation() {
    let dir = published_store();
    let args = [
        "store",
        "reshard",
        "--store",
        "store",
        "--generation",
        "0",
        "--workers",
        "3",
        "--json",
    ];
    check(&args, dir.path());
    let verified = run_ok(
        &[
            "store",
            "verify",
            "--store",
            "store",
            "--generation",
            "1",
            "--json",
        ],
        dir.path(),
    );
    assert!(verified.contains("\"workers\": 3"), "{verified}");
}

#[test]
fn store_export_and_import_end_quietly() {
    let dir = published_store();
    check(
        &[
            "store",
            "export",
            "--store",
            "store",
            "--generation",
            "0",
            "--out",
            "export",
            "--json",
        ],
        dir.path(),
    );
    assert!(dir.path().join("export/metadata.json").is_file());
    check(
        &[
            "store",
            "import",
            "--store",
            "store",
            "--from",
            "export",
            "--workers",
            "4",
            "--json",
        ],
        dir.path(),
    );
}

#[test]
fn crash_matrix_list_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    check(&["crash-matrix", "--list-mutants"], dir.path());
}

#[test]
fn crash_test_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ct");
    let out = out.to_str().expect("utf-8 path");
    check(
        &[
            "crash-test",
            "--out",
            out,
            "--check",
            "true",
            "--json",
            "--",
            "/bin/sh",
            "-c",
            "echo 1 > state",
        ],
        dir.path(),
    );
    assert!(
        dir.path().join("ct/report.json").is_file(),
        "the report is kept"
    );
}

#[test]
fn train_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = common::cache_directory();
    let cache = cache.to_str().expect("utf-8 path");
    check(
        &[
            "train",
            "--engine",
            "fake",
            "--workers",
            "2",
            "--steps",
            "1",
            "--cache-directory",
            cache,
            "--json",
        ],
        dir.path(),
    );
}

#[test]
fn verify_bundle_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = common::committed_bundle();
    let bundle = bundle.to_str().expect("utf-8 path");
    check(&["verify-bundle", "--bundle-directory", bundle], dir.path());
}

#[test]
fn help_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    // clap prints help itself; a closed pipe there must not panic either.
    let output = run_with_closed_stdout(&["--help"], dir.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn dataset_fetch_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = common::cache_directory();
    let cache = cache.to_str().expect("utf-8 path");
    check(
        &["dataset", "fetch", "--cache-directory", cache, "--json"],
        dir.path(),
    );
    check(
        &["dataset", "fetch", "--cache-directory", cache],
        dir.path(),
    );
}
