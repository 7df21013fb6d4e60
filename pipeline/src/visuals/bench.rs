//! The checkpoint bench's figures, drawn from the committed `bench checkpoint` report
//! (`evidence/bench/checkpoint-<commit>.json`, the commit it was measured on in its name):
//! save and cold load by the disk, ShardLift and the PyTorch formats, the bounds of the
//! store's layout, and the W4 -> W3 reshard, each bar a median with its min-max whisker.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::error::{io, VisualsError};
use super::svg::*;

/// Where the committed reports lie, repository-relative.
pub const REPORT_DIR: &str = "evidence/bench";
/// The view's file name.
pub const VIEW: &str = "11-checkpoint-bench.svg";
/// The largest report read.
const REPORT_CAP: u64 = 1 << 20;
const WIDTH: f32 = 960.0;
const LABEL_X: f32 = 30.0;
const BAR_X: f32 = 290.0;
const BAR_W: f32 = 470.0;
const ROW_H: f32 = 24.0;

/// One figure of the report: what the view draws of it.
#[derive(Clone, Debug, Deserialize)]
pub struct BenchFigure {
    /// The median over the repetitions, in seconds.
    pub median_s: f64,
    /// The fastest repetition.
    pub min_s: f64,
    /// The slowest repetition.
    pub max_s: f64,
    /// Bytes the operation wrote, where it writes.
    #[serde(default)]
    pub bytes_written: Option<u64>,
}

/// One ratio of the report.
#[derive(Clone, Debug, Deserialize)]
pub struct BenchRatio {
    /// Its value, or null.
    pub value: Option<f64>,
}

/// The fields of the report the view draws.
#[derive(Clone, Debug, Deserialize)]
pub struct BenchReport {
    /// `shardlift.bench.checkpoint`.
    pub schema: String,
    /// 1.
    pub version: u32,
    /// Bytes of the state.
    pub state_bytes: u64,
    /// Repetitions.
    pub repetitions: u32,
    /// `/proc/loadavg` at the start.
    pub load_average_start: String,
    /// Every figure.
    pub figures: BTreeMap<String, BenchFigure>,
    /// Every ratio.
    pub ratios: BTreeMap<String, BenchRatio>,
}

/// The committed report: its repository-relative name, bytes and decoded fields. Exactly
/// one `checkpoint-*.json` must lie under [`REPORT_DIR`].
pub fn read(root: &Path) -> Result<(String, Vec<u8>, BenchReport), VisualsError> {
    let dir = root.join(REPORT_DIR);
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
        let name = entry
            .map_err(io(&dir))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.starts_with("checkpoint-") && name.ends_with(".json") {
            found.push(name);
        }
    }
    found.sort();
    let [name] = found.as_slice() else {
        return Err(VisualsError::BenchReport {
            name: REPORT_DIR.to_owned(),
            reason: format!("expected one checkpoint-<commit>.json, found {found:?}"),
        });
    };
    let path = dir.join(name);
    let rel = format!("{REPORT_DIR}/{name}");
    let meta = path.symlink_metadata().map_err(io(&path))?;
    if !meta.is_file() || meta.len() > REPORT_CAP {
        return Err(VisualsError::BenchReport {
            name: rel,
            reason: "not a regular file under 1 MiB".to_owned(),
        });
    }
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let report: BenchReport =
        serde_json::from_slice(&bytes).map_err(|e| VisualsError::BenchReport {
            name: rel.clone(),
            reason: e.to_string(),
        })?;
    if report.schema != "shardlift.bench.checkpoint" || report.version != 1 {
        return Err(VisualsError::BenchReport {
            name: rel,
            reason: format!("schema {} version {}", report.schema, report.version),
        });
    }
    Ok((rel, bytes, report))
}

/// A bar: its label, the figures summed (one figure, or a bound of two), its colours.
struct Bar {
    label: &'static str,
    figures: &'static [&'static str],
    colours: (&'static str, &'static str),
}

