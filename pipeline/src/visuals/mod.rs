//! `pipeline visuals`: pictures of the committed release evidence, and their check.
//!
//! `render` draws ten SVG views of the evidence and one of the committed `bench
//! checkpoint` report ([`bench`](mod@bench)), a PNG raster of the committed `verify-bundle`
//! transcripts and a six-frame GIF of the workflow (no looping extension: it plays once)
//! from one evidence directory, RFC 0001 and the barrier enum, and writes them with
//! `manifest.json` (see [`manifest`]). Text is drawn as paths from the embedded font, and
//! nothing drawn depends on the time, the host, a path or a PID, so rendering is
//! byte-for-byte repeatable.
//!
//! `check` renders again in memory and compares, stopping at the first failure, each
//! naming the file: the directory's file set; every output, byte for byte (a file that
//! differs from the fresh render and from its manifest digest was tampered with; one that
//! matches its manifest digest was rendered from other evidence or an older renderer);
//! `manifest.json`, byte for byte (with the first input whose recorded digest is not the
//! committed file's); then the independent [`audit`] of the rasters.
pub mod audit;
pub mod bench;
pub mod error;
pub mod evidence;
pub mod font;
pub mod manifest;
pub mod raster;
pub mod svg;
pub mod views;

use std::path::Path;

use shardlift::core::barrier::Barrier;
use shardlift::core::canonical;
use shardlift::core::digest::Digest;
use shardlift::durable;

use error::io;
pub use error::VisualsError;
use manifest::{Fact, FileDigest, FrameRecord, FrameRun, RasterDigest, VisualsManifest, MANIFEST};

/// The PNG raster of the verify-bundle transcripts.
pub const TRANSCRIPTS_PNG: &str = "transcripts.png";
/// The six-frame workflow GIF.
pub const WORKFLOW_GIF: &str = "workflow.gif";
/// How long each GIF frame shows, in hundredths of a second.
pub const FRAME_DELAY_CS: u16 = 200;
/// The GIF's frame count: one per workflow step.
pub const GIF_FRAMES: usize = views::STEPS.len();

/// A rendering: every file, in writing order, `manifest.json` last.
pub struct Rendered {
    /// The evidence directory's name, `release-<commit>`.
    pub evidence: String,
    /// Every file, by name, with its bytes.
    pub files: Vec<(String, Vec<u8>)>,
    /// The manifest, as written last.
    pub manifest: VisualsManifest,
}

/// Every file name `render` writes, in order.
pub fn output_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "01-workflow.svg",
        "02-cli-evidence.svg",
        "03-outcomes.svg",
        "04-fault-boundary.svg",
        "05-lineage.svg",
        "06-projection.svg",
        "07-ledger.svg",
        "08-topology.svg",
        "09-protocol.svg",
        "10-bundle.svg",
        bench::VIEW,
        TRANSCRIPTS_PNG,
        WORKFLOW_GIF,
    ]
    .map(str::to_owned)
    .to_vec();
    names.push(MANIFEST.to_owned());
    names
}

/// Renders every file from the evidence directory `evidence_dir` (and RFC 0001 under
/// `root`), without writing anything.
pub fn render(root: &Path, evidence_dir: &Path) -> Result<Rendered, VisualsError> {
    let mut evidence = evidence::read(root, evidence_dir)?;
    let font = font::Font::embedded()?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, svg) in views::views(&evidence) {
        files.push((name.to_owned(), svg.finish(&font)?.into_bytes()));
    }
    let (bench_name, bench_bytes, bench_report) = bench::read(root)?;
    let bench_svg = bench::view(&bench_name, &bench_report).finish(&font)?;
    files.push((bench::VIEW.to_owned(), bench_svg.into_bytes()));
    evidence.inputs.push((bench_name, bench_bytes));
    let mut rasters = Vec::new();

    let page = views::transcripts(&evidence).finish(&font)?;
    let image = raster::rasterise(TRANSCRIPTS_PNG, &page)?;
    files.push((
        TRANSCRIPTS_PNG.to_owned(),
        raster::encode_png(TRANSCRIPTS_PNG, &image)?,
    ));
    rasters.push(RasterDigest {
        name: TRANSCRIPTS_PNG.to_owned(),
        width: image.width,
        height: image.height,
        rgba_sha256: vec![Digest::of(&image.pixels)],
    });

    let (gif, gif_raster, records) = render_workflow(&evidence, &font)?;
    files.push((WORKFLOW_GIF.to_owned(), gif));
    rasters.push(gif_raster);

    let evidence_path = format!("evidence/{}", evidence.name);
    let manifest = VisualsManifest {
        schema: manifest::MANIFEST_SCHEMA.to_owned(),
        version: manifest::MANIFEST_VERSION,
        evidence: evidence_path.clone(),
        inputs: evidence
            .inputs
            .iter()
            .map(|(name, bytes)| FileDigest::of(&input_path(&evidence_path, name), bytes))
            .collect(),
        font: FileDigest::of(font::FONT_NAME, font::FONT),
        barriers: Barrier::ALL.iter().map(|b| b.name().to_owned()).collect(),
        outputs: files
            .iter()
            .map(|(name, bytes)| FileDigest::of(name, bytes))
            .collect(),
        rasters,
        gif_frames: records,
        claim: views::claim(&evidence).to_vec(),
    };
    let mut bytes = canonical::encode(&manifest).map_err(VisualsError::ManifestEncode)?;
    bytes.push(b'\n');
    files.push((MANIFEST.to_owned(), bytes));
    Ok(Rendered {
        evidence: evidence.name,
        files,
        manifest,
    })
}

