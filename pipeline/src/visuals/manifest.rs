//! `docs/visuals/manifest.json`: canonical JSON (RFC 8785) under a closed, versioned
//! schema. It names the evidence directory rendered and binds, by SHA-256, every input
//! read, the embedded font, every output file, each raster's decoded RGBA pixels, and one
//! fact record per GIF frame.
use serde::{Deserialize, Serialize};
use shardlift::core::digest::Digest;

/// File name of the manifest in the visuals directory.
pub const MANIFEST: &str = "manifest.json";
/// Schema id of [`VisualsManifest`].
pub const MANIFEST_SCHEMA: &str = "shardlift.visuals.manifest";
/// The one manifest schema version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// `manifest.json`: what the visuals were drawn from and what they are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisualsManifest {
    /// [`MANIFEST_SCHEMA`].
    pub schema: String,
    /// [`MANIFEST_VERSION`].
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

/// A file by name, size and SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    /// Its name: repository-relative for an input, directory-relative for an output.
    pub name: String,
    /// Its size, in bytes.
    pub bytes: u64,
    /// The SHA-256 of its bytes.
    pub sha256: Digest,
}

impl FileDigest {
    /// The digest of `bytes`, named `name`.
    pub fn of(name: &str, bytes: &[u8]) -> Self {
        FileDigest {
            name: name.to_owned(),
            bytes: bytes.len() as u64,
            sha256: Digest::of(bytes),
        }
    }
}

/// A raster output by its decoded pixels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RasterDigest {
    /// Its file name.
    pub name: String,
    /// Width, in pixels.
    pub width: u32,
    /// Height, in pixels.
    pub height: u32,
    /// SHA-256 of each frame's straight RGBA8 pixels, row-major.
    pub rgba_sha256: Vec<Digest>,
}

/// One GIF frame: the workflow step it highlights and the facts it states.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameRecord {
    /// The frame, 0-based.
    pub index: u32,
    /// The workflow step's name, e.g. `sigkill`.
    pub step: String,
    /// The frame's heading, e.g. `1 recorded real SIGKILL`.
    pub heading: String,
    /// How long the frame shows, in hundredths of a second.
    pub delay_cs: u16,
    /// SHA-256 of the frame's RGBA pixels as the GIF's palette maps them back.
    pub rgba_sha256: Digest,
    /// The facts per run, in barrier order.
    pub runs: Vec<FrameRun>,
}

/// The facts a frame states about one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameRun {
    /// The barrier of the run.
    pub barrier: String,
    /// The facts, each copied from a recorded field.
    pub facts: Vec<Fact>,
}

/// One stated fact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// Its name, after the recorded field it is copied from (e.g. `target_barrier`).
    pub name: String,
    /// Its value, as drawn.
    pub value: String,
}
