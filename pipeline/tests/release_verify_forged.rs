//! `pipeline verify-release` on the committed evidence (`evidence/release-*/`) and on
//! forgeries of it, checked against this repository, which holds the recorded commit.
//!
//! Every forgery is internally consistent: the edited file stays canonical, the Statement
//! rebinds the byproducts it names, and SHA256SUMS is resealed, so the directory alone
//! still verifies and the forgery is refused by the one check it targets, which names its
//! file, shard or path. The bundled-receipt forgeries start from the shared fixture's
//! evidence (a throwaway repository's, made with a real receipt and both killer-demo runs),
//! since the committed evidence need not bundle a receipt.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pipeline::receipt::schema::{Carried, Extension, Outcome, Receipt, TestOutcome};
use release_support::*;
use serde_json::Value;
use shardlift::core::digest::Digest;

mod release_support;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed evidence directory (the first `evidence/*/` holding SHA256SUMS).
fn committed_evidence() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace().join("evidence"))
        .expect("read evidence/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.join("SHA256SUMS").is_file())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .next()
        .expect("committed evidence in evidence/*/")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("JSON")
}

fn write_canonical(path: &Path, value: &Value) {
    std::fs::write(
        path,
        serde_json_canonicalizer::to_vec(value).expect("canonicalize"),
    )
    .expect("write");
}

/// The recorded commit; the repository must hold it (a shallow clone does not).
fn recorded_commit(dir: &Path) -> String {
    let statement = read_json(&dir.join("release-evidence.json"));
    let commit = statement["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]
        ["gitCommit"]
        .as_str()
        .expect("gitCommit")
        .to_owned();
    let present = Command::new("git")
        .arg("-C")
        .arg(workspace())
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status()
        .expect("run git");
    assert!(
        present.success(),
        "this repository lacks the evidence's commit {commit} (a shallow clone?); fetch its history"
    );
    commit
}

struct Copy {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

fn copy() -> Copy {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("evidence");
    copy_tree(&committed_evidence(), &dir);
    Copy { _tmp: tmp, dir }
}

/// Edits the Statement (kept canonical).
fn edit_statement(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("release-evidence.json");
    let mut statement = read_json(&path);
    edit(&mut statement);
    write_canonical(&path, &statement);
}

/// The Statement's resolved dependencies, for editing.
fn dependencies(statement: &mut Value) -> &mut Vec<Value> {
    statement["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array_mut()
        .expect("resolvedDependencies")
}

fn dependency<'a>(statement: &'a mut Value, name: &str) -> &'a mut Value {
    dependencies(statement)
        .iter_mut()
        .find(|d| d["name"] == name)
        .expect("dependency")
}

/// Edits the summary (kept canonical).
fn edit_summary(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("summary.json");
    let mut summary = read_json(&path);
    edit(&mut summary);
    write_canonical(&path, &summary);
}

/// Forges the bundled receipt through `edit`, rebuilding it as the recorder would.
fn forge_receipt(dir: &Path, edit: impl FnOnce(&mut Extension)) {
    let path = dir.join("receipts/merged.json");
    let bytes = std::fs::read(&path).expect("read receipt");
    let mut extension = Receipt::decode(&bytes).expect("decode").shardlift;
    edit(&mut extension);
    for shard in &mut extension.shards {
        shard.manifest_digest = shard.manifest.digest();
        shard.scope_fingerprint = shard.scope.fingerprint();
    }
    let forged = Receipt::assemble(extension).encode().expect("encode");
    std::fs::write(&path, forged).expect("write receipt");
}

/// Rebinds every byproduct's SHA-256 in the Statement, then reseals SHA256SUMS.
fn rebind_and_reseal(dir: &Path) {
    edit_statement(dir, |statement| {
        for byproduct in statement["predicate"]["runDetails"]["byproducts"]
            .as_array_mut()
            .expect("byproducts")
        {
            let name = byproduct["name"].as_str().expect("name").to_owned();
            let bytes = std::fs::read(dir.join(&name)).expect("read byproduct");
            byproduct["digest"]["sha256"] = Value::String(sha256_hex(&bytes));
        }
    });
    reseal(dir);
}

fn verify(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .arg("verify-release")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("run verify-release")
}

fn with_repository(dir: &Path, more: &[&str]) -> Output {
    let repository = workspace();
    let mut args = vec!["--repository", repository.to_str().expect("UTF-8 path")];
    args.extend_from_slice(more);
    verify(dir, &args)
}

fn assert_verified(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "rejected: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON record")
}

