//! What a publisher child says to the parent (one JSON line each) and what the parent
//! reports of a kill or a free run.
use super::*;

/// One line from a publisher child.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ChildMessage {
    /// It reached a barrier (RFC 0001 §4) and, paused at barriers, waits for an
    /// acknowledgement.
    Barrier(BarrierEvent),
    /// It is about to perform a file-system operation and waits for an acknowledgement.
    Operation(OperationEvent),
    /// Paused nowhere: it is about to publish, free-running.
    Ready,
    /// Its publish committed: the summary of the generation.
    Done(CommitSummary),
}

/// One file-system operation a publisher child is about to perform (paths relative to the
/// store root; `..` is the store's parent directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationEvent {
    /// 0-based position in the run's operation trace.
    pub seq: u64,
    /// Which operation.
    pub kind: OperationKind,
    /// The path it acts on (the renamed file, for renames).
    pub path: String,
    /// The rename target, for renames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Bytes written at offset 0, for `create_write`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The mutating operations of the file-system seam. A new file is created and written
/// whole (offset 0, every byte) in one call; the protocol never writes at another offset,
/// overwrites a file in place, or uses fdatasync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// [`FileSystem::create_dir`].
    Mkdir,
    /// [`FileSystem::write_new_file`].
    CreateWrite,
    /// [`FileSystem::fsync_file`].
    FsyncFile,
    /// [`FileSystem::fsync_dir`].
    FsyncDir,
    /// [`FileSystem::rename_noreplace`].
    Rename,
    /// [`FileSystem::rename_replace`].
    RenameReplace,
    /// [`FileSystem::remove_file`].
    Unlink,
}

/// How a publisher child ended and what it left visible.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublisherExit {
    /// The signal that killed it (none: it exited).
    pub signal: Option<i32>,
    /// Its exit record.
    pub exit: ExitRecord,
    /// The generation it was writing.
    pub candidate_generation: u64,
    /// Whether `commits/<candidate>.json` exists after it ended.
    pub candidate_visible: bool,
}

impl PublisherExit {
    pub(super) fn observe(exit: ExitRecord, store_dir: &Path, candidate_generation: u64) -> Self {
        PublisherExit {
            signal: exit_signal(&exit),
            exit,
            candidate_generation,
            candidate_visible: store_dir
                .join(commit_rel_path(candidate_generation))
                .exists(),
        }
    }
}

/// What happened when a publisher was killed before one of its file-system operations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationKillReport {
    /// Every operation acknowledged (and so performed), in order.
    pub performed: Vec<OperationEvent>,
    /// The operation that was answered with SIGKILL instead (never performed).
    pub killed_before: OperationEvent,
    /// How the killed publisher ended.
    pub ended: PublisherExit,
}

/// What a free-running publisher did before a kill after a delay (or without one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreeRunReport {
    /// The delay between the child's `ready` and the SIGKILL (none: run to the end).
    pub kill_after_us: Option<u64>,
    /// Microseconds from `ready` to the kill, or to `done` when it ran to the end.
    pub elapsed_us: u64,
    /// Whether the child reported `done` (its publish completed) before it ended.
    pub completed: bool,
    /// How the publisher ended.
    pub ended: PublisherExit,
}

/// What happened when a publisher was killed at a barrier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillReport {
    /// The barrier the kill was aimed at.
    pub target: Barrier,
    /// Which occurrence of it (1-based).
    pub occurrence: u32,
    /// Every event acknowledged, in order; ends exactly before `unacknowledged`.
    pub acknowledged: Vec<BarrierEvent>,
    /// The target event, which was answered with SIGKILL instead of an acknowledgement.
    pub unacknowledged: BarrierEvent,
    /// The signal that ended it (SIGKILL, unless it had died first).
    pub signal: Option<i32>,
    /// Whether it was seen reaped: its wait returned an exit status.
    pub reaped: bool,
    /// Its exit record.
    pub exit: ExitRecord,
    /// The generation the killed publisher was writing.
    pub candidate_generation: u64,
    /// Whether `commits/<candidate>.json` exists after the kill.
    pub candidate_visible: bool,
}

/// Where a publisher child stops for an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublisherPause {
    /// After every barrier event (the named steps of RFC 0001 §4).
    Barriers,
    /// Before every file-system operation (so a kill can land between any two).
    Operations,
    /// Nowhere: it says it is ready, then runs free (for kills at random instants).
    Nowhere,
}

impl PublisherPause {
    /// The value of `store-child publish --pause-at`.
    pub fn arg(self) -> &'static str {
        match self {
            PublisherPause::Barriers => "barriers",
            PublisherPause::Operations => "operations",
            PublisherPause::Nowhere => "nowhere",
        }
    }

    /// The inverse of [`PublisherPause::arg`].
    pub fn from_arg(text: &str) -> Option<Self> {
        [
            PublisherPause::Barriers,
            PublisherPause::Operations,
            PublisherPause::Nowhere,
        ]
        .into_iter()
        .find(|p| p.arg() == text)
    }
}
