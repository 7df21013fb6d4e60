//! `docs/visuals/manifest.json`: canonical JSON (RFC 8785) under a closed, versioned
//! schema. It names the evidence directory rendered and binds, by SHA-256, every input
//! read, the embedded font, every output file, each raster's decoded RGBA pixels, and one
//! fact record per GIF frame.
use serde::{Deserialize, Serialize};
use shardlift::core::digest::Digest;

pub const MANIFEST: &str = "manifest.json";
pub const MANIFEST_SCHEMA: &str = "shardlift.visuals.manifest";
pub const MANIFEST_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisualsManifest {
    pub schema: String,
    pub version: u32,
    /// The evidence directory rendered, as `evidence/release-<commit>`.
    pub evidence: String,
    /// Every input read, repository-relative, in reading order.
    pub inputs: Vec<FileDigest>,
    /// The embedded font the text was drawn with.
    pub font: FileDigest,
    /// The barrier enum, in protocol order (the protocol view's list).
    pub barriers: Vec<String>,
    /// Every file written beside this manifest, in writing order.
    pub outputs: Vec<FileDigest>,
    /// The PNG and the GIF: size and the SHA-256 of each frame's RGBA pixels.
    pub rasters: Vec<RasterDigest>,
    /// One record per GIF frame: the workflow step it highlights and the recorded facts.
    pub gif_frames: Vec<FrameRecord>,
    /// The claim boundary every picture carries.
    pub claim: Vec<String>,
}

shardlift::canonical_record!(VisualsManifest, MANIFEST_SCHEMA, MANIFEST_VERSION, 1 << 20);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    pub name: String,
    pub bytes: u64,
    pub sha256: Digest,
}

impl FileDigest {
    pub fn of(name: &str, bytes: &[u8]) -> Self {
        FileDigest {
            name: name.to_owned(),
            bytes: bytes.len() as u64,
            sha256: Digest::of(bytes),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RasterDigest {
    pub name: String,
    pub width: u32,
    pub height: u32,
    /// SHA-256 of each frame's straight RGBA8 pixels, row-major.
    pub rgba_sha256: Vec<Digest>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameRecord {
    pub index: u32,
    pub step: String,
    pub heading: String,
    /// How long the frame shows, in hundredths of a second.
    pub delay_cs: u16,
    pub rgba_sha256: Digest,
    pub runs: Vec<FrameRun>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameRun {
    pub barrier: String,
    pub facts: Vec<Fact>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    pub name: String,
    pub value: String,
}
