//! `shardlift bench checkpoint`: ShardLift's checkpoint I/O against what users would pick,
//! on one state, one file system, one run.
//!
//! One seeded state shaped like a model's state dict ([`state`]) is saved and loaded,
//! cold, by the disk itself (one sequential write + fsync, one read), by ShardLift
//! (publish; recovery and load with every digest verified), and — in the hash-locked
//! Python torch ([`peers`]) — by PyTorch DCP, `torch.save` and safetensors; then
//! resharded W4 -> W3 by ShardLift's offline reshard and by a DCP user's load-and-save.
//! The methods interleave over the repetitions (their order rotates each repetition);
//! every figure keeps its samples and every ratio names the figures it divides. The
//! bounds that keep ShardLift's publish and load from the disk's speed with today's
//! layout (one file per object; SHA-256 of every byte) are measured in the same run.
pub mod disk;
pub mod error;
pub mod peers;
pub mod report;
pub mod shardlift_side;
pub mod state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::core::progress::Progress;
pub use error::CheckpointBenchError;
use error::{io, stop_if_interrupted};
use report::{CheckpointBenchReport, Figure, ShardliftLayout};
use shardlift_side::ShardliftState;

/// The smallest state measured: the model's three chunk objects and more.
pub const MIN_STATE_BYTES: u64 = 4 << 20;
/// The largest state measured (held twice here and twice more by the peers).
pub const MAX_STATE_BYTES: u64 = 16 << 30;
/// The most repetitions.
pub const MAX_REPETITIONS: u32 = 20;
/// How long one peer request may take by default, in milliseconds.
pub const DEFAULT_PEER_TIMEOUT_MS: u64 = 600_000;
/// Free space kept beyond the bench's peak, in bytes.
const HEADROOM_BYTES: u64 = 512 << 20;

/// What to measure, and where.
#[derive(Clone, Debug)]
pub struct CheckpointBenchOptions {
    /// Bytes of the state (rounded down to whole FP32 weight/moment triples).
    pub state_bytes: u64,
    /// Repetitions of every method, interleaved.
    pub repetitions: u32,
    /// The directory the bench's scratch directory is made in.
    pub dir: PathBuf,
    /// The hash-locked torch's `torchrun` (the peers run in the `python` beside it);
    /// `None` with `python_peers` is [`CheckpointBenchError::PythonTorchMissing`].
    pub torchrun: Option<PathBuf>,
    /// Run the PyTorch peers (false: the disk and ShardLift only).
    pub python_peers: bool,
    /// How long one peer request may take, in milliseconds.
    pub peer_timeout_ms: u64,
    /// The state's seed.
    pub seed: u64,
}

/// Checks the options before anything is created.
pub fn validate(options: &CheckpointBenchOptions) -> Result<(), CheckpointBenchError> {
    if !(MIN_STATE_BYTES..=MAX_STATE_BYTES).contains(&options.state_bytes) {
        return Err(CheckpointBenchError::StateBytesOutOfRange {
            requested: options.state_bytes,
            min: MIN_STATE_BYTES,
            max: MAX_STATE_BYTES,
        });
    }
    if !(1..=MAX_REPETITIONS).contains(&options.repetitions) {
        return Err(CheckpointBenchError::RepetitionsOutOfRange {
            requested: options.repetitions,
            max: MAX_REPETITIONS,
        });
    }
    if !options.dir.is_dir() {
        return Err(CheckpointBenchError::NotADirectory {
            path: options.dir.clone(),
        });
    }
    Ok(())
}

/// Samples collected over the repetitions, by figure name: seconds and bytes written.
#[derive(Default)]
struct Samples(BTreeMap<&'static str, (Vec<f64>, Vec<u64>)>);

impl Samples {
    fn add(&mut self, name: &'static str, seconds: f64, bytes_written: Option<u64>) {
        let entry = self.0.entry(name).or_default();
        entry.0.push(seconds);
        entry.1.extend(bytes_written);
    }
}

/// What one repetition works with.
struct Context<'a> {
    state: &'a state::BenchState,
    shardlift: &'a ShardliftState,
    read_buffer: Vec<u8>,
    peer: Option<peers::Peer>,
}

/// The methods, in the order of the first repetition.
const METHODS: [&str; 5] = ["disk", "shardlift", "dcp", "torch", "safetensors"];

