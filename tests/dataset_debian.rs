//! The real Fashion-MNIST files from Debian's `dataset-fashion-mnist` package
//! (`apt-get install dataset-fashion-mnist`; CI installs it): fetch, load and the CLI.
#[path = "fixtures/dataset/support.rs"]
mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use shardlift::dataset::{
    ensure_and_load, fetch, load, DatasetError, FetchOptions, Resource, SourceKind,
    DEBIAN_DIRECTORY, FASHION_MNIST,
};
use support::{snapshot, HttpServer};

fn debian_directory() -> PathBuf {
    let directory = PathBuf::from(DEBIAN_DIRECTORY);
    assert!(
        directory
            .join(Resource::TrainImages.gzip_file_name())
            .is_file(),
        "{DEBIAN_DIRECTORY} is missing: run `apt-get install dataset-fashion-mnist`"
    );
    directory
}

fn class_counts(labels: &[u8]) -> [usize; 10] {
    let mut counts = [0; 10];
    for &label in labels {
        counts[usize::from(label)] += 1;
    }
    counts
}

#[test]
fn real_fetch_from_debian_directory_then_load_checks_counts() {
    let source = debian_directory();
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");

    let mut options = FetchOptions::new(&cache);
    options.source_directory = Some(source);
    let report = fetch(&options).expect("fetch from Debian's files");
    assert_eq!(report.resources.len(), 4);
    for (entry, pin) in report.resources.iter().zip(&FASHION_MNIST.resources) {
        assert_eq!(entry.source, SourceKind::Local);
        assert_eq!(entry.name, pin.name);
        assert_eq!(entry.payload_sha256, pin.payload.sha256);
        assert_eq!(entry.bytes, pin.payload.bytes);
        let installed = cache.join("fashion-mnist-v1").join(pin.name);
        assert_eq!(
            fs::metadata(&installed).expect("installed").len(),
            pin.payload.bytes
        );
    }

    let data = load(&cache).expect("load");
    assert_eq!(data.train.count, 60_000);
    assert_eq!(data.test.count, 10_000);
    assert_eq!(data.train.images.len(), 60_000 * 784);
    assert_eq!(data.test.images.len(), 10_000 * 784);
    assert_eq!(data.train.labels.len(), 60_000);
    assert_eq!(class_counts(&data.train.labels), [6_000; 10]);
    assert_eq!(class_counts(&data.test.labels), [1_000; 10]);
    assert_eq!(data.test.image(9_999).len(), 784);
    assert!(data.train.image(0).iter().any(|&p| p != 0));

    // A second fetch keeps everything (even with the source directory gone).
    let before = snapshot(&cache);
    let mut options = FetchOptions::new(&cache);
    options.source_directory = Some(temp.path().join("no-such-directory"));
    let again = fetch(&options).expect("cached fetch");
    assert!(again
        .resources
        .iter()
        .all(|r| r.source == SourceKind::Cached));
    assert_eq!(snapshot(&cache), before);
    let again = ensure_and_load(&cache, None).expect("ensure and load");
    assert_eq!(again, data);
}

#[test]
fn load_never_returns_bytes_that_differ_from_the_pins() {
    let source = debian_directory();
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");
    // Only the small label files matter here; install the real set once.
    ensure_and_load(&cache, Some(&source)).expect("ensure and load");
    let labels = cache.join("fashion-mnist-v1/t10k-labels-idx1-ubyte");
    let mut bytes = fs::read(&labels).expect("read");
    // Swap two labels: still a valid IDX file, but not the pinned one.
    bytes.swap(8, 9);
    assert_ne!(bytes[8], bytes[9]);
    fs::write(&labels, &bytes).expect("write");
    match load(&cache) {
        Err(DatasetError::CachedFileCorrupt { name, .. }) => {
            assert_eq!(name, "t10k-labels-idx1-ubyte")
        }
        other => panic!("expected CachedFileCorrupt, got {:?}", other.map(|_| ())),
    }
}

fn shardlift() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shardlift"))
}

#[test]
fn cli_fetch_with_base_url_override_falls_back_to_debian_and_prints_json() {
    debian_directory();
    let server = HttpServer::start(Default::default()); // 404 for every file
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");
    let output = shardlift()
        .args(["dataset", "fetch", "--json", "--cache-directory"])
        .arg(&cache)
        .env("SHARDLIFT_DATASET_BASE_URL", server.base_url())
        .output()
        .expect("run shardlift");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    assert_eq!(
        server.requests(),
        Resource::ALL
            .iter()
            .map(|r| format!("/fashion/{}.gz", r.file_name()))
            .collect::<Vec<_>>()
    );
    assert!(
        stderr.contains("download failed (HTTP 404); using"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["dataset"], "fashion-mnist-v1");
    let resources = report["resources"].as_array().expect("resources");
    assert_eq!(resources.len(), 4);
    for (entry, pin) in resources.iter().zip(&FASHION_MNIST.resources) {
        assert_eq!(entry["name"], pin.name);
        assert_eq!(entry["source"], "local");
        assert_eq!(entry["bytes"], pin.payload.bytes);
        assert_eq!(entry["payload_sha256"], pin.payload.sha256.to_hex());
    }

    // Second run: everything cached, no request.
    let output = shardlift()
        .args(["dataset", "fetch", "--json", "--cache-directory"])
        .arg(&cache)
        .env("SHARDLIFT_DATASET_BASE_URL", server.base_url())
        .output()
        .expect("run shardlift");
    assert!(output.status.success());
    assert_eq!(server.requests().len(), 4);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(report["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .all(|r| r["source"] == "cached"));
}

#[test]
fn cli_fetch_refuses_a_world_writable_cache_and_changes_nothing() {
    let temp = tempfile::tempdir().expect("tempdir");
    let cache = temp.path().join("cache");
    fs::create_dir(&cache).expect("mkdir");
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).expect("chmod");
    let before = snapshot(&cache);
    let output = shardlift()
        .args(["dataset", "fetch", "--cache-directory"])
        .arg(&cache)
        .arg("--source-directory")
        .arg(DEBIAN_DIRECTORY)
        .output()
        .expect("run shardlift");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("chmod go-w"), "{stderr}");
    assert!(output.stdout.is_empty());
    assert_eq!(snapshot(&cache), before);
}

#[test]
fn cli_fetch_help_and_usage() {
    let output = shardlift()
        .args(["dataset", "fetch", "--help"])
        .output()
        .expect("run shardlift");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "--cache-directory",
        "--source-directory",
        "--json",
        "SHARDLIFT_DATASET_BASE_URL",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    let output = shardlift()
        .args(["dataset", "fetch"])
        .output()
        .expect("run shardlift");
    assert_eq!(
        output.status.code(),
        Some(2),
        "missing --cache-directory is a usage error"
    );
}
