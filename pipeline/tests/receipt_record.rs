//! `pipeline receipt record`: a complete receipt from a lane it runs itself, and the
//! refusals (shared receipt, output it does not understand).
mod receipt_support;

use receipt_support::*;

#[test]
fn record_writes_a_complete_receipt() {
    let fx = Fixture::new();
    let (out, output) = fx.record_with(
        "core",
        "core,README",
        &[
            "--fingerprint-extra-paths",
            "data/extra.txt",
            "--mode",
            "ci",
        ],
        "demo",
        &["m::a:ok", "m::b:ok", "m::slow:ignored"],
    );
    assert_success(&output);
    // The lane's own output passes through.
    assert!(String::from_utf8_lossy(&output.stdout).contains("test m::a ... ok"));
    let receipt = read_json(&out);
    assert_eq!(receipt["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(
        receipt["predicateType"],
        "https://in-toto.io/attestation/test-result/v0.1"
    );
    assert_eq!(receipt["schema"], "shardlift.test-receipt");
    assert_eq!(receipt["version"], 1);
    let head = fx.head();
    assert_eq!(receipt["subject"][0]["digest"]["gitCommit"], head.as_str());
    let ext = &receipt["shardlift"];
    assert_eq!(ext["commit"], head.as_str());
    assert_eq!(ext["tree"], fx.git(&["rev-parse", "HEAD^{tree}"]).as_str());
    assert_eq!(ext["mode"], "ci");
    assert_eq!(ext["dirty"], false);
    assert!(ext["toolchain"]["rustc"]
        .as_str()
        .unwrap_or("")
        .starts_with("rustc "));
    assert!(ext["toolchain"]["cargo"]
        .as_str()
        .unwrap_or("")
        .starts_with("cargo "));
    assert!(ext["toolchain"]["nextest"].is_string());
    assert!(ext["platform"].as_str().unwrap_or("").contains("linux"));
    assert!(ext["tool"].as_str().unwrap_or("").starts_with("pipeline "));
    assert_eq!(ext["session"]["outcome"], "PASSED");
    assert_eq!(receipt["predicate"]["result"], "PASSED");
    let shard = shard(&receipt, "core").expect("shard core");
    assert_eq!(shard["commit"], head.as_str());
    let blobs = &shard["manifest"]["blobs"];
    assert_eq!(
        blobs["core/a.rs"],
        fx.git(&["rev-parse", "HEAD:core/a.rs"]).as_str()
    );
    assert_eq!(
        blobs["core/b.rs"],
        fx.git(&["rev-parse", "HEAD:core/b.rs"]).as_str()
    );
    assert_eq!(
        blobs["README"],
        fx.git(&["rev-parse", "HEAD:README"]).as_str()
    );
    assert!(
        blobs.get("other/c.rs").is_none(),
        "outside the narrow manifest"
    );
    let extra = shard["manifest"]["extras"]["data/extra.txt"]
        .as_str()
        .expect("extra digest");
    assert_eq!(extra.len(), 64);
    assert_eq!(
        shard["test_ids"],
        serde_json::json!([
            "demo/src/lib.rs::m::a",
            "demo/src/lib.rs::m::b",
            "demo/src/lib.rs::m::slow"
        ])
    );
    assert_eq!(
        shard["counts"],
        serde_json::json!({"passed": 2, "failed": 0, "ignored": 1})
    );
    assert_eq!(
        ext["tests"]["demo/src/lib.rs::m::slow"]["outcome"],
        "ignored"
    );
    assert_eq!(ext["tests"]["demo/src/lib.rs::m::a"]["shard"], "core");
    assert!(shard["started"].as_str().unwrap_or("").ends_with('Z'));
    assert!(shard["command"][0]
        .as_str()
        .unwrap_or("")
        .ends_with("lane.sh"));
    assert_eq!(shard["exit"]["code"], 0);
    assert!(shard["carried"].is_null());
    // Canonical bytes: re-encoding gives the same file.
    let bytes = std::fs::read(&out).expect("read");
    assert_eq!(
        serde_json_canonicalizer::to_vec(&receipt).expect("canonical"),
        bytes
    );
    // And it verifies on its own.
    let policy = fx.out("policy.json");
    std::fs::write(&policy, "{}").expect("policy");
    let verified = fx.pipeline(&[
        "receipt",
        "verify",
        &out.to_string_lossy(),
        "--policy",
        &policy.to_string_lossy(),
    ]);
    assert_success(&verified);
    assert!(String::from_utf8_lossy(&verified.stdout).contains("3 tests"));
}

#[test]
fn record_marks_a_dirty_tree() {
    let fx = Fixture::new();
    fx.write("other/c.rs", "changed but not committed\n");
    let out = fx.record("core", "core", "demo", &["t:ok"]);
    let receipt = read_json(&out);
    assert_eq!(receipt["shardlift"]["dirty"], true);
    assert_eq!(shard(&receipt, "core").expect("core")["dirty"], true);
}

#[test]
fn a_failed_lane_gets_a_failed_receipt_and_exit_1() {
    let fx = Fixture::new();
    let (out, output) = fx.record_with("core", "core", &[], "demo", &["good:ok", "bad:FAILED"]);
    assert_refused(&output, "lane core failed");
    let receipt = read_json(&out);
    assert_eq!(receipt["shardlift"]["session"]["outcome"], "FAILED");
    assert_eq!(receipt["predicate"]["result"], "FAILED");
    assert_eq!(
        receipt["predicate"]["failedTests"],
        serde_json::json!(["demo/src/lib.rs::bad"])
    );
}

#[test]
fn record_refuses_an_out_file_locked_by_another_recorder() {
    let fx = Fixture::new();
    std::fs::write(fx.out("core.json.lock"), "4242\n").expect("lock");
    let (out, output) = fx.record_with("core", "core", &[], "demo", &["t:ok"]);
    assert_refused(&output, "another recorder holds");
    assert!(!out.exists());
}

#[test]
fn record_refuses_parallel_nodes_sharing_one_lane_receipt() {
    let fx = Fixture::new();
    let out = fx.out("fast.json");
    let script = fx.lane_script();
    let args = |lane: &'static str| {
        vec![
            "receipt".to_owned(),
            "record".to_owned(),
            "--lane".to_owned(),
            lane.to_owned(),
            "--fingerprint-paths".to_owned(),
            "core".to_owned(),
            "--out".to_owned(),
            out.to_string_lossy().into_owned(),
            "--".to_owned(),
            script.to_string_lossy().into_owned(),
            "demo".to_owned(),
            "t:ok".to_owned(),
        ]
    };
    let env = [("CI_NODE_TOTAL", "2"), ("CI_NODE_INDEX", "1")];
    let shared = args("fast");
    let shared: Vec<&str> = shared.iter().map(String::as_str).collect();
    assert_refused(&fx.pipeline_env(&shared, &env), "parallel nodes");
    let own = args("fast-1");
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    assert_success(&fx.pipeline_env(&own, &env));
}

