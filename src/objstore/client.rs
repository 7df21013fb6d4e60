//! A synchronous S3 client over `object_store` (feature `aws`) and a small owned
//! current-thread tokio runtime. Every request has a timeout, bounded retries, and an
//! outer deadline; every read has a byte cap.
use std::time::Duration;

use futures_util::StreamExt;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};
use serde::{Deserialize, Serialize};

use crate::core::error_chain::error_chain_text;
use crate::objstore::error::ObjStoreError;
pub use crate::store::location::S3Location;

/// Timeouts and retry bounds of the client. Every wait is bounded by one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjStoreOptions {
    /// TCP connect timeout per attempt, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Whole-request timeout per attempt, in milliseconds.
    pub request_timeout_ms: u64,
    /// Retries per request after the first attempt (transient errors, 5xx).
    pub max_retries: usize,
    /// No retry starts later than this after the first attempt, in milliseconds.
    pub retry_timeout_ms: u64,
    /// Outer deadline of one operation (all attempts, reading the body), in milliseconds.
    pub operation_timeout_ms: u64,
}

impl Default for ObjStoreOptions {
    fn default() -> Self {
        ObjStoreOptions {
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            max_retries: 3,
            retry_timeout_ms: 15_000,
            operation_timeout_ms: 120_000,
        }
    }
}

impl ObjStoreOptions {
    /// The longest per-attempt request timeout a caller may ask for, in milliseconds.
    pub const MAX_REQUEST_TIMEOUT_MS: u64 = 600_000;

    /// The default bounds with each request attempt limited to `request_timeout_ms` (the
    /// CLI's `--request-timeout-ms`; RFC 0001 §9): the connect timeout is at most that,
    /// no retry starts later than that after the first attempt, and one operation (all
    /// attempts of its request) ends within `(max_retries + 2) × request_timeout_ms`.
    /// `None` when the value is 0 or above [`Self::MAX_REQUEST_TIMEOUT_MS`].
    pub fn with_request_timeout_ms(self, request_timeout_ms: u64) -> Option<Self> {
        if request_timeout_ms == 0 || request_timeout_ms > Self::MAX_REQUEST_TIMEOUT_MS {
            return None;
        }
        let attempts = self.max_retries as u64 + 2;
        Some(ObjStoreOptions {
            connect_timeout_ms: self.connect_timeout_ms.min(request_timeout_ms),
            request_timeout_ms,
            retry_timeout_ms: request_timeout_ms,
            operation_timeout_ms: request_timeout_ms * attempts,
            ..self
        })
    }
}

/// Whether the backend refuses a second conditional create (`If-None-Match: *`) of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConditionalCreate {
    /// The second create was refused: the backend honours conditional create.
    Honoured,
    /// The second create succeeded and overwrote: the backend ignores it (Garage does).
    Ignored,
    /// Not probed (recovery writes nothing, so it does not probe).
    NotProbed,
}

/// The result of a capped GET.
pub enum Fetched {
    /// The object's bytes (at most the cap).
    Bytes(Vec<u8>),
    /// No such key.
    Missing,
}

/// An open connection to one store location.
pub struct ObjClient {
    location: S3Location,
    store: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Runtime,
    options: ObjStoreOptions,
}

impl std::fmt::Debug for ObjClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjClient")
            .field("location", &self.location)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Refuses, before any request, a location whose endpoint or credentials the environment
/// does not name. Without them the S3 client would fall back to AWS's public endpoint
/// and to the cloud instance-metadata address for credentials: requests to hosts the
/// user never named.
fn require_endpoint_and_credentials(location: &S3Location) -> Result<(), ObjStoreError> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    let mut missing = Vec::new();
    if !set("AWS_ENDPOINT_URL") && !set("AWS_ENDPOINT") {
        missing.push("AWS_ENDPOINT_URL (the S3 endpoint, e.g. http://127.0.0.1:3900 or https://s3.eu-west-1.amazonaws.com)");
    }
    for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        if !set(name) {
            missing.push(name);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(ObjStoreError::Config {
        location: location.url(),
        message: format!(
            "set {} (and AWS_REGION, and AWS_ALLOW_HTTP=true for a plain-HTTP endpoint); \
             nothing was sent",
            missing.join(", ")
        ),
    })
}

