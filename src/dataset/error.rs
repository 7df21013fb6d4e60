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
    /// The cache directory path names something that is not a directory.
    #[error(
        "cache directory {path} is not a directory; pass a directory path to \
         --cache-directory (or remove what is there)"
    )]
    CacheDirectoryNotADirectory {
        /// The cache directory.
        path: PathBuf,
    },

    /// The cache directory is owned by another user than the effective uid.
    #[error(
        "cache directory {path} is owned by uid {owner}, not by this user (uid {expected}); \
         use a directory you own, or fix it with `chown {expected} {path}`"
    )]
    CacheDirectoryOwner {
        /// The cache directory.
        path: PathBuf,
        /// The uid that owns it.
        owner: u32,
        /// The effective uid of this process.
        expected: u32,
    },

    /// The cache directory is writable by group or others.
    #[error(
        "cache directory {path} has mode {mode:04o}, writable by group or others; \
         restrict it with `chmod go-w {path}` (0700 is recommended)"
    )]
    CacheDirectoryMode {
        /// The cache directory.
        path: PathBuf,
        /// Its permission bits (`st_mode & 0o7777`).
        mode: u32,
    },

    /// A missing cache directory (or one of its parents) could not be created.
    #[error("cannot create cache directory {path}: {source}")]
    CacheDirectoryCreate {
        /// The directory that could not be created.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// An I/O operation on the cache failed: reading, inspecting or installing a file.
    #[error("I/O error in the cache at {path}: {source}; nothing in the cache was changed")]
    CacheIo {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Installing a payload through the durable writer failed; everything this fetch
    /// created was removed.
    #[error("{source}; nothing in the cache was changed")]
    CacheDurable {
        /// The durable writer's error.
        #[source]
        source: DurableError,
    },

    /// A cached payload fails its size, SHA-256 or IDX check; it is left in place.
    #[error(
        "cached file {path} ({name}) does not match its pin: {detail}; it was left in \
         place so nothing is lost: inspect it, then remove it (`rm {path}`) and fetch again"
    )]
    CachedFileCorrupt {
        /// The resource's payload file name, e.g. `train-images-idx3-ubyte`.
        name: String,
        /// The cached file.
        path: PathBuf,
        /// The failed check, as the error message that check gave.
        detail: String,
    },

    /// A payload is not in the cache (loading never fetches; see [`super::fetch()`]).
    #[error(
        "{name} is not in the cache at {path}; run `shardlift dataset fetch \
         --cache-directory DIR` first"
    )]
    CachedFileMissing {
        /// The resource's payload file name.
        name: String,
        /// Where the cache would hold it.
        path: PathBuf,
    },

    // ----- sources -----
    /// The source directory holds neither `<name>.gz` nor `<name>`.
    #[error("{name}: neither {name}.gz nor {name} is in {directory}; {hint}", hint = HOW_TO_GET_THE_DATA)]
    SourceFileMissing {
        /// The resource's payload file name.
        name: String,
        /// The source directory searched.
        directory: PathBuf,
    },

    /// Reading a file of a local source (`--source-directory` or Debian's) failed.
    #[error("cannot read source file {path}: {source}")]
    SourceIo {
        /// The source file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A local source file is larger than it may be (the download cap for a `.gz`, the
    /// pinned payload size for an uncompressed file).
    #[error("source file {path} is larger than the limit of {limit} bytes for {name}")]
    SourceTooLarge {
        /// The resource's payload file name.
        name: String,
        /// The source file.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
    },

    /// Without a source directory: the download failed and the system directory has no
    /// `<name>.gz` to fall back on.
    #[error(
        "could not obtain {name}: the download failed ({download_error}) and \
         {system_directory}/{name}.gz does not exist; {hint}",
        hint = HOW_TO_GET_THE_DATA
    )]
    Unavailable {
        /// The resource's payload file name.
        name: String,
        /// Why the download failed, as its error message.
        download_error: String,
        /// The local fallback directory searched (by default [`super::DEBIAN_DIRECTORY`]).
        system_directory: PathBuf,
    },

    // ----- download -----
    /// The server answered a download with a status other than 200.
    #[error(
        "downloading {url} failed: the server answered HTTP {status} (expected 200); \
         check the base URL (SHARDLIFT_DATASET_BASE_URL) or use --source-directory"
    )]
    HttpStatus {
        /// The HTTP status code.
        status: u16,
        /// The URL requested.
        url: String,
    },

    /// A download failed below HTTP (DNS, connect, TLS, a timeout, a broken read), or was
    /// not attempted after such a failure earlier in the same fetch.
    #[error(
        "downloading {url} failed: {detail}; check the network, or use \
         --source-directory / `apt-get install dataset-fashion-mnist`"
    )]
    HttpTransport {
        /// The URL requested.
        url: String,
        /// The transport error's message.
        detail: String,
    },

    /// A download's body exceeds [`FetchOptions::max_download_bytes`](super::FetchOptions::max_download_bytes).
    #[error("downloading {url} failed: the body is larger than the limit of {limit} bytes")]
    DownloadTooLarge {
        /// The URL requested.
        url: String,
        /// The limit, in bytes.
        limit: u64,
    },

    /// A downloaded `.gz` does not match the canonical upstream pin
    /// ([`ResourcePin::gzip`](super::ResourcePin::gzip)); it is not decompressed.
    #[error(
        "downloaded {name}.gz from {url} does not match its pin: expected SHA-256 \
         {expected}, got {actual_bytes} bytes with SHA-256 {actual}; the upstream file \
         changed or the transfer was tampered with — nothing was installed"
    )]
    GzipDigestMismatch {
        /// The resource's payload file name (the download is `<name>.gz`).
        name: String,
        /// The URL downloaded.
        url: String,
        /// The pinned SHA-256 of the `.gz`.
        expected: Digest,
        /// The SHA-256 of the bytes received.
        actual: Digest,
        /// The size of the bytes received.
        actual_bytes: u64,
    },

    // ----- gzip -----
    /// A gzip stream ends before its end-of-stream trailer.
    #[error("gzip stream of {name} from {origin} is truncated; fetch a complete copy")]
    TruncatedGzip {
        /// The resource's payload file name.
        name: String,
        /// The URL or file the stream came from.
        origin: String,
    },

    /// A gzip stream is not valid (bad header, bad deflate data or a CRC mismatch).
    #[error("gzip stream of {name} from {origin} is corrupt: {detail}")]
    GzipCorrupt {
        /// The resource's payload file name.
        name: String,
        /// The URL or file the stream came from.
        origin: String,
        /// The decoder's message.
        detail: String,
    },

    /// Bytes follow the end of a gzip stream (a second member or garbage).
    #[error("gzip stream of {name} from {origin} has trailing bytes after its end")]
    GzipTrailingData {
        /// The resource's payload file name.
        name: String,
        /// The URL or file the stream came from.
        origin: String,
    },

    /// Decompression stopped at the pinned payload size with output still coming.
    #[error(
        "decompressed {name} from {origin} exceeds its pinned size of {limit} bytes; \
         this is not the pinned file"
    )]
    DecompressedTooLarge {
        /// The resource's payload file name.
        name: String,
        /// The URL or file the stream came from.
        origin: String,
        /// The pinned payload size, in bytes.
        limit: u64,
    },

    // ----- payload -----
    /// A payload's size differs from its pin ([`ResourcePin::payload`](super::ResourcePin::payload)).
    #[error(
        "payload of {name} from {origin} is {actual} bytes, the pin says {expected}; \
         this is not the pinned file"
    )]
    PayloadSizeMismatch {
        /// The resource's payload file name.
        name: String,
        /// The URL or file the payload came from.
        origin: String,
        /// The pinned size, in bytes.
        expected: u64,
        /// The size found, in bytes.
        actual: u64,
    },

    /// A payload's SHA-256 differs from its pin.
    #[error(
        "payload of {name} from {origin} has SHA-256 {actual}, the pin says {expected}; \
         this is not the pinned file — nothing was installed or loaded"
    )]
    PayloadDigestMismatch {
        /// The resource's payload file name.
        name: String,
        /// The URL or file the payload came from.
        origin: String,
        /// The pinned SHA-256.
        expected: Digest,
        /// The SHA-256 of the bytes found.
        actual: Digest,
    },

    // ----- IDX -----
    /// An IDX file's magic number is not the one its kind requires.
    #[error("{name} is not an IDX {kind} file: magic {actual:#010x}, expected {expected:#010x}")]
    IdxMagic {
        /// The file's name, as given to the parser.
        name: String,
        /// `images` or `labels`.
        kind: &'static str,
        /// The magic of that kind ([`super::idx::IMAGES_MAGIC`] or
        /// [`super::idx::LABELS_MAGIC`]).
        expected: u32,
        /// The magic read (big-endian, first four bytes).
        actual: u32,
    },

    /// An IDX file's dimensions are not `(n, 28, 28)` or `(n)`, or `n` exceeds
    /// [`super::idx::MAX_COUNT`].
    #[error("{name} has IDX dimensions {dimensions:?}: {detail}")]
    IdxDimensions {
        /// The file's name, as given to the parser.
        name: String,
        /// The dimensions read from the header (as many as it holds).
        dimensions: Vec<u32>,
        /// What is wrong with them.
        detail: String,
    },

    /// An IDX file's length is not exactly its header plus the product of its dimensions.
    #[error("{name} is {actual} bytes, its IDX header requires exactly {expected}")]
    IdxLength {
        /// The file's name, as given to the parser.
        name: String,
        /// The length the header requires, in bytes.
        expected: u64,
        /// The length found, in bytes.
        actual: u64,
    },

    /// A label is not below [`super::idx::CLASSES`].
    #[error("{name}: label {index} is {value}, labels are 0..=9")]
    LabelOutOfRange {
        /// The file's name, as given to the parser.
        name: String,
        /// The label's position in the file (0-based).
        index: usize,
        /// The label's value.
        value: u8,
    },

    /// A split's image file and label file hold different counts.
    #[error("the {split} split has {images} images but {labels} labels")]
    CountMismatch {
        /// `train` or `test`.
        split: &'static str,
        /// Images in the image file.
        images: usize,
        /// Labels in the label file.
        labels: usize,
    },
}
