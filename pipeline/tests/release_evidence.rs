//! End to end: `pipeline release-evidence` on a throwaway clean repository (both real
//! killer-demo runs, once per test binary), then `verify-release`, `sha256sum -c`,
//! `ssh-keygen -Y verify`, and every kind of tampering, each named.
//!
//! Needs the real `shardlift` binary with the torch feature (`cargo build`): by default the
//! one next to the pipeline binary (target/debug/shardlift), or `SHARDLIFT_BIN`.
use std::path::Path;
use std::process::{Command, Output, Stdio};

use release_support::*;

mod release_support;

const NAMESPACE: &str = "shardlift-release-evidence-v1";

/// A forger's edit of one file's text.
type Edit = Box<dyn Fn(String) -> String>;

fn verify(dir: &Path, allowed: Option<&Path>) -> Output {
    let mut command = pipeline();
    command.arg("verify-release").arg("--dir").arg(dir);
    if let Some(allowed) = allowed {
        command.arg("--allowed-signers").arg(allowed);
    }
    command.output().expect("run verify-release")
}

#[test]
fn release_evidence_verifies_with_its_signature_and_sha256sum_accepts_it() {
    let f = fixture();
    let output = verify(&f.out, Some(&f.allowed));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\"status\":\"verified\""), "{stdout}");
    assert!(stdout.contains(PRINCIPAL), "{stdout}");
    assert!(stdout.contains(&f.commit), "{stdout}");

    let sha256sum = Command::new("sha256sum")
        .args(["-c", "--strict", "SHA256SUMS"])
        .current_dir(&f.out)
        .output()
        .expect("run sha256sum");
    assert!(sha256sum.status.success(), "{sha256sum:?}");

    // OpenSSH itself accepts the signature over SHA256SUMS in the release namespace.
    let mut child = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(&f.allowed)
        .args(["-I", PRINCIPAL, "-n", NAMESPACE, "-s"])
        .arg(f.out.join("SHA256SUMS.sig"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ssh-keygen");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("stdin"),
        &std::fs::read(f.out.join("SHA256SUMS")).expect("read"),
    )
    .expect("write");
    assert!(
        child.wait().expect("wait").success(),
        "ssh-keygen -Y verify refused it"
    );
}

#[test]
fn the_statement_binds_head_and_every_subject_is_the_files_sha256() {
    let f = fixture();
    let statement: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.out.join("release-evidence.json")).expect("read"))
            .expect("JSON");
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(statement["predicateType"], "https://slsa.dev/provenance/v1");
    let dependencies = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("array");
    let source = dependencies
        .iter()
        .find(|d| d["name"] == "source")
        .expect("source dependency");
    assert_eq!(source["digest"]["gitCommit"], f.commit.as_str());
    assert_eq!(
        source["digest"]["gitTree"],
        git(&f.repo, &["rev-parse", "HEAD^{tree}"]).as_str()
    );
    // Runtime sources come from the HEAD tree; docs are not runtime sources.
    let blob = git(&f.repo, &["rev-parse", "HEAD:src/lib.rs"]);
    assert!(dependencies
        .iter()
        .any(|d| d["name"] == "src/lib.rs" && d["digest"]["gitBlob"] == blob.as_str()));
    assert!(!dependencies.iter().any(|d| d["name"] == "docs/notes.md"));
    for name in [
        "Cargo.lock",
        "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    ] {
        assert!(dependencies.iter().any(|d| d["name"] == name), "{name}");
    }
    let subjects = statement["subject"].as_array().expect("subjects");
    assert_eq!(subjects.len(), 8);
    for subject in subjects {
        let name = subject["name"].as_str().expect("name");
        assert!(name.starts_with("bundles/"), "{name}");
        let bytes = std::fs::read(f.out.join(name)).expect("read subject");
        assert_eq!(
            subject["digest"]["sha256"],
            sha256_hex(&bytes).as_str(),
            "{name}"
        );
    }
}

