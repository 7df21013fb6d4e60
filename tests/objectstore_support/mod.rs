//! Helpers of the objectstore lane (`tests/objectstore_*.rs`): the Garage cluster that
//! `ci/test objectstore` starts with `ci/garage start` and describes in `AWS_*`,
//! `SHARDLIFT_TEST_BUCKET` and `SHARDLIFT_GARAGE_DIR`. Without them the tests FAIL.
#![allow(dead_code)]
use std::path::PathBuf;
use std::process::Command;

use shardlift::objstore::{ObjStore, ObjStoreOptions};

/// The variables the lane exports; a test that runs without one fails with this message.
pub const REQUIRED: [&str; 5] = [
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "SHARDLIFT_TEST_BUCKET",
    "SHARDLIFT_GARAGE_DIR",
];

/// The value of a required variable, or a panic saying how to run the lane.
pub fn required(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{name} is not set: the objectstore tests run against a real Garage cluster; \
             run them with `ci/test objectstore` (it installs and starts Garage with ci/garage \
             and exports AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, \
             AWS_SECRET_ACCESS_KEY, SHARDLIFT_TEST_BUCKET and SHARDLIFT_GARAGE_DIR)"
        ),
    }
}

/// Checks every required variable (fails naming the first one missing).
pub fn require_cluster() {
    for name in REQUIRED {
        required(name);
    }
}

/// A fresh store location in the test bucket, unique to this test and run.
pub fn fresh_url(test: &str) -> String {
    require_cluster();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "s3://{}/{test}-{}-{nanos}",
        required("SHARDLIFT_TEST_BUCKET"),
        std::process::id()
    )
}

/// Short bounds for the fault tests (a quorum loss must fail within seconds).
pub fn short_options() -> ObjStoreOptions {
    ObjStoreOptions {
        connect_timeout_ms: 2_000,
        request_timeout_ms: 5_000,
        max_retries: 2,
        retry_timeout_ms: 5_000,
        operation_timeout_ms: 30_000,
    }
}

/// Opens `url` (probing conditional create when `probe`).
pub fn open(url: &str, probe: bool) -> ObjStore {
    ObjStore::open(url, ObjStoreOptions::default(), probe).expect("open the object store")
}

/// The `shardlift` binary under test.
pub fn shardlift_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shardlift"))
}

/// Runs `shardlift ARGS` as a fresh process; returns (success, stdout JSON or Null, stderr).
pub fn shardlift_json(args: &[&str]) -> (bool, serde_json::Value, String) {
    let output = Command::new(shardlift_exe())
        .args(args)
        .output()
        .expect("run shardlift");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let value = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (
        output.status.success(),
        value,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `ci/garage node DIR stop|start N` on the lane's cluster; panics when it fails.
pub fn garage_node(action: &str, node: u32) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/garage");
    let dir = required("SHARDLIFT_GARAGE_DIR");
    let output = Command::new(&script)
        .args(["node", &dir, action, &node.to_string()])
        .output()
        .expect("run ci/garage");
    assert!(
        output.status.success(),
        "ci/garage node {dir} {action} {node} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits (bounded, in `ci/garage health`) until every running node sees all three: a
/// fault test starts from a whole cluster.
pub fn garage_healthy() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/garage");
    let dir = required("SHARDLIFT_GARAGE_DIR");
    let output = Command::new(&script)
        .args(["health", &dir])
        .output()
        .expect("run ci/garage");
    assert!(
        output.status.success(),
        "ci/garage health {dir} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Restarts the nodes it names when dropped (a failed test must not leave the cluster
/// short of nodes for the next one).
pub struct RestartOnDrop(pub Vec<u32>);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        for &node in &self.0 {
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/garage");
            if let Ok(dir) = std::env::var("SHARDLIFT_GARAGE_DIR") {
                let _ = Command::new(&script)
                    .args(["node", &dir, "start", &node.to_string()])
                    .output();
            }
        }
    }
}
