//! The dataset fetch path against a real loopback HTTP/1.1 server with small synthetic
//! IDX fixtures and injected pins: success, caching, and one test per error kind, each
//! checking that the cache directory is left exactly as it was.
#[path = "fixtures/dataset/support.rs"]
mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use shardlift::core::digest::Digest;
use shardlift::dataset::{
    ensure_and_load_with, fetch_with_pins, load_with_pins, DatasetError, PinTable, Resource,
    SourceKind,
};
use support::{closed_port_url, options, populated_cache, snapshot, HttpServer, Reply, Synthetic};

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Runs a fetch expected to fail and checks that the cache is unchanged afterwards.
fn fetch_fails(
    cache: &Path,
    base_url: &str,
    pins: &PinTable,
    tweak: impl FnOnce(&mut shardlift::dataset::FetchOptions),
) -> DatasetError {
    let before = snapshot(cache);
    let mut options = options(cache, base_url);
    tweak(&mut options);
    let error = match fetch_with_pins(&options, pins) {
        Ok(report) => panic!("fetch unexpectedly succeeded: {report:?}"),
        Err(error) => error,
    };
    assert_eq!(
        snapshot(cache),
        before,
        "the cache changed after a failed fetch ({error})"
    );
    error
}

#[test]
fn download_installs_verified_payloads_then_second_fetch_uses_cache_without_requests() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = temp.path().join("nested/new/cache");

    let report = fetch_with_pins(&options(&cache, &server.base_url()), &pins).expect("fetch");
    assert_eq!(server.requests().len(), 4);
    assert_eq!(report.dataset, "fashion-mnist-v1");
    assert_eq!(report.resources.len(), 4);
    for ((resource, entry), payload) in Resource::ALL
        .iter()
        .zip(&report.resources)
        .zip(&synthetic.payloads)
    {
        assert_eq!(entry.resource, *resource);
        assert_eq!(entry.name, resource.file_name());
        assert_eq!(entry.source, SourceKind::Download);
        assert_eq!(entry.payload_sha256, Digest::of(payload));
        assert_eq!(entry.bytes, payload.len() as u64);
        let installed = cache.join("fashion-mnist-v1").join(resource.file_name());
        assert_eq!(&fs::read(&installed).expect("installed"), payload);
        let mode = fs::metadata(&installed).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    for dir in [
        temp.path().join("nested"),
        temp.path().join("nested/new"),
        cache.clone(),
        cache.join("fashion-mnist-v1"),
    ] {
        let mode = fs::metadata(&dir).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", dir.display());
    }
    // No temporary files are left behind.
    let names: Vec<String> = fs::read_dir(cache.join("fashion-mnist-v1"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");

    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["resources"][0]["source"], "download");

    let before = snapshot(&cache);
    let again = fetch_with_pins(&options(&cache, &server.base_url()), &pins).expect("fetch");
    assert_eq!(
        server.requests().len(),
        4,
        "the second fetch made a request"
    );
    assert!(again
        .resources
        .iter()
        .all(|r| r.source == SourceKind::Cached && r.origin.is_none()));
    assert_eq!(snapshot(&cache), before);

    let loaded = load_with_pins(&cache, &pins).expect("load");
    assert_eq!(loaded.train.count, 3);
    assert_eq!(loaded.test.count, 2);
    assert_eq!(loaded.train.labels, vec![9, 0, 4]);
    assert_eq!(loaded.test.labels, vec![1, 8]);
    assert_eq!(
        loaded.train.image(2),
        &synthetic.payloads[0][16 + 2 * 784..]
    );
    assert_eq!(loaded.test.images.len(), 2 * 784);
}

#[test]
fn gzip_digest_mismatch_is_reported_and_cache_unchanged() {
    let synthetic = Synthetic::new();
    let mut pins = synthetic.pins();
    pins.resources[2].gzip.sha256 = Digest([7; 32]);
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(&error, DatasetError::GzipDigestMismatch { name, .. } if name == "t10k-images-idx3-ubyte"),
        "{error}"
    );
}

