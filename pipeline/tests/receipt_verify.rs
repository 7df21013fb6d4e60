//! `pipeline receipt verify`: one test per policy rule, and signatures that interoperate
//! with `ssh-keygen -Y verify`.
mod receipt_support;

use std::path::Path;
use std::process::{Command, Stdio};

use receipt_support::*;
use serde_json::json;

fn verify(
    fx: &Fixture,
    receipt: &Path,
    policy: &Path,
    allowed: Option<&Path>,
) -> std::process::Output {
    verify_receipt(fx, receipt, policy, allowed, false)
}

#[test]
fn carried_shards_are_refused_unless_allowed() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    let strict = policy(&fx, "strict.json", json!({}));
    assert_refused(&verify(&fx, &merged, &strict, None), "carried forward");
    assert_refused(
        &verify_receipt(&fx, &merged, &strict, None, true),
        "carried forward",
    );
    let lenient = policy(&fx, "lenient.json", json!({"allow_carried": true}));
    assert_success(&verify_receipt(&fx, &merged, &lenient, None, true));
}

#[test]
fn carried_shards_older_than_the_limit_are_refused() {
    let fx = Fixture::new();
    let merged = with_carried(&fx);
    let limited = policy(
        &fx,
        "limited.json",
        json!({"allow_carried": true, "carried_max_age_days": 7}),
    );
    assert_success(&verify_receipt(&fx, &merged, &limited, None, true));
    rewrite(&merged, |v| {
        for shard in v["shardlift"]["shards"].as_array_mut().expect("shards") {
            if shard["name"] == "core" {
                shard["finished"] = json!("2020-01-01T00:00:00Z");
            }
        }
    });
    assert_refused(
        &verify_receipt(&fx, &merged, &limited, None, true),
        "days ago",
    );
}

#[test]
fn required_shard_fingerprints_pin_the_shard_set() {
    let fx = Fixture::new();
    let core = fx.record("core", "core", "alpha", &["a:ok"]);
    let receipt = read_json(&core);
    let fingerprint = shard(&receipt, "core").expect("core")["scope_fingerprint"].clone();
    let exact = policy(
        &fx,
        "exact.json",
        json!({"required_shard_fingerprints": {"core": fingerprint}}),
    );
    assert_success(&verify(&fx, &core, &exact, None));
    let more = policy(
        &fx,
        "more.json",
        json!({"required_shard_fingerprints": {"core": fingerprint, "ml": fingerprint}}),
    );
    assert_refused(&verify(&fx, &core, &more, None), "not the required set");
}

#[test]
fn required_shard_fingerprints_pin_each_declared_scope() {
    let fx = Fixture::new();
    // The same lane recorded with a narrower scope than the policy pins.
    let (wide, output) = fx.record_with(
        "core",
        "core",
        &["--fingerprint-extra-paths", "data/extra.txt"],
        "alpha",
        &["a:ok"],
    );
    assert_success(&output);
    let pinned = shard(&read_json(&wide), "core").expect("core")["scope_fingerprint"].clone();
    let pin = policy(
        &fx,
        "pin.json",
        json!({"required_shard_fingerprints": {"core": pinned}}),
    );
    assert_success(&verify(&fx, &wide, &pin, None));
    let (narrow, output) = fx.record_with(
        "core",
        "core",
        &["--fingerprint-exclude-paths", "core/b.rs"],
        "alpha",
        &["a:ok"],
    );
    assert_success(&output);
    assert_refused(&verify(&fx, &narrow, &pin, None), "declares scope");
}

#[test]
fn dirty_shards_are_refused_unless_allowed() {
    let fx = Fixture::new();
    fx.write("README", "uncommitted\n");
    let dirty = fx.record("core", "core", "alpha", &["a:ok"]);
    let strict = policy(&fx, "strict.json", json!({}));
    assert_refused(&verify(&fx, &dirty, &strict, None), "dirty tree");
    let lenient = policy(&fx, "lenient.json", json!({"allow_dirty": true}));
    assert_success(&verify(&fx, &dirty, &lenient, None));
}

