//! Acquiring the pinned payloads into the cache.
//!
//! Order of sources for a resource that is not already cached and verified:
//!
//! 1. with `source_directory`: only that directory (`<name>.gz`, else `<name>`);
//! 2. otherwise the upstream download (`<base URL>/<name>.gz`), then Debian's
//!    `/usr/share/datasets/fashion-mnist/<name>.gz`, then an error saying how to get
//!    the data.
//!
//! Nothing is written until every missing resource has been acquired and verified; then
//! all of them are installed at once (see [`crate::dataset::cache`]).
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::core::digest::Digest;
use crate::dataset::cache::{read_optional, Cache};
use crate::dataset::error::DatasetError;
use crate::dataset::pins::{PinTable, Resource, ResourcePin, FASHION_MNIST};
use crate::dataset::verify::{gunzip, verify_gzip, verify_payload};
use crate::durable::DurableError;

/// The GitHub repository that publishes Fashion-MNIST.
pub const UPSTREAM_REPOSITORY: &str = "zalandoresearch/fashion-mnist";
/// The branch and folder of the `.gz` files in [`UPSTREAM_REPOSITORY`].
pub const UPSTREAM_FOLDER: &str = "master/data/fashion";
/// Environment variable that overrides the download base URL.
pub const BASE_URL_VARIABLE: &str = "SHARDLIFT_DATASET_BASE_URL";
/// Where Debian's `dataset-fashion-mnist` package installs the `.gz` files.
pub const DEBIAN_DIRECTORY: &str = "/usr/share/datasets/fashion-mnist";

/// The default base URL: raw file downloads from the upstream repository.
pub fn default_base_url() -> String {
    format!("https://raw.githubusercontent.com/{UPSTREAM_REPOSITORY}/{UPSTREAM_FOLDER}")
}

/// How to fetch.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// The cache directory; payloads live in `<it>/fashion-mnist-v1/`.
    pub cache_directory: PathBuf,
    /// When set, the only source: a directory with `<name>.gz` or `<name>` files.
    pub source_directory: Option<PathBuf>,
    /// Download base URL; `None` means `$SHARDLIFT_DATASET_BASE_URL`, else
    /// [`default_base_url`].
    pub base_url: Option<String>,
    /// The local fallback after a failed download (`<name>.gz` files); `None` disables
    /// it. Defaults to [`DEBIAN_DIRECTORY`].
    pub system_directory: Option<PathBuf>,
    /// TCP connect timeout of a download.
    pub connect_timeout_ms: u64,
    /// Timeout of each socket read (and write) during a download.
    pub read_timeout_ms: u64,
    /// The most bytes accepted from one download or one local `.gz` file.
    pub max_download_bytes: u64,
    /// Print one progress line per resource on stderr.
    pub progress: bool,
}

impl FetchOptions {
    /// Defaults: no source directory, base URL from the environment or upstream, Debian
    /// fallback, 30 s timeouts, 64 MiB download cap, progress on.
    pub fn new(cache_directory: impl Into<PathBuf>) -> FetchOptions {
        FetchOptions {
            cache_directory: cache_directory.into(),
            source_directory: None,
            base_url: None,
            system_directory: Some(PathBuf::from(DEBIAN_DIRECTORY)),
            connect_timeout_ms: 30_000,
            read_timeout_ms: 30_000,
            max_download_bytes: 64 * 1024 * 1024,
            progress: true,
        }
    }

    /// The base URL a download will use.
    pub fn effective_base_url(&self) -> String {
        let chosen = match &self.base_url {
            Some(url) => url.clone(),
            None => std::env::var(BASE_URL_VARIABLE)
                .ok()
                .filter(|url| !url.is_empty())
                .unwrap_or_else(default_base_url),
        };
        chosen.trim_end_matches('/').to_owned()
    }
}

/// Where a resource's payload came from in this fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Already in the cache, verified.
    Cached,
    /// Downloaded and verified against both pins.
    Download,
    /// Read from a local directory (`--source-directory` or Debian's) and verified.
    Local,
}

impl SourceKind {
    /// The JSON spelling: `cached`, `download` or `local`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Cached => "cached",
            SourceKind::Download => "download",
            SourceKind::Local => "local",
        }
    }
}

/// One resource's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceReport {
    /// The payload's file name, e.g. `train-images-idx3-ubyte`.
    pub name: String,
    /// Which of the four resources.
    pub resource: Resource,
    /// The pinned SHA-256 of the payload now in the cache.
    pub payload_sha256: Digest,
    /// The pinned payload size, in bytes.
    pub bytes: u64,
    /// Where the payload came from.
    pub source: SourceKind,
    /// The URL or file the payload came from; `None` when cached.
    pub origin: Option<String>,
}

/// The outcome of a successful fetch: every resource is in the cache and verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FetchReport {
    /// The pin table's dataset name, which is also the cache subdirectory
    /// ([`CACHE_SUBDIRECTORY`](super::CACHE_SUBDIRECTORY) for the production pins).
    pub dataset: String,
    /// One report per resource, in [`Resource::ALL`] order.
    pub resources: Vec<ResourceReport>,
}

