//! The independent auditor: a separate code path from the renderer. It decodes the PNG
//! with the `png` crate's decoder and the GIF with the `gif` crate's decoder (the
//! renderer only encodes), recomputes every frame's RGBA digest, counts the GIF's frames,
//! checks that no looping extension is present, and checks every frame's fact record
//! against the evidence records it reads itself (summary.json's run outcomes and each
//! bundle's recovery evidence and audit, decoded under their schemas). It also checks
//! that no SVG relies on a font (`<text>` or `font-family`).
use std::collections::BTreeMap;
use std::path::Path;

use shardlift::core::canonical;
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::{AuditRecord, RecoveryEvidenceRecord, AUDIT, RECOVERY_EVIDENCE};

use super::error::{io, VisualsError};
use super::manifest::{VisualsManifest, MANIFEST};
use crate::release::pins;
use crate::release::summary::ReleaseSummary;

/// The workflow steps each GIF frame must show, in order.
const FRAME_STEPS: [&str; 6] = [
    "sigkill",
    "installation",
    "recovery",
    "replay",
    "reshard",
    "final",
];

fn decode_error(name: &str, reason: impl std::fmt::Display) -> VisualsError {
    VisualsError::AuditDecode {
        name: name.to_owned(),
        reason: reason.to_string(),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, VisualsError> {
    std::fs::read(path).map_err(io(path))
}

/// What the audit saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audited {
    /// Frames decoded from the PNG (1).
    pub png_frames: usize,
    /// Frames decoded from the GIF.
    pub gif_frames: usize,
}

/// Audits the visuals in `visuals_dir` against their manifest and the evidence.
pub fn audit(evidence_dir: &Path, visuals_dir: &Path) -> Result<Audited, VisualsError> {
    let manifest_bytes = read(&visuals_dir.join(MANIFEST))?;
    let body = manifest_bytes
        .strip_suffix(b"\n")
        .unwrap_or(&manifest_bytes);
    let manifest: VisualsManifest =
        canonical::decode(body).map_err(|e| decode_error(MANIFEST, e))?;
    let mut png_frames = 0;
    let mut gif_frames = 0;
    for raster in &manifest.rasters {
        let bytes = read(&visuals_dir.join(&raster.name))?;
        let (width, height, frames) = if raster.name.ends_with(".png") {
            decode_png(&raster.name, &bytes)?
        } else if raster.name.ends_with(".gif") {
            decode_gif(&raster.name, &bytes)?
        } else {
            return Err(decode_error(&raster.name, "neither a PNG nor a GIF"));
        };
        if (width, height) != (raster.width, raster.height) {
            return Err(VisualsError::AuditSize {
                name: raster.name.clone(),
                width,
                height,
                recorded_width: raster.width,
                recorded_height: raster.height,
            });
        }
        if frames.len() != raster.rgba_sha256.len() {
            return Err(VisualsError::AuditFrameCount {
                name: raster.name.clone(),
                found: frames.len(),
                expected: raster.rgba_sha256.len(),
            });
        }
        for (frame, (actual, recorded)) in frames.iter().zip(&raster.rgba_sha256).enumerate() {
            if actual != recorded {
                return Err(VisualsError::AuditPixels {
                    name: raster.name.clone(),
                    frame,
                    recorded: *recorded,
                    actual: *actual,
                });
            }
        }
        if raster.name.ends_with(".gif") {
            check_frames(&raster.name, &frames, &manifest, evidence_dir)?;
            gif_frames = frames.len();
        } else {
            png_frames = frames.len();
        }
    }
    if png_frames != 1 || gif_frames != FRAME_STEPS.len() {
        return Err(VisualsError::AuditFrameCount {
            name: MANIFEST.to_owned(),
            found: gif_frames,
            expected: FRAME_STEPS.len(),
        });
    }
    for output in manifest.outputs.iter().filter(|o| o.name.ends_with(".svg")) {
        let text = String::from_utf8_lossy(&read(&visuals_dir.join(&output.name))?).into_owned();
        if text.contains("<text") || text.contains("font-family") {
            return Err(decode_error(
                &output.name,
                "it draws text with a font instead of paths",
            ));
        }
    }
    Ok(Audited {
        png_frames,
        gif_frames,
    })
}

/// Decodes a PNG into straight RGBA8 and returns its size and the digest of its pixels.
fn decode_png(name: &str, bytes: &[u8]) -> Result<(u32, u32, Vec<Digest>), VisualsError> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().map_err(|e| decode_error(name, e))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| decode_error(name, "the image is too large"))?;
    let mut pixels = vec![0; size];
    let info = reader
        .next_frame(&mut pixels)
        .map_err(|e| decode_error(name, e))?;
    if info.color_type != png::ColorType::Rgba || info.bit_depth != png::BitDepth::Eight {
        return Err(decode_error(name, "not 8-bit RGBA"));
    }
    pixels.truncate(info.buffer_size());
    Ok((info.width, info.height, vec![Digest::of(&pixels)]))
}

