//! The process-crash harness: a real publisher child that stops at every barrier until
//! acknowledged, killed with SIGKILL (via pidfd) at a chosen barrier; a fresh recovery child.
//!
//! Wire protocol (child → parent, stdout): one JSON line per message, either
//! `{"barrier":{...BarrierEvent}}` after each completed step, or `{"done":{...CommitSummary}}`.
//! Parent → child (stdin): one byte `A` acknowledges the last barrier event. The child does
//! nothing after a barrier until it reads the acknowledgement; EOF on stdin stops it.
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
    enter_supervised_child, ChildSpec, ExitOutcome, ExitRecord, ShardliftChild, SupervisedChild,
};

use crate::durable::fs::{FileSystem, RealFs};
use crate::lab::error::LabError;
use crate::lab::handoff::{decode_handoff, encode_handoff, HANDOFF_MAGIC};
use crate::store::barrier::{Barrier, BarrierEvent, FnHook};
use crate::store::codec::{commit_rel_path, MAX_CHUNK_OBJECT_BYTES, MAX_MANIFEST_BYTES};
use crate::store::error::StoreError;
use crate::store::recovery::RecoveryReport;
use crate::store::writer::{next_generation, publish_with, CommitSummary, WriterFaults};

/// The acknowledgement byte.
pub const ACK: u8 = b'A';
/// Longest line a child may send.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Deadline for any one message from a child.
pub const CHILD_MESSAGE_TIMEOUT_MS: u64 = 60_000;
/// The session named in the harness children's exit records.
const HARNESS_SESSION: &str = "crash-harness";

/// One line from a publisher child.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ChildMessage {
    Barrier(BarrierEvent),
    Done(CommitSummary),
}

/// What happened when a publisher was killed at a barrier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillReport {
    pub target: Barrier,
    pub occurrence: u32,
    /// Every event acknowledged, in order; ends exactly before `unacknowledged`.
    pub acknowledged: Vec<BarrierEvent>,
    /// The target event, which was answered with SIGKILL instead of an acknowledgement.
    pub unacknowledged: BarrierEvent,
    pub signal: Option<i32>,
    pub reaped: bool,
    pub exit: ExitRecord,
    /// The generation the killed publisher was writing.
    pub candidate_generation: u64,
    /// Whether `commits/<candidate>.json` exists after the kill.
    pub candidate_visible: bool,
}

/// Reads newline-terminated lines from a child's pipe with a deadline.
struct LineReader<R: Read + AsFd> {
    source: R,
    buffer: Vec<u8>,
    eof: bool,
}

impl<R: Read + AsFd> LineReader<R> {
    fn new(source: R) -> Self {
        LineReader {
            source,
            buffer: Vec::new(),
            eof: false,
        }
    }

    fn wait_readable(&self, deadline: Instant) -> Result<(), LabError> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(LabError::ChildProtocol(
                    "timed out waiting for the child".into(),
                ));
            }
            let timespec = Timespec {
                tv_sec: remaining.as_secs() as i64,
                tv_nsec: i64::from(remaining.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.source, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec)) {
                Ok(0) => continue,
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(LabError::ChildProtocol(format!("poll: {e}"))),
            }
        }
    }

    fn fill(&mut self, deadline: Instant) -> Result<(), LabError> {
        self.wait_readable(deadline)?;
        let mut chunk = [0u8; 8192];
        let n = self
            .source
            .read(&mut chunk)
            .map_err(|e| LabError::ChildProtocol(format!("read: {e}")))?;
        if n == 0 {
            self.eof = true;
        }
        self.buffer.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next line (without the newline), or `None` at EOF.
    fn next_line(&mut self, deadline: Instant) -> Result<Option<String>, LabError> {
        loop {
            if let Some(pos) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                let text = String::from_utf8(line[..pos].to_vec())
                    .map_err(|_| LabError::ChildProtocol("non-UTF-8 line".into()))?;
                return Ok(Some(text));
            }
            if self.buffer.len() > MAX_LINE_BYTES {
                return Err(LabError::ChildProtocol("line exceeds the cap".into()));
            }
            if self.eof {
                return Ok(None);
            }
            self.fill(deadline)?;
        }
    }

    /// Everything until EOF (capped).
    fn read_to_end(&mut self, deadline: Instant, cap: usize) -> Result<Vec<u8>, LabError> {
        while !self.eof {
            if self.buffer.len() > cap {
                return Err(LabError::ChildProtocol("output exceeds the cap".into()));
            }
            self.fill(deadline)?;
        }
        Ok(std::mem::take(&mut self.buffer))
    }
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

