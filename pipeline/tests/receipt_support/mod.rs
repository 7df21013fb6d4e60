//! Shared fixtures for the receipt tests: a throwaway git repository, a fake lane that
//! prints libtest output, and helpers to run `pipeline` and rewrite receipts.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub struct Fixture {
    pub dir: tempfile::TempDir,
}

const LANE_SCRIPT: &str = r#"#!/bin/sh
# usage: lane.sh STEM NAME:OUTCOME...   (prints one libtest block for test binary STEM)
stem=$1; shift
echo "     Running unittests src/lib.rs (target/debug/deps/$stem-0123abcd)" >&2
echo ""
echo "running $# tests"
p=0; f=0; i=0
for t in "$@"; do
  name=${t%:*}; o=${t##*:}
  case $o in ok) p=$((p+1));; FAILED) f=$((f+1));; ignored) i=$((i+1));; esac
  echo "test $name ... $o"
done
echo ""
r=ok; [ $f -gt 0 ] && r=FAILED
echo "test result: $r. $p passed; $f failed; $i ignored; 0 measured; 0 filtered out; finished in 0.00s"
[ $f -eq 0 ]
"#;

impl Fixture {
    /// A repository with `core/{a,b}.rs`, `other/c.rs`, `README`, an ignored `data/extra.txt`,
    /// one commit; and `lane.sh` and `out/` beside it.
    pub fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        std::fs::create_dir_all(fixture.repo()).expect("mkdir repo");
        std::fs::create_dir_all(fixture.out_dir()).expect("mkdir out");
        fixture.git(&["init", "-q", "-b", "main"]);
        fixture.git(&["config", "user.email", "t@example.invalid"]);
        fixture.git(&["config", "user.name", "t"]);
        fixture.git(&["config", "commit.gpgsign", "false"]);
        fixture.write("core/a.rs", "a1\n");
        fixture.write("core/b.rs", "b1\n");
        fixture.write("other/c.rs", "c1\n");
        fixture.write("README", "readme\n");
        fixture.write(".gitignore", "data/\n");
        fixture.write("data/extra.txt", "extra1\n");
        fixture.commit("initial");
        let lane = fixture.dir.path().join("lane.sh");
        std::fs::write(&lane, LANE_SCRIPT).expect("write lane.sh");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&lane, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        fixture
    }

    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    pub fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    pub fn out(&self, name: &str) -> PathBuf {
        self.out_dir().join(name)
    }

    pub fn lane_script(&self) -> PathBuf {
        self.dir.path().join("lane.sh")
    }

    pub fn write(&self, path: &str, text: &str) {
        let full = self.repo().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(full, text).expect("write");
    }

    pub fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args(args)
            .current_dir(self.repo())
            .output()
            .expect("run git");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.head()
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// Runs `pipeline` in the repository.
    pub fn pipeline(&self, args: &[&str]) -> Output {
        self.pipeline_env(args, &[])
    }

    pub fn pipeline_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pipeline"));
        command.args(args).current_dir(self.repo());
        for name in [
            "CI_NODE_TOTAL",
            "CIRCLE_NODE_TOTAL",
            "BUILDKITE_PARALLEL_JOB_COUNT",
        ] {
            command.env_remove(name);
        }
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().expect("run pipeline")
    }

    /// Records lane `lane` over `paths` (comma list) with the fake lane printing `tests`
    /// for test binary `stem`; returns the receipt path and the command's output.
    pub fn record_with(
        &self,
        lane: &str,
        paths: &str,
        extra: &[&str],
        stem: &str,
        tests: &[&str],
    ) -> (PathBuf, Output) {
        let out = self.out(&format!("{lane}.json"));
        let out_text = out.to_string_lossy().into_owned();
        let script = self.lane_script().to_string_lossy().into_owned();
        let mut args = vec![
            "receipt",
            "record",
            "--lane",
            lane,
            "--fingerprint-paths",
            paths,
            "--out",
            &out_text,
        ];
        args.extend_from_slice(extra);
        args.push("--");
        args.push(&script);
        args.push(stem);
        args.extend_from_slice(tests);
        let output = self.pipeline(&args);
        (out, output)
    }

    /// Records and requires success.
    pub fn record(&self, lane: &str, paths: &str, stem: &str, tests: &[&str]) -> PathBuf {
        let (out, output) = self.record_with(lane, paths, &[], stem, tests);
        assert_success(&output);
        out
    }

    /// Merges `inputs` into `out`, with extra arguments.
    pub fn merge(&self, inputs: &[&Path], out: &str, extra: &[&str]) -> (PathBuf, Output) {
        let out = self.out(out);
        let mut args: Vec<String> = vec!["receipt".into(), "merge".into()];
        args.extend(inputs.iter().map(|p| p.to_string_lossy().into_owned()));
        args.push("--out".into());
        args.push(out.to_string_lossy().into_owned());
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self.pipeline(&refs);
        (out, output)
    }

    /// An ed25519 key made by ssh-keygen and an allowed_signers file naming it.
    pub fn keypair(&self, name: &str, principal: &str) -> (PathBuf, PathBuf) {
        let key = self.dir.path().join(name);
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&key)
            .status()
            .expect("run ssh-keygen");
        assert!(status.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).expect("read .pub");
        let allowed = self.dir.path().join(format!("{name}.allowed_signers"));
        std::fs::write(&allowed, format!("{principal} {}", public.trim())).expect("write");
        (key, allowed)
    }
}

pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "expected success, got {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Requires failure (exit 1) with `needle` in stderr.
pub fn assert_refused(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "expected refusal, got {:?}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stderr.contains(needle),
        "expected {needle:?} in stderr:\n{stderr}"
    );
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read receipt")).expect("receipt JSON")
}

/// Rewrites a receipt through `edit`, keeping it canonical JSON.
pub fn rewrite(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value = read_json(path);
    edit(&mut value);
    let bytes = serde_json_canonicalizer::to_vec(&value).expect("canonicalize");
    std::fs::write(path, bytes).expect("write receipt");
}

/// The shard named `name` in a receipt.
pub fn shard<'a>(receipt: &'a Value, name: &str) -> Option<&'a Value> {
    receipt["shardlift"]["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .find(|s| s["name"] == name)
}

pub fn shard_names(receipt: &Value) -> Vec<String> {
    receipt["shardlift"]["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_owned())
        .collect()
}

/// Writes a policy file.
pub fn policy(fx: &Fixture, name: &str, value: serde_json::Value) -> PathBuf {
    let path = fx.out(name);
    std::fs::write(&path, value.to_string()).expect("write policy");
    path
}

/// `receipt verify RECEIPT --policy POLICY`, with `--allowed-signers` when given and
/// `--repository` (the fixture's) when `repository`.
pub fn verify_receipt(
    fx: &Fixture,
    receipt: &Path,
    policy: &Path,
    allowed: Option<&Path>,
    repository: bool,
) -> Output {
    let mut args = vec![
        "receipt".to_owned(),
        "verify".to_owned(),
        receipt.to_string_lossy().into_owned(),
        "--policy".to_owned(),
        policy.to_string_lossy().into_owned(),
    ];
    if let Some(allowed) = allowed {
        args.push("--allowed-signers".to_owned());
        args.push(allowed.to_string_lossy().into_owned());
    }
    if repository {
        args.push("--repository".to_owned());
        args.push(fx.repo().to_string_lossy().into_owned());
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    fx.pipeline(&refs)
}

/// A merged receipt at HEAD with a fresh `other` and `core` carried from an older commit.
pub fn with_carried(fx: &Fixture) -> PathBuf {
    let core = fx.record("core", "core", "alpha", &["a:ok"]);
    let old = fx.out("old.json");
    std::fs::rename(&core, &old).expect("move");
    fx.write("other/c.rs", "c2\n");
    fx.commit("change other");
    let fresh = fx.record("other", "other", "beta", &["b:ok"]);
    let (out, output) = fx.merge(
        &[&fresh],
        "merged.json",
        &[
            "--carry-from",
            &old.to_string_lossy(),
            "--repo",
            &fx.repo().to_string_lossy(),
        ],
    );
    assert_success(&output);
    assert!(shard(&read_json(&out), "core").is_some_and(|s| !s["carried"].is_null()));
    out
}

/// Forges the receipt at `path` through `edit` and keeps it internally consistent: every
/// shard's manifest digest and scope fingerprint are recomputed and the Statement (subject
/// and predicate) is rebuilt from the edited extension block, as the recorder would.
pub fn forge(path: &Path, edit: impl FnOnce(&mut pipeline::receipt::schema::Extension)) {
    use pipeline::receipt::schema::Receipt;
    let bytes = std::fs::read(path).expect("read receipt");
    let mut extension = Receipt::decode(&bytes).expect("decode receipt").shardlift;
    edit(&mut extension);
    for shard in &mut extension.shards {
        shard.manifest_digest = shard.manifest.digest();
        shard.scope_fingerprint = shard.scope.fingerprint();
    }
    let forged = Receipt::assemble(extension)
        .encode()
        .expect("encode receipt");
    std::fs::write(path, forged).expect("write receipt");
}

/// The shard named `name` of an extension block, for editing.
pub fn shard_mut<'a>(
    extension: &'a mut pipeline::receipt::schema::Extension,
    name: &str,
) -> &'a mut pipeline::receipt::schema::Shard {
    extension
        .shards
        .iter_mut()
        .find(|s| s.name == name)
        .expect("shard")
}