fn env_true(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

impl ObjClient {
    /// Connects to `location` with endpoint, region and credentials from the usual
    /// `AWS_*` variables (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`). Path-style addressing unless
    /// `AWS_VIRTUAL_HOSTED_STYLE_REQUEST` says otherwise; plain HTTP is allowed when
    /// `AWS_ALLOW_HTTP` is true or the endpoint is an `http://` URL.
    pub fn open(location: S3Location, options: ObjStoreOptions) -> Result<Self, ObjStoreError> {
        // reqwest is built without a TLS crypto provider of its own (Cargo.toml): it
        // takes the process default, and panics while building a client without one.
        // `Err` here means a provider is already installed, which is all we need.
        let _ = rustls::crypto::ring::default_provider().install_default();
        require_endpoint_and_credentials(&location)?;
        let endpoint_is_http = std::env::var("AWS_ENDPOINT_URL")
            .or_else(|_| std::env::var("AWS_ENDPOINT"))
            .is_ok_and(|e| e.starts_with("http://"));
        let client_options = ClientOptions::new()
            .with_allow_http(env_true("AWS_ALLOW_HTTP") || endpoint_is_http)
            .with_connect_timeout(Duration::from_millis(options.connect_timeout_ms))
            .with_timeout(Duration::from_millis(options.request_timeout_ms));
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: options.max_retries,
            retry_timeout: Duration::from_millis(options.retry_timeout_ms),
        };
        let store = AmazonS3Builder::from_env()
            .with_bucket_name(&location.bucket)
            .with_client_options(client_options)
            .with_retry(retry)
            .build()
            .map_err(|e| ObjStoreError::Config {
                location: location.url(),
                message: error_chain_text(&e),
            })?;
        Self::with_store(location, Arc::new(store), options)
    }

    /// A client of `location` over any `object_store` backend: one that honours
    /// conditional create where no such S3 service runs (`object_store`'s in-memory or
    /// local-file backends), or a store shared by two clients in one process.
    pub fn with_store(
        location: S3Location,
        store: Arc<dyn ObjectStore>,
        options: ObjStoreOptions,
    ) -> Result<Self, ObjStoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| ObjStoreError::Runtime { source })?;
        Ok(ObjClient {
            location,
            store,
            runtime,
            options,
        })
    }

    /// The store location.
    pub fn location(&self) -> &S3Location {
        &self.location
    }

    /// The client's timeouts and retry bounds.
    pub fn options(&self) -> ObjStoreOptions {
        self.options
    }

    fn path(&self, rel: &str) -> ObjPath {
        ObjPath::from(self.location.key(rel))
    }

    fn request_error(
        &self,
        op: &'static str,
        rel: &str,
        error: object_store::Error,
    ) -> ObjStoreError {
        match error {
            object_store::Error::NotFound { .. } => ObjStoreError::MissingObject {
                key: self.location.key_url(rel),
            },
            other => ObjStoreError::Request {
                op,
                key: self.location.key_url(rel),
                max_retries: self.options.max_retries,
                // The whole chain: object_store's own text stops at "error sending
                // request" and keeps the cause (a refused certificate, a reset) in a
                // source.
                message: error_chain_text(&other),
            },
        }
    }

    fn bounded<T>(
        &self,
        op: &'static str,
        rel: &str,
        future: impl std::future::Future<Output = Result<T, ObjStoreError>>,
    ) -> Result<T, ObjStoreError> {
        let timeout_ms = self.options.operation_timeout_ms;
        self.runtime.block_on(async {
            match tokio::time::timeout(Duration::from_millis(timeout_ms), future).await {
                Ok(result) => result,
                Err(_) => Err(ObjStoreError::Timeout {
                    op,
                    key: self.location.key_url(rel),
                    timeout_ms,
                }),
            }
        })
    }

    /// PUT `bytes` at `rel`, overwriting (the keys this protocol overwrites are
    /// content-addressed, so an overwrite writes the same bytes, or LATEST, a hint).
    pub fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<(), ObjStoreError> {
        let path = self.path(rel);
        self.bounded("PUT", rel, async {
            self.store
                .put(&path, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|e| self.request_error("PUT", rel, e))
        })
    }

    /// PUT with `If-None-Match: *`: `Ok(true)` when created, `Ok(false)` when the backend
    /// refused because the key exists (a backend that ignores the header returns true).
    pub fn put_create(&self, rel: &str, bytes: Vec<u8>) -> Result<bool, ObjStoreError> {
        let path = self.path(rel);
        self.bounded("PUT", rel, async {
            let options = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match self
                .store
                .put_opts(&path, PutPayload::from(bytes), options)
                .await
            {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => Ok(false),
                Err(e) => Err(self.request_error("PUT", rel, e)),
            }
        })
    }

    /// GET `rel`, refusing (before reading the body, and while reading it) anything
    /// larger than `cap_bytes`.
    pub fn get_capped(&self, rel: &str, cap_bytes: u64) -> Result<Fetched, ObjStoreError> {
        let path = self.path(rel);
        let too_large = |size_bytes| ObjStoreError::TooLarge {
            key: self.location.key_url(rel),
            size_bytes,
            cap_bytes,
        };
        self.bounded("GET", rel, async {
            let result = match self.store.get_opts(&path, GetOptions::default()).await {
                Ok(result) => result,
                Err(object_store::Error::NotFound { .. }) => return Ok(Fetched::Missing),
                Err(e) => return Err(self.request_error("GET", rel, e)),
            };
            if result.meta.size > cap_bytes {
                return Err(too_large(result.meta.size));
            }
            let capacity = usize::try_from(result.meta.size).unwrap_or(0);
            let mut bytes = Vec::with_capacity(capacity);
            let mut stream = result.into_stream();
            while let Some(piece) = stream.next().await {
                let piece = piece.map_err(|e| self.request_error("GET", rel, e))?;
                bytes.extend_from_slice(&piece);
                if bytes.len() as u64 > cap_bytes {
                    return Err(too_large(bytes.len() as u64));
                }
            }
            Ok(Fetched::Bytes(bytes))
        })
    }

    /// Every key under `rel_prefix/` (relative to the store), sorted.
    pub fn list(&self, rel_prefix: &str) -> Result<Vec<String>, ObjStoreError> {
        Ok(self
            .list_with_sizes(rel_prefix)?
            .into_iter()
            .map(|(key, _)| key)
            .collect())
    }

    /// Every key under `rel_prefix/` (relative to the store) with its object's size in
    /// bytes as the listing reports it, sorted by key.
    pub fn list_with_sizes(&self, rel_prefix: &str) -> Result<Vec<(String, u64)>, ObjStoreError> {
        let path = self.path(rel_prefix);
        let store_prefix = if self.location.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.location.prefix)
        };
        self.bounded("LIST", rel_prefix, async {
            let mut stream = self.store.list(Some(&path));
            let mut keys = Vec::new();
            while let Some(meta) = stream.next().await {
                let meta = meta.map_err(|e| self.request_error("LIST", rel_prefix, e))?;
                let full = meta.location.to_string();
                if let Some(rel) = full.strip_prefix(&store_prefix) {
                    keys.push((rel.to_owned(), meta.size));
                }
            }
            keys.sort();
            Ok(keys)
        })
    }

    /// DELETE `rel`. Only scratch keys outside the store's records are ever deleted: the
    /// probe key and the bench's raw copies (`bench-raw/`).
    pub fn delete(&self, rel: &str) -> Result<(), ObjStoreError> {
        let path = self.path(rel);
        self.bounded("DELETE", rel, async {
            self.store
                .delete(&path)
                .await
                .map_err(|e| self.request_error("DELETE", rel, e))
        })
    }

    /// Probes conditional create: creates a fresh key under `probes/` twice with
    /// `If-None-Match: *`; a refused second create means the backend honours it. The
    /// probe key is deleted afterwards (best effort; recovery ignores `probes/`).
    pub fn probe_conditional_create(&self) -> Result<ConditionalCreate, ObjStoreError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let rel = format!("probes/conditional-create-{}-{nanos}", std::process::id());
        if !self.put_create(&rel, b"first".to_vec())? {
            return Err(ObjStoreError::Probe {
                key: self.location.key_url(&rel),
                reason: "the first create of a fresh key was refused".into(),
            });
        }
        let second = self.put_create(&rel, b"second".to_vec())?;
        let _ = self.delete(&rel);
        Ok(if second {
            ConditionalCreate::Ignored
        } else {
            ConditionalCreate::Honoured
        })
    }
}