#[test]
fn the_evidence_is_path_free_and_host_free() {
    let f = fixture();
    let mut needles = vec![
        f.root.to_string_lossy().into_owned(),
        f.repo.to_string_lossy().into_owned(),
        std::env::temp_dir().to_string_lossy().into_owned(),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        needles.push(home.to_string_lossy().into_owned());
    }
    // Everything the pipeline wrote; the receipt is ci/test's record, carried verbatim
    // (with the lane's command and environment) and bound by digest, so it is exempt.
    let produced: Vec<String> = emitted_files(&f.out)
        .into_iter()
        .filter(|name| name != "receipts/merged.json")
        .collect();
    assert!(produced.len() >= 10, "{produced:?}");
    for name in produced {
        let text = std::fs::read_to_string(f.out.join(&name)).expect("read");
        for needle in needles.iter().filter(|n| n.len() > 1) {
            assert!(!text.contains(needle.as_str()), "{name} contains {needle}");
        }
        // Transcripts elide wall times. A bundle's audit.json keeps its own
        // `context.wall_time_ms` (bound by digest, never compared), so it is exempt.
        if !name.starts_with("bundles/") {
            let numeric_wall_time = text.match_indices("\"wall_time_ms\":").any(|(i, key)| {
                text[i + key.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            });
            assert!(!numeric_wall_time, "{name} carries a wall time");
        }
    }
}

#[test]
fn changing_any_emitted_file_is_rejected_naming_it() {
    let f = fixture();
    for (index, name) in emitted_files(&f.out).iter().enumerate() {
        let dir = copy_of_evidence(&format!("flip-{index}"));
        let path = dir.join(name);
        let mut bytes = std::fs::read(&path).expect("read");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(&path, bytes).expect("write");
        assert_rejected_naming(&verify(&dir, None), name);
    }
    // SHA256SUMS itself, and (when a signer is required) its signature.
    let dir = copy_of_evidence("flip-sums");
    let mut sums = std::fs::read(dir.join("SHA256SUMS")).expect("read");
    sums[3] = if sums[3] == b'0' { b'1' } else { b'0' };
    std::fs::write(dir.join("SHA256SUMS"), sums).expect("write");
    assert_rejected_naming(&verify(&dir, None), "SHA256SUMS");
    let dir = copy_of_evidence("flip-sig");
    let signature = std::fs::read_to_string(dir.join("SHA256SUMS.sig")).expect("read");
    let mut lines: Vec<String> = signature.lines().map(str::to_owned).collect();
    let body = &mut lines[3];
    let replacement = if body.starts_with('A') { "B" } else { "A" };
    body.replace_range(0..1, replacement);
    std::fs::write(dir.join("SHA256SUMS.sig"), lines.join("\n") + "\n").expect("write");
    assert_rejected_naming(&verify(&dir, Some(&f.allowed)), "SHA256SUMS.sig");
}

#[test]
fn consistent_forgeries_are_rejected_naming_the_file() {
    let f = fixture();
    let other = "0123456789abcdef0123456789abcdef01234567";
    let cases: [(&str, Edit); 4] = [
        (
            "release-evidence.json",
            Box::new(move |t: String| t.replace(&f.commit, other)),
        ),
        (
            "summary.json",
            Box::new(|t: String| t.replacen("\"replayed_batches\":1", "\"replayed_batches\":0", 1)),
        ),
        (
            "transcripts/commit-after-rename.killer-demo.txt",
            Box::new(|t: String| t.replace("\"status\":\"passed\"", "\"status\":\"failed\"")),
        ),
        (
            "bundles/commit-after-rename/audit.json",
            Box::new(|t: String| t.replace("\"status\":\"passed\"", "\"status\":\"failed\"")),
        ),
    ];
    for (index, (name, edit)) in cases.iter().enumerate() {
        let dir = copy_of_evidence(&format!("forge-{index}"));
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).expect("read");
        let edited = edit(text.clone());
        assert_ne!(edited, text, "the edit of {name} changed nothing");
        std::fs::write(&path, edited).expect("write");
        reseal(&dir);
        assert_rejected_naming(&verify(&dir, None), name);
        // With the signer's key required, the resealed SHA256SUMS no longer verifies.
        assert_rejected_naming(&verify(&dir, Some(&f.allowed)), "SHA256SUMS.sig");
    }
}

