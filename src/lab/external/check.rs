//! Materialises crash states and runs the user's check command on each, bounded: at most
//! `max_states` states (spread evenly over the distinct ones when there are more), a
//! deadline per check after which its whole process group is killed, and the last
//! `output_tail_bytes` of its output kept. Checks run `jobs` at a time; results are
//! gathered by state index, so the report does not depend on scheduling.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::lab::crash_model::trace::Trace;
use crate::lab::crash_model::{state_files, write_state_files, CrashState, StateEntry};
use crate::lab::external::ack::ACKED_ENV;
use crate::lab::external::error::CrashTestError;
use crate::supervise::process::{ChildSpec, ExitOutcome, Role, Signal, SupervisedChild};

/// Bounds of the checking phase.
#[derive(Clone, Copy, Debug)]
pub struct CheckLimits {
    /// Most states checked; more are sampled evenly.
    pub max_states: usize,
    /// Deadline per check, in milliseconds; its process group is then killed.
    pub timeout_ms: u64,
    /// Bytes of each check's output kept (the last ones).
    pub output_tail_bytes: usize,
    /// Checks run at once.
    pub jobs: usize,
    /// Keep passing states' directories and logs too.
    pub keep_passing: bool,
}

impl Default for CheckLimits {
    fn default() -> Self {
        CheckLimits {
            max_states: 5_000,
            timeout_ms: 60_000,
            output_tail_bytes: 2_048,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            keep_passing: false,
        }
    }
}

/// How one check ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// Exited (or was killed by a signal) before the deadline.
    Exited(ExitOutcome),
    /// Killed at the deadline.
    TimedOut {
        /// The deadline, in milliseconds.
        timeout_ms: u64,
    },
}

impl CheckOutcome {
    /// Whether the check exited 0.
    pub fn passed(&self) -> bool {
        matches!(self, CheckOutcome::Exited(outcome) if outcome.success())
    }
}

/// One failing state.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// Index among the distinct states (`states/N/` in the output directory).
    pub state: usize,
    /// Trace operations completed at the crash: the failing trace prefix is `0..crash_point`.
    pub crash_point: usize,
    /// Acknowledgements the crash follows (the check's `SHARDLIFT_ACKED`).
    pub acknowledged: usize,
    /// The last completed operation, described.
    pub last_operation: Option<String>,
    /// Pending entry operations that did not persist, described with their index.
    pub dropped_operations: Vec<String>,
    /// What persisted: every path with its kind, size, digest and data variant.
    pub persisted: BTreeMap<String, StateEntry>,
    /// How the check ended.
    pub check: CheckOutcome,
    /// The last bytes of its output (stdout and stderr), lossily decoded.
    pub output_tail: String,
}

/// Failures sharing the check's last output line.
#[derive(Clone, Debug, Serialize)]
pub struct FailureClass {
    /// The check's last output line.
    pub message: String,
    /// Failing states in the class.
    pub states: usize,
    /// The shortest trace prefix that leads to this failure.
    pub smallest_crash_point: usize,
    /// The state with that shortest prefix.
    pub example_state: usize,
}

/// What the checking phase gave.
pub struct Checked {
    /// States checked.
    pub checked: usize,
    /// The failing ones, by state index.
    pub failures: Vec<Failure>,
}

/// Checks (a bounded, evenly spread selection of) `states`.
pub fn check_states(
    trace: &Trace,
    states: &[CrashState],
    command: &str,
    states_dir: &Path,
    limits: CheckLimits,
    progress: &mut dyn FnMut(&str),
) -> Result<Checked, CrashTestError> {
    let selected = select(states.len(), limits.max_states);
    let total = selected.len();
    let next = AtomicUsize::new(0);
    // Set by the first worker that meets an error, so the others take no new states.
    let stop_queue = AtomicBool::new(false);
    let results: Mutex<BTreeMap<usize, Result<Option<Failure>, CrashTestError>>> =
        Mutex::new(BTreeMap::new());
    let done = AtomicUsize::new(0);
    let (tick_tx, tick_rx) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|scope| {
        for _ in 0..limits.jobs.max(1) {
            let tick = tick_tx.clone();
            let (next, results, done, selected, stop_queue) =
                (&next, &results, &done, &selected, &stop_queue);
            scope.spawn(move || loop {
                if stop_queue.load(Ordering::SeqCst) {
                    break;
                }
                let slot = next.fetch_add(1, Ordering::SeqCst);
                let Some(&index) = selected.get(slot) else {
                    break;
                };
                let result = check_one(trace, &states[index], index, command, states_dir, limits);
                let stop = result.is_err();
                if let Ok(mut map) = results.lock() {
                    map.insert(index, result);
                }
                let _ = tick.send(done.fetch_add(1, Ordering::SeqCst) + 1);
                if stop {
                    stop_queue.store(true, Ordering::SeqCst);
                    break;
                }
            });
        }
        drop(tick_tx);
        let step = (total / 20).max(1);
        for finished in tick_rx {
            if finished % step == 0 || finished == total {
                progress(&format!("checked {finished}/{total} crash states"));
            }
        }
    });
    let results = results.into_inner().unwrap_or_default();
    let mut failures = Vec::new();
    let checked = results.len();
    for (_, result) in results {
        if let Some(failure) = result? {
            failures.push(failure);
        }
    }
    Ok(Checked { checked, failures })
}