/// As `kill_publisher_at`, at the `occurrence`-th event of `target` (1-based).
pub fn kill_publisher_at_occurrence(
    shardlift_exe: &Path,
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    target: Barrier,
    occurrence: u32,
) -> Result<KillReport, LabError> {
    match drive_publisher(
        shardlift_exe,
        store_dir,
        state,
        topology,
        Some((target, occurrence)),
    )? {
        PublisherEnd::Killed(report) => Ok(report),
        PublisherEnd::Completed(_) => Err(LabError::TargetNotReached {
            barrier: target.name(),
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
    match drive_publisher(shardlift_exe, store_dir, state, topology, None)? {
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
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    stop: Option<(Barrier, u32)>,
) -> Result<PublisherEnd, LabError> {
    let handoff = write_handoff(state, topology)?;
    let candidate_generation = next_generation(&RealFs, store_dir)?;
    let mut publisher = Publisher::spawn(shardlift_exe, store_dir, handoff.path())?;
    let mut acknowledged: Vec<BarrierEvent> = Vec::new();
    loop {
        match publisher.next_message()? {
            ChildMessage::Barrier(event) => {
                publisher.check_sequence(&event, acknowledged.len())?;
                if let Some((target, occurrence)) =
                    stop.filter(|&(b, o)| (b, o) == (event.barrier, event.occurrence))
                {
                    let exit = publisher.child.kill_and_reap()?;
                    let candidate_visible = store_dir
                        .join(commit_rel_path(candidate_generation))
                        .exists();
                    return Ok(PublisherEnd::Killed(KillReport {
                        target,
                        occurrence,
                        acknowledged,
                        unacknowledged: event,
                        signal: match exit.outcome {
                            ExitOutcome::Signal(s) => Some(s),
                            ExitOutcome::Code(_) => None,
                        },
                        reaped: true,
                        exit,
                        candidate_generation,
                        candidate_visible,
                    }));
                }
                publisher.acknowledge()?;
                acknowledged.push(event);
            }
            ChildMessage::Done(summary) => return publisher.finish(summary),
        }
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
    fn spawn(shardlift_exe: &Path, store: &Path, handoff: &Path) -> Result<Self, LabError> {
        let spec = ChildSpec::shardlift(
            shardlift_exe,
            HARNESS_SESSION,
            ShardliftChild::Publisher { store, handoff },
        );
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

    /// After `done`: closes stdin and requires a clean exit.
    fn finish(self, summary: CommitSummary) -> Result<PublisherEnd, LabError> {
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
    let spec = ChildSpec::shardlift(
        shardlift_exe,
        HARNESS_SESSION,
        ShardliftChild::Recovery { store: store_dir },
    );
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

/// Child side of `store-child publish`: reads the handoff, publishes, and streams one
/// event per barrier, waiting for an acknowledgement byte after each.
pub fn child_publish(store_dir: &Path, handoff: &Path) -> Result<CommitSummary, LabError> {
    enter_supervised_child()?;
    let cap = (MAX_CHUNK_OBJECT_BYTES * 3)
        .saturating_add(MAX_MANIFEST_BYTES)
        .saturating_add(HANDOFF_MAGIC.len() as u64 + 8);
    let bytes = RealFs
        .read_file(handoff, cap)
        .map_err(|e| StoreError::io(handoff, e))?;
    if bytes.len() as u64 > cap {
        return Err(LabError::Store(StoreError::TooLarge {
            path: handoff.to_owned(),
            cap,
        }));
    }
    let (state, topology) = decode_handoff(handoff, &bytes)?;
    let stdout = std::io::stdout();
    let stdin = std::io::stdin();
    let mut hook = FnHook(|event: &BarrierEvent| {
        let line = serde_json::to_string(&ChildMessage::Barrier(event.clone()))
            .map_err(|e| e.to_string())?;
        let mut out = stdout.lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
        let mut ack = [0u8; 1];
        stdin
            .lock()
            .read_exact(&mut ack)
            .map_err(|e| format!("no acknowledgement: {e}"))?;
        if ack[0] != ACK {
            return Err(format!("unexpected acknowledgement byte {}", ack[0]));
        }
        Ok(())
    });
    let summary = publish_with(
        &RealFs,
        store_dir,
        &state,
        topology,
        &mut hook,
        WriterFaults::default(),
    )?;
    let line = serde_json::to_string(&ChildMessage::Done(summary.clone()))
        .map_err(|e| LabError::ChildProtocol(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| LabError::ChildProtocol(e.to_string()))?;
    Ok(summary)
}