/// Refused with `kind`, naming `file` in the JSON record and every needle on stderr.
fn assert_refused(output: &Output, kind: &str, file: &str, needles: &[&str]) {
    assert_rejected_naming(output, file);
    let record: Value = serde_json::from_slice(&output.stdout).expect("JSON record");
    assert_eq!(record["error_kind"], kind, "{record}");
    assert_eq!(record["file"], file, "{record}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for needle in needles {
        assert!(stderr.contains(needle), "{needle} not in: {stderr}");
    }
}

#[test]
fn the_committed_evidence_verifies_against_this_repository() {
    let dir = committed_evidence();
    let commit = recorded_commit(&dir);
    let record = assert_verified(&with_repository(&dir, &[]));
    assert_eq!(record["commit"], commit.as_str());
    assert_eq!(record["source"]["status"], "matched");
    assert!(record["source"]["runtime_sources"].as_u64() > Some(0));
    if !record["receipt"].is_null() {
        assert_eq!(record["receipt"]["carried"], serde_json::json!([]));
    }
}

#[test]
fn a_repository_without_the_recorded_commit_is_refused_naming_it() {
    let dir = committed_evidence();
    let commit = recorded_commit(&dir);
    let tmp = tempfile::tempdir().expect("tempdir");
    git(tmp.path(), &["init", "-q"]);
    git(
        tmp.path(),
        &["commit", "-q", "--allow-empty", "-m", "unrelated"],
    );
    let output = verify(&dir, &["--repository", tmp.path().to_str().expect("UTF-8")]);
    assert_refused(
        &output,
        "commit-not-in-repository",
        "release-evidence.json",
        &[&commit],
    );
}

#[test]
fn a_recorded_tree_that_is_not_the_commits_is_refused() {
    let copy = copy();
    let commit = recorded_commit(&copy.dir);
    let parent_tree = git(
        &workspace(),
        &["rev-parse", &format!("{commit}~1^{{tree}}")],
    );
    edit_statement(&copy.dir, |statement| {
        dependencies(statement)[0]["digest"]["gitTree"] = Value::String(parent_tree.clone());
    });
    edit_summary(&copy.dir, |summary| {
        summary["source"]["tree"] = Value::String(parent_tree.clone());
    });
    if copy.dir.join("receipts/merged.json").exists() {
        forge_receipt(&copy.dir, |ext| ext.tree = parent_tree.clone());
    }
    rebind_and_reseal(&copy.dir);
    assert_verified(&verify(&copy.dir, &[]));
    assert_refused(
        &with_repository(&copy.dir, &[]),
        "tree-mismatch",
        "release-evidence.json",
        &[&parent_tree, &commit],
    );
}

#[test]
fn a_runtime_source_blob_that_is_not_the_commits_is_refused_naming_it() {
    let copy = copy();
    recorded_commit(&copy.dir);
    edit_statement(&copy.dir, |statement| {
        let other = dependency(statement, "src/main.rs")["digest"]["gitBlob"].clone();
        dependency(statement, "src/lib.rs")["digest"]["gitBlob"] = other;
    });
    rebind_and_reseal(&copy.dir);
    assert_verified(&verify(&copy.dir, &[]));
    assert_refused(
        &with_repository(&copy.dir, &[]),
        "source-mismatch",
        "release-evidence.json",
        &["runtime source src/lib.rs is recorded with digests"],
    );
}

fn forge_lock_digest(lock: &str) {
    let copy = copy();
    recorded_commit(&copy.dir);
    edit_statement(&copy.dir, |statement| {
        dependency(statement, lock)["digest"]["sha256"] =
            Value::String(sha256_hex(b"another lock file\n"));
    });
    rebind_and_reseal(&copy.dir);
    assert_verified(&verify(&copy.dir, &[]));
    assert_refused(
        &with_repository(&copy.dir, &[]),
        "source-mismatch",
        "release-evidence.json",
        &[&format!("runtime source {lock} is recorded with digests")],
    );
}

#[test]
fn a_cargo_lock_digest_that_is_not_the_blobs_is_refused() {
    forge_lock_digest("Cargo.lock");
}

#[test]
fn a_libtorch_lock_digest_that_is_not_the_blobs_is_refused() {
    forge_lock_digest("ci/libtorch.lock");
}

