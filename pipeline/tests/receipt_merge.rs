//! `pipeline receipt merge`: one test per refusal, the union's rules, signed inputs.
mod receipt_support;

use receipt_support::*;
use serde_json::json;

/// Two lanes recorded at the same commit.
fn two_lanes(fx: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    let a = fx.record("core", "core", "alpha", &["a1:ok", "a2:ignored"]);
    let b = fx.record("other", "other", "beta", &["b1:ok"]);
    (a, b)
}

#[test]
fn merge_forms_the_union() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    let (out, output) = fx.merge(&[&a, &b], "merged.json", &[]);
    assert_success(&output);
    assert!(String::from_utf8_lossy(&output.stdout).contains(": 3 tests"));
    let merged = read_json(&out);
    assert_eq!(shard_names(&merged), vec!["core", "other"]);
    assert_eq!(
        merged["shardlift"]["tests"].as_object().map(|t| t.len()),
        Some(3)
    );
    let inputs = merged["shardlift"]["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 2);
    assert_eq!(inputs[0]["name"], "core.json");
    assert_eq!(
        inputs[0]["counts"],
        json!({"passed": 1, "failed": 0, "ignored": 1})
    );
    assert_eq!(inputs[1]["name"], "other.json");
    assert!(inputs[0]["signer"].is_null());
    assert!(inputs[0]["started"].is_string() && inputs[0]["finished"].is_string());
    assert_eq!(merged["shardlift"]["session"]["outcome"], "PASSED");
    assert_eq!(merged["shardlift"]["dirty"], false);
}

#[test]
fn merge_ors_dirty_spans_times_and_fails_if_any_input_failed() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    rewrite(&a, |v| {
        v["shardlift"]["dirty"] = json!(true);
        v["shardlift"]["shards"][0]["dirty"] = json!(true);
        v["shardlift"]["session"]["started"] = json!("2001-01-01T00:00:00Z");
    });
    rewrite(&b, |v| {
        v["shardlift"]["session"]["outcome"] = json!("FAILED");
        v["shardlift"]["session"]["finished"] = json!("2999-01-01T00:00:00Z");
    });
    let (out, output) = fx.merge(&[&a, &b], "merged.json", &[]);
    assert_success(&output);
    let merged = read_json(&out);
    assert_eq!(merged["shardlift"]["dirty"], true);
    assert_eq!(
        merged["shardlift"]["session"]["started"],
        "2001-01-01T00:00:00Z"
    );
    assert_eq!(
        merged["shardlift"]["session"]["finished"],
        "2999-01-01T00:00:00Z"
    );
    assert_eq!(merged["shardlift"]["session"]["outcome"], "FAILED");
    assert_eq!(merged["predicate"]["result"], "FAILED");
}

#[test]
fn merge_refuses_disagreeing_schema() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    rewrite(&b, |v| v["version"] = json!(2));
    assert_refused(&fx.merge(&[&a, &b], "m.json", &[]).1, "has schema");
}

#[test]
fn merge_refuses_disagreeing_commits() {
    let fx = Fixture::new();
    let a = fx.record("core", "core", "alpha", &["a1:ok"]);
    fx.write("README", "next\n");
    fx.commit("next");
    let b = fx.record("other", "other", "beta", &["b1:ok"]);
    assert_refused(
        &fx.merge(&[&a, &b], "m.json", &[]).1,
        "was recorded at commit",
    );
}

#[test]
fn merge_refuses_disagreeing_global_fingerprints() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    rewrite(&b, |v| v["shardlift"]["tree"] = json!("0".repeat(40)));
    assert_refused(
        &fx.merge(&[&a, &b], "m.json", &[]).1,
        "has global fingerprint",
    );
}