/// Runs the bench (see the module documentation), progress on `progress`.
pub fn run(
    options: &CheckpointBenchOptions,
    progress: &mut dyn Progress,
) -> Result<CheckpointBenchReport, CheckpointBenchError> {
    validate(options)?;
    let python = match options.python_peers {
        true => Some(peers::python_beside(options.torchrun.as_deref())?),
        false => None,
    };
    check_free_space(&options.dir, options.state_bytes)?;
    let load_average_start = load_average();
    let work = tempfile::Builder::new()
        .prefix(".shardlift-bench-checkpoint-")
        .tempdir_in(&options.dir)
        .map_err(io(format!(
            "creating a scratch directory in {}",
            options.dir.display()
        )))?;
    progress.phase("bench checkpoint: generating the state", None);
    let state = state::generate(options.state_bytes, options.seed);
    let state_bytes = state.bytes.len() as u64;
    let shardlift = ShardliftState::new(state_bytes, options.seed);
    let mut context = Context {
        state: &state,
        shardlift: &shardlift,
        read_buffer: vec![1u8; state.bytes.len()],
        peer: None,
    };
    let versions = match &python {
        Some(python) => Some(start_peer(&mut context, python, work.path(), options)?),
        None => None,
    };
    progress.finish();
    let mut samples = Samples::default();
    for rep in 0..options.repetitions {
        let mut methods = METHODS;
        methods.rotate_left(rep as usize % METHODS.len());
        let name = format!(
            "bench checkpoint: repetition {}/{}",
            rep + 1,
            options.repetitions
        );
        progress.phase(&name, Some(methods.len() as u64));
        for (done, method) in methods.iter().enumerate() {
            stop_if_interrupted()?;
            let rep_dir = work.path().join(format!("{rep}-{method}"));
            run_method(method, &mut context, &rep_dir, &mut samples)?;
            progress.advance(done as u64 + 1);
        }
        progress.finish();
    }
    drop(context.peer.take());
    progress.phase("bench checkpoint: bounds (objects as files, SHA-256)", None);
    let bounds = measure_bounds(&state.bytes, &work.path().join("bounds"))?;
    progress.finish();
    let figures = figures(state_bytes, samples, bounds);
    let measured = Measured {
        state: &state,
        shardlift: &shardlift,
        versions,
        figures,
        load_average_start,
    };
    Ok(assemble(options, measured))
}

/// What a run measured, before it becomes the report.
struct Measured<'a> {
    state: &'a state::BenchState,
    shardlift: &'a ShardliftState,
    versions: Option<report::PeerVersions>,
    figures: BTreeMap<String, Figure>,
    load_average_start: String,
}

/// The report of a run with `options` that measured `measured`.
fn assemble(options: &CheckpointBenchOptions, measured: Measured<'_>) -> CheckpointBenchReport {
    let Measured {
        state,
        shardlift,
        versions,
        figures,
        load_average_start,
    } = measured;
    CheckpointBenchReport {
        schema: report::REPORT_SCHEMA,
        version: report::REPORT_VERSION,
        state_bytes_requested: options.state_bytes,
        state_bytes: state.bytes.len() as u64,
        tensors: state.tensors.len(),
        tensor_bytes_max: state
            .tensors
            .iter()
            .map(|t| t.elements * 4)
            .max()
            .unwrap_or(0),
        repetitions: options.repetitions,
        seed: options.seed,
        cores_available: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cores_used: verify_threads(),
        io_threads: crate::store::writer::MAX_OBJECT_IO_THREADS,
        load_average_start,
        load_average_end: load_average(),
        cache_eviction: cache_eviction_note(),
        shardlift_layout: ShardliftLayout {
            object_bytes: u64::from(shardlift_side::OBJECT_BYTES),
            objects: shardlift.objects(),
            note: SHARDLIFT_LAYOUT_NOTE.to_owned(),
        },
        peers: versions,
        ratios: ratios(&figures),
        figures,
        notes: NOTES.iter().map(|n| (*n).to_owned()).collect(),
    }
}

fn verify_threads() -> usize {
    crate::store::recovery::verify_threads(&crate::store::RealFs)
}