/// The workflow GIF (one frame per step of the demo), its raster digest and the frames'
/// records for the manifest.
fn render_workflow(
    evidence: &evidence::Evidence,
    font: &font::Font<'_>,
) -> Result<(Vec<u8>, RasterDigest, Vec<FrameRecord>), VisualsError> {
    let facts = views::workflow_facts(evidence);
    let mut frames = Vec::new();
    let mut records = Vec::new();
    let (mut width, mut height) = (0, 0);
    for (index, step) in facts.iter().enumerate() {
        let svg = views::workflow(evidence, Some(index)).finish(font)?;
        let image = raster::rasterise(WORKFLOW_GIF, &svg)?;
        (width, height) = (image.width, image.height);
        let frame = raster::gif_frame(WORKFLOW_GIF, &image, FRAME_DELAY_CS)?;
        records.push(FrameRecord {
            index: index as u32,
            step: step.step.to_owned(),
            heading: step.heading.to_owned(),
            delay_cs: FRAME_DELAY_CS,
            rgba_sha256: Digest::of(&frame.rgba),
            runs: step
                .runs
                .iter()
                .map(|(barrier, facts)| FrameRun {
                    barrier: barrier.clone(),
                    facts: facts
                        .iter()
                        .map(|(name, value)| Fact {
                            name: (*name).to_owned(),
                            value: value.clone(),
                        })
                        .collect(),
                })
                .collect(),
        });
        frames.push(frame);
    }
    let gif = raster::encode_gif(WORKFLOW_GIF, width, height, &frames)?;
    let gif_raster = RasterDigest {
        name: WORKFLOW_GIF.to_owned(),
        width,
        height,
        rgba_sha256: records.iter().map(|r| r.rgba_sha256).collect(),
    };
    Ok((gif, gif_raster, records))
}

/// An input's repository-relative name: evidence files under `evidence/<dir>/`; RFC 0001
/// and the bench report as they are.
fn input_path(evidence_path: &str, name: &str) -> String {
    if name == evidence::RFC_PATH || name.starts_with(bench::REPORT_DIR) {
        name.to_owned()
    } else {
        format!("{evidence_path}/{name}")
    }
}

/// Writes a rendering into `out` (created if missing), each file through the durable
/// module: temp, fsync, rename over the old version, directory fsync.
pub fn write(rendered: &Rendered, out: &Path) -> Result<(), VisualsError> {
    durable::ensure_dir_all(out)?;
    for (name, bytes) in &rendered.files {
        durable::write_file(&out.join(name), bytes, durable::WriteOptions::REPLACEABLE)?;
    }
    Ok(())
}

/// Decodes `manifest.json`'s bytes (a trailing newline after the canonical record).
pub fn decode_manifest(bytes: &[u8]) -> Result<VisualsManifest, VisualsError> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    canonical::decode(body).map_err(|source| VisualsError::Record {
        name: MANIFEST.to_owned(),
        source,
    })
}

/// The evidence directory `check` compares with when none is given: the single
/// `evidence/release-*` under `root`; with several, the one `manifest.json` names.
pub fn evidence_for_check(
    root: &Path,
    visuals_dir: &Path,
) -> Result<std::path::PathBuf, VisualsError> {
    match evidence::default_evidence_dir(root) {
        Err(VisualsError::AmbiguousEvidence(found)) => {
            let path = visuals_dir.join(MANIFEST);
            let recorded = std::fs::read(&path)
                .ok()
                .and_then(|bytes| decode_manifest(&bytes).ok())
                .map(|manifest| root.join(manifest.evidence))
                .filter(|dir| dir.is_dir());
            recorded.ok_or(VisualsError::AmbiguousEvidence(found))
        }
        other => other,
    }
}

