//! Why rendering or checking the visuals failed: one variant per reason, each naming the
//! file it concerns.
use std::path::PathBuf;

use shardlift::core::canonical::CanonicalError;
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::BundleError;

/// Why the visuals were not rendered, or are not current.
#[derive(Debug, thiserror::Error)]
pub enum VisualsError {
    /// An I/O operation failed.
    #[error("I/O on {path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Writing a rendered file durably failed.
    #[error(transparent)]
    Durable(#[from] shardlift::durable::DurableError),
    /// No `evidence/release-*` directory was found to render from (the root searched).
    #[error("no evidence/release-* directory under {0}; pass --evidence")]
    NoEvidence(PathBuf),
    /// Several evidence directories were found; their names.
    #[error("several evidence directories ({0}); pass --evidence")]
    AmbiguousEvidence(String),
    /// The evidence path has no final component to name it by.
    #[error("{path} has no directory name")]
    UnnamedEvidence {
        /// The evidence path given.
        path: PathBuf,
    },
    /// A bundle of the evidence does not verify.
    #[error("the bundle of {barrier} does not verify: {source}")]
    Bundle {
        /// The barrier of its run.
        barrier: String,
        /// Why it does not verify.
        source: Box<BundleError>,
    },
    /// A record of the evidence does not decode under its schema.
    #[error("{name} does not decode under its schema: {source}")]
    Record {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// Why it does not decode.
        source: CanonicalError,
    },
    /// The committed `bench checkpoint` report is missing, ambiguous or does not decode.
    #[error("{name}: not one bench checkpoint report: {reason}")]
    BenchReport {
        /// The report (or the directory searched), repository-relative.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A verify-bundle transcript has no stdout section.
    #[error("{name} has no stdout section")]
    TranscriptNoStdout {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
    },
    /// A verify-bundle transcript's stdout is not one verify-bundle record.
    #[error("{name}: its stdout is not one verify-bundle record: {source}")]
    TranscriptRecord {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A verify-bundle transcript reports other facts than the bundle it is about.
    #[error("{name} disagrees with the bundle it reports on")]
    TranscriptDisagrees {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
    },
    /// `summary.json` has no run for a barrier of the evidence.
    #[error("summary.json does not list a run for {barrier}")]
    SummaryRun {
        /// The barrier.
        barrier: String,
    },
    /// RFC 0001 does not list the barriers in the order of
    /// [`Barrier::ALL`](shardlift::core::barrier::Barrier::ALL).
    #[error("{name}: the barriers are not listed in the order of the barrier enum")]
    RfcOrder {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
    },
    /// The embedded font does not parse.
    #[error("the embedded font does not parse: {0}")]
    Font(ttf_parser::FaceParsingError),
    /// The embedded font has no glyph for a character drawn.
    #[error("the embedded font has no glyph for {0:?}")]
    MissingGlyph(char),
    /// A drawn SVG does not parse for rasterising.
    #[error("{name}: the drawn SVG does not parse: {source}")]
    Svg {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// The SVG parser's error.
        source: resvg::usvg::Error,
    },
    /// A raster of that size cannot be allocated.
    #[error("{name}: cannot allocate a {width}x{height} raster")]
    RasterSize {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// Width, in pixels.
        width: u32,
        /// Height, in pixels.
        height: u32,
    },
    /// PNG encoding failed.
    #[error("{name}: PNG encoding failed: {source}")]
    PngEncode {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// The encoder's error.
        source: png::EncodingError,
    },
    /// GIF encoding failed.
    #[error("{name}: GIF encoding failed: {source}")]
    GifEncode {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// The encoder's error.
        source: gif::EncodingError,
    },
    /// `manifest.json` could not be encoded as canonical JSON.
    #[error("manifest.json cannot be encoded: {0}")]
    ManifestEncode(CanonicalError),
    /// A file a fresh render writes is missing from the visuals directory.
    #[error("{name} is missing from the visuals; run `pipeline visuals render`")]
    Missing {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
    },
    /// The visuals directory holds a file a render does not write.
    #[error("{name} does not belong in the visuals directory")]
    Unexpected {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
    },
    /// `manifest.json` names another evidence directory than the one checked.
    #[error("manifest.json names evidence {recorded}, but the evidence checked is {found}: stale, run `pipeline visuals render`")]
    OtherEvidence {
        /// The evidence `manifest.json` names.
        recorded: String,
        /// The evidence checked.
        found: String,
    },
    /// A file matches its manifest digest but not a fresh render: it was rendered from
    /// other inputs.
    #[error("{name} matches its manifest digest but not a fresh render of the committed evidence: it was rendered from other evidence (first input that differs: {input}); run `pipeline visuals render`")]
    RenderedFromOther {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// The first recorded input that differs from the committed file.
        input: String,
    },
    /// `manifest.json` differs from a fresh render's.
    #[error("manifest.json is stale or tampered: it differs from a fresh render (first recorded input that differs from the committed file: {input}); run `pipeline visuals render`")]
    ManifestStale {
        /// The first recorded input that differs from the committed file, or `none`.
        input: String,
    },
    /// A file's SHA-256 is not the one `manifest.json` records.
    #[error("{name} was tampered with: manifest.json records {recorded}, the file is {actual}")]
    OutputChanged {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
        /// The SHA-256 `manifest.json` records.
        recorded: Digest,
        /// The SHA-256 of the file's bytes.
        actual: Digest,
    },
    /// A file differs from a fresh render of the committed evidence.
    #[error("{name} is stale or tampered: it differs from a fresh render of the committed evidence; run `pipeline visuals render`")]
    Stale {
        /// The file concerned, by its name in the visuals or evidence directory.
        name: String,
    },
    /// Audit: a raster does not decode.
    #[error("audit of {name}: it does not decode: {reason}")]
    AuditDecode {
        /// The raster audited, by its name in the visuals directory.
        name: String,
        /// The decoder's message.
        reason: String,
    },
    /// Audit: a raster's size is not the one `manifest.json` records.
    #[error("audit of {name}: {width}x{height} pixels where manifest.json records {recorded_width}x{recorded_height}")]
    AuditSize {
        /// The raster audited, by its name in the visuals directory.
        name: String,
        /// Decoded width, in pixels.
        width: u32,
        /// Decoded height, in pixels.
        height: u32,
        /// Recorded width, in pixels.
        recorded_width: u32,
        /// Recorded height, in pixels.
        recorded_height: u32,
    },
    /// Audit: a frame's decoded RGBA pixels do not hash to the recorded SHA-256.
    #[error("audit of {name}: frame {frame}'s decoded RGBA pixels are {actual}, manifest.json records {recorded}")]
    AuditPixels {
        /// The raster audited, by its name in the visuals directory.
        name: String,
        /// The frame, 0-based.
        frame: usize,
        /// The SHA-256 `manifest.json` records.
        recorded: Digest,
        /// The SHA-256 of the decoded pixels.
        actual: Digest,
    },
    /// Audit: a raster has another frame count than required.
    #[error("audit of {name}: {found} frame(s) where {expected} are required")]
    AuditFrameCount {
        /// The raster audited, by its name in the visuals directory.
        name: String,
        /// Frames decoded.
        found: usize,
        /// Frames required.
        expected: usize,
    },
    /// Audit: the GIF carries a looping extension; it must play once.
    #[error("audit of {name}: it carries a looping extension ({repeat}); it must play once")]
    AuditLoops {
        /// The raster audited, by its name in the visuals directory.
        name: String,
        /// The repeat setting found.
        repeat: String,
    },
    /// Audit: a GIF frame's fact record does not follow from the evidence.
    #[error("audit of {name}: frame {frame}'s fact record does not follow from the evidence")]
    AuditFacts {
        /// The raster audited, by its name in the visuals directory.
        name: String,
        /// The frame, 0-based.
        frame: usize,
    },
}

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> VisualsError + '_ {
    move |source| VisualsError::Io {
        path: path.to_owned(),
        source,
    }
}
