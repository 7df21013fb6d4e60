//! Shared helpers for the release-evidence tests: copying evidence, resealing it as a
//! forger would, and checking a rejection.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

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

pub const PRINCIPAL: &str = "release@shardlift.test";

pub fn pipeline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
}

/// The real `shardlift` binary with the torch feature: by default the one next to the
/// pipeline binary (target/debug/shardlift), or `SHARDLIFT_BIN`.
pub fn shardlift() -> PathBuf {
    let path = std::env::var_os("SHARDLIFT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_BIN_EXE_pipeline")).with_file_name("shardlift"));
    let help = Command::new(&path)
        .args(["killer-demo", "--help"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; build it with `cargo build`",
                path.display()
            )
        });
    assert!(
        help.status.success(),
        "{} has no killer-demo (built without the torch feature?); run `cargo build` first",
        path.display()
    );
    path
}

pub fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .expect("run ssh-keygen");
    assert!(status.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("read .pub");
    (key, public.trim().to_owned())
}

/// The fixture's throwaway repository at `root/repo`: a Cargo.toml, the workspace's
/// Cargo.lock and ci/libtorch.lock, two runtime sources and a doc, in two commits (the
/// second leaves src/ alone, so a shard scoped to src/ may be carried from the first).
pub fn toy_repository(root: &Path) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let repo = root.join("repo");
    for (relative, bytes) in [
        ("Cargo.toml", b"[package]\nname = \"x\"\n".to_vec()),
        (
            "Cargo.lock",
            std::fs::read(workspace.join("Cargo.lock")).expect("read"),
        ),
        (
            "ci/libtorch.lock",
            std::fs::read(workspace.join("ci/libtorch.lock")).expect("read"),
        ),
        ("src/lib.rs", b"pub fn f() {}\n".to_vec()),
        ("src/store/mod.rs", b"pub fn g() {}\n".to_vec()),
        ("docs/notes.md", b"not a runtime source\n".to_vec()),
        (".gitignore", b"/target\n".to_vec()),
    ] {
        let path = repo.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    // A second commit that leaves src/ alone: a shard scoped to src/ may be carried
    // from the first.
    std::fs::write(repo.join("docs/notes.md"), b"still not a runtime source\n").expect("write");
    git(&repo, &["commit", "-q", "-am", "docs"]);
    repo
}

/// Signed release evidence, with a real test-lane receipt, of a throwaway clean repository
/// (both real killer-demo runs, once per test binary).
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub repo: PathBuf,
    /// Signed evidence.
    pub out: PathBuf,
    pub key: PathBuf,
    pub allowed: PathBuf,
    pub other_key: PathBuf,
    pub other_allowed: PathBuf,
    pub commit: String,
}

pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let shardlift = shardlift();
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_owned();
        let repo = toy_repository(&root);
        let commit = git(&repo, &["rev-parse", "HEAD"]);

        let (key, public) = keygen(&root, "release");
        let (other_key, other_public) = keygen(&root, "other");
        let allowed = root.join("allowed_signers");
        std::fs::write(&allowed, format!("{PRINCIPAL} {public}\n")).expect("write");
        let other_allowed = root.join("other_allowed_signers");
        std::fs::write(&other_allowed, format!("{PRINCIPAL} {other_public}\n")).expect("write");

        // A test-lane receipt of this exact commit, recorded by the real recorder from a
        // lane that prints libtest output; the evidence must carry it and bind its digest.
        let lane = root.join("lane.sh");
        std::fs::write(
            &lane,
            "#!/bin/sh\necho '     Running unittests src/lib.rs (target/debug/deps/x-0123abcd)' >&2\n\
             echo ''\necho 'running 1 test'\necho 'test tests::ok ... ok'\necho ''\n\
             echo 'test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s'\n",
        )
        .expect("write lane");
        let receipt = root.join("receipt.json");
        let recorded = pipeline()
            .args(["receipt", "record", "--lane", "unit", "--fingerprint-paths", "src", "--repo"])
            .arg(&repo)
            .arg("--out")
            .arg(&receipt)
            .arg("--")
            .arg("sh")
            .arg(&lane)
            .env_remove("CI")
            .output()
            .expect("run receipt record");
        assert!(recorded.status.success(), "receipt record: {recorded:?}");

        let out = root.join("evidence");
        let output = pipeline()
            .arg("release-evidence")
            .arg("--receipt")
            .arg(&receipt)
            .arg("--repository")
            .arg(&repo)
            .arg("--out")
            .arg(&out)
            .arg("--sign-key")
            .arg(&key)
            .arg("--shardlift")
            .arg(&shardlift)
            .output()
            .expect("run pipeline");
        assert!(
            output.status.success(),
            "release-evidence failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Fixture {
            _tmp: tmp,
            root,
            repo,
            out,
            key,
            allowed,
            other_key,
            other_allowed,
            commit,
        }
    })
}

/// A fresh copy of the fixture's evidence.
pub fn copy_of_evidence(label: &str) -> PathBuf {
    let f = fixture();
    let dir = f.root.join("copies").join(label);
    assert!(!dir.exists(), "copy {label} reused");
    copy_tree(&f.out, &dir);
    dir
}
