//! `shardlift store bench`: publish vs plain write+fsync, reshard vs copy, recovery
//! verify vs raw SHA-256 — measured in one run, printed as JSON.
//!
//! Two benches: [`run_large`] publishes one synthetic state of `--state-bytes` (chunked
//! like the real state, scaled with synthetic objects) and measures bandwidth; [`run`]
//! publishes many generations of the 1.2 MB model state and measures per-commit overhead.
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::core::digest::Digest;
use crate::core::progress::Progress;
use crate::core::topology::Topology;

use crate::core::logical::LogicalState;
use crate::lab::error::{stop_if_interrupted, LabError};
use crate::store::barrier::NoHooks;
use crate::store::layout::{chunk_payloads, synthetic_object, synthetic_state};
use crate::store::writer::SyntheticSpec;
use crate::store::ObjectCheck;

/// What [`run`] measured (printed as JSON). Times are in seconds summed over the run,
/// rates in bytes per second; each `_over_` field is the store's cost over its plain
/// baseline (infinite when the baseline took no time).
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Generations published (one synthetic state each).
    pub states: u64,
    /// Chunk-payload bytes of all the states published.
    pub payload_bytes: u64,
    /// Seconds spent publishing every state.
    pub publish_s: f64,
    /// Seconds spent writing and fsyncing the same payloads as plain files (and their
    /// directory).
    pub plain_write_fsync_s: f64,
    /// `publish_s / plain_write_fsync_s`.
    pub publish_over_plain: f64,
    /// Seconds of one offline reshard of the last generation, W4 → W3.
    pub reshard_s: f64,
    /// Seconds spent copying (and fsyncing) that state's plain files.
    pub copy_s: f64,
    /// `reshard_s / copy_s`.
    pub reshard_over_copy: f64,
    /// Bytes per second recovery verified, over every generation in the store.
    pub recovery_verify_bytes_per_s: f64,
    /// Bytes per second of plain SHA-256 on one thread, in memory.
    pub raw_sha256_bytes_per_s: f64,
    /// `raw_sha256_bytes_per_s / recovery_verify_bytes_per_s`: how many times slower
    /// recovery verifies than raw hashing.
    pub recovery_over_sha256: f64,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::INFINITY
    }
}

/// Publishes about `bytes` of chunk payloads (whole synthetic states) in a scratch store
/// under `dir` (default: the system temp dir) and measures the figures of [`BenchReport`],
/// reporting its phases (publish, with one step per state; reshard; recovery) to `progress`.
pub fn run(
    bytes: u64,
    dir: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<BenchReport, LabError> {
    let work = match dir {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    };
    let store = work.path().join("store");
    let plain = work.path().join("plain");
    std::fs::create_dir(&plain)?;
    let per_state = synthetic_state(0, 0, 8192)
        .chunks()
        .iter()
        .map(|c| c.parameters().len() as u64 * 12)
        .sum::<u64>();
    let states = bytes.div_ceil(per_state).max(1);
    progress.phase("store bench: publish", Some(states));
    let publish = time_publishes(&store, &plain, states, progress)?;
    progress.finish();
    stop_if_interrupted()?;
    let last = states - 1;
    progress.phase("store bench: reshard and copy", None);
    let reshard = time_reshard_and_copy(&store, &plain, &work.path().join("copy"), last)?;
    progress.finish();
    stop_if_interrupted()?;
    let payload_bytes = states * per_state;
    // Recovery verifies every generation: `states` publishes plus the reshard's payloads.
    progress.phase("store bench: recovery and SHA-256", None);
    let recovery = time_recovery_and_sha256(&store, payload_bytes + per_state)?;
    progress.finish();
    let out = BenchReport {
        states,
        payload_bytes,
        publish_s: publish.measured_s,
        plain_write_fsync_s: publish.baseline_s,
        publish_over_plain: ratio(publish.measured_s, publish.baseline_s),
        reshard_s: reshard.measured_s,
        copy_s: reshard.baseline_s,
        reshard_over_copy: ratio(reshard.measured_s, reshard.baseline_s),
        recovery_verify_bytes_per_s: recovery.recovery_bytes_per_s,
        raw_sha256_bytes_per_s: recovery.sha256_bytes_per_s,
        recovery_over_sha256: ratio(recovery.sha256_bytes_per_s, recovery.recovery_bytes_per_s),
    };
    Ok(out)
}

/// One measured operation and the plain baseline it is compared with, in seconds.
struct Timed {
    measured_s: f64,
    baseline_s: f64,
}

/// Publishes `states` synthetic states, each timed against writing and fsyncing the same
/// chunk payloads as plain files.
fn time_publishes(
    store: &Path,
    plain: &Path,
    states: u64,
    progress: &mut dyn Progress,
) -> Result<Timed, LabError> {
    let topology = Topology::new(4)?;
    let (mut publish_s, mut plain_s) = (0.0, 0.0);
    for step in 0..states {
        let state = synthetic_state(1, step, 8192);
        let payloads: Vec<Vec<u8>> = state.chunks().iter().flat_map(chunk_payloads).collect();
        let started = Instant::now();
        crate::store::publish(store, &state, topology, &mut NoHooks)?;
        publish_s += started.elapsed().as_secs_f64();
        let started = Instant::now();
        for (i, payload) in payloads.iter().enumerate() {
            let mut file = std::fs::File::create(plain.join(format!("{step}-{i}")))?;
            file.write_all(payload)?;
            file.sync_all()?;
        }
        std::fs::File::open(plain)?.sync_all()?;
        plain_s += started.elapsed().as_secs_f64();
        progress.advance(step + 1);
    }
    Ok(Timed {
        measured_s: publish_s,
        baseline_s: plain_s,
    })
}

/// Reshards generation `last` to three workers, timed against copying (and fsyncing) that
/// state's plain files into `copy_dir`.
fn time_reshard_and_copy(
    store: &Path,
    plain: &Path,
    copy_dir: &Path,
    last: u64,
) -> Result<Timed, LabError> {
    let started = Instant::now();
    crate::store::reshard(store, last, Topology::new(3)?, ObjectCheck::Lengths)?;
    let reshard_s = started.elapsed().as_secs_f64();
    std::fs::create_dir(copy_dir)?;
    let started = Instant::now();
    for entry in std::fs::read_dir(plain)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(&format!("{last}-")) {
            let target = copy_dir.join(&name);
            std::fs::copy(entry.path(), &target)?;
            std::fs::File::open(&target)?.sync_all()?;
        }
    }
    std::fs::File::open(copy_dir)?.sync_all()?;
    Ok(Timed {
        measured_s: reshard_s,
        baseline_s: started.elapsed().as_secs_f64(),
    })
}

