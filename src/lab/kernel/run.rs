//! One crash test on the kernel, phase by phase (see the module doc of [`super`]).
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::core::digest::Digest;
use crate::durable::file::{write_file, WriteOptions};
use crate::lab::crash_model::trace::Trace;
use crate::lab::crash_model::{self as model, Unread};
use crate::lab::external::check::{run_check, CheckOutcome};
use crate::lab::external::{AckPattern, CrashTestError};
use crate::lab::kernel::blklog::{self, BlockLog};
use crate::lab::kernel::boot::{self, Booted, GuestWriter};
use crate::lab::kernel::config::{FileSystem, KernelConfig, PhaseTimings, MAX_LOG_BYTES};
use crate::lab::kernel::error::KernelError;
use crate::lab::kernel::guest::{self, Accelerator};
use crate::lab::kernel::host_record;
use crate::lab::kernel::pin::{self, KernelInstall, KERNEL_PACKAGE_SHA256, KERNEL_RELEASE};
use crate::lab::kernel::recover::recover_ext4;
use crate::lab::kernel::recover_guest::{RecoveryGuest, STATES_PER_GUEST};
use crate::lab::kernel::state_check::StateCheck;
use crate::lab::kernel::states::{self, BlockState, StateKind};
use crate::lab::matrix::Violation;

/// The pinned kernel, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct KernelPin {
    /// The release.
    pub release: &'static str,
    /// SHA-256 of its Debian package.
    pub package_sha256: &'static str,
}

/// One failing state.
#[derive(Clone, Debug, Serialize)]
pub struct KernelFailure {
    /// Index among the generated states (`states/N/`).
    pub state: usize,
    /// How it was made.
    pub kind: StateKind,
    /// Log entries before its cut.
    pub cut: usize,
    /// Acknowledgements it follows (the check's `SHARDLIFT_ACKED`).
    pub acknowledged: usize,
    /// Why recovery failed (then no check ran), if it did.
    pub recovery: Option<String>,
    /// The recovered tree (every path: `dir` or its SHA-256) when it is none of the
    /// model's crash states (then no check ran): a state the model does not admit.
    pub outside_model: Option<BTreeMap<String, String>>,
    /// How the check ended, if it ran.
    pub check: Option<CheckOutcome>,
    /// The last bytes of the check's output.
    pub output_tail: String,
    /// With an in-process check: the invariants the state broke.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
}

/// The result of one kernel crash test (`report.json`, and stdout with `--json`).
#[derive(Clone, Debug, Serialize)]
pub struct KernelReport {
    /// `shardlift-crash-test-kernel-report`.
    pub schema: &'static str,
    /// The schema's version (1).
    pub version: u32,
    /// The file system.
    pub file_system: FileSystem,
    /// The pinned kernel.
    pub kernel: KernelPin,
    /// The accelerator QEMU used.
    pub accelerator: Accelerator,
    /// The acknowledgement lines the agent marked, in order, then `<exit>` (also marked).
    pub acknowledgements: Vec<String>,
    /// Entries in the block log.
    pub log_entries: usize,
    /// Write entries (file system and markers).
    pub log_writes: usize,
    /// Flush entries.
    pub log_flushes: usize,
    /// Distinct flush-point states.
    pub flush_points: usize,
    /// Distinct seeded reordered states.
    pub reordered_states: usize,
    /// Distinct torn states.
    pub torn_states: usize,
    /// States checked.
    pub states: usize,
    /// States that recovered and whose check passed.
    pub passing_states: usize,
    /// States that failed recovery or the check, or lie outside the model.
    pub failing_states: usize,
    /// With `--hold-model`: the model's distinct crash states of the same writer.
    pub model_states: Option<usize>,
    /// With `--hold-model`: whether the model was deliberately narrowed.
    pub narrowed_model: bool,
    /// Recovered states that are none of the model's (each is a failure).
    pub outside_model_states: usize,
    /// Every failing state.
    pub failures: Vec<KernelFailure>,
    /// Per-phase timings.
    pub timings: PhaseTimings,
}

