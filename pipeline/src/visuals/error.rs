//! Why rendering or checking the visuals failed: one variant per reason, each naming the
//! file it concerns.
use std::path::PathBuf;

use shardlift::core::canonical::CanonicalError;
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::BundleError;

#[derive(Debug, thiserror::Error)]
pub enum VisualsError {
    #[error("I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no evidence/release-* directory under {0}; pass --evidence")]
    NoEvidence(PathBuf),
    #[error("several evidence directories ({0}); pass --evidence")]
    AmbiguousEvidence(String),
    #[error("{path} has no directory name")]
    UnnamedEvidence { path: PathBuf },
    #[error("the bundle of {barrier} does not verify: {source}")]
    Bundle {
        barrier: String,
        source: Box<BundleError>,
    },
    #[error("{name} does not decode under its schema: {source}")]
    Record {
        name: String,
        source: CanonicalError,
    },
    #[error("{name} has no stdout section")]
    TranscriptNoStdout { name: String },
    #[error("{name}: its stdout is not one verify-bundle record: {source}")]
    TranscriptRecord {
        name: String,
        source: serde_json::Error,
    },
    #[error("{name} disagrees with the bundle it reports on")]
    TranscriptDisagrees { name: String },
    #[error("summary.json does not list a run for {barrier}")]
    SummaryRun { barrier: String },
    #[error("{name}: the barriers are not listed in the order of the barrier enum")]
    RfcOrder { name: String },
    #[error("the embedded font does not parse: {0}")]
    Font(ttf_parser::FaceParsingError),
    #[error("the embedded font has no glyph for {0:?}")]
    MissingGlyph(char),
    #[error("{name}: the drawn SVG does not parse: {source}")]
    Svg {
        name: String,
        source: resvg::usvg::Error,
    },
    #[error("{name}: cannot allocate a {width}x{height} raster")]
    RasterSize {
        name: String,
        width: u32,
        height: u32,
    },
    #[error("{name}: PNG encoding failed: {source}")]
    PngEncode {
        name: String,
        source: png::EncodingError,
    },
    #[error("{name}: GIF encoding failed: {source}")]
    GifEncode {
        name: String,
        source: gif::EncodingError,
    },
    #[error("manifest.json cannot be encoded: {0}")]
    ManifestEncode(CanonicalError),
    #[error("{name} is missing from the visuals; run `pipeline visuals render`")]
    Missing { name: String },
    #[error("{name} does not belong in the visuals directory")]
    Unexpected { name: String },
    #[error("manifest.json names evidence {recorded}, but the evidence checked is {found}: stale, run `pipeline visuals render`")]
    OtherEvidence { recorded: String, found: String },
    #[error("{name} matches its manifest digest but not a fresh render of the committed evidence: it was rendered from other evidence (first input that differs: {input}); run `pipeline visuals render`")]
    RenderedFromOther { name: String, input: String },
    #[error("manifest.json is stale or tampered: it differs from a fresh render (first recorded input that differs from the committed file: {input}); run `pipeline visuals render`")]
    ManifestStale { input: String },
    #[error("{name} was tampered with: manifest.json records {recorded}, the file is {actual}")]
    OutputChanged {
        name: String,
        recorded: Digest,
        actual: Digest,
    },
    #[error("{name} is stale or tampered: it differs from a fresh render of the committed evidence; run `pipeline visuals render`")]
    Stale { name: String },
    #[error("audit of {name}: it does not decode: {reason}")]
    AuditDecode { name: String, reason: String },
    #[error("audit of {name}: {width}x{height} pixels where manifest.json records {recorded_width}x{recorded_height}")]
    AuditSize {
        name: String,
        width: u32,
        height: u32,
        recorded_width: u32,
        recorded_height: u32,
    },
    #[error("audit of {name}: frame {frame}'s decoded RGBA pixels are {actual}, manifest.json records {recorded}")]
    AuditPixels {
        name: String,
        frame: usize,
        recorded: Digest,
        actual: Digest,
    },
    #[error("audit of {name}: {found} frame(s) where {expected} are required")]
    AuditFrameCount {
        name: String,
        found: usize,
        expected: usize,
    },
    #[error("audit of {name}: it carries a looping extension ({repeat}); it must play once")]
    AuditLoops { name: String, repeat: String },
    #[error("audit of {name}: frame {frame}'s fact record does not follow from the evidence")]
    AuditFacts { name: String, frame: usize },
}

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> VisualsError + '_ {
    move |source| VisualsError::Io {
        path: path.to_owned(),
        source,
    }
}