/// Makes sure the cache holds every pinned Fashion-MNIST payload, verified.
pub fn fetch(options: &FetchOptions) -> Result<FetchReport, DatasetError> {
    fetch_with_pins(options, &FASHION_MNIST)
}

/// [`fetch`] against another pin table (tests use small synthetic payloads).
pub fn fetch_with_pins(
    options: &FetchOptions,
    pins: &PinTable,
) -> Result<FetchReport, DatasetError> {
    let cache = Cache::open_checked(&options.cache_directory, pins.dataset)?;
    let progress = |line: String| {
        if options.progress {
            eprintln!("dataset: {line}");
        }
    };

    // 1. What is cached and verified (reads only; a corrupt file stops everything).
    let mut reports = Vec::with_capacity(pins.resources.len());
    let mut missing = Vec::new();
    for pin in &pins.resources {
        match cache.read_verified(pin)? {
            Some(_) => {
                progress(format!("{}: already cached and verified", pin.name));
                reports.push(report(pin, SourceKind::Cached, None));
            }
            None => missing.push(pin),
        }
    }

    // 2. Acquire and verify every missing payload in memory.
    let mut sources = Sources::new(options);
    let mut acquired = Vec::with_capacity(missing.len());
    for pin in missing {
        let (payload, kind, origin) = sources.acquire(pin, &progress)?;
        let verb = match kind {
            SourceKind::Download => "downloaded from",
            _ => "read from",
        };
        progress(format!("{}: {verb} {origin}, verified", pin.name));
        reports.push(report(pin, kind, Some(origin)));
        acquired.push((pin, payload));
    }

    // 3. Install all of them at once.
    if !acquired.is_empty() {
        cache.install(&acquired)?;
        progress(format!(
            "installed {} file(s) in {}",
            acquired.len(),
            options.cache_directory.join(pins.dataset).display()
        ));
    }
    reports.sort_by_key(|r| Resource::ALL.iter().position(|x| *x == r.resource));
    Ok(FetchReport {
        dataset: pins.dataset.to_owned(),
        resources: reports,
    })
}

fn report(pin: &ResourcePin, source: SourceKind, origin: Option<String>) -> ResourceReport {
    ResourceReport {
        name: pin.name.to_owned(),
        resource: pin.resource,
        payload_sha256: pin.payload.sha256,
        bytes: pin.payload.bytes,
        source,
        origin,
    }
}

struct Sources<'a> {
    options: &'a FetchOptions,
    agent: ureq::Agent,
    base_url: String,
    /// After a transport failure, later downloads are skipped (no repeated timeouts).
    transport_failed: bool,
}

impl<'a> Sources<'a> {
    fn new(options: &'a FetchOptions) -> Sources<'a> {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_millis(options.connect_timeout_ms))
            .timeout_read(Duration::from_millis(options.read_timeout_ms))
            .timeout_write(Duration::from_millis(options.read_timeout_ms))
            .user_agent(concat!("shardlift/", env!("CARGO_PKG_VERSION")))
            .build();
        Sources {
            options,
            agent,
            base_url: options.effective_base_url(),
            transport_failed: false,
        }
    }

    fn acquire(
        &mut self,
        pin: &ResourcePin,
        progress: &dyn Fn(String),
    ) -> Result<(Vec<u8>, SourceKind, String), DatasetError> {
        if let Some(directory) = &self.options.source_directory {
            let (payload, origin) = self.local(pin, directory, true)?;
            return Ok((payload, SourceKind::Local, origin));
        }
        let url = format!("{}/{}.gz", self.base_url, pin.name);
        let download_error = match self.download(pin, &url) {
            Ok(payload) => return Ok((payload, SourceKind::Download, url)),
            Err(error) => error,
        };
        let Some(system) = &self.options.system_directory else {
            return Err(download_error);
        };
        let gzip_path = system.join(pin.resource.gzip_file_name());
        if std::fs::symlink_metadata(&gzip_path).is_err() {
            return Err(DatasetError::Unavailable {
                name: pin.name.to_owned(),
                download_error: download_error.to_string(),
                system_directory: system.clone(),
            });
        }
        let reason = match &download_error {
            DatasetError::HttpStatus { status, .. } => format!("HTTP {status}"),
            DatasetError::HttpTransport { detail, .. } => detail.clone(),
            other => other.to_string(),
        };
        progress(format!(
            "{}: download failed ({reason}); using {}",
            pin.name,
            system.display()
        ));
        let (payload, origin) = self.local(pin, system, false)?;
        Ok((payload, SourceKind::Local, origin))
    }