#[test]
fn extra_missing_and_relisted_files_are_named() {
    let dir = copy_of_evidence("extra");
    std::fs::write(dir.join("transcripts/extra.txt"), "x\n").expect("write");
    assert_rejected_naming(&verify(&dir, None), "transcripts/extra.txt");

    let dir = copy_of_evidence("missing");
    std::fs::remove_file(dir.join("summary.json")).expect("remove");
    assert_rejected_naming(&verify(&dir, None), "summary.json");

    // Removed from SHA256SUMS as well: the layout names it.
    let dir = copy_of_evidence("unlisted-and-gone");
    std::fs::remove_file(dir.join("transcripts/commit-after-rename.verify-bundle.txt"))
        .expect("remove");
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).expect("read");
    let kept: String = sums
        .lines()
        .filter(|l| !l.ends_with("commit-after-rename.verify-bundle.txt"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("SHA256SUMS"), kept).expect("write");
    assert_rejected_naming(
        &verify(&dir, None),
        "transcripts/commit-after-rename.verify-bundle.txt",
    );
}

#[test]
fn signatures_by_another_key_or_in_another_namespace_are_rejected() {
    let f = fixture();
    // The genuine signature, checked against someone else's key.
    assert_rejected_naming(&verify(&f.out, Some(&f.other_allowed)), "SHA256SUMS.sig");

    let sign = |dir: &Path, key: &Path, namespace: &str| {
        std::fs::remove_file(dir.join("SHA256SUMS.sig")).expect("remove");
        let status = Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign", "-f"])
            .arg(key)
            .args(["-n", namespace])
            .arg(dir.join("SHA256SUMS"))
            .stderr(Stdio::null())
            .status()
            .expect("ssh-keygen -Y sign");
        assert!(status.success());
    };
    // The right key, another namespace.
    let dir = copy_of_evidence("namespace");
    sign(&dir, &f.key, "file");
    let output = verify(&dir, Some(&f.allowed));
    assert_rejected_naming(&output, "SHA256SUMS.sig");
    assert!(String::from_utf8_lossy(&output.stderr).contains("namespace"));
    // Another key, the right namespace.
    let dir = copy_of_evidence("other-key");
    sign(&dir, &f.other_key, NAMESPACE);
    assert_rejected_naming(&verify(&dir, Some(&f.allowed)), "SHA256SUMS.sig");
    // Re-signed by the right key in the right namespace: accepted (the test's own check).
    let dir = copy_of_evidence("resigned");
    sign(&dir, &f.key, NAMESPACE);
    assert!(verify(&dir, Some(&f.allowed)).status.success());
    // No signature at all, but one is required.
    let dir = copy_of_evidence("unsigned");
    std::fs::remove_file(dir.join("SHA256SUMS.sig")).expect("remove");
    assert!(verify(&dir, None).status.success());
    assert_rejected_naming(&verify(&dir, Some(&f.allowed)), "SHA256SUMS.sig");
}