#[test]
fn a_runtime_source_left_out_of_the_record_is_refused_naming_it() {
    let copy = copy();
    recorded_commit(&copy.dir);
    edit_statement(&copy.dir, |statement| {
        dependencies(statement).retain(|d| d["name"] != "build.rs");
    });
    edit_summary(&copy.dir, |summary| {
        let count = summary["source"]["runtime_sources"]
            .as_u64()
            .expect("count");
        summary["source"]["runtime_sources"] = Value::from(count - 1);
    });
    rebind_and_reseal(&copy.dir);
    assert_verified(&verify(&copy.dir, &[]));
    assert_refused(
        &with_repository(&copy.dir, &[]),
        "source-mismatch",
        "release-evidence.json",
        &["runtime source build.rs is selected by the recorded rule, but not recorded"],
    );
}

/// A copy of the fixture's evidence (a throwaway repository's, with a real test-lane
/// receipt: committed evidence need not bundle one) whose receipt went through `edit`; the
/// directory check alone refuses it.
fn forged_receipt_copy(edit: impl FnOnce(&mut Extension)) -> Copy {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("evidence");
    copy_tree(&fixture().out, &dir);
    assert!(dir.join("receipts/merged.json").exists());
    forge_receipt(&dir, edit);
    rebind_and_reseal(&dir);
    Copy { _tmp: tmp, dir }
}

/// `verify-release` of `dir` against the fixture's repository.
fn with_fixture_repository(dir: &Path, more: &[&str]) -> Output {
    let repository = &fixture().repo;
    let mut args = vec!["--repository", repository.to_str().expect("UTF-8 path")];
    args.extend_from_slice(more);
    verify(dir, &args)
}

fn first_shard(ext: &mut Extension) -> &mut pipeline::receipt::schema::Shard {
    ext.shards.first_mut().expect("a shard")
}

#[test]
fn a_bundled_receipt_with_a_failed_test_is_refused_naming_the_shard() {
    let mut failed = (String::new(), String::new());
    let copy = forged_receipt_copy(|ext| {
        let shard = first_shard(ext);
        let id = shard.test_ids.first().expect("a test").clone();
        shard.counts.passed -= 1;
        shard.counts.failed += 1;
        shard.outcome = Outcome::Failed;
        failed = (shard.name.clone(), id.clone());
        if let Some(entry) = ext.tests.get_mut(&id) {
            entry.outcome = TestOutcome::Failed;
        }
        ext.session.outcome = Outcome::Failed;
    });
    let (shard, id) = failed;
    assert_refused(
        &verify(&copy.dir, &[]),
        "receipt-rejected",
        "receipts/merged.json",
        &[&format!("shard {shard} failed (1 failed tests: {id})")],
    );
}

#[test]
fn a_bundled_receipt_recorded_dirty_is_refused_naming_the_shard() {
    let mut name = String::new();
    let copy = forged_receipt_copy(|ext| {
        let shard = first_shard(ext);
        shard.dirty = true;
        name = shard.name.clone();
        ext.dirty = true;
    });
    assert_refused(
        &verify(&copy.dir, &[]),
        "receipt-rejected",
        "receipts/merged.json",
        &[&format!("shard {name} was recorded from a dirty tree")],
    );
}

#[test]
fn a_bundled_receipt_of_another_tree_is_refused() {
    let copy = forged_receipt_copy(|ext| ext.tree = "1".repeat(40));
    assert_refused(
        &verify(&copy.dir, &[]),
        "receipt-source",
        "receipts/merged.json",
        &[&format!("records tree {}", "1".repeat(40))],
    );
}

#[test]
fn a_bundled_receipt_with_an_inconsistent_shard_commit_is_refused() {
    let mut name = String::new();
    let copy = forged_receipt_copy(|ext| {
        let shard = first_shard(ext);
        shard.commit = "f".repeat(40);
        name = shard.name.clone();
    });
    assert_refused(
        &verify(&copy.dir, &[]),
        "receipt-rejected",
        "receipts/merged.json",
        &[&format!(
            "shard {name} was recorded at commit {}",
            "f".repeat(40)
        )],
    );
}

/// Marks the shard without extra paths (its manifest recomputes from git alone) as
/// carried from `from`.
fn carry_shard(ext: &mut Extension, from: &str) -> String {
    let shard = ext
        .shards
        .iter_mut()
        .find(|s| s.scope.extra_paths.is_empty())
        .expect("a shard without extra paths");
    shard.commit = from.to_owned();
    shard.carried = Some(Carried {
        from_receipt: Digest::of(b"an older receipt"),
        carried_at: "2026-11-30T00:00:00Z".to_owned(),
        original_dirty: shard.dirty,
    });
    shard.name.clone()
}

