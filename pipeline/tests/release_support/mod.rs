//! Shared helpers for the release-evidence tests: copying evidence, resealing it as a
//! forger would, and checking a rejection.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use sha2::Digest as _;

pub fn git(repo: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
        ])
        .args(args)
        .output()
        .expect("run git");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The files `SHA256SUMS` lists.
pub fn emitted_files(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("SHA256SUMS")).expect("read SHA256SUMS");
    text.lines()
        .map(|line| line.split_once("  ").expect("GNU line").1.to_owned())
        .collect()
}

/// Rewrites SHA256SUMS to match the files, as a forger would.
pub fn reseal(dir: &Path) {
    let mut text = String::new();
    for name in emitted_files(dir) {
        let bytes = std::fs::read(dir.join(&name)).expect("read");
        text.push_str(&format!("{}  {name}\n", sha256_hex(&bytes)));
    }
    std::fs::write(dir.join("SHA256SUMS"), text).expect("write");
}

/// Exit 1, `name` in stderr, and a `rejected` JSON record on stdout.
pub fn assert_rejected_naming(output: &Output, name: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "accepted; stdout {stdout}");
    assert!(stderr.contains(name), "{name} not named in: {stderr}");
    assert!(stdout.contains("\"status\":\"rejected\""), "{stdout}");
}