/// `count` indices spread evenly over `0..total` (all of them when `total <= count`).
fn select(total: usize, count: usize) -> Vec<usize> {
    if total <= count {
        return (0..total).collect();
    }
    (0..count).map(|i| i * total / count).collect()
}

fn check_one(
    trace: &Trace,
    state: &CrashState,
    index: usize,
    command: &str,
    states_dir: &Path,
    limits: CheckLimits,
) -> Result<Option<Failure>, CrashTestError> {
    let dir = states_dir.join(index.to_string());
    let log = states_dir.join(format!("{index}.log"));
    materialise(trace, state, &dir)?;
    let (outcome, output_tail) = run_check(command, &dir, &log, state.acknowledged, limits)
        .map_err(|error| match error {
            CrashTestError::CheckWait { source, .. } => CrashTestError::CheckWait {
                state: index,
                source,
            },
            other => other,
        })?;
    if outcome.passed() {
        if !limits.keep_passing {
            std::fs::remove_dir_all(&dir)
                .map_err(CrashTestError::io("removing a checked state"))?;
            std::fs::remove_file(&log).map_err(CrashTestError::io("removing a check log"))?;
        }
        return Ok(None);
    }
    Ok(Some(Failure {
        state: index,
        crash_point: state.crash_point,
        acknowledged: state.acknowledged,
        last_operation: state
            .crash_point
            .checked_sub(1)
            .and_then(|seq| Some((seq, trace.ops.get(seq)?)))
            .map(|(seq, op)| format!("#{seq} {}", op.describe_at(seq))),
        dropped_operations: state
            .dropped_operations
            .iter()
            .filter_map(|&seq| {
                trace
                    .ops
                    .get(seq)
                    .map(|op| format!("#{seq} {}", op.describe()))
            })
            .collect(),
        persisted: state.entries.clone(),
        check: outcome,
        output_tail,
    }))
}

/// Runs `command` (`sh -c`) in `dir` with `SHARDLIFT_ACKED=acknowledged`, its output in
/// `log`, killed with its process group at the deadline; returns how it ended and the
/// tail of its output.
pub fn run_check(
    command: &str,
    dir: &Path,
    log: &Path,
    acknowledged: usize,
    limits: CheckLimits,
) -> Result<(CheckOutcome, String), CrashTestError> {
    let spec = ChildSpec::new("/bin/sh", Role::Check, "crash-test")
        .arg("-c")
        .arg(command)
        .env(ACKED_ENV, acknowledged.to_string())
        .current_dir(dir)
        .output_to(log);
    let mut child = SupervisedChild::spawn(spec).map_err(|source| CrashTestError::CheckSpawn {
        command: command.to_owned(),
        source,
    })?;
    let outcome = match child.wait_timeout(limits.timeout_ms) {
        Ok(Some(record)) => CheckOutcome::Exited(record.outcome),
        Ok(None) => {
            let _ = child.signal_group(Signal::KILL);
            let _ = child.kill_and_reap();
            CheckOutcome::TimedOut {
                timeout_ms: limits.timeout_ms,
            }
        }
        Err(source) => {
            // Not a verdict on the state: the run cannot say what the check did.
            let _ = child.signal_group(Signal::KILL);
            let _ = child.kill_and_reap();
            return Err(CrashTestError::CheckWait { state: 0, source });
        }
    };
    // A check's children may outlive it in its process group: end them too.
    let _ = child.signal_group(Signal::KILL);
    Ok((outcome, tail(log, limits.output_tail_bytes)?))
}

/// Writes a state's tree under `dir` (which must not exist).
fn materialise(trace: &Trace, state: &CrashState, dir: &Path) -> Result<(), CrashTestError> {
    std::fs::create_dir(dir).map_err(CrashTestError::io("creating a state directory"))?;
    write_state_files(&state_files(trace, state), dir)
        .map_err(|(path, e)| CrashTestError::io(format!("materialising {path}"))(e))
}

/// The last `max_bytes` of a log, as text.
fn tail(path: &Path, max_bytes: usize) -> Result<String, CrashTestError> {
    let bytes = std::fs::read(path).map_err(CrashTestError::io("reading a check log"))?;
    let start = bytes.len().saturating_sub(max_bytes);
    Ok(String::from_utf8_lossy(&bytes[start..]).into_owned())
}

/// Groups failures by the last non-empty line of their output (or the timeout).
pub fn classes(failures: &[Failure]) -> Vec<FailureClass> {
    let mut by_message: BTreeMap<String, FailureClass> = BTreeMap::new();
    for failure in failures {
        let message = match &failure.check {
            CheckOutcome::TimedOut { timeout_ms } => format!("timed out after {timeout_ms} ms"),
            CheckOutcome::Exited(outcome) => failure
                .output_tail
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .map_or_else(|| format!("no output ({outcome})"), |l| l.trim().to_owned()),
        };
        let class = by_message
            .entry(message.clone())
            .or_insert_with(|| FailureClass {
                message,
                states: 0,
                smallest_crash_point: failure.crash_point,
                example_state: failure.state,
            });
        class.states += 1;
        if failure.crash_point < class.smallest_crash_point {
            class.smallest_crash_point = failure.crash_point;
            class.example_state = failure.state;
        }
    }
    by_message.into_values().collect()
}