const SHARDLIFT: (&str, &str) = (NOTE_FILL, NOTE);
const DISK: (&str, &str) = (GOOD_FILL, GOOD);
const BOUND: (&str, &str) = (WARN_FILL, MUTED);
const PEER: (&str, &str) = (PANEL, MUTED);

const SAVE: [Bar; 6] = [
    Bar {
        label: "disk: write + fsync",
        figures: &["disk_write"],
        colours: DISK,
    },
    Bar {
        label: "bound: objects as files",
        figures: &["bound_objects_as_files_write"],
        colours: BOUND,
    },
    Bar {
        label: "ShardLift publish",
        figures: &["shardlift_publish"],
        colours: SHARDLIFT,
    },
    Bar {
        label: "DCP save",
        figures: &["dcp_save"],
        colours: PEER,
    },
    Bar {
        label: "torch.save + fsync",
        figures: &["torch_save"],
        colours: PEER,
    },
    Bar {
        label: "safetensors + fsync",
        figures: &["safetensors_save"],
        colours: PEER,
    },
];

const LOAD: [Bar; 7] = [
    Bar {
        label: "disk: read",
        figures: &["disk_read_cold"],
        colours: DISK,
    },
    Bar {
        label: "bound: reads + SHA-256",
        figures: &["bound_objects_as_files_read_cold", "bound_sha256_parallel"],
        colours: BOUND,
    },
    Bar {
        label: "ShardLift recover",
        figures: &["shardlift_recover_cold"],
        colours: SHARDLIFT,
    },
    Bar {
        label: "ShardLift load (verified)",
        figures: &["shardlift_load_cold"],
        colours: SHARDLIFT,
    },
    Bar {
        label: "DCP load",
        figures: &["dcp_load_cold"],
        colours: PEER,
    },
    Bar {
        label: "torch.load",
        figures: &["torch_load_cold"],
        colours: PEER,
    },
    Bar {
        label: "safetensors load",
        figures: &["safetensors_load_cold"],
        colours: PEER,
    },
];

const RESHARD: [Bar; 2] = [
    Bar {
        label: "ShardLift reshard",
        figures: &["shardlift_reshard_w3"],
        colours: SHARDLIFT,
    },
    Bar {
        label: "DCP load + save",
        figures: &["dcp_reshard_w3"],
        colours: PEER,
    },
];

/// (median, min, max) of a bar: the sums of its figures' fields; None when one is missing.
fn bar_values(report: &BenchReport, bar: &Bar) -> Option<(f64, f64, f64)> {
    bar.figures
        .iter()
        .try_fold((0.0, 0.0, 0.0), |(m, lo, hi), name| {
            let f = report.figures.get(*name)?;
            Some((m + f.median_s, lo + f.min_s, hi + f.max_s))
        })
}

fn seconds(value: f64) -> String {
    if value < 0.1 {
        format!("{:.1} ms", value * 1e3)
    } else {
        format!("{value:.2} s")
    }
}

/// Draws `bars` from `y` on the scale `px_per_s`; returns the y after the last row.
fn panel(
    svg: &mut Svg,
    report: &BenchReport,
    heading: &str,
    bars: &[Bar],
    y: f32,
    px_per_s: f32,
) -> f32 {
    svg.text(LABEL_X, y, 15.0, INK, heading);
    let mut y = y + 12.0;
    for bar in bars {
        svg.text(LABEL_X, y + 16.0, 12.0, INK, bar.label);
        match bar_values(report, bar) {
            Some((median, min, max)) => {
                let (fill, edge) = bar.colours;
                let w = (median as f32 * px_per_s).max(1.0);
                svg.rect(BAR_X, y + 3.0, w, ROW_H - 6.0, fill, Some(edge));
                let (x0, x1) = (BAR_X + min as f32 * px_per_s, BAR_X + max as f32 * px_per_s);
                let mid = y + ROW_H / 2.0;
                svg.line(x0, mid, x1, mid, INK, false);
                svg.line(x0, mid - 5.0, x0, mid + 5.0, INK, false);
                svg.line(x1, mid - 5.0, x1, mid + 5.0, INK, false);
                let text = format!("{} ({} to {})", seconds(median), seconds(min), seconds(max));
                svg.text(
                    BAR_X + w.max(x1 - BAR_X) + 8.0,
                    y + 16.0,
                    11.0,
                    MUTED,
                    &text,
                );
            }
            None => svg.text(BAR_X, y + 16.0, 11.0, MUTED, "not measured in this run"),
        }
        y += ROW_H;
    }
    y + 18.0
}