/// Runs a whole kernel crash test.
pub fn run(
    config: &KernelConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<KernelReport, KernelError> {
    run_with(config, None, progress)
}

/// Runs a whole kernel crash test, each state checked by `in_process` when given, else
/// by the check command.
pub fn run_with(
    config: &KernelConfig,
    in_process: Option<&mut dyn StateCheck>,
    progress: &mut dyn FnMut(&str),
) -> Result<KernelReport, KernelError> {
    if config.file_system == FileSystem::Model {
        return Err(KernelError::UnsupportedFileSystem {
            name: "model",
            reason: "it is ShardLift's own model, not a file system of the kernel",
        });
    }
    if config.writer.is_empty() {
        return Err(CrashTestError::NoWriterCommand.into());
    }
    if let Some(pattern) = &config.ack {
        AckPattern::new(pattern)?;
    }
    let install =
        KernelInstall::locate(&config.kernel_dir.clone().unwrap_or_else(pin::default_dir))?;
    let qemu = guest::qemu_binary()?;
    if !config.replay {
        boot::resolve_program(&config.writer[0])?;
    }
    prepare_output(&config.out)?;
    let host_trace = if config.replay || config.hold_model.is_some() {
        progress("recording the writer on the host");
        Some(host_record::record(config)?)
    } else {
        None
    };
    let writer = GuestWriter::new(config, host_trace.as_ref().filter(|_| config.replay))?;
    let booted = boot::boot(config, &install, (&qemu, &writer), progress)?;
    let recovery = match config.file_system {
        FileSystem::Xfs | FileSystem::Btrfs => Some(RecoveryGuest::prepare(
            config.file_system,
            &install,
            (&qemu, booted.accelerator),
            &config.out.join("tmp"),
            config.guest_timeout_ms,
        )?),
        FileSystem::Model | FileSystem::Ext4 => None,
    };
    let report = judge_log(
        config,
        (booted, host_trace.as_ref()),
        recovery.as_ref(),
        in_process,
        progress,
    )?;
    write_report(&config.out, &report)?;
    Ok(report)
}

/// Parses the block log, builds the crash states and judges each one.
fn judge_log(
    config: &KernelConfig,
    (booted, host_trace): (Booted, Option<&Trace>),
    recovery: Option<&RecoveryGuest>,
    mut in_process: Option<&mut dyn StateCheck>,
    progress: &mut dyn FnMut(&str),
) -> Result<KernelReport, KernelError> {
    let started = Instant::now();
    let log_bytes = read_log(&config.out.join("blocks.log"))?;
    let log = blklog::parse(&log_bytes, MAX_LOG_BYTES)?;
    let marker_sector = config.file_system.file_system_bytes() / log.sector_size;
    let all = states::block_states(&log, marker_sector, config.states);
    progress(&format!(
        "{} log entries; {} crash states; recovering and checking",
        log.entries.len(),
        all.len()
    ));
    let checked = &all[..all.len().min(config.max_states)];
    let admitted = match (config.hold_model, host_trace) {
        (Some(limits), Some(trace)) => {
            progress("building the model's crash states of the recorded writer");
            Some(host_record::model_digests(config, trace, limits)?)
        }
        _ => None,
    };
    if let Some(check) = in_process.as_deref_mut() {
        check.prepare(&booted.acks)?;
    }
    let base = config.out.join("base.img");
    let failures = check_states(
        config,
        (&log, &log_bytes),
        (&base, recovery),
        checked,
        (admitted.as_ref(), in_process.as_deref()),
        progress,
    )?;
    let mut timings = booted.timings;
    timings.states_ms = started.elapsed().as_millis() as u64;
    let count = |kind: StateKind| all.iter().filter(|s| s.kind == kind).count();
    Ok(KernelReport {
        schema: "shardlift-crash-test-kernel-report",
        version: 1,
        file_system: config.file_system,
        kernel: KernelPin {
            release: KERNEL_RELEASE,
            package_sha256: KERNEL_PACKAGE_SHA256,
        },
        accelerator: booted.accelerator,
        acknowledgements: booted
            .acks
            .into_iter()
            .chain([crate::lab::external::ack::EXIT_ACK.to_owned()])
            .collect(),
        log_entries: log.entries.len(),
        log_writes: log.entries.iter().filter(|e| e.is_write()).count(),
        log_flushes: log.entries.iter().filter(|e| e.is_flush()).count(),
        flush_points: count(StateKind::FlushPoint),
        reordered_states: count(StateKind::Reordered),
        torn_states: count(StateKind::Torn),
        states: checked.len(),
        passing_states: checked.len() - failures.len(),
        failing_states: failures.len(),
        model_states: admitted.as_ref().map(HashSet::len),
        narrowed_model: config.hold_model.is_some_and(|l| l.narrowed),
        outside_model_states: failures
            .iter()
            .filter(|f| f.outside_model.is_some())
            .count(),
        failures,
        timings,
    })
}

fn prepare_output(out: &Path) -> Result<(), KernelError> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CrashTestError::OutputNotEmpty {
                    path: out.to_owned(),
                }
                .into());
            }
        }
        Err(_) => std::fs::create_dir_all(out)
            .map_err(KernelError::io("creating the output directory"))?,
    }
    for dir in ["setup", "tmp", "states"] {
        std::fs::create_dir(out.join(dir))
            .map_err(KernelError::io("creating the output layout"))?;
    }
    Ok(())
}