#[test]
fn payload_digest_mismatch_is_reported_and_cache_unchanged() {
    let synthetic = Synthetic::new();
    let mut pins = synthetic.pins();
    // Same size, other digest.
    pins.resources[3].payload.sha256 = Digest([9; 32]);
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    match &error {
        DatasetError::PayloadDigestMismatch {
            name,
            expected,
            actual,
            ..
        } => {
            assert_eq!(name, "t10k-labels-idx1-ubyte");
            assert_eq!(*expected, Digest([9; 32]));
            assert_eq!(*actual, Digest::of(&synthetic.payloads[3]));
        }
        other => panic!("unexpected error: {other}"),
    }
}

#[test]
fn truncated_gzip_is_reported_and_cache_unchanged() {
    let mut synthetic = Synthetic::new();
    let index = Synthetic::index(Resource::TrainLabels);
    let full = synthetic.gzips[index].clone();
    synthetic.gzips[index] = full[..full.len() - 6].to_vec();
    // The served (truncated) bytes match the gzip pin, so the gzip check passes and
    // decompression must catch the truncation.
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(&error, DatasetError::TruncatedGzip { name, .. } if name == "train-labels-idx1-ubyte"),
        "{error}"
    );
}

#[test]
fn truncated_gzip_in_source_directory_is_reported_and_cache_unchanged() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let temp = temp();
    let source = temp.path().join("source");
    fs::create_dir(&source).expect("mkdir");
    for (name, gzip) in synthetic.named_gzips() {
        let bytes = if name == "t10k-images-idx3-ubyte" {
            gzip[..gzip.len() / 2].to_vec()
        } else {
            gzip
        };
        fs::write(source.join(format!("{name}.gz")), bytes).expect("write");
    }
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &closed_port_url(), &pins, |o| {
        o.source_directory = Some(source.clone());
    });
    assert!(
        matches!(&error, DatasetError::TruncatedGzip { .. }),
        "{error}"
    );
}

#[test]
fn wrong_idx_magic_is_reported_and_cache_unchanged() {
    let mut synthetic = Synthetic::new();
    let index = Synthetic::index(Resource::TestImages);
    synthetic.payloads[index][3] = 0x02;
    synthetic.gzips[index] = support::gzip(&synthetic.payloads[index]);
    // Pins match the bad file exactly: only the strict IDX parse can reject it.
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(
            &error,
            DatasetError::IdxMagic {
                actual: 0x0802,
                expected: 0x0803,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn label_out_of_range_is_reported_and_cache_unchanged() {
    let mut synthetic = Synthetic::new();
    let index = Synthetic::index(Resource::TestLabels);
    synthetic.payloads[index][9] = 10;
    synthetic.gzips[index] = support::gzip(&synthetic.payloads[index]);
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(
            &error,
            DatasetError::LabelOutOfRange {
                index: 1,
                value: 10,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn http_404_is_reported_and_cache_unchanged() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let mut gzips = synthetic.named_gzips();
    gzips.retain(|(name, _)| name != "train-labels-idx1-ubyte");
    let server = HttpServer::serving(&gzips);
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    match &error {
        DatasetError::HttpStatus { status, url } => {
            assert_eq!(*status, 404);
            assert!(
                url.ends_with("/fashion/train-labels-idx1-ubyte.gz"),
                "{url}"
            );
        }
        other => panic!("unexpected error: {other}"),
    }
}

#[test]
fn connection_failure_is_http_transport_and_cache_unchanged() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &closed_port_url(), &pins, |_| {});
    assert!(
        matches!(&error, DatasetError::HttpTransport { .. }),
        "{error}"
    );
}

#[test]
fn oversized_download_is_refused_and_cache_unchanged() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |o| {
        o.max_download_bytes = 16;
    });
    assert!(
        matches!(&error, DatasetError::DownloadTooLarge { limit: 16, .. }),
        "{error}"
    );
}

#[test]
fn cache_directory_owned_by_another_user_is_refused_before_any_work() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    if let Err(error) = std::os::unix::fs::chown(&cache, Some(65534), Some(65534)) {
        eprintln!("skipping: cannot chown a directory here (not root?): {error}");
        return;
    }
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(
            &error,
            DatasetError::CacheDirectoryOwner { owner: 65534, .. }
        ),
        "{error}"
    );
    assert!(server.requests().is_empty());
    assert!(matches!(
        load_with_pins(&cache, &pins),
        Err(DatasetError::CacheDirectoryOwner { .. })
    ));
}