#[test]
fn staleness_names_the_runtime_sources_changed_since_without_failing() {
    let f = fixture();
    let clone = f.root.join("later");
    let status = Command::new("git")
        .args(["clone", "-q"])
        .arg(&f.repo)
        .arg(&clone)
        .status()
        .expect("git clone");
    assert!(status.success());
    let current = pipeline()
        .args(["verify-release", "--dir"])
        .arg(&f.out)
        .arg("--repository")
        .arg(&clone)
        .output()
        .expect("run");
    assert!(current.status.success());
    assert!(String::from_utf8_lossy(&current.stdout).contains("\"stale\":false"));

    std::fs::write(clone.join("src/lib.rs"), "pub fn f() { }\n").expect("write");
    std::fs::write(clone.join("src/new.rs"), "\n").expect("write");
    std::fs::write(
        clone.join("docs/notes.md"),
        "changed, not a runtime source\n",
    )
    .expect("write");
    std::fs::remove_file(clone.join("src/store/mod.rs")).expect("remove");
    git(&clone, &["add", "-A"]);
    git(&clone, &["commit", "-q", "-m", "later"]);
    let stale = pipeline()
        .args(["verify-release", "--dir"])
        .arg(&f.out)
        .arg("--repository")
        .arg(&clone)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&stale.stdout);
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(stale.status.success(), "{stderr}");
    let record: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    assert_eq!(record["staleness"]["stale"], true);
    assert_eq!(
        record["staleness"]["changed"],
        serde_json::json!(["src/lib.rs"])
    );
    assert_eq!(
        record["staleness"]["added"],
        serde_json::json!(["src/new.rs"])
    );
    assert_eq!(
        record["staleness"]["removed"],
        serde_json::json!(["src/store/mod.rs"])
    );
    assert!(stderr.contains("changed: src/lib.rs"), "{stderr}");
    assert!(!stdout.contains("docs/notes.md"));
}

#[test]
fn the_receipt_is_emitted_and_bound_by_the_statement() {
    let f = fixture();
    let receipt = std::fs::read(f.out.join("receipts/merged.json")).expect("receipt emitted");
    assert_eq!(
        receipt,
        std::fs::read(f.root.join("receipt.json")).expect("original")
    );
    let statement: serde_json::Value = serde_json::from_slice(
        &std::fs::read(f.out.join("release-evidence.json")).expect("statement"),
    )
    .expect("json");
    let byproducts = statement["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts");
    let bound = byproducts
        .iter()
        .find(|d| d["name"] == "receipts/merged.json")
        .expect("the receipt is a byproduct of the Statement");
    assert_eq!(bound["digest"]["sha256"], sha256_hex(&receipt));
    assert!(emitted_files(&f.out).contains(&"receipts/merged.json".to_owned()));
}

#[test]
fn a_receipt_of_another_commit_is_refused_before_any_run() {
    let f = fixture();
    let scratch = tempfile::tempdir().expect("tempdir");
    let receipt = std::fs::read_to_string(f.root.join("receipt.json")).expect("receipt");
    let forged = receipt.replace(&f.commit, &"0".repeat(40));
    assert_ne!(forged, receipt);
    let path = scratch.path().join("other.json");
    std::fs::write(&path, forged).expect("write");
    let out = scratch.path().join("out");
    let output = pipeline()
        .arg("release-evidence")
        .arg("--receipt")
        .arg(&path)
        .arg("--repository")
        .arg(&f.repo)
        .arg("--out")
        .arg(&out)
        .arg("--shardlift")
        .arg(shardlift())
        .output()
        .expect("run pipeline");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("receipts/merged.json"));
    assert!(!out.exists());
}

/// Runs `pipeline reproduce` of `dir` against `repository`.
fn reproduce(dir: &Path, repository: &Path) -> Output {
    pipeline()
        .args(["reproduce", "--dir"])
        .arg(dir)
        .arg("--repository")
        .arg(repository)
        .arg("--shardlift")
        .arg(shardlift())
        .output()
        .expect("run reproduce")
}