/// Writes the state and its layout where the peer reads them (untimed), starts the peer
/// and has it read the state.
fn start_peer(
    context: &mut Context<'_>,
    python: &Path,
    work: &Path,
    options: &CheckpointBenchOptions,
) -> Result<report::PeerVersions, CheckpointBenchError> {
    let source = work.join("source");
    std::fs::create_dir(&source).map_err(io("creating the peers' source directory"))?;
    let (layout, data) = (source.join("layout.json"), source.join("state.bin"));
    let layout_json = serde_json::to_vec(&context.state.tensors)
        .map_err(|e| io("encoding the layout")(std::io::Error::other(e)))?;
    std::fs::write(&layout, layout_json).map_err(io("writing the layout"))?;
    std::fs::write(&data, &context.state.bytes).map_err(io("writing the peers' state"))?;
    let mut peer = peers::Peer::start(python, work, options.peer_timeout_ms)?;
    let versions = peer.versions()?;
    peer.load_state(&layout, &data)?;
    disk::remove(&data)?;
    context.peer = Some(peer);
    Ok(versions)
}

/// One method's save, cold load and (ShardLift, DCP) reshard in `dir`, removed after.
fn run_method(
    method: &str,
    context: &mut Context<'_>,
    dir: &Path,
    samples: &mut Samples,
) -> Result<(), CheckpointBenchError> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    disk::settle(parent)?;
    std::fs::create_dir(dir).map_err(io(format!("creating {}", dir.display())))?;
    match method {
        "disk" => {
            let file = dir.join("state.bin");
            samples.add(
                "disk_write",
                disk::write_fsync(&file, &context.state.bytes)?,
                None,
            );
            let read = disk::read_cold(&file, &mut context.read_buffer, &context.state.bytes)?;
            samples.add("disk_read_cold", read, None);
        }
        "shardlift" => {
            let store = dir.join("store");
            let publish_s = shardlift_side::publish(&store, context.shardlift)?;
            samples.add("shardlift_publish", publish_s, None);
            let recover_s = shardlift_side::recover_cold(&store)?;
            samples.add("shardlift_recover_cold", recover_s, None);
            let load_s = shardlift_side::load_cold(&store, context.shardlift)?;
            samples.add("shardlift_load_cold", load_s, None);
            let (reshard_s, written) = shardlift_side::reshard_w3(&store)?;
            samples.add("shardlift_reshard_w3", reshard_s, Some(written));
        }
        format => {
            if let Some(peer) = context.peer.as_mut() {
                run_peer(peer, format, dir, samples)?;
            }
        }
    }
    disk::remove(dir)
}

/// A peer format's save, cold load and (DCP) reshard W4 -> W3.
fn run_peer(
    peer: &mut peers::Peer,
    format: &str,
    dir: &Path,
    samples: &mut Samples,
) -> Result<(), CheckpointBenchError> {
    let (save, load, target) = match format {
        "dcp" => ("dcp_save", "dcp_load_cold", dir.join("checkpoint")),
        "torch" => ("torch_save", "torch_load_cold", dir.join("state.pt")),
        _ => (
            "safetensors_save",
            "safetensors_load_cold",
            dir.join("state.safetensors"),
        ),
    };
    let (save_s, written) = peer.save(format, &target)?;
    samples.add(save, save_s, Some(written));
    disk::evict_tree(&target)?;
    samples.add(load, peer.load(format, &target)?, None);
    if format == "dcp" {
        let resharded = dir.join("checkpoint-w3");
        disk::evict_tree(&target)?;
        let (reshard_s, written) = peer.reshard(&target, &resharded, 3)?;
        samples.add("dcp_reshard_w3", reshard_s, Some(written));
    }
    Ok(())
}

/// The bounds, each measured once: the state's objects written and read as plain files,
/// SHA-256 of the state on one core and on the cores recovery uses, and making the
/// store's synthetic objects.
fn measure_bounds(
    bytes: &[u8],
    dir: &Path,
) -> Result<Vec<(&'static str, f64)>, CheckpointBenchError> {
    let object_bytes = shardlift_side::OBJECT_BYTES as usize;
    let parent = dir.parent().unwrap_or(Path::new("."));
    disk::settle(parent)?;
    let threads = crate::store::writer::MAX_OBJECT_IO_THREADS;
    let write_s = disk::objects_as_files_write(dir, bytes, object_bytes, threads)?;
    let read_s = disk::objects_as_files_read_cold(dir, verify_threads())?;
    let read_io_threads_s = disk::objects_as_files_read_cold(dir, threads)?;
    disk::remove(dir)?;
    let single_s = disk::sha256_seconds(bytes, object_bytes, 1);
    let parallel_s = disk::sha256_seconds(bytes, object_bytes, verify_threads());
    let spec = ShardliftState::new(bytes.len() as u64, 0).spec;
    let started = std::time::Instant::now();
    for index in 0..spec.object_count() {
        let len = spec.object_len(index) as usize;
        std::hint::black_box(crate::store::layout::synthetic_object(
            spec.seed, index, len,
        ));
    }
    let generate_s = started.elapsed().as_secs_f64();
    Ok(vec![
        ("bound_objects_as_files_write", write_s),
        ("bound_objects_as_files_read_cold", read_s),
        (
            "bound_objects_as_files_read_cold_io_threads",
            read_io_threads_s,
        ),
        ("bound_sha256_single_core", single_s),
        ("bound_sha256_parallel", parallel_s),
        ("bound_synthetic_objects_made", generate_s),
    ])
}