/// Decodes every GIF frame into RGBA8; refuses a looping extension.
fn decode_gif(name: &str, bytes: &[u8]) -> Result<(u32, u32, Vec<Digest>), VisualsError> {
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    let mut decoder = options
        .read_info(std::io::Cursor::new(bytes))
        .map_err(|e| decode_error(name, e))?;
    let (width, height) = (u32::from(decoder.width()), u32::from(decoder.height()));
    let mut digests = Vec::new();
    while let Some(frame) = decoder
        .read_next_frame()
        .map_err(|e| decode_error(name, e))?
    {
        if (u32::from(frame.width), u32::from(frame.height)) != (width, height)
            || (frame.left, frame.top) != (0, 0)
        {
            return Err(decode_error(
                name,
                "a frame does not cover the whole picture",
            ));
        }
        digests.push(Digest::of(&frame.buffer));
    }
    // Without a NETSCAPE2.0 application extension the decoder reports Finite(0).
    let repeat = decoder.repeat();
    if repeat != gif::Repeat::Finite(0) {
        return Err(VisualsError::AuditLoops {
            name: name.to_owned(),
            repeat: format!("{repeat:?}"),
        });
    }
    Ok((width, height, digests))
}

/// Every fact a frame may state, per barrier, read from the evidence by this module.
fn expected_facts(
    evidence_dir: &Path,
) -> Result<BTreeMap<String, BTreeMap<&'static str, String>>, VisualsError> {
    let summary_path = evidence_dir.join(pins::SUMMARY);
    let summary: ReleaseSummary =
        canonical::decode(&read(&summary_path)?).map_err(|e| decode_error(pins::SUMMARY, e))?;
    let mut all = BTreeMap::new();
    for run in &summary.runs {
        let o = &run.outcome;
        let folder = evidence_dir.join(&run.bundle);
        let evidence: RecoveryEvidenceRecord =
            canonical::decode(&read(&folder.join(RECOVERY_EVIDENCE))?)
                .map_err(|e| decode_error(RECOVERY_EVIDENCE, e))?;
        let audit: AuditRecord =
            canonical::decode(&read(&folder.join(AUDIT))?).map_err(|e| decode_error(AUDIT, e))?;
        let k = &evidence.kill;
        let r = &evidence.reshard;
        let facts: BTreeMap<&'static str, String> = [
            ("target_barrier", k.target_barrier.clone()),
            ("signal", k.signal.to_string()),
            ("reaped", k.reaped.to_string()),
            (
                "acknowledged_events",
                k.acknowledged_events.len().to_string(),
            ),
            ("candidate_generation", k.candidate_generation.to_string()),
            ("candidate_installed", o.candidate_installed.to_string()),
            ("selected_generation", o.selected_generation.to_string()),
            ("selected_step", o.selected_step.to_string()),
            ("latest_status", evidence.recovery.latest_status.clone()),
            ("replayed_batches", o.replayed_batches.to_string()),
            ("target_step", evidence.target_step.to_string()),
            ("source_generation", r.source_generation.to_string()),
            ("generation", r.generation.to_string()),
            ("workers_before", r.workers_before.to_string()),
            ("workers_after", r.workers_after.to_string()),
            (
                "final_generation",
                o.final_checkpoint.generation.to_string(),
            ),
            ("final_step", o.final_checkpoint.step.to_string()),
            ("final_workers", o.final_checkpoint.workers.to_string()),
            ("status", audit.status.clone()),
        ]
        .into_iter()
        .collect();
        all.insert(o.barrier.clone(), facts);
    }
    Ok(all)
}

fn check_frames(
    name: &str,
    decoded: &[Digest],
    manifest: &VisualsManifest,
    evidence_dir: &Path,
) -> Result<(), VisualsError> {
    if decoded.len() != FRAME_STEPS.len() || manifest.gif_frames.len() != FRAME_STEPS.len() {
        return Err(VisualsError::AuditFrameCount {
            name: name.to_owned(),
            found: decoded.len(),
            expected: FRAME_STEPS.len(),
        });
    }
    let expected = expected_facts(evidence_dir)?;
    for (frame, (record, digest)) in manifest.gif_frames.iter().zip(decoded).enumerate() {
        let bad = || VisualsError::AuditFacts {
            name: name.to_owned(),
            frame,
        };
        if record.index as usize != frame || record.step != FRAME_STEPS[frame] {
            return Err(bad());
        }
        if &record.rgba_sha256 != digest {
            return Err(VisualsError::AuditPixels {
                name: name.to_owned(),
                frame,
                recorded: record.rgba_sha256,
                actual: *digest,
            });
        }
        if record.runs.len() != expected.len() {
            return Err(bad());
        }
        for run in &record.runs {
            let facts = expected.get(&run.barrier).ok_or_else(bad)?;
            if run.facts.is_empty() {
                return Err(bad());
            }
            for fact in &run.facts {
                if facts.get(fact.name.as_str()) != Some(&fact.value) {
                    return Err(bad());
                }
            }
        }
    }
    Ok(())
}