#[test]
fn group_or_world_writable_cache_directory_is_refused_before_any_work() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).expect("chmod");
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(&error, DatasetError::CacheDirectoryMode { mode: 0o777, .. }),
        "{error}"
    );
    assert!(server.requests().is_empty());

    // The dataset subdirectory is held to the same rule.
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).expect("chmod");
    fs::set_permissions(
        cache.join("fashion-mnist-v1"),
        fs::Permissions::from_mode(0o770),
    )
    .expect("chmod");
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(&error, DatasetError::CacheDirectoryMode { mode: 0o770, .. }),
        "{error}"
    );
    assert!(server.requests().is_empty());
}

#[test]
fn cache_path_that_is_a_file_is_refused() {
    let synthetic = Synthetic::new();
    let temp = temp();
    let cache = temp.path().join("cache");
    fs::write(&cache, b"not a directory").expect("write");
    let error = fetch_fails(&cache, &closed_port_url(), &synthetic.pins(), |_| {});
    assert!(
        matches!(&error, DatasetError::CacheDirectoryNotADirectory { .. }),
        "{error}"
    );
}

#[test]
fn corrupt_cached_file_is_reported_not_deleted_and_nothing_is_downloaded() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = temp.path().join("cache");
    fetch_with_pins(&options(&cache, &server.base_url()), &pins).expect("first fetch");
    let victim = cache.join("fashion-mnist-v1/train-labels-idx1-ubyte");
    let mut bytes = fs::read(&victim).expect("read");
    bytes[8] ^= 1;
    fs::write(&victim, &bytes).expect("write");
    let requests = server.requests().len();

    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    match &error {
        DatasetError::CachedFileCorrupt { name, path, .. } => {
            assert_eq!(name, "train-labels-idx1-ubyte");
            assert_eq!(path, &victim);
            assert!(error.to_string().contains("rm "), "{error}");
        }
        other => panic!("unexpected error: {other}"),
    }
    assert_eq!(fs::read(&victim).expect("still there"), bytes);
    assert_eq!(server.requests().len(), requests);
    assert!(matches!(
        load_with_pins(&cache, &pins),
        Err(DatasetError::CachedFileCorrupt { .. })
    ));
}

#[test]
fn failure_with_a_missing_cache_directory_creates_nothing() {
    let synthetic = Synthetic::new();
    let temp = temp();
    let cache = temp.path().join("a/b/cache");
    let error = fetch_fails(&cache, &closed_port_url(), &synthetic.pins(), |_| {});
    assert!(
        matches!(&error, DatasetError::HttpTransport { .. }),
        "{error}"
    );
    assert!(!temp.path().join("a").exists());
}

