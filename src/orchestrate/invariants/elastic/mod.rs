//! Scenario 11: an elastic restart under the real `torch.distributed.run` launcher.
//!
//! The launcher (from the pinned torch 2.13.0 wheel, installed by `ci/python-torch`)
//! starts this project's binary directly (`--no-python`) as a fixed group of two
//! workers (`--nnodes=1 --nproc-per-node=2`), with `--max-restarts=1` and a c10d
//! rendezvous on a numeric loopback address. On attempt 0 rank 1 writes a private
//! canonical marker, waits (bounded) until rank 0 has recorded that it saw it, and exits
//! with [`FAILURE_EXIT_CODE`]; rank 0 waits to be torn down. The launcher restarts the
//! group; on attempt 1 both ranks run a fresh recovery scan of the shared store
//! (read-only), load the selected generation, compute the next step in-process with one
//! torch thread, and write a canonical per-rank report. The parent then derives the
//! observation from the reports, the launcher's exit and log, and store receipts taken
//! before and after; it records only derived booleans, counts and digests.
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::core::canonical;
use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::durable::{self, DurableError, WriteOptions};

use crate::orchestrate::invariants::scenarios::{slot_sha256, ScenarioError};

mod launch;
mod observe;
mod worker;

pub use launch::*;
pub use observe::*;
pub use worker::*;

/// The registered exit code of rank 1 on attempt 0.
pub const FAILURE_EXIT_CODE: i32 = 91;
/// Group size and restart budget.
pub const WORLD_SIZE: u32 = 2;
/// Restarts the launcher may make (`--max-restarts`).
pub const MAX_RESTARTS: u32 = 1;
/// Bound on the whole launcher run.
pub const LAUNCHER_TIMEOUT_S: u64 = 180;
/// Bound on any wait inside a worker.
pub const WORKER_WAIT_MS: u64 = 60_000;

/// Schema name of [`MarkerRecord`].
pub const MARKER_SCHEMA: &str = "shardlift.invariants.elastic-marker";
/// Schema name of [`WorkerReport`].
pub const REPORT_SCHEMA: &str = "shardlift.invariants.elastic-report";
pub(super) const MARKER_FILE: &str = "rank1-attempt0.marker.json";
pub(super) const RANK0_ACK_FILE: &str = "rank0-saw-marker";

/// The private marker rank 1 writes on attempt 0 (never copied into the evidence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkerRecord {
    /// [`MARKER_SCHEMA`].
    pub schema: String,
    /// The schema's version (1).
    pub version: u32,
    /// The writer's rank (1).
    pub rank: u32,
    /// The attempt it was written on (0).
    pub restart_count: u32,
    /// The exit code it is about to exit with ([`FAILURE_EXIT_CODE`]).
    pub exit_code: i32,
}

crate::canonical_record!(MarkerRecord, MARKER_SCHEMA, 1, 4096);

/// A worker's report for one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerReport {
    /// [`REPORT_SCHEMA`].
    pub schema: String,
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// The worker's rank (`RANK`).
    pub rank: u32,
    /// The group's size (`WORLD_SIZE`).
    pub world_size: u32,
    /// The attempt (`TORCHELASTIC_RESTART_COUNT`).
    pub restart_count: u32,
    /// The launcher's restart budget (`TORCHELASTIC_MAX_RESTARTS`).
    pub max_restarts: u32,
    /// Attempt 0, rank 0: whether the marker was seen (and decoded) before teardown.
    pub saw_marker: bool,
    /// Restarted attempt: the generation recovery selected and the worker loaded.
    pub loaded_generation: Option<u64>,
    /// Restarted attempt: digest of the loaded parameters.
    pub parameters_sha256: Option<Digest>,
    /// Restarted attempt: [`optimizer_sha256`] of the loaded state.
    pub optimizer_sha256: Option<Digest>,
    /// Restarted attempt: the loaded data cursor.
    pub cursor: Option<u64>,
    /// Restarted attempt: the loaded state's logical root.
    pub loaded_root: Option<Digest>,
    /// Restarted attempt: the logical root after the next step.
    pub next_root: Option<Digest>,
    /// Restarted attempt: the ledger digest after the next step.
    pub next_ledger_digest: Option<Digest>,
}

/// Version 2: no `publish_attempted` field (the worker stated a constant; whether
/// anything was published is now observed by the parent from the store itself).
pub const REPORT_VERSION: u32 = 2;

crate::canonical_record!(WorkerReport, REPORT_SCHEMA, REPORT_VERSION, 16 << 10);

pub(super) fn report_file(rank: u32, restart_count: u32) -> String {
    format!("rank{rank}-attempt{restart_count}.json")
}

/// Digest of the optimizer part of a state: step and both AdamW slots.
pub fn optimizer_sha256(state: &LogicalState) -> Digest {
    let mut hasher = crate::core::digest::FramedHasher::new("shardlift/invariants/optimizer/v1");
    hasher.u64(state.step());
    hasher.field(slot_sha256(state, |c| c.exp_avg()).0.as_slice());
    hasher.field(slot_sha256(state, |c| c.exp_avg_sq()).0.as_slice());
    hasher.finish()
}

/// Why the elastic worker or launcher failed.
#[derive(Debug, thiserror::Error)]
pub enum ElasticError {
    /// A launcher variable is missing or not a number.
    #[error("environment variable {name} is missing or not a number (is this running under torch.distributed.run?)")]
    Environment {
        /// The variable's name.
        name: &'static str,
    },
    /// The launcher's rank or world size is not the fixed 2-worker group's.
    #[error("unexpected rank {rank} of world size {world_size} (the scenario is a fixed 2-worker group)")]
    Topology {
        /// The rank given.
        rank: u32,
        /// The world size given.
        world_size: u32,
    },
    /// I/O on the worker directories or the launcher's log failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A durable write failed other than by I/O (e.g. a path with no parent).
    #[error("{0}")]
    Durable(DurableError),
    /// A marker or report is not canonical JSON of its schema.
    #[error("record: {0}")]
    Record(#[from] canonical::CanonicalError),
    /// Recovering or loading from the store failed.
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The Fashion-MNIST payloads could not be loaded.
    #[error("dataset: {0}")]
    Dataset(#[from] crate::dataset::DatasetError),
    /// Preparing or stepping the scenario's state failed.
    #[error("scenario: {0}")]
    Scenario(#[from] ScenarioError),
    /// Rank 0 never saw the marker (the bound is in milliseconds).
    #[error("rank 0 did not see rank 1's marker within {0} ms")]
    MarkerTimeout(u64),
    /// Recovery found no valid generation on the restarted attempt.
    #[error("the store has no valid generation to resume")]
    NothingToResume,
    /// Starting or reaping the launcher failed.
    #[error("process: {0}")]
    Process(#[from] crate::supervise::process::ProcessError),
}

pub(super) fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ElasticError {
    let context = context.into();
    move |source| ElasticError::Io { context, source }
}

pub(super) fn env_u32(name: &'static str) -> Result<u32, ElasticError> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or(ElasticError::Environment { name })
}

/// Writes bytes durably under `dir/name`, replacing any earlier version.
pub(super) fn write_durable(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), ElasticError> {
    match durable::write_file(&dir.join(name), bytes, WriteOptions::REPLACEABLE) {
        Ok(_) => Ok(()),
        Err(DurableError::Io { source, .. } | DurableError::Fsync { source, .. }) => {
            Err(io_error(format!("writing {name}"))(source))
        }
        Err(other) => Err(ElasticError::Durable(other)),
    }
}

pub(super) fn wait_for_file(path: &Path, timeout_ms: u64) -> bool {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    path.exists()
}
