//! The process-crash harness: a real publisher child, killed with SIGKILL (via pidfd) at a
//! chosen barrier, before a chosen file-system operation, or after a random delay; a fresh
//! recovery child.
//!
//! Wire protocol (child → parent, stdout): one JSON line per message:
//! `{"barrier":{...BarrierEvent}}` after each completed step (pause at barriers),
//! `{"operation":{...OperationEvent}}` before each file-system operation (pause at
//! operations), `"ready"` once before publishing (pause nowhere), and
//! `{"done":{...CommitSummary}}` at the end. Parent → child (stdin): one byte `A`
//! acknowledges the last barrier or operation event. A pausing child does nothing after an
//! event until it reads the acknowledgement; EOF on stdin stops it.
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::{Deserialize, Serialize};

use crate::core::logical::LogicalState;
use crate::core::topology::Topology;
use crate::supervise::process::{
    enter_supervised_child, ChildSpec, ExitOutcome, ExitRecord, Role, SupervisedChild,
};

use crate::durable::fs::{reads_from_real_disk, FileSystem, RealFs};
use crate::lab::error::LabError;
use crate::lab::handoff::{decode_handoff, encode_handoff, HANDOFF_MAGIC};
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, FnHook, HookStop, NoHooks};
use crate::store::codec::{commit_rel_path, MAX_CHUNK_OBJECT_BYTES, MAX_MANIFEST_BYTES};
use crate::store::error::StoreError;
use crate::store::recovery::RecoveryReport;
use crate::store::writer::{next_generation, publish_with, CommitSummary};

/// The acknowledgement byte.
pub const ACK: u8 = b'A';
/// Longest line a child may send.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Deadline for any one message from a child.
pub const CHILD_MESSAGE_TIMEOUT_MS: u64 = 60_000;
/// The session named in the harness children's exit records.
const HARNESS_SESSION: &str = "crash-harness";

/// The store a publisher or recovery child works on, as the parent sees it: the child's
/// `--store` argument and the two observations the harness makes of the store itself (the
/// generation the child will claim; whether that generation's commit record became
/// visible). A local directory is [`LocalStore`]; the object-store backend implements it
/// above the lab (`orchestrate::demo`), so the lab never depends on it.
pub trait ChildStore {
    /// The child's `--store` argument (a directory, or an `s3://` location).
    fn argument(&self) -> &Path;
    /// The generation a publisher started now will claim.
    fn next_generation(&self) -> Result<u64, LabError>;
    /// Whether a commit record of `generation` is visible in the store.
    fn commit_visible(&self, generation: u64) -> Result<bool, LabError>;
}

/// A store directory on the local file system.
#[derive(Clone, Copy, Debug)]
pub struct LocalStore<'a>(pub &'a Path);

impl ChildStore for LocalStore<'_> {
    fn argument(&self) -> &Path {
        self.0
    }

    fn next_generation(&self) -> Result<u64, LabError> {
        Ok(next_generation(&RealFs, self.0)?)
    }

    fn commit_visible(&self, generation: u64) -> Result<bool, LabError> {
        Ok(self.0.join(commit_rel_path(generation)).exists())
    }
}

/// `shardlift store-child publish --store S --handoff F --pause-at P`, stdin and stdout
/// piped (events out, acknowledgements in): the argv the binary's hidden `store-child`
/// command parses (`cli::store_child`).
fn publisher_spec(
    shardlift_exe: &Path,
    store: &Path,
    handoff: &Path,
    pause: PublisherPause,
) -> ChildSpec {
    ChildSpec::new(shardlift_exe, Role::Publisher, HARNESS_SESSION)
        .arg("store-child")
        .arg("publish")
        .arg("--store")
        .arg(store)
        .arg("--handoff")
        .arg(handoff)
        .arg("--pause-at")
        .arg(pause.arg())
        .piped_stdin()
        .piped_stdout()
}