/// What a passing check saw.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Checked {
    /// Always `current`.
    pub status: &'static str,
    /// The evidence directory's name.
    pub evidence: String,
    /// How many files a render writes, `manifest.json` included.
    pub files: usize,
    /// How many frames the GIF has.
    pub gif_frames: usize,
}

/// Checks the visuals in `visuals_dir` against a fresh render of `evidence_dir` (see the
/// module documentation for the order).
pub fn check(
    root: &Path,
    evidence_dir: &Path,
    visuals_dir: &Path,
) -> Result<Checked, VisualsError> {
    let fresh = render(root, evidence_dir)?;
    check_against(&fresh, evidence_dir, visuals_dir)
}

/// [`check`] against an already made fresh rendering of `evidence_dir`.
pub fn check_against(
    fresh: &Rendered,
    evidence_dir: &Path,
    visuals_dir: &Path,
) -> Result<Checked, VisualsError> {
    let on_disk = read_outputs(fresh, visuals_dir)?;
    let Some((manifest_bytes, outputs)) = on_disk.split_last() else {
        return Err(VisualsError::Missing {
            name: MANIFEST.to_owned(),
        });
    };
    let recorded = decode_manifest(manifest_bytes).ok();
    if let Some(recorded) = &recorded {
        if recorded.evidence != fresh.manifest.evidence {
            return Err(VisualsError::OtherEvidence {
                recorded: recorded.evidence.clone(),
                found: fresh.manifest.evidence.clone(),
            });
        }
    }
    for ((name, fresh_bytes), disk) in fresh.files.iter().zip(outputs) {
        if disk == fresh_bytes {
            continue;
        }
        let actual = Digest::of(disk);
        let Some(recorded) = &recorded else {
            return Err(VisualsError::Stale { name: name.clone() });
        };
        match recorded.outputs.iter().find(|o| &o.name == name) {
            Some(entry) if entry.sha256 != actual || entry.bytes != disk.len() as u64 => {
                return Err(VisualsError::OutputChanged {
                    name: name.clone(),
                    recorded: entry.sha256,
                    actual,
                });
            }
            Some(_) => {
                return Err(VisualsError::RenderedFromOther {
                    name: name.clone(),
                    input: first_changed_input(recorded, fresh)
                        .unwrap_or_else(|| "none: the renderer changed".to_owned()),
                });
            }
            None => return Err(VisualsError::Stale { name: name.clone() }),
        }
    }
    let fresh_manifest = fresh.files.last().map(|(_, bytes)| bytes.as_slice());
    if fresh_manifest != Some(manifest_bytes.as_slice()) {
        let Some(recorded) = &recorded else {
            return Err(VisualsError::Stale {
                name: MANIFEST.to_owned(),
            });
        };
        return Err(VisualsError::ManifestStale {
            input: first_changed_input(recorded, fresh).unwrap_or_else(|| "none".to_owned()),
        });
    }
    audit::audit(evidence_dir, visuals_dir)?;
    Ok(Checked {
        status: "current",
        evidence: fresh.manifest.evidence.clone(),
        files: fresh.files.len(),
        gif_frames: fresh.manifest.gif_frames.len(),
    })
}

/// The files of `visuals_dir`, read in the order of `fresh`'s files (the manifest last),
/// which must be exactly the files present.
fn read_outputs(fresh: &Rendered, visuals_dir: &Path) -> Result<Vec<Vec<u8>>, VisualsError> {
    let mut present = Vec::new();
    for entry in std::fs::read_dir(visuals_dir).map_err(io(visuals_dir))? {
        let entry = entry.map_err(io(visuals_dir))?;
        present.push(entry.file_name().to_string_lossy().into_owned());
    }
    present.sort();
    for (name, _) in &fresh.files {
        if !present.contains(name) {
            return Err(VisualsError::Missing { name: name.clone() });
        }
    }
    if let Some(extra) = present
        .iter()
        .find(|name| !fresh.files.iter().any(|(n, _)| n == *name))
    {
        return Err(VisualsError::Unexpected {
            name: extra.clone(),
        });
    }
    let mut on_disk = Vec::new();
    for (name, _) in &fresh.files {
        let path = visuals_dir.join(name);
        on_disk.push(std::fs::read(&path).map_err(io(&path))?);
    }
    Ok(on_disk)
}

/// The first input whose digest differs between the recorded manifest and the fresh
/// rendering's ("the input list" when their counts differ), if any.
fn first_changed_input(recorded: &VisualsManifest, fresh: &Rendered) -> Option<String> {
    let fresh_inputs = &fresh.manifest.inputs;
    if recorded.inputs.len() != fresh_inputs.len() {
        return Some("the input list".to_owned());
    }
    recorded
        .inputs
        .iter()
        .zip(fresh_inputs)
        .find(|(a, b)| a != b)
        .map(|(_, b)| b.name.clone())
}