#[test]
fn a_rerun_reproduces_every_bundle_and_transcript_byte_for_byte() {
    let f = fixture();
    let output = reproduce(&f.out, &f.repo);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let record: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(record["status"], "reproduced");
    let identical: Vec<&str> = record["identical"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    // Both bundles (four files each) and both runs' two transcripts.
    assert_eq!(identical.len(), 12, "{identical:?}");
    assert!(identical.contains(&"bundles/commit-after-rename/audit.json"));
}

#[test]
fn two_runs_of_one_commit_write_identical_sha256sums() {
    let f = fixture();
    let second = f.root.join("second-run");
    let output = pipeline()
        .arg("release-evidence")
        .arg("--receipt")
        .arg(f.root.join("receipt.json"))
        .arg("--repository")
        .arg(&f.repo)
        .arg("--out")
        .arg(&second)
        .arg("--sign-key")
        .arg(&f.key)
        .arg("--shardlift")
        .arg(shardlift())
        .output()
        .expect("run pipeline");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sums = |dir: &Path| std::fs::read(dir.join("SHA256SUMS")).expect("SHA256SUMS");
    assert_eq!(
        String::from_utf8_lossy(&sums(&second)),
        String::from_utf8_lossy(&sums(&f.out))
    );
    assert_eq!(emitted_files(&second), emitted_files(&f.out));
}

#[test]
fn a_checkout_with_other_runtime_sources_is_not_rerun_and_is_named() {
    let f = fixture();
    let clone = f.root.join("changed-for-reproduce");
    git(
        &f.root,
        &[
            "clone",
            "-q",
            f.repo.to_str().expect("UTF-8"),
            clone.to_str().expect("UTF-8"),
        ],
    );
    std::fs::write(clone.join("src/lib.rs"), "pub fn f() { let _ = 1; }\n").expect("write");
    git(&clone, &["commit", "-q", "-am", "another runtime source"]);
    let output = reproduce(&f.out, &clone);
    assert_eq!(output.status.code(), Some(1));
    let record: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(record["error_kind"], "not-reproducible", "{record}");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.contains("src/lib.rs")),
        "{record}"
    );
}

#[test]
fn a_recorded_byte_changed_is_not_reproduced_and_the_file_is_named() {
    let f = fixture();
    let dir = copy_of_evidence("reproduce-changed-byte");
    let name = "bundles/commit-after-file-fsync/reference-evaluation.json";
    let path = dir.join(name);
    let mut bytes = std::fs::read(&path).expect("read");
    let last = bytes.len() - 2;
    bytes[last] ^= 1;
    std::fs::write(&path, bytes).expect("write");
    let output = reproduce(&dir, &f.repo);
    assert_eq!(output.status.code(), Some(1));
    let record: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(record["status"], "not-reproduced", "{record}");
    assert_eq!(record["file"], name, "{record}");
    assert!(String::from_utf8_lossy(&output.stderr).contains(name));
}

#[test]
fn evidence_recorded_on_another_cpu_kernel_path_is_refused_before_any_rerun() {
    use shardlift::evidence::kernel_path::{this_machine, UNKNOWN_VENDOR};
    let f = fixture();
    let here = this_machine();
    let mut statement: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.out.join("release-evidence.json")).expect("read"))
            .expect("JSON");
    let recorded = &mut statement["predicate"]["buildDefinition"]["internalParameters"]
        ["buildIdentity"]["cpuKernelPath"];
    // Recorded from what this machine's /proc/cpuinfo says, not a constant.
    assert_eq!(*recorded, here.as_str());

    // A forger moves the evidence to another (well-formed) path and reseals it: it still
    // verifies, says where it was recorded, and is not rerun here.
    let other = if here == UNKNOWN_VENDOR {
        "GenuineIntel avx2 fma"
    } else {
        UNKNOWN_VENDOR
    };
    *recorded = serde_json::Value::String(other.into());
    let dir = copy_of_evidence("other-kernel-path");
    std::fs::write(
        dir.join("release-evidence.json"),
        serde_json_canonicalizer::to_vec(&statement).expect("canonicalize"),
    )
    .expect("write");
    reseal(&dir);
    let verified = verify(&dir, None);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let record: serde_json::Value = serde_json::from_slice(&verified.stdout).expect("JSON");
    assert_eq!(record["cpu_kernel_path"], other, "{record}");
    assert_eq!(record["cpu_kernel_path_here"], here.as_str(), "{record}");

    let output = reproduce(&dir, &f.repo);
    assert_eq!(output.status.code(), Some(1));
    let record: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(record["error_kind"], "other-kernel-path", "{record}");
    assert_eq!(record["file"], "release-evidence.json", "{record}");
    let error = record["error"].as_str().unwrap_or_default();
    assert!(error.contains(other) && error.contains(&here), "{record}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("running killer-demo"),
        "a rerun started: {stderr}"
    );
}
