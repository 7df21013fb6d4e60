//! Why acquiring or loading the dataset failed: one variant per reason.
use std::io;
use std::path::PathBuf;

use crate::core::digest::Digest;
use crate::durable::DurableError;

/// How to get the dataset when no source worked.
pub const HOW_TO_GET_THE_DATA: &str = "install Debian's package with \
`apt-get install dataset-fashion-mnist` (it provides /usr/share/datasets/fashion-mnist), \
or pass `--source-directory DIR` naming a directory that holds the four files \
(`<name>.gz` or uncompressed `<name>`)";

/// Every way acquiring, verifying or loading Fashion-MNIST can fail.
///
/// Whatever the variant, a failed fetch leaves the cache directory exactly as it was.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    // ----- the cache directory -----
    #[error(
        "cache directory {path} is not a directory; pass a directory path to \
         --cache-directory (or remove what is there)"
    )]
    CacheDirectoryNotADirectory { path: PathBuf },

    #[error(
        "cache directory {path} is owned by uid {owner}, not by this user (uid {expected}); \
         use a directory you own, or fix it with `chown {expected} {path}`"
    )]
    CacheDirectoryOwner {
        path: PathBuf,
        owner: u32,
        expected: u32,
    },

    #[error(
        "cache directory {path} has mode {mode:04o}, writable by group or others; \
         restrict it with `chmod go-w {path}` (0700 is recommended)"
    )]
    CacheDirectoryMode { path: PathBuf, mode: u32 },

    #[error("cannot create cache directory {path}: {source}")]
    CacheDirectoryCreate {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("I/O error in the cache at {path}: {source}; nothing in the cache was changed")]
    CacheIo {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{source}; nothing in the cache was changed")]
    CacheDurable {
        #[source]
        source: DurableError,
    },

    #[error(
        "cached file {path} ({name}) does not match its pin: {detail}; it was left in \
         place so nothing is lost: inspect it, then remove it (`rm {path}`) and fetch again"
    )]
    CachedFileCorrupt {
        name: String,
        path: PathBuf,
        detail: String,
    },

    #[error(
        "{name} is not in the cache at {path}; run `shardlift dataset fetch \
         --cache-directory DIR` first"
    )]
    CachedFileMissing { name: String, path: PathBuf },

    // ----- sources -----
    #[error("{name}: neither {name}.gz nor {name} is in {directory}; {hint}", hint = HOW_TO_GET_THE_DATA)]
    SourceFileMissing { name: String, directory: PathBuf },

    #[error("cannot read source file {path}: {source}")]
    SourceIo {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("source file {path} is larger than the limit of {limit} bytes for {name}")]
    SourceTooLarge {
        name: String,
        path: PathBuf,
        limit: u64,
    },

    #[error(
        "could not obtain {name}: the download failed ({download_error}) and \
         {system_directory}/{name}.gz does not exist; {hint}",
        hint = HOW_TO_GET_THE_DATA
    )]
    Unavailable {
        name: String,
        download_error: String,
        system_directory: PathBuf,
    },

    // ----- download -----
    #[error(
        "downloading {url} failed: the server answered HTTP {status} (expected 200); \
         check the base URL (SHARDLIFT_DATASET_BASE_URL) or use --source-directory"
    )]
    HttpStatus { status: u16, url: String },

    #[error(
        "downloading {url} failed: {detail}; check the network, or use \
         --source-directory / `apt-get install dataset-fashion-mnist`"
    )]
    HttpTransport { url: String, detail: String },

    #[error("downloading {url} failed: the body is larger than the limit of {limit} bytes")]
    DownloadTooLarge { url: String, limit: u64 },

    #[error(
        "downloaded {name}.gz from {url} does not match its pin: expected SHA-256 \
         {expected}, got {actual_bytes} bytes with SHA-256 {actual}; the upstream file \
         changed or the transfer was tampered with — nothing was installed"
    )]
    GzipDigestMismatch {
        name: String,
        url: String,
        expected: Digest,
        actual: Digest,
        actual_bytes: u64,
    },

    // ----- gzip -----
    #[error("gzip stream of {name} from {origin} is truncated; fetch a complete copy")]
    TruncatedGzip { name: String, origin: String },

    #[error("gzip stream of {name} from {origin} is corrupt: {detail}")]
    GzipCorrupt {
        name: String,
        origin: String,
        detail: String,
    },

    #[error("gzip stream of {name} from {origin} has trailing bytes after its end")]
    GzipTrailingData { name: String, origin: String },

    #[error(
        "decompressed {name} from {origin} exceeds its pinned size of {limit} bytes; \
         this is not the pinned file"
    )]
    DecompressedTooLarge {
        name: String,
        origin: String,
        limit: u64,
    },

    // ----- payload -----
    #[error(
        "payload of {name} from {origin} is {actual} bytes, the pin says {expected}; \
         this is not the pinned file"
    )]
    PayloadSizeMismatch {
        name: String,
        origin: String,
        expected: u64,
        actual: u64,
    },

    #[error(
        "payload of {name} from {origin} has SHA-256 {actual}, the pin says {expected}; \
         this is not the pinned file — nothing was installed or loaded"
    )]
    PayloadDigestMismatch {
        name: String,
        origin: String,
        expected: Digest,
        actual: Digest,
    },

    // ----- IDX -----
    #[error("{name} is not an IDX {kind} file: magic {actual:#010x}, expected {expected:#010x}")]
    IdxMagic {
        name: String,
        kind: &'static str,
        expected: u32,
        actual: u32,
    },

    #[error("{name} has IDX dimensions {dimensions:?}: {detail}")]
    IdxDimensions {
        name: String,
        dimensions: Vec<u32>,
        detail: String,
    },

    #[error("{name} is {actual} bytes, its IDX header requires exactly {expected}")]
    IdxLength {
        name: String,
        expected: u64,
        actual: u64,
    },

    #[error("{name}: label {index} is {value}, labels are 0..=9")]
    LabelOutOfRange {
        name: String,
        index: usize,
        value: u8,
    },

    #[error("the {split} split has {images} images but {labels} labels")]
    CountMismatch {
        split: &'static str,
        images: usize,
        labels: usize,
    },
}