/// Recovery's verification rate and raw SHA-256's over as many bytes.
struct Rates {
    recovery_bytes_per_s: f64,
    sha256_bytes_per_s: f64,
}

fn time_recovery_and_sha256(store: &Path, verified_bytes: u64) -> Result<Rates, LabError> {
    let started = Instant::now();
    let report = crate::store::recover(store)?;
    let recover_s = started.elapsed().as_secs_f64();
    if !report.rejected.is_empty() {
        return Err(LabError::Model("the bench store did not verify".to_owned()));
    }
    let buffer = vec![0x5au8; 8 << 20];
    let started = Instant::now();
    let mut hashed = 0u64;
    while hashed < verified_bytes {
        std::hint::black_box(Digest::of(&buffer));
        hashed += buffer.len() as u64;
    }
    let sha_s = started.elapsed().as_secs_f64();
    Ok(Rates {
        recovery_bytes_per_s: ratio(verified_bytes as f64, recover_s),
        sha256_bytes_per_s: ratio(hashed as f64, sha_s),
    })
}

/// Bytes, seconds and MB/s (10^6 bytes per second) of one measured operation.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Figure {
    /// Bytes the operation wrote, copied or verified.
    pub bytes: u64,
    /// Wall-clock seconds it took.
    pub seconds: f64,
    /// `bytes / seconds / 1e6`.
    pub mb_per_s: f64,
}

impl Figure {
    fn new(bytes: u64, seconds: f64) -> Figure {
        Figure {
            bytes,
            seconds,
            mb_per_s: ratio(bytes as f64, seconds) / 1e6,
        }
    }
}

/// Copies every file of `from` into a new directory `to`, fsyncing each copy and then
/// `to`; returns the seconds it took.
fn copy_tree(from: &Path, to: &Path) -> Result<f64, LabError> {
    std::fs::create_dir(to)?;
    let mut names: Vec<_> = std::fs::read_dir(from)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    let started = Instant::now();
    for name in names {
        let target = to.join(&name);
        std::fs::copy(from.join(&name), &target)?;
        std::fs::File::open(&target)?.sync_all()?;
    }
    std::fs::File::open(to)?.sync_all()?;
    Ok(started.elapsed().as_secs_f64())
}

mod large;
mod timing;
pub use large::{run_large, LargeBenchOptions, LargeBenchReport, LARGE_BENCH_STATE_COPIES};
pub use timing::FsyncProbe;