fn figures(
    state_bytes: u64,
    samples: Samples,
    bounds: Vec<(&'static str, f64)>,
) -> BTreeMap<String, Figure> {
    let mut figures = BTreeMap::new();
    for (name, (seconds, written)) in samples.0 {
        figures.insert(name.to_owned(), Figure::new(state_bytes, seconds, &written));
    }
    for (name, seconds) in bounds {
        figures.insert(
            name.to_owned(),
            Figure::new(state_bytes, vec![seconds], &[]),
        );
    }
    figures
}

/// Every ratio: (name, numerator terms, denominator terms), each term (figure, field).
type RatioSpec = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [(&'static str, &'static str)],
);

const M: &str = "median_s";
const RATIOS: &[RatioSpec] = &[
    (
        "publish_over_disk_write",
        &[("shardlift_publish", M)],
        &[("disk_write", M)],
    ),
    (
        "load_over_disk_read",
        &[("shardlift_load_cold", M)],
        &[("disk_read_cold", M)],
    ),
    (
        "recover_over_disk_read",
        &[("shardlift_recover_cold", M)],
        &[("disk_read_cold", M)],
    ),
    (
        "publish_speedup_over_dcp_save",
        &[("dcp_save", M)],
        &[("shardlift_publish", M)],
    ),
    (
        "load_speedup_over_dcp_load",
        &[("dcp_load_cold", M)],
        &[("shardlift_load_cold", M)],
    ),
    (
        "publish_speedup_over_torch_save",
        &[("torch_save", M)],
        &[("shardlift_publish", M)],
    ),
    (
        "load_speedup_over_torch_load",
        &[("torch_load_cold", M)],
        &[("shardlift_load_cold", M)],
    ),
    (
        "publish_speedup_over_safetensors_save",
        &[("safetensors_save", M)],
        &[("shardlift_publish", M)],
    ),
    (
        "load_speedup_over_safetensors_load",
        &[("safetensors_load_cold", M)],
        &[("shardlift_load_cold", M)],
    ),
    (
        "dcp_save_over_disk_write",
        &[("dcp_save", M)],
        &[("disk_write", M)],
    ),
    (
        "dcp_load_over_disk_read",
        &[("dcp_load_cold", M)],
        &[("disk_read_cold", M)],
    ),
    (
        "reshard_speedup_over_dcp",
        &[("dcp_reshard_w3", M)],
        &[("shardlift_reshard_w3", M)],
    ),
    (
        "reshard_bytes_written",
        &[("shardlift_reshard_w3", "bytes_written")],
        &[("dcp_reshard_w3", "bytes_written")],
    ),
    (
        "bound_objects_as_files_over_disk_write",
        &[("bound_objects_as_files_write", M)],
        &[("disk_write", M)],
    ),
    (
        "publish_over_bound_objects_as_files",
        &[("shardlift_publish", M)],
        &[("bound_objects_as_files_write", M)],
    ),
    (
        "bound_reads_plus_hashing_over_disk_read",
        &[
            ("bound_objects_as_files_read_cold", M),
            ("bound_sha256_parallel", M),
        ],
        &[("disk_read_cold", M)],
    ),
    (
        "bound_load_speedup_over_dcp_load_by_reads",
        &[("dcp_load_cold", M)],
        &[("bound_objects_as_files_read_cold_io_threads", M)],
    ),
    (
        "bound_load_speedup_over_dcp_load_by_hashing",
        &[("dcp_load_cold", M)],
        &[("bound_sha256_parallel", M)],
    ),
    (
        "bound_reads_plus_hashing_over_recover",
        &[
            ("bound_objects_as_files_read_cold", M),
            ("bound_sha256_parallel", M),
        ],
        &[("shardlift_recover_cold", M)],
    ),
];

