//! `pipeline release-evidence` refuses what it must before any run starts: a dirty
//! checkout (modified, staged, untracked files, each named), an existing --out, and a
//! ci/libtorch.lock at HEAD that differs from the pins. Ignored files are allowed.
//!
//! No libtorch needed: `--shardlift` names a stand-in that records that it was started.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use release_support::git;

mod release_support;

fn workspace_file(relative: &str) -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read(root.join(relative)).expect("read a workspace file")
}

/// A committed, clean repository with what the pipeline binds (Cargo.lock, the lock).
fn clean_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    std::fs::create_dir_all(repo.join("ci")).expect("mkdir");
    std::fs::write(repo.join("Cargo.toml"), "[package]\nname = \"x\"\n").expect("write");
    std::fs::write(repo.join("Cargo.lock"), workspace_file("Cargo.lock")).expect("write");
    std::fs::write(
        repo.join("ci/libtorch.lock"),
        workspace_file("ci/libtorch.lock"),
    )
    .expect("write");
    std::fs::write(repo.join("src/lib.rs"), "pub fn f() {}\n").expect("write");
    std::fs::write(repo.join(".gitignore"), "/target\n").expect("write");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    repo
}

/// A stand-in for shardlift that leaves a marker when it is started, then fails.
fn marker_shardlift(dir: &Path) -> (PathBuf, PathBuf) {
    let marker = dir.join("started");
    let script = dir.join("fake-shardlift");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\nexit 3\n", marker.display()),
    )
    .expect("write script");
    let mut permissions = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&script, permissions).expect("chmod");
    (script, marker)
}

fn release(repo: &Path, out: &Path, shardlift: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .arg("release-evidence")
        .arg("--repository")
        .arg(repo)
        .arg("--out")
        .arg(out)
        .arg("--shardlift")
        .arg(shardlift)
        // A failed run keeps its scratch folder for inspection: keep it in the tempdir.
        .env("TMPDIR", out.parent().expect("out has a parent"))
        .output()
        .expect("run pipeline")
}

fn assert_refused_before_any_run(output: &Output, out: &Path, marker: &Path, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    for name in names {
        assert!(stderr.contains(name), "{name} not named in: {stderr}");
    }
    assert!(!marker.exists(), "shardlift was started: {stderr}");
    assert!(!out.exists(), "--out was created");
}

#[test]
fn a_modified_tracked_file_is_refused_and_named_before_any_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    std::fs::write(repo.join("src/lib.rs"), "pub fn g() {}\n").expect("modify");
    let out = tmp.path().join("out");
    let output = release(&repo, &out, &shardlift);
    assert_refused_before_any_run(&output, &out, &marker, &["not clean", "src/lib.rs"]);
}

#[test]
fn an_untracked_file_is_refused_and_named_before_any_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    std::fs::write(repo.join("notes.txt"), "draft\n").expect("write");
    let out = tmp.path().join("out");
    let output = release(&repo, &out, &shardlift);
    assert_refused_before_any_run(&output, &out, &marker, &["not clean", "notes.txt"]);
}

#[test]
fn a_staged_file_and_an_untracked_one_are_both_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    std::fs::write(repo.join("src/staged.rs"), "// staged\n").expect("write");
    git(&repo, &["add", "src/staged.rs"]);
    std::fs::write(repo.join("src/untracked.rs"), "// untracked\n").expect("write");
    let out = tmp.path().join("out");
    let output = release(&repo, &out, &shardlift);
    assert_refused_before_any_run(
        &output,
        &out,
        &marker,
        &["src/staged.rs", "src/untracked.rs"],
    );
}

#[test]
fn an_existing_out_directory_is_refused_before_any_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let output = release(&repo, &out, &shardlift);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(!marker.exists());
    assert_eq!(std::fs::read_dir(&out).expect("read").count(), 0);
}

#[test]
fn a_lock_file_with_other_pins_is_refused_before_any_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    std::fs::write(
        repo.join("ci/libtorch.lock"),
        "torch==2.13.0 --hash=sha256:0000000000000000000000000000000000000000000000000000000000000000\n",
    )
    .expect("write");
    git(&repo, &["commit", "-q", "-am", "other pins"]);
    let out = tmp.path().join("out");
    let output = release(&repo, &out, &shardlift);
    assert_refused_before_any_run(&output, &out, &marker, &["ci/libtorch.lock"]);
}

#[test]
fn ignored_files_are_allowed_and_the_run_starts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    std::fs::create_dir(repo.join("target")).expect("mkdir");
    std::fs::write(repo.join("target/artifact"), "built\n").expect("write");
    let out = tmp.path().join("out");
    let output = release(&repo, &out, &shardlift);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The checkout passed; the stand-in started and failed, so nothing was emitted.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(marker.exists(), "the run never started: {stderr}");
    assert!(stderr.contains("killer-demo"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn an_unusable_signing_key_is_refused_before_any_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = clean_repo(tmp.path());
    let (shardlift, marker) = marker_shardlift(tmp.path());
    let key = tmp.path().join("not-a-key");
    std::fs::write(&key, "not an OpenSSH private key\n").expect("write");
    let out = tmp.path().join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .arg("release-evidence")
        .arg("--repository")
        .arg(&repo)
        .arg("--out")
        .arg(&out)
        .arg("--shardlift")
        .arg(&shardlift)
        .arg("--sign-key")
        .arg(&key)
        .env("TMPDIR", tmp.path())
        .output()
        .expect("run pipeline");
    assert_refused_before_any_run(&output, &out, &marker, &["cannot sign", "not-a-key"]);
}