#[test]
fn a_declared_scope_edited_after_recording_is_refused() {
    let fx = Fixture::new();
    let core = fx.record("core", "core", "alpha", &["a:ok"]);
    rewrite(&core, |v| {
        v["shardlift"]["shards"][0]["scope"]["paths"] = json!(["core", "other"])
    });
    let open = policy(&fx, "open.json", json!({}));
    assert_refused(
        &verify(&fx, &core, &open, None),
        "scope fingerprint does not match",
    );
}

fn ssh_keygen_verify(allowed: &Path, principal: &str, namespace: &str, receipt: &Path) -> bool {
    let sig = format!("{}.sig", receipt.display());
    let status = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(allowed)
        .args(["-I", principal, "-n", namespace, "-s", &sig])
        .stdin(std::fs::File::open(receipt).expect("open receipt"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    status.success()
}

#[test]
fn signed_receipt_verifies_with_ssh_keygen_and_with_pipeline() {
    let fx = Fixture::new();
    let (key, allowed) = fx.keypair("ci", "ci@shardlift");
    let (receipt, output) = fx.record_with(
        "core",
        "core",
        &["--sign-key", &key.to_string_lossy()],
        "alpha",
        &["a:ok"],
    );
    assert_success(&output);
    assert!(ssh_keygen_verify(
        &allowed,
        "ci@shardlift",
        "shardlift-receipt-v1",
        &receipt
    ));
    let signed = policy(&fx, "signed.json", json!({"require_signature": true}));
    let output = verify(&fx, &receipt, &signed, Some(&allowed));
    assert_success(&output);
    assert!(String::from_utf8_lossy(&output.stdout).contains("signed by ci@shardlift"));
    // Required but not checkable: refused.
    assert_refused(
        &verify(&fx, &receipt, &signed, None),
        "requires a signature",
    );
}

#[test]
fn tampered_receipt_is_rejected() {
    let fx = Fixture::new();
    let (key, allowed) = fx.keypair("ci", "ci@shardlift");
    let (receipt, output) = fx.record_with(
        "core",
        "core",
        &["--sign-key", &key.to_string_lossy()],
        "alpha",
        &["a:ok"],
    );
    assert_success(&output);
    rewrite(&receipt, |v| v["shardlift"]["mode"] = json!("tampered"));
    assert!(!ssh_keygen_verify(
        &allowed,
        "ci@shardlift",
        "shardlift-receipt-v1",
        &receipt
    ));
    let open = policy(&fx, "open.json", json!({}));
    assert_refused(
        &verify(&fx, &receipt, &open, Some(&allowed)),
        "does not match the message",
    );
}

#[test]
fn wrong_namespace_signature_is_rejected() {
    let fx = Fixture::new();
    let (key, allowed) = fx.keypair("ci", "ci@shardlift");
    let receipt = fx.record("core", "core", "alpha", &["a:ok"]);
    // Signed by the allowed key, but for git's namespace.
    let status = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-f"])
        .arg(&key)
        .args(["-n", "git"])
        .arg(&receipt)
        .status()
        .expect("ssh-keygen -Y sign");
    assert!(status.success());
    let open = policy(&fx, "open.json", json!({}));
    assert_refused(
        &verify(&fx, &receipt, &open, Some(&allowed)),
        "namespace \"git\"",
    );
}

#[test]
fn unsigned_receipt_is_rejected_when_signers_are_given() {
    let fx = Fixture::new();
    let (_, allowed) = fx.keypair("ci", "ci@shardlift");
    let receipt = fx.record("core", "core", "alpha", &["a:ok"]);
    let open = policy(&fx, "open.json", json!({}));
    assert_refused(&verify(&fx, &receipt, &open, Some(&allowed)), "unsigned");
}

#[test]
fn a_policy_with_unknown_fields_is_refused() {
    let fx = Fixture::new();
    let receipt = fx.record("core", "core", "alpha", &["a:ok"]);
    let typo = policy(&fx, "typo.json", json!({"allow_carryed": true}));
    assert_refused(&verify(&fx, &receipt, &typo, None), "unknown field");
}
