//! The quality lane (`ci/quality`) fails on what it is meant to catch. Each test runs the
//! real script on a tiny scratch crate (one `lib.rs`, no dependencies, this repository's
//! `deny.toml`, a git index), so it costs seconds, not a workspace build: a clean crate
//! passes, and one injected problem fails the lane naming exactly the check it breaks.

use std::path::{Path, PathBuf};
use std::process::Command;

const CLEAN_LIB: &str = "//! A scratch crate for the quality lane's test.\n\n\
/// Returns one.\npub fn one() -> u32 {\n    1\n}\n";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(dir: &Path, program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
    assert!(
        status.success(),
        "{program} {args:?} failed in {}",
        dir.display()
    );
}

/// A scratch crate whose `src/lib.rs` is `lib`, with `README.md` as `readme`, every file
/// in the git index.
fn scratch_crate(lib: &str, readme: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         license = \"Apache-2.0\"\npublish = false\n",
    )
    .expect("Cargo.toml");
    std::fs::create_dir(root.join("src")).expect("src/");
    std::fs::write(root.join("src/lib.rs"), lib).expect("src/lib.rs");
    std::fs::write(root.join("README.md"), readme).expect("README.md");
    std::fs::copy(repo_root().join("deny.toml"), root.join("deny.toml")).expect("deny.toml");
    run(
        root,
        "cargo",
        &["generate-lockfile", "--offline", "--quiet"],
    );
    run(root, "git", &["init", "--quiet"]);
    run(root, "git", &["add", "--all"]);
    dir
}

/// Runs `ci/quality DIR`; returns its exit code and the checks its last line names as
/// failed (empty when it passed).
fn quality(dir: &Path) -> (Option<i32>, Vec<String>) {
    let output = Command::new(repo_root().join("ci/quality"))
        .arg(dir)
        .output()
        .expect("run ci/quality");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let failed: Vec<String> = last
        .strip_prefix("quality: FAILED: ")
        .map(|names| names.split(' ').map(str::to_owned).collect())
        .unwrap_or_default();
    if !output.status.success() || !failed.is_empty() {
        eprintln!("ci/quality said:\n{stderr}");
    }
    (output.status.code(), failed)
}

#[test]
fn a_clean_crate_passes_the_quality_lane() {
    let dir = scratch_crate(CLEAN_LIB, "# Scratch\n");
    assert_eq!(quality(dir.path()), (Some(0), vec![]));
}

#[test]
fn a_clippy_warning_fails_both_clippy_checks() {
    // `needless_return` is a warning, not an error: only -D warnings makes it fail.
    let lib = CLEAN_LIB.replace("    1\n", "    return 1;\n");
    let dir = scratch_crate(&lib, "# Scratch\n");
    assert_eq!(
        quality(dir.path()),
        (Some(1), vec!["clippy".to_owned(), "clippy-core".to_owned()])
    );
}

#[test]
fn an_unformatted_file_fails_the_fmt_check() {
    let lib = CLEAN_LIB.replace("pub fn one() -> u32 {\n    1\n}", "pub fn one()->u32{ 1 }");
    let dir = scratch_crate(&lib, "# Scratch\n");
    assert_eq!(quality(dir.path()), (Some(1), vec!["fmt".to_owned()]));
}

#[test]
fn trailing_whitespace_fails_the_whitespace_check() {
    let dir = scratch_crate(CLEAN_LIB, "# Scratch \n");
    assert_eq!(
        quality(dir.path()),
        (Some(1), vec!["whitespace".to_owned()])
    );
}

#[test]
fn a_doc_link_to_a_feature_gated_item_fails_the_doc_core_check() {
    // The crate docs link to a module that exists only with the default feature: the doc
    // check (default features) passes, the doc check without them does not.
    let lib = CLEAN_LIB.replace(
        "//! A scratch crate for the quality lane's test.\n",
        "//! A scratch crate for the quality lane's test; see [`extra`].\n\n\
         #[cfg(feature = \"extra\")]\n/// Only with the `extra` feature.\npub mod extra {}\n",
    );
    let dir = scratch_crate(&lib, "# Scratch\n");
    let manifest = dir.path().join("Cargo.toml");
    let mut toml = std::fs::read_to_string(&manifest).expect("Cargo.toml");
    toml.push_str("\n[features]\ndefault = [\"extra\"]\nextra = []\n");
    std::fs::write(&manifest, toml).expect("Cargo.toml");
    assert_eq!(quality(dir.path()), (Some(1), vec!["doc-core".to_owned()]));
}