#[test]
fn merge_refuses_disagreeing_modes() {
    let fx = Fixture::new();
    let (a, o1) = fx.record_with("core", "core", &["--mode", "ci"], "alpha", &["a:ok"]);
    assert_success(&o1);
    let (b, o2) = fx.record_with("other", "other", &["--mode", "local"], "beta", &["b:ok"]);
    assert_success(&o2);
    assert_refused(&fx.merge(&[&a, &b], "m.json", &[]).1, "has mode");
}

#[test]
fn merge_refuses_disagreeing_toolchains() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    rewrite(&b, |v| {
        v["shardlift"]["toolchain"]["rustc"] = json!("rustc 0.0.1")
    });
    assert_refused(&fx.merge(&[&a, &b], "m.json", &[]).1, "has toolchain");
}

#[test]
fn merge_refuses_disagreeing_platforms() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    rewrite(&b, |v| {
        v["shardlift"]["platform"] = json!("riscv64gc-unknown-linux-gnu")
    });
    assert_refused(&fx.merge(&[&a, &b], "m.json", &[]).1, "has platform");
}

#[test]
fn merge_refuses_disagreeing_tool_versions() {
    let fx = Fixture::new();
    let (a, b) = two_lanes(&fx);
    rewrite(&b, |v| v["shardlift"]["tool"] = json!("pipeline 9.9.9"));
    assert_refused(&fx.merge(&[&a, &b], "m.json", &[]).1, "was made by");
}

#[test]
fn merge_refuses_duplicate_test_ids() {
    let fx = Fixture::new();
    let a = fx.record("core", "core", "same", &["t:ok"]);
    let b = fx.record("other", "other", "same", &["t:ok"]);
    assert_refused(&fx.merge(&[&a, &b], "m.json", &[]).1, "test ID");
}

#[test]
fn merge_refuses_duplicate_shard_names() {
    let fx = Fixture::new();
    let a = fx.record("core", "core", "alpha", &["a:ok"]);
    let moved = fx.out("core-copy.json");
    std::fs::rename(&a, &moved).expect("move");
    let b = fx.record("core", "other", "beta", &["b:ok"]);
    assert_refused(&fx.merge(&[&moved, &b], "m.json", &[]).1, "shard name");
}

#[test]
fn merge_verify_inputs_requires_a_valid_signature_on_every_input() {
    let fx = Fixture::new();
    let (key, allowed) = fx.keypair("ci", "ci@shardlift");
    let (a, b) = two_lanes(&fx);
    let allowed_text = allowed.to_string_lossy().into_owned();
    let verify = [
        "--verify-inputs",
        "--allowed-signers",
        allowed_text.as_str(),
    ];
    let sign = |path: &std::path::Path| {
        assert_success(&fx.pipeline(&[
            "receipt",
            "sign",
            &path.to_string_lossy(),
            "--key",
            &key.to_string_lossy(),
        ]))
    };
    // Unsigned input refused.
    sign(&a);
    assert_refused(&fx.merge(&[&a, &b], "m.json", &verify).1, "unsigned");
    // Signed by a key that is not allowed: refused.
    let (stranger, _) = fx.keypair("stranger", "x");
    assert_success(&fx.pipeline(&[
        "receipt",
        "sign",
        &b.to_string_lossy(),
        "--key",
        &stranger.to_string_lossy(),
    ]));
    assert_refused(&fx.merge(&[&a, &b], "m.json", &verify).1, "is not listed");
    // Both signed by the allowed key: merged, signers recorded.
    sign(&b);
    let (out, output) = fx.merge(&[&a, &b], "m.json", &verify);
    assert_success(&output);
    let merged = read_json(&out);
    for input in merged["shardlift"]["inputs"].as_array().expect("inputs") {
        assert_eq!(input["signer"], "ci@shardlift");
    }
    // A signed input altered afterwards: refused.
    rewrite(&a, |v| v["shardlift"]["mode"] = json!("tampered"));
    rewrite(&b, |v| v["shardlift"]["mode"] = json!("tampered"));
    assert_refused(&fx.merge(&[&a, &b], "m.json", &verify).1, "does not match");
}