#[test]
fn record_refuses_output_whose_counts_disagree_with_libtest() {
    let fx = Fixture::new();
    let script = fx.dir.path().join("liar.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '     Running unittests src/lib.rs (target/debug/deps/x-01)' >&2\necho 'running 2 tests'\necho 'test a ... ok'\necho 'test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out'\n",
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = fx.out("x.json");
    let output = fx.pipeline(&[
        "receipt",
        "record",
        "--lane",
        "x",
        "--fingerprint-paths",
        "core",
        "--out",
        &out.to_string_lossy(),
        "--",
        &script.to_string_lossy(),
    ]);
    assert_refused(&output, "libtest's summary says");
    assert!(!out.exists());
}

#[test]
fn record_refuses_a_scope_path_missing_from_the_tree() {
    let fx = Fixture::new();
    let (_, output) = fx.record_with("core", "nowhere", &[], "demo", &["t:ok"]);
    assert_refused(&output, "is not in the tree");
}

/// A real `cargo test` run of a tiny crate: IDs, outcomes and counts from libtest itself.
#[test]
fn record_a_real_cargo_test_run() {
    let fx = Fixture::new();
    fx.write(
        "tiny/Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    );
    fx.write(
        "tiny/src/lib.rs",
        "#[cfg(test)]\nmod tests {\n    #[test]\n    fn one() {}\n    #[test]\n    fn two() {}\n    #[test]\n    #[ignore]\n    fn slow() {}\n}\n",
    );
    fx.write("tiny/tests/outer.rs", "#[test]\nfn outer() {}\n");
    fx.write(".gitignore", "data/\ntiny/Cargo.lock\n");
    fx.commit("tiny crate");
    let target = fx.dir.path().join("target");
    let out = fx.out("tiny.json");
    let output = fx.pipeline_env(
        &[
            "receipt",
            "record",
            "--lane",
            "tiny",
            "--fingerprint-paths",
            "tiny",
            "--out",
            &out.to_string_lossy(),
            "--",
            "cargo",
            "test",
            "--offline",
            "--manifest-path",
            "tiny/Cargo.toml",
        ],
        &[("CARGO_TARGET_DIR", &target.to_string_lossy())],
    );
    assert_success(&output);
    let receipt = read_json(&out);
    let ids: Vec<&str> = receipt["shardlift"]["tests"]
        .as_object()
        .expect("tests")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        ids,
        vec![
            "outer/tests/outer.rs::outer",
            "tiny/src/lib.rs::tests::one",
            "tiny/src/lib.rs::tests::slow",
            "tiny/src/lib.rs::tests::two",
        ]
    );
    let counts = &shard(&receipt, "tiny").expect("tiny")["counts"];
    assert_eq!(
        *counts,
        serde_json::json!({"passed": 3, "failed": 0, "ignored": 1})
    );
    assert_eq!(receipt["shardlift"]["dirty"], false);
}