/// `shardlift store-child recover --store S`, its report on piped stdout.
fn recovery_spec(shardlift_exe: &Path, store: &Path) -> ChildSpec {
    ChildSpec::new(shardlift_exe, Role::Recovery, HARNESS_SESSION)
        .arg("store-child")
        .arg("recover")
        .arg("--store")
        .arg(store)
        .piped_stdout()
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_millis(CHILD_MESSAGE_TIMEOUT_MS)
}

/// Spawns a publisher child for `state` and kills it with SIGKILL when it reports the
/// first occurrence of `target`.
pub fn kill_publisher_at(
    shardlift_exe: &Path,
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    target: Barrier,
) -> Result<KillReport, LabError> {
    kill_publisher_at_occurrence(shardlift_exe, store_dir, state, topology, target, 1)
}

/// As [`kill_publisher_at`], on any [`ChildStore`] (a local directory or an object store).
pub fn kill_publisher_on(
    shardlift_exe: &Path,
    store: &dyn ChildStore,
    state: &LogicalState,
    topology: Topology,
    target: Barrier,
) -> Result<KillReport, LabError> {
    kill_at(shardlift_exe, store, state, topology, (target, 1))
}

/// As `kill_publisher_at`, at the `occurrence`-th event of `target` (1-based).
pub fn kill_publisher_at_occurrence(
    shardlift_exe: &Path,
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    target: Barrier,
    occurrence: u32,
) -> Result<KillReport, LabError> {
    let store = LocalStore(store_dir);
    kill_at(shardlift_exe, &store, state, topology, (target, occurrence))
}

/// The kill at the `occurrence`-th event of `target` (1-based), on any store.
fn kill_at(
    shardlift_exe: &Path,
    store: &dyn ChildStore,
    state: &LogicalState,
    topology: Topology,
    (target, occurrence): (Barrier, u32),
) -> Result<KillReport, LabError> {
    match drive_publisher(
        shardlift_exe,
        store,
        state,
        topology,
        Some((target, occurrence)),
    )? {
        PublisherEnd::Killed(report) => Ok(report),
        PublisherEnd::Completed(_) => Err(LabError::TargetNotReached {
            barrier: target,
            occurrence,
        }),
    }
}