#[test]
fn carried_shards_in_the_bundled_receipt_are_refused_unless_allowed_and_checked() {
    let f = fixture();
    let parent = git(&f.repo, &["rev-parse", &format!("{}~1", f.commit)]);
    let mut name = String::new();
    let copy = forged_receipt_copy(|ext| name = carry_shard(ext, &parent));
    assert_refused(
        &verify(&copy.dir, &[]),
        "receipt-rejected",
        "receipts/merged.json",
        &[&format!("shard {name} was carried forward")],
    );
    // --allow-carried needs the repository that the conditions are checked against.
    assert_eq!(
        verify(&copy.dir, &["--allow-carried"]).status.code(),
        Some(2)
    );
    let record = assert_verified(&with_fixture_repository(&copy.dir, &["--allow-carried"]));
    assert_eq!(record["receipt"]["carried"], serde_json::json!([name]));
}

#[test]
fn a_shard_carried_from_a_commit_that_does_not_exist_is_refused() {
    let zeros = "0".repeat(40);
    let mut name = String::new();
    let copy = forged_receipt_copy(|ext| name = carry_shard(ext, &zeros));
    assert_refused(
        &with_fixture_repository(&copy.dir, &["--allow-carried"]),
        "receipt-rejected",
        "receipts/merged.json",
        &[&format!(
            "carried shard {name} fails the carry-forward conditions: (a) commit {zeros}"
        )],
    );
}

#[test]
fn binaries_are_compared_with_the_recorded_digests() {
    let copy = copy();
    let tmp = tempfile::tempdir().expect("tempdir");
    let shardlift = tmp.path().join("shardlift");
    std::fs::write(&shardlift, b"a shardlift binary\n").expect("write");
    let shardlift_arg = shardlift.to_str().expect("UTF-8");
    // The committed record names another binary: refused, naming it.
    assert_refused(
        &verify(&copy.dir, &["--shardlift", shardlift_arg]),
        "binary-mismatch",
        "release-evidence.json",
        &["records shardlift SHA-256"],
    );
    assert_refused(
        &verify(&copy.dir, &["--pipeline", shardlift_arg]),
        "binary-mismatch",
        "release-evidence.json",
        &["records pipeline SHA-256"],
    );
    // Recorded as this file's digest: accepted, and reported as checked.
    edit_statement(&copy.dir, |statement| {
        statement["predicate"]["buildDefinition"]["internalParameters"]["buildIdentity"]
            ["shardliftSha256"] = Value::String(sha256_hex(b"a shardlift binary\n"));
    });
    rebind_and_reseal(&copy.dir);
    let record = assert_verified(&verify(&copy.dir, &["--shardlift", shardlift_arg]));
    assert_eq!(record["binaries_checked"], serde_json::json!(["shardlift"]));
}

/// The Statement's build identity, for editing.
fn identity(statement: &mut Value) -> &mut Value {
    &mut statement["predicate"]["buildDefinition"]["internalParameters"]["buildIdentity"]
}

#[test]
fn a_malformed_cpu_kernel_path_is_refused_and_a_well_formed_one_is_reported() {
    // Flags out of their order: no /proc/cpuinfo gives this path.
    let malformed = copy();
    edit_statement(&malformed.dir, |statement| {
        identity(statement)["cpuKernelPath"] = Value::String("GenuineIntel fma avx2".into());
    });
    rebind_and_reseal(&malformed.dir);
    assert_refused(
        &verify(&malformed.dir, &[]),
        "inconsistent",
        "release-evidence.json",
        &["CPU kernel path \"GenuineIntel fma avx2\""],
    );

    let reported = copy();
    edit_statement(&reported.dir, |statement| {
        identity(statement)["cpuKernelPath"] = Value::String("GenuineIntel avx2 fma".into());
    });
    rebind_and_reseal(&reported.dir);
    let record = assert_verified(&verify(&reported.dir, &[]));
    assert_eq!(
        record["cpu_kernel_path"], "GenuineIntel avx2 fma",
        "{record}"
    );
    assert_eq!(
        record["cpu_kernel_path_here"],
        shardlift::evidence::kernel_path::this_machine().as_str()
    );
}