#[test]
fn failed_download_falls_back_to_the_system_directory() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::start(Default::default()); // 404 for everything
    let temp = temp();
    let system = temp.path().join("system");
    fs::create_dir(&system).expect("mkdir");
    // The fallback accepts any gzip framing: it is checked on the payload pin only.
    for (index, (name, _)) in synthetic.named_gzips().into_iter().enumerate() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, &synthetic.payloads[index]).expect("gzip");
        fs::write(
            system.join(format!("{name}.gz")),
            encoder.finish().expect("gzip"),
        )
        .expect("write");
    }
    let cache = temp.path().join("cache");
    let mut options = options(&cache, &server.base_url());
    options.system_directory = Some(system.clone());
    let report = fetch_with_pins(&options, &pins).expect("fetch");
    assert_eq!(server.requests().len(), 4);
    assert!(report
        .resources
        .iter()
        .all(|r| r.source == SourceKind::Local));
    assert!(load_with_pins(&cache, &pins).is_ok());

    // Without the files there, the error says how to get the data.
    let empty = temp.path().join("empty");
    fs::create_dir(&empty).expect("mkdir");
    let other_cache = temp.path().join("other-cache");
    let error = fetch_fails(&other_cache, &server.base_url(), &pins, |o| {
        o.system_directory = Some(empty.clone());
    });
    assert!(
        matches!(&error, DatasetError::Unavailable { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("apt-get install dataset-fashion-mnist"),
        "{message}"
    );
    assert!(message.contains("--source-directory"), "{message}");
    assert!(message.contains("404"), "{message}");
}

#[test]
fn after_a_connection_failure_later_downloads_are_not_attempted() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let routes = synthetic
        .named_gzips()
        .into_iter()
        .map(|(name, _)| {
            let hang_up = Reply {
                status: 0,
                body: Vec::new(),
            };
            (format!("/fashion/{name}.gz"), hang_up)
        })
        .collect();
    let server = HttpServer::start(routes);
    let temp = temp();
    let system = temp.path().join("system");
    fs::create_dir(&system).expect("mkdir");
    for (name, gzip) in synthetic.named_gzips() {
        fs::write(system.join(format!("{name}.gz")), gzip).expect("write");
    }
    let cache = temp.path().join("cache");
    let mut options = options(&cache, &server.base_url());
    options.system_directory = Some(system);
    let report = fetch_with_pins(&options, &pins).expect("fetch");
    assert!(report
        .resources
        .iter()
        .all(|r| r.source == SourceKind::Local));
    assert_eq!(server.requests().len(), 1, "{:?}", server.requests());
}

#[test]
fn source_directory_accepts_gzip_or_plain_files_and_nothing_else() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::start(Default::default());
    let temp = temp();
    let source = temp.path().join("source");
    fs::create_dir(&source).expect("mkdir");
    for (index, (name, gzip)) in synthetic.named_gzips().into_iter().enumerate() {
        if index % 2 == 0 {
            fs::write(source.join(format!("{name}.gz")), gzip).expect("write");
        } else {
            fs::write(source.join(&name), &synthetic.payloads[index]).expect("write");
        }
    }
    let cache = temp.path().join("cache");
    let mut options = options(&cache, &server.base_url());
    options.source_directory = Some(source.clone());
    let report = fetch_with_pins(&options, &pins).expect("fetch");
    assert!(report
        .resources
        .iter()
        .all(|r| r.source == SourceKind::Local));
    assert!(
        server.requests().is_empty(),
        "a source directory means no download"
    );

    fs::remove_file(source.join("t10k-labels-idx1-ubyte")).expect("remove");
    let other_cache = temp.path().join("other");
    let error = fetch_fails(&other_cache, &server.base_url(), &pins, |o| {
        o.source_directory = Some(source.clone());
    });
    assert!(
        matches!(&error, DatasetError::SourceFileMissing { name, .. } if name == "t10k-labels-idx1-ubyte"),
        "{error}"
    );
    assert!(server.requests().is_empty());
}

#[test]
fn ensure_and_load_acquires_missing_files_then_loads() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let server = HttpServer::serving(&synthetic.named_gzips());
    let temp = temp();
    let cache = temp.path().join("cache");
    assert!(matches!(
        load_with_pins(&cache, &pins),
        Err(DatasetError::CachedFileMissing { .. })
    ));
    let options = options(&cache, &server.base_url());
    let loaded = ensure_and_load_with(&options, &pins).expect("ensure and load");
    assert_eq!((loaded.train.count, loaded.test.count), (3, 2));
    assert_eq!(server.requests().len(), 4);
    let again = ensure_and_load_with(&options, &pins).expect("ensure and load");
    assert_eq!(again, loaded);
    assert_eq!(server.requests().len(), 4);
}

#[test]
fn served_reply_with_other_status_is_http_status() {
    let synthetic = Synthetic::new();
    let pins = synthetic.pins();
    let routes = synthetic
        .named_gzips()
        .into_iter()
        .map(|(name, body)| (format!("/fashion/{name}.gz"), Reply { status: 500, body }))
        .collect();
    let server = HttpServer::start(routes);
    let temp = temp();
    let cache = populated_cache(temp.path(), &synthetic);
    let error = fetch_fails(&cache, &server.base_url(), &pins, |_| {});
    assert!(
        matches!(&error, DatasetError::HttpStatus { status: 500, .. }),
        "{error}"
    );
}