    /// Downloads `<name>.gz`, checks it against the gzip pin, decompresses, verifies.
    fn download(&mut self, pin: &ResourcePin, url: &str) -> Result<Vec<u8>, DatasetError> {
        if self.transport_failed {
            // The first failure carried the detail (and may have taken a full timeout).
            return Err(DatasetError::HttpTransport {
                url: url.to_owned(),
                detail: "not attempted after an earlier connection failure".to_owned(),
            });
        }
        let gzip = match self.get(url) {
            Err(DatasetError::HttpTransport { url, detail }) => {
                self.transport_failed = true;
                return Err(DatasetError::HttpTransport { url, detail });
            }
            other => other?,
        };
        verify_gzip(pin, url, &gzip)?;
        let payload = gunzip(pin, url, &gzip)?;
        verify_payload(pin, url, &payload)?;
        Ok(payload)
    }

    fn get(&self, url: &str) -> Result<Vec<u8>, DatasetError> {
        let limit = self.options.max_download_bytes;
        let transport = |detail: String| DatasetError::HttpTransport {
            url: url.to_owned(),
            detail,
        };
        let response = match self
            .agent
            .get(url)
            .set("Accept-Encoding", "identity")
            .call()
        {
            Ok(response) => response,
            Err(ureq::Error::Status(status, _)) => {
                return Err(DatasetError::HttpStatus {
                    status,
                    url: url.to_owned(),
                })
            }
            Err(ureq::Error::Transport(error)) => return Err(transport(error.to_string())),
        };
        if response.status() != 200 {
            return Err(DatasetError::HttpStatus {
                status: response.status(),
                url: url.to_owned(),
            });
        }
        let too_large = || DatasetError::DownloadTooLarge {
            url: url.to_owned(),
            limit,
        };
        if let Some(length) = response
            .header("Content-Length")
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            if length > limit {
                return Err(too_large());
            }
        }
        let mut body = Vec::new();
        response
            .into_reader()
            .take(limit.saturating_add(1))
            .read_to_end(&mut body)
            .map_err(|error| transport(format!("reading the body: {error}")))?;
        if body.len() as u64 > limit {
            return Err(too_large());
        }
        Ok(body)
    }

    /// Reads `<name>.gz` (or, when `allow_plain`, uncompressed `<name>`) from `directory`
    /// and verifies the payload.
    fn local(
        &self,
        pin: &ResourcePin,
        directory: &Path,
        allow_plain: bool,
    ) -> Result<(Vec<u8>, String), DatasetError> {
        let gzip_path = directory.join(pin.resource.gzip_file_name());
        let limit = self.options.max_download_bytes;
        let payload_and_origin = match read_source(pin, &gzip_path, limit)? {
            Some(gzip) => {
                let origin = gzip_path.display().to_string();
                (gunzip(pin, &origin, &gzip)?, origin)
            }
            None if allow_plain => {
                let plain_path = directory.join(pin.name);
                match read_source(pin, &plain_path, pin.payload.bytes)? {
                    Some(payload) => (payload, plain_path.display().to_string()),
                    None => {
                        return Err(DatasetError::SourceFileMissing {
                            name: pin.name.to_owned(),
                            directory: directory.to_path_buf(),
                        })
                    }
                }
            }
            None => {
                return Err(DatasetError::SourceFileMissing {
                    name: pin.name.to_owned(),
                    directory: directory.to_path_buf(),
                })
            }
        };
        let (payload, origin) = payload_and_origin;
        verify_payload(pin, &origin, &payload)?;
        Ok((payload, origin))
    }
}

fn read_source(
    pin: &ResourcePin,
    path: &Path,
    limit: u64,
) -> Result<Option<Vec<u8>>, DatasetError> {
    read_optional(path, limit).map_err(|error| match error {
        DurableError::TooLarge { .. } => DatasetError::SourceTooLarge {
            name: pin.name.to_owned(),
            path: path.to_path_buf(),
            limit,
        },
        DurableError::Io { source, .. } | DurableError::Fsync { source, .. } => {
            DatasetError::SourceIo {
                path: path.to_path_buf(),
                source,
            }
        }
        // A symlink or special file (a read never reports the other kinds).
        _ => DatasetError::SourceIo {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (symlinks and special files are refused)",
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_url_is_built_from_the_repository() {
        assert_eq!(
            default_base_url(),
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion"
        );
        let mut options = FetchOptions::new("/nonexistent");
        options.base_url = Some("http://127.0.0.1:1/x/".to_owned());
        assert_eq!(options.effective_base_url(), "http://127.0.0.1:1/x");
    }

    #[test]
    fn report_serialises_source_kinds() {
        let pin = FASHION_MNIST.get(Resource::TrainLabels);
        let json = serde_json::to_value(report(pin, SourceKind::Cached, None));
        let json = json.expect("json");
        assert_eq!(json["source"], "cached");
        assert_eq!(json["name"], "train-labels-idx1-ubyte");
        assert_eq!(json["bytes"], 60_008);
        assert_eq!(json["resource"], "train-labels");
        assert_eq!(
            json["payload_sha256"],
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"
        );
        let download = serde_json::to_value(SourceKind::Download).expect("json");
        assert_eq!(download, "download");
    }
}