/// Publishes `state` in an isolated `shardlift store-child publish` process, acknowledging
/// every barrier, and returns what it committed. The parent never writes the store itself.
pub fn publish_in_child(
    shardlift_exe: &Path,
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<CommitSummary, LabError> {
    publish_in_child_on(shardlift_exe, &LocalStore(store_dir), state, topology)
}

/// As [`publish_in_child`], on any [`ChildStore`] (a local directory or an object store).
pub fn publish_in_child_on(
    shardlift_exe: &Path,
    store: &dyn ChildStore,
    state: &LogicalState,
    topology: Topology,
) -> Result<CommitSummary, LabError> {
    match drive_publisher(shardlift_exe, store, state, topology, None)? {
        PublisherEnd::Completed(summary) => Ok(summary),
        PublisherEnd::Killed(_) => Err(LabError::ChildProtocol(
            "publisher was killed without a target".into(),
        )),
    }
}

/// How a driven publisher ended.
enum PublisherEnd {
    Killed(KillReport),
    Completed(CommitSummary),
}

/// Spawns a publisher child for `state` and acknowledges its barrier events in order;
/// with `stop = Some((barrier, occurrence))` it answers that event with SIGKILL instead.
fn drive_publisher(
    shardlift_exe: &Path,
    store: &dyn ChildStore,
    state: &LogicalState,
    topology: Topology,
    stop: Option<(Barrier, u32)>,
) -> Result<PublisherEnd, LabError> {
    let (mut publisher, _handoff, candidate_generation) = Publisher::start(
        shardlift_exe,
        store,
        state,
        topology,
        PublisherPause::Barriers,
    )?;
    let mut acknowledged: Vec<BarrierEvent> = Vec::new();
    loop {
        match publisher.next_message()? {
            ChildMessage::Barrier(event) => {
                publisher.check_sequence(&event, acknowledged.len())?;
                if let Some((target, occurrence)) =
                    stop.filter(|&(b, o)| (b, o) == (event.barrier, event.occurrence))
                {
                    let exit = publisher.child.kill_and_reap()?;
                    // Reaped when the child's wait returned its exit status (the record
                    // exists only then).
                    let reaped = publisher.child.exit_record().is_some();
                    let candidate_visible = store.commit_visible(candidate_generation)?;
                    return Ok(PublisherEnd::Killed(KillReport {
                        target,
                        occurrence,
                        acknowledged,
                        unacknowledged: event,
                        signal: exit_signal(&exit),
                        reaped,
                        exit,
                        candidate_generation,
                        candidate_visible,
                    }));
                }
                publisher.acknowledge()?;
                acknowledged.push(event);
            }
            ChildMessage::Done(summary) => return publisher.finish(summary, candidate_generation),
            other => return Err(publisher.unexpected(&other)),
        }
    }
}

/// How a publisher driven operation by operation ended.
pub enum OperationsEnd {
    /// It was killed before an operation.
    Killed(OperationKillReport),
    /// It finished: what it committed and every operation it performed, in order.
    Completed(CommitSummary, Vec<OperationEvent>),
}

/// Spawns a publisher child that stops before every file-system operation, acknowledges
/// them in order and, with `kill_before = Some(n)`, answers operation `n` (0-based) with
/// SIGKILL instead. With `None` it records the whole trace of a real publish.
pub fn drive_operations(
    shardlift_exe: &Path,
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    kill_before: Option<u64>,
) -> Result<OperationsEnd, LabError> {
    let (mut publisher, _handoff, candidate_generation) = Publisher::start(
        shardlift_exe,
        &LocalStore(store_dir),
        state,
        topology,
        PublisherPause::Operations,
    )?;
    let mut performed: Vec<OperationEvent> = Vec::new();
    loop {
        match publisher.next_message()? {
            ChildMessage::Operation(event) => {
                if event.seq != performed.len() as u64 {
                    return Err(publisher.abandon(LabError::ChildProtocol(format!(
                        "operation seq {} after {} acknowledged operations",
                        event.seq,
                        performed.len()
                    ))));
                }
                if kill_before == Some(event.seq) {
                    let exit = publisher.child.kill_and_reap()?;
                    return Ok(OperationsEnd::Killed(OperationKillReport {
                        performed,
                        killed_before: event,
                        ended: PublisherExit::observe(exit, store_dir, candidate_generation),
                    }));
                }
                publisher.acknowledge()?;
                performed.push(event);
            }
            ChildMessage::Done(summary) => {
                if let Some(target) = kill_before {
                    return Err(publisher.abandon(LabError::ChildProtocol(format!(
                        "the publish ended after {} operations, before operation {target}",
                        performed.len()
                    ))));
                }
                return match publisher.finish(summary, candidate_generation)? {
                    PublisherEnd::Completed(summary) => {
                        Ok(OperationsEnd::Completed(summary, performed))
                    }
                    PublisherEnd::Killed(_) => Err(LabError::ChildProtocol(
                        "publisher was killed without a target".into(),
                    )),
                };
            }
            other => return Err(publisher.unexpected(&other)),
        }
    }
}

/// Spawns a publisher child that pauses nowhere and, `kill_after` after it reports ready
/// (an unparked instant: inside whatever it is doing), kills it with SIGKILL. With `None`
/// it runs to the end (to measure how long a publish takes).
pub fn run_free_publisher(
    shardlift_exe: &Path,
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    kill_after: Option<Duration>,
) -> Result<FreeRunReport, LabError> {
    let (mut publisher, _handoff, candidate_generation) = Publisher::start(
        shardlift_exe,
        &LocalStore(store_dir),
        state,
        topology,
        PublisherPause::Nowhere,
    )?;
    match publisher.next_message()? {
        ChildMessage::Ready => {}
        other => return Err(publisher.unexpected(&other)),
    }
    let started = Instant::now();
    let (exit, completed, elapsed) = match kill_after {
        Some(delay) => {
            std::thread::sleep(delay);
            let exit = publisher.child.kill_and_reap()?;
            let elapsed = started.elapsed();
            // The child is dead: whatever it wrote is in the pipe, up to EOF.
            let rest = publisher.reader.read_to_end(deadline(), MAX_LINE_BYTES)?;
            let completed = rest.split(|&b| b == b'\n').any(|line| {
                matches!(
                    serde_json::from_slice::<ChildMessage>(line),
                    Ok(ChildMessage::Done(_))
                )
            });
            (exit, completed, elapsed)
        }
        None => {
            match publisher.next_message()? {
                ChildMessage::Done(_) => {}
                other => return Err(publisher.unexpected(&other)),
            }
            let elapsed = started.elapsed();
            let exit = publisher.child.wait_deadline(CHILD_MESSAGE_TIMEOUT_MS)?;
            (exit, true, elapsed)
        }
    };
    Ok(FreeRunReport {
        kill_after_us: kill_after.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        elapsed_us: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        completed,
        ended: PublisherExit::observe(exit, store_dir, candidate_generation),
    })
}

fn exit_signal(exit: &ExitRecord) -> Option<i32> {
    match exit.outcome {
        ExitOutcome::Signal(s) => Some(s),
        ExitOutcome::Code(_) => None,
    }
}

/// The state and topology handed to a publisher child, in a temporary file.
fn write_handoff(
    state: &LogicalState,
    topology: Topology,
) -> Result<tempfile::NamedTempFile, LabError> {
    let handoff_bytes = encode_handoff(state, topology)?;
    let mut handoff =
        tempfile::NamedTempFile::new().map_err(|e| StoreError::io(std::env::temp_dir(), e))?;
    handoff
        .write_all(&handoff_bytes)
        .and_then(|()| handoff.flush())
        .map_err(|e| StoreError::io(handoff.path(), e))?;
    Ok(handoff)
}

/// A running publisher child and its two pipes. Every protocol failure kills and reaps
/// it before returning the error.
struct Publisher {
    child: SupervisedChild,
    stdin: ChildStdin,
    reader: LineReader<ChildStdout>,
}

impl Publisher {
    /// Writes the handoff for `state`, notes the generation the child will claim, and
    /// spawns it pausing at `pause`. The handoff file must outlive the child's read of it.
    fn start(
        shardlift_exe: &Path,
        store: &dyn ChildStore,
        state: &LogicalState,
        topology: Topology,
        pause: PublisherPause,
    ) -> Result<(Self, tempfile::NamedTempFile, u64), LabError> {
        let handoff = write_handoff(state, topology)?;
        let candidate_generation = store.next_generation()?;
        let publisher = Publisher::spawn(shardlift_exe, store.argument(), handoff.path(), pause)?;
        Ok((publisher, handoff, candidate_generation))
    }

    fn spawn(
        shardlift_exe: &Path,
        store: &Path,
        handoff: &Path,
        pause: PublisherPause,
    ) -> Result<Self, LabError> {
        let spec = publisher_spec(shardlift_exe, store, handoff, pause);
        let mut child = SupervisedChild::spawn(spec)?;
        let stdin = child
            .take_stdin()
            .ok_or_else(|| LabError::ChildProtocol("no stdin pipe".into()))?;
        let stdout = child
            .take_stdout()
            .ok_or_else(|| LabError::ChildProtocol("no stdout pipe".into()))?;
        Ok(Publisher {
            child,
            stdin,
            reader: LineReader::new(stdout),
        })
    }

    /// Kills and reaps the child, then returns `error`.
    fn abandon(&mut self, error: LabError) -> LabError {
        let _ = self.child.kill_and_reap();
        error
    }

    fn next_message(&mut self) -> Result<ChildMessage, LabError> {
        let line = match self.reader.next_line(deadline()) {
            Ok(Some(line)) => line,
            Ok(None) => {
                let exit = self.child.wait_deadline(CHILD_MESSAGE_TIMEOUT_MS)?;
                return Err(LabError::ChildFailed(format!(
                    "publisher closed its output before finishing ({})",
                    exit.outcome
                )));
            }
            Err(e) => return Err(self.abandon(e)),
        };
        serde_json::from_str(&line)
            .map_err(|e| self.abandon(LabError::ChildProtocol(format!("bad line {line:?}: {e}"))))
    }

    /// A message this mode of the protocol never sends: kill, then report it.
    fn unexpected(&mut self, message: &ChildMessage) -> LabError {
        self.abandon(LabError::ChildProtocol(format!(
            "unexpected message {message:?}"
        )))
    }

    /// Events arrive numbered from 0, one after each acknowledgement.
    fn check_sequence(
        &mut self,
        event: &BarrierEvent,
        acknowledged: usize,
    ) -> Result<(), LabError> {
        if event.seq == acknowledged as u64 {
            return Ok(());
        }
        Err(self.abandon(LabError::ChildProtocol(format!(
            "event seq {} after {acknowledged} acknowledged events",
            event.seq
        ))))
    }

    fn acknowledge(&mut self) -> Result<(), LabError> {
        let sent = self
            .stdin
            .write_all(&[ACK])
            .and_then(|()| self.stdin.flush());
        sent.map_err(|e| self.abandon(LabError::ChildProtocol(format!("ack: {e}"))))
    }

    /// After `done`: closes stdin and requires a clean exit, and that the child committed
    /// the generation the parent predicted (its kill reports name that generation).
    fn finish(
        mut self,
        summary: CommitSummary,
        candidate_generation: u64,
    ) -> Result<PublisherEnd, LabError> {
        if summary.committed.generation != candidate_generation {
            return Err(self.abandon(LabError::ChildProtocol(format!(
                "the publisher committed generation {}, not the predicted generation {candidate_generation}",
                summary.committed.generation
            ))));
        }
        let Publisher {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let exit = child.wait_deadline(CHILD_MESSAGE_TIMEOUT_MS)?;
        if !exit.outcome.success() {
            return Err(LabError::ChildFailed(format!(
                "publisher reported done but ended with {}",
                exit.outcome
            )));
        }
        Ok(PublisherEnd::Completed(summary))
    }
}

/// Runs recovery in a fresh `shardlift store-child recover` process and returns its report.
pub fn recover_in_child(
    shardlift_exe: &Path,
    store_dir: &Path,
) -> Result<RecoveryReport, LabError> {
    recover_in_child_on(shardlift_exe, &LocalStore(store_dir))
}

/// As [`recover_in_child`], on any [`ChildStore`]: an object store's child prints the scan
/// part of its report, the same `RecoveryReport` fields (RFC 0001 §9.4).
pub fn recover_in_child_on(
    shardlift_exe: &Path,
    store: &dyn ChildStore,
) -> Result<RecoveryReport, LabError> {
    let spec = recovery_spec(shardlift_exe, store.argument());
    let mut child = SupervisedChild::spawn(spec)?;
    let stdout = child
        .take_stdout()
        .ok_or_else(|| LabError::ChildProtocol("no stdout pipe".into()))?;
    let mut reader = LineReader::new(stdout);
    let output = reader.read_to_end(deadline(), 64 << 20);
    let exit = child.wait_deadline(CHILD_MESSAGE_TIMEOUT_MS)?;
    let output = output?;
    if !exit.outcome.success() {
        return Err(LabError::ChildFailed(format!(
            "recovery child ended with {}",
            exit.outcome
        )));
    }
    serde_json::from_slice(&output)
        .map_err(|e| LabError::ChildProtocol(format!("recovery report: {e}")))
}

mod child;
pub use child::{
    child_print_report, child_publish, child_publish_on, child_recover, publish_traced,
    stepping_barrier_hook,
};

mod line_reader;
mod messages;
use line_reader::LineReader;
pub use messages::{
    ChildMessage, FreeRunReport, KillReport, OperationEvent, OperationKillReport, OperationKind,
    PublisherExit, PublisherPause,
};