fn ratio_line(report: &BenchReport, name: &str) -> String {
    match report.ratios.get(name).and_then(|r| r.value) {
        Some(value) if value.abs() < 0.01 => format!("{name} {value:.2e}"),
        Some(value) => format!("{name} {value:.3}"),
        None => format!("{name} n/a"),
    }
}

/// The view of the report `name` (its repository-relative path).
pub fn view(name: &str, report: &BenchReport) -> Svg {
    let height = 790.0;
    let title = format!(
        "Checkpoint I/O, {:.0} MiB state, one run",
        report.state_bytes as f64 / f64::from(1u32 << 20)
    );
    let shows = format!(
        "Median of {} interleaved repetitions (bar) and min-max (whisker); cold loads; load average at start {}.",
        report.repetitions,
        report.load_average_start.split(' ').take(3).collect::<Vec<_>>().join(" ")
    );
    let claim1 = format!("Claim boundary: figures of {name}, drawn as recorded.");
    let claim2 = "One run on one machine: compare ratios within it, never figures across runs.";
    let mut svg = Svg::new(WIDTH, height, &title, &format!("{shows} {claim1} {claim2}"));
    svg.text(30.0, 38.0, 20.0, INK, &title);
    svg.text(30.0, 60.0, 12.0, MUTED, &shows);
    let longest = SAVE
        .iter()
        .chain(LOAD.iter())
        .filter_map(|bar| bar_values(report, bar).map(|(_, _, max)| max))
        .fold(0.0_f64, f64::max)
        .max(1e-3);
    let px_per_s = BAR_W / longest as f32;
    let y = panel(&mut svg, report, "Save (durable)", &SAVE, 95.0, px_per_s);
    let y = panel(&mut svg, report, "Load (cold)", &LOAD, y, px_per_s);
    let reshard_longest = RESHARD
        .iter()
        .filter_map(|bar| bar_values(report, bar).map(|(_, _, max)| max))
        .fold(0.0_f64, f64::max)
        .max(1e-3);
    let y = panel(
        &mut svg,
        report,
        "Reshard W4 -> W3",
        &RESHARD,
        y,
        BAR_W / reshard_longest as f32,
    );
    let written = |figure: &str| {
        report
            .figures
            .get(figure)
            .and_then(|f| f.bytes_written)
            .map_or("n/a".to_owned(), |b| b.to_string())
    };
    let lines: Vec<String> = [
        "publish_over_disk_write",
        "load_over_disk_read",
        "publish_speedup_over_dcp_save",
        "load_speedup_over_dcp_load",
        "reshard_speedup_over_dcp",
        "reshard_bytes_written",
        "bound_objects_as_files_over_disk_write",
        "bound_load_speedup_over_dcp_load_by_reads",
    ]
    .iter()
    .map(|name| ratio_line(report, name))
    .chain([format!(
        "bytes written by the reshard: ShardLift {}, DCP {}",
        written("shardlift_reshard_w3"),
        written("dcp_reshard_w3")
    )])
    .collect();
    svg.card(
        30.0,
        y - 6.0,
        900.0,
        (PANEL, EDGE),
        "Ratios (from the medians above)",
        &lines,
    );
    svg.rect(0.0, height - 48.0, WIDTH, 48.0, WARN_FILL, None);
    svg.text(30.0, height - 28.0, 12.0, INK, &claim1);
    svg.text(30.0, height - 11.0, 12.0, INK, claim2);
    svg
}