fn ratios(figures: &BTreeMap<String, Figure>) -> BTreeMap<String, report::Ratio> {
    RATIOS
        .iter()
        .map(|(name, top, bottom)| ((*name).to_owned(), report::ratio(figures, top, bottom)))
        .collect()
}

const SHARDLIFT_LAYOUT_NOTE: &str = "ShardLift publishes the model's state as one chunk (three objects) plus the store's seeded synthetic objects for the rest of the bytes (store publish-synthetic), each synthetic object the size of one of the state's weight tensors (object_bytes), one file each; the synthetic objects are made (SplitMix64) inside the timed publish, bound_synthetic_objects_made says what that costs";

const NOTES: &[&str] = &[
    "disk_write: one file, sequential writes of the state, fsync of the file and of its directory; disk_read_cold: the same file evicted, read whole into a buffer allocated before timing",
    "shardlift_publish: store::publish_synthetic on W4 into a new store (objects, manifest, commit record, LATEST, every fsync of RFC 0001); shardlift_recover_cold: store::recover after evicting the store (every record, manifest and object digest verified); shardlift_load_cold: store::load_newest after evicting the store again (the generation recovery selects, found from the highest record down, every digest verified once, the state rebuilt)",
    "shardlift_reshard_w3: store::reshard W4 -> W3 with the default source check (records in full, object lengths from metadata), store evicted first; bytes_written: what the reshard added to the store",
    "dcp_save: torch.distributed.checkpoint.save, default FileSystemWriter with sync_files=True, one process; dcp_load_cold: dcp.load into the held state dict, files evicted first, no digest checked; dcp_reshard_w3: what a DCP user does to move to three ranks in one process: dcp.load of the W4 checkpoint, then dcp.save with one file per rank (FileSystemWriter thread_count=3)",
    "torch_save: torch.save, then fsync of the file and of its directory; torch_load_cold: torch.load(weights_only=True) of the evicted file; safetensors_save: save_file, then the same fsyncs; safetensors_load_cold: load_file of the evicted file; every peer load is timed until one byte of every page of every tensor was read (load_file maps the file), and checked bit for bit against the state afterwards, untimed",
    "bounds, measured once after the repetitions on the same file system: bound_objects_as_files_write is the state cut into ShardLift's objects written as plain files from io_threads threads (create, write, fsync each, then the directory): today's one-file-per-object layout without the store's protocol, so publish_over_disk_write cannot go below bound_objects_as_files_over_disk_write with it; bound_objects_as_files_read_cold plus bound_sha256_parallel (on cores_used threads) is what a recovery that reads and hashes every byte costs, one after the other; bound_objects_as_files_read_cold_io_threads is the same read from io_threads threads; bound_load_speedup_over_dcp_load_by_reads and _by_hashing are the load_speedup_over_dcp_load of a load that took only those reads, or only the hashing of every byte on cores_used threads: a load that reads and verifies every byte exceeds neither here",
];

/// `/proc/loadavg`, trimmed (empty when unreadable).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn cache_eviction_note() -> String {
    "each cold load evicts the files it reads with posix_fadvise(POSIX_FADV_DONTNEED) after they were fsynced; the global page cache is never dropped (it would evict every other user's cache)".to_owned()
}

/// Refuses to start, writing nothing, when `dir`'s file system cannot hold the bench's
/// peak: the peers' copy of the state and a DCP checkpoint with its W3 reshard.
fn check_free_space(dir: &Path, state_bytes: u64) -> Result<(), CheckpointBenchError> {
    let stats =
        rustix::fs::statvfs(dir).map_err(|e| io(format!("statvfs {}", dir.display()))(e.into()))?;
    let available_bytes = stats.f_bavail.saturating_mul(stats.f_frsize);
    let needed_bytes = state_bytes.saturating_mul(3).saturating_add(HEADROOM_BYTES);
    if available_bytes < needed_bytes {
        return Err(CheckpointBenchError::InsufficientSpace {
            dir: dir.to_owned(),
            needed_bytes,
            available_bytes,
        });
    }
    Ok(())
}