fn read_log(path: &Path) -> Result<Vec<u8>, KernelError> {
    let len = std::fs::metadata(path)
        .map_err(KernelError::io("reading the block log"))?
        .len();
    if len > MAX_LOG_BYTES {
        return Err(KernelError::LogOverLimit {
            limit_bytes: MAX_LOG_BYTES,
        });
    }
    std::fs::read(path).map_err(KernelError::io("reading the block log"))
}

/// How each state is judged besides recovery: held against the model's states, and by
/// an in-process check instead of the command.
type Judges<'a> = (Option<&'a HashSet<Digest>>, Option<&'a dyn StateCheck>);

/// Recovery guests that run at once (one per core, at most this many): each is one
/// emulated CPU, and the host's checker and unpacking run between their boots.
const RECOVERY_GUESTS_AT_ONCE: usize = 2;

/// One batch of states on disk: their indices, images and (once recovered) trees.
struct Batch<'s> {
    states: &'s [BlockState],
    indices: Vec<usize>,
    images: Vec<PathBuf>,
    trees: Vec<PathBuf>,
}

fn check_states(
    config: &KernelConfig,
    (log, log_bytes): (&BlockLog, &[u8]),
    (base, recovery): (&Path, Option<&RecoveryGuest>),
    states: &[BlockState],
    judges: Judges<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<KernelFailure>, KernelError> {
    let dir = config.out.join("states");
    // A recovery guest takes a batch of states, and several guests run at once; ext4
    // recovers one state at a time.
    let (batch_len, lanes) = match recovery {
        Some(_) => {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            (STATES_PER_GUEST, cores.clamp(1, RECOVERY_GUESTS_AT_ONCE))
        }
        None => (1, 1),
    };
    let mut failures = Vec::new();
    for (round_index, round) in states.chunks(batch_len * lanes).enumerate() {
        if judges.1.is_some_and(|check| check.done()) {
            break;
        }
        let mut batches = Vec::new();
        for (batch_index, batch) in round.chunks(batch_len).enumerate() {
            let first = round_index * batch_len * lanes + batch_index * batch_len;
            let indices: Vec<usize> = (first..first + batch.len()).collect();
            let images: Vec<PathBuf> = indices
                .iter()
                .map(|i| dir.join(format!("{i}.img")))
                .collect();
            let trees = indices.iter().map(|i| dir.join(i.to_string())).collect();
            for (state, image) in batch.iter().zip(&images) {
                states::write_image(base, log, log_bytes, state, image)
                    .map_err(KernelError::io("writing a state image"))?;
            }
            batches.push(Batch {
                states: batch,
                indices,
                images,
                trees,
            });
        }
        let recovered = match recovery {
            Some(guest) => {
                let work: Vec<(Vec<PathBuf>, Vec<PathBuf>)> = batches
                    .iter()
                    .map(|b| (b.images.clone(), b.trees.clone()))
                    .collect();
                guest.recover_at_once(&work)?
            }
            None => batches
                .iter()
                .map(|b| {
                    b.images
                        .iter()
                        .zip(&b.trees)
                        .map(|(image, tree)| recover_ext4(image, tree))
                        .collect::<Result<Vec<_>, _>>()
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        for (batch, recovered) in batches.iter().zip(recovered) {
            // A check that has seen enough stops judging: what this round recovered
            // beyond it is removed unjudged, as if never recovered.
            if judges.1.is_some_and(|check| check.done()) {
                remove_unjudged(batch)?;
                continue;
            }
            judge_batch(config, batch, recovered, judges, &mut failures)?;
            for checked in batch.indices.iter().map(|index| index + 1) {
                if checked % 10 == 0 || checked == states.len() {
                    progress(&format!("checked {checked}/{} crash states", states.len()));
                }
            }
        }
    }
    Ok(failures)
}

/// Removes the images and any recovered trees of a batch that was not judged.
fn remove_unjudged(batch: &Batch<'_>) -> Result<(), KernelError> {
    for (image, tree) in batch.images.iter().zip(&batch.trees) {
        std::fs::remove_file(image).map_err(KernelError::io("removing a state image"))?;
        if tree.exists() {
            std::fs::remove_dir_all(tree).map_err(KernelError::io("removing an unjudged state"))?;
        }
    }
    Ok(())
}

/// Judges every state of a recovered batch in order, keeping what fails (its tree and
/// check log) and removing what passes.
fn judge_batch(
    config: &KernelConfig,
    batch: &Batch<'_>,
    recovered: Vec<Result<(), String>>,
    judges: Judges<'_>,
    failures: &mut Vec<KernelFailure>,
) -> Result<(), KernelError> {
    let dir = config.out.join("states");
    for (slot, (state, recovered)) in batch.states.iter().zip(recovered).enumerate() {
        let (index, tree) = (batch.indices[slot], &batch.trees[slot]);
        std::fs::remove_file(&batch.images[slot])
            .map_err(KernelError::io("removing a state image"))?;
        let check_log = dir.join(format!("{index}.log"));
        match judge(config, recovered, (tree, &check_log), state, judges)? {
            None => {
                std::fs::remove_dir_all(tree)
                    .map_err(KernelError::io("removing a checked state"))?;
                std::fs::remove_file(&check_log)
                    .map_err(KernelError::io("removing a check log"))?;
            }
            Some(mut failure) => {
                failure.state = index;
                failures.push(failure);
            }
        }
    }
    Ok(())
}

/// Holds one recovered state against the model and checks it: `None` when it passes
/// (its tree and check log are left for the caller to remove).
fn judge(
    config: &KernelConfig,
    recovered: Result<(), String>,
    (tree, check_log): (&Path, &Path),
    state: &BlockState,
    (admitted, in_process): Judges<'_>,
) -> Result<Option<KernelFailure>, KernelError> {
    let mut failure = KernelFailure {
        state: 0,
        kind: state.kind,
        cut: state.cut,
        acknowledged: state.acknowledged,
        recovery: None,
        outside_model: None,
        check: None,
        output_tail: String::new(),
        violations: Vec::new(),
    };
    if let Err(why) = recovered {
        failure.recovery = Some(why);
        return Ok(Some(failure));
    }
    // The check log must exist for the caller to remove, whatever happens next.
    std::fs::write(check_log, b"").map_err(KernelError::io("creating a check log"))?;
    if let Some(admitted) = admitted {
        let (digest, listing) = model::tree_digest(tree, &Unread::new(&config.unread))
            .map_err(KernelError::io("reading a recovered state"))?;
        if !admitted.contains(&digest) {
            failure.outside_model = Some(listing);
            return Ok(Some(failure));
        }
    }
    if let Some(check) = in_process {
        let context = format!("{:?} state at log entry {}", state.kind, state.cut);
        failure.violations = check.violations(tree, state.acknowledged, &context);
        return Ok((!failure.violations.is_empty()).then_some(failure));
    }
    let (outcome, tail) = run_check(
        &config.check,
        tree,
        check_log,
        state.acknowledged,
        config.checks,
    )?;
    if outcome.passed() {
        return Ok(None);
    }
    failure.check = Some(outcome);
    failure.output_tail = tail;
    Ok(Some(failure))
}

fn write_report(out: &Path, report: &KernelReport) -> Result<(), KernelError> {
    let bytes = serde_json_canonicalizer::to_vec(report).map_err(|e| KernelError::Io {
        context: "encoding the report".to_owned(),
        source: std::io::Error::other(e.to_string()),
    })?;
    write_file(&out.join("report.json"), &bytes, WriteOptions::REPLACEABLE)
        .map(drop)
        .map_err(|e| KernelError::Io {
            context: "writing report.json".to_owned(),
            source: std::io::Error::other(e.to_string()),
        })
}
