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
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::core::canonical;
use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::durable::{self, DurableError, WriteOptions};
use crate::supervise::process::{ChildSpec, ExitOutcome, Role, Signal, SupervisedChild};

use crate::orchestrate::invariants::evidence::Observation;
use crate::orchestrate::invariants::registry::REGISTRY;
use crate::orchestrate::invariants::scenarios::{
    next_step, slot_sha256, store_receipts, Context, ScenarioError,
};

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
const MARKER_FILE: &str = "rank1-attempt0.marker.json";
const RANK0_ACK_FILE: &str = "rank0-saw-marker";

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

fn report_file(rank: u32, restart_count: u32) -> String {
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

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ElasticError {
    let context = context.into();
    move |source| ElasticError::Io { context, source }
}

fn env_u32(name: &'static str) -> Result<u32, ElasticError> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or(ElasticError::Environment { name })
}

/// Writes bytes durably under `dir/name`, replacing any earlier version.
fn write_durable(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), ElasticError> {
    match durable::write_file(&dir.join(name), bytes, WriteOptions::REPLACEABLE) {
        Ok(_) => Ok(()),
        Err(DurableError::Io { source, .. } | DurableError::Fsync { source, .. }) => {
            Err(io_error(format!("writing {name}"))(source))
        }
        Err(other) => Err(ElasticError::Durable(other)),
    }
}

fn wait_for_file(path: &Path, timeout_ms: u64) -> bool {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    path.exists()
}

/// What the worker needs besides its environment.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The shared store (read-only for the workers).
    pub store: PathBuf,
    /// Where rank 1 writes its marker and rank 0 its acknowledgement.
    pub marker_dir: PathBuf,
    /// Where each rank writes its per-attempt report.
    pub out: PathBuf,
    /// Where the Fashion-MNIST payloads are cached.
    pub cache_directory: PathBuf,
    /// A local copy of the payloads, if any.
    pub source_directory: Option<PathBuf>,
    /// Test only: rank 1 perturbs its loaded state on the restarted attempt.
    pub inject: bool,
}

/// The worker body run under torch.distributed.run. Returns the process exit code.
pub fn run_worker(options: &WorkerOptions) -> Result<i32, ElasticError> {
    // If the launcher dies, so do we (the launcher starts workers in their own sessions).
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let identity = WorkerIdentity::from_environment()?;
    match (identity.restart_count, identity.rank) {
        (0, 1) => fail_first_attempt(options, &identity),
        (0, _) => watch_first_attempt(options, &identity),
        _ => resume(options, &identity),
    }
}

/// Who the launcher says this worker is.
struct WorkerIdentity {
    rank: u32,
    world_size: u32,
    restart_count: u32,
    max_restarts: u32,
}

/// What a restarted worker loaded and trained from it.
struct Resumption<'a> {
    generation: u64,
    loaded: &'a LogicalState,
    next: &'a LogicalState,
}

impl WorkerIdentity {
    fn from_environment() -> Result<Self, ElasticError> {
        let rank = env_u32("RANK")?;
        let world_size = env_u32("WORLD_SIZE")?;
        let restart_count = env_u32("TORCHELASTIC_RESTART_COUNT")?;
        let max_restarts = env_u32("TORCHELASTIC_MAX_RESTARTS")?;
        if world_size != WORLD_SIZE || rank >= world_size {
            return Err(ElasticError::Topology { rank, world_size });
        }
        Ok(WorkerIdentity {
            rank,
            world_size,
            restart_count,
            max_restarts,
        })
    }

    fn report(&self, saw_marker: bool, resumed: Option<Resumption>) -> WorkerReport {
        WorkerReport {
            schema: REPORT_SCHEMA.to_owned(),
            version: REPORT_VERSION,
            rank: self.rank,
            world_size: self.world_size,
            restart_count: self.restart_count,
            max_restarts: self.max_restarts,
            saw_marker,
            loaded_generation: resumed.as_ref().map(|r| r.generation),
            parameters_sha256: resumed
                .as_ref()
                .map(|r| slot_sha256(r.loaded, |c| c.parameters())),
            optimizer_sha256: resumed.as_ref().map(|r| optimizer_sha256(r.loaded)),
            cursor: resumed.as_ref().map(|r| r.loaded.cursor()),
            loaded_root: resumed.as_ref().map(|r| r.loaded.logical_state_root()),
            next_root: resumed.as_ref().map(|r| r.next.logical_state_root()),
            next_ledger_digest: resumed.as_ref().map(|r| r.next.ledger_digest()),
        }
    }

    fn write_report(
        &self,
        options: &WorkerOptions,
        report: &WorkerReport,
    ) -> Result<(), ElasticError> {
        write_durable(
            &options.out,
            &report_file(self.rank, self.restart_count),
            &canonical::encode(report)?,
        )
    }
}

/// Attempt 0, rank 1: write the marker, wait (bounded) for rank 0 to see it, then fail
/// with the registered exit code.
fn fail_first_attempt(
    options: &WorkerOptions,
    identity: &WorkerIdentity,
) -> Result<i32, ElasticError> {
    let marker = MarkerRecord {
        schema: MARKER_SCHEMA.to_owned(),
        version: 1,
        rank: identity.rank,
        restart_count: identity.restart_count,
        exit_code: FAILURE_EXIT_CODE,
    };
    write_durable(
        &options.marker_dir,
        MARKER_FILE,
        &canonical::encode(&marker)?,
    )?;
    eprintln!("elastic-worker: rank 1 attempt 0 wrote its marker; waiting for rank 0");
    // Bounded: exit with the registered code either way.
    wait_for_file(&options.marker_dir.join(RANK0_ACK_FILE), WORKER_WAIT_MS);
    eprintln!("elastic-worker: rank 1 attempt 0 exits with code {FAILURE_EXIT_CODE}");
    Ok(FAILURE_EXIT_CODE)
}

/// Attempt 0, rank 0: see rank 1's marker, report and acknowledge it, then wait to be
/// torn down with the failed attempt.
fn watch_first_attempt(
    options: &WorkerOptions,
    identity: &WorkerIdentity,
) -> Result<i32, ElasticError> {
    let marker_path = options.marker_dir.join(MARKER_FILE);
    if !wait_for_file(&marker_path, WORKER_WAIT_MS) {
        return Err(ElasticError::MarkerTimeout(WORKER_WAIT_MS));
    }
    let bytes = std::fs::read(&marker_path).map_err(io_error("reading the marker"))?;
    let marker: MarkerRecord = canonical::decode(&bytes)?;
    let saw_marker = marker.rank == 1 && marker.restart_count == 0;
    identity.write_report(options, &identity.report(saw_marker, None))?;
    write_durable(&options.marker_dir, RANK0_ACK_FILE, b"")?;
    eprintln!("elastic-worker: rank 0 attempt 0 saw the marker; waiting to be torn down");
    std::thread::sleep(Duration::from_millis(WORKER_WAIT_MS));
    // Not torn down within the bound: fail loudly rather than hang.
    Ok(3)
}

/// A restarted attempt: recover the store read-only, load the selected generation, train
/// the next step in memory and report the digests (nothing is published).
fn resume(options: &WorkerOptions, identity: &WorkerIdentity) -> Result<i32, ElasticError> {
    crate::engine::pin_single_thread();
    let data = crate::dataset::ensure_and_load(
        &options.cache_directory,
        options.source_directory.as_deref(),
    )?;
    // A fresh, read-only recovery scan decides what to resume; nothing is written.
    let recovery = crate::store::recover(&options.store)?;
    let selected = recovery.selected.ok_or(ElasticError::NothingToResume)?;
    let (mut state, _) = crate::store::load_generation(&options.store, selected.generation)?;
    if options.inject && identity.rank == 1 {
        if let Some(chunk) = state.chunk_slots_mut(0) {
            chunk.parameters[0] = f32::from_bits(chunk.parameters[0].to_bits() ^ 1);
        }
    }
    let (next, _) = next_step(&state, &data)?;
    let saw_marker = options.marker_dir.join(MARKER_FILE).exists();
    let resumed = Resumption {
        generation: selected.generation,
        loaded: &state,
        next: &next,
    };
    identity.write_report(options, &identity.report(saw_marker, Some(resumed)))?;
    eprintln!(
        "elastic-worker: rank {} attempt {} resumed and reported",
        identity.rank, identity.restart_count
    );
    Ok(0)
}

/// Everything the parent gathered from one launcher run (raw; never written out).
#[derive(Clone, Debug, Default)]
pub struct ElasticRun {
    /// How the launcher exited (`None`: it did not, it was killed at the deadline).
    pub launcher_exit: Option<ExitOutcome>,
    /// Whether the launcher ran past its deadline.
    pub launcher_timed_out: bool,
    /// The exit code of local rank 1 as printed by the launcher's own failure log line.
    pub launcher_logged_failure_code: Option<i32>,
    /// Rank 1's marker, as decoded.
    pub marker: Option<MarkerRecord>,
    /// Rank 0's report of attempt 0.
    pub rank0_attempt0: Option<WorkerReport>,
    /// Reports of the restarted attempt, by rank.
    pub finals: Vec<WorkerReport>,
    /// [`store_receipts`] before the launcher ran.
    pub receipts_before: Option<(Digest, Option<Digest>)>,
    /// [`store_receipts`] after it ran.
    pub receipts_after: Option<(Digest, Option<Digest>)>,
    /// Entries in the store's `staging/` before the run.
    pub staging_before: usize,
    /// Entries in the store's `staging/` after it.
    pub staging_after: usize,
    /// [`store_tree_sha256`] of the whole store before and after the launcher run.
    pub store_tree_before: Option<Digest>,
    /// See `store_tree_before`.
    pub store_tree_after: Option<Digest>,
    /// Launcher runs made (a rendezvous failure is retried).
    pub launch_attempts: u32,
}

/// What the restarted group must reproduce.
#[derive(Clone, Debug)]
pub struct ElasticExpectation {
    /// The generation recovery must select.
    pub generation: u64,
    /// Its state.
    pub state: LogicalState,
    /// The state after the next step from it.
    pub next: LogicalState,
}

fn opt<T: ToString>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "absent".to_owned(), T::to_string)
}

/// Derives the scenario-11 observation from what was gathered (pure, so the negative
/// tests can feed it violations directly).
pub fn elastic_observation(run: &ElasticRun, expected: &ElasticExpectation) -> Observation {
    let spec = &REGISTRY[10];
    let mut obs = Observation::new(spec);
    obs.fact("launcher", "torch.distributed.run --no-python");
    obs.fact("topology", "nnodes=1 nproc-per-node=2 (fixed 2-to-2)");
    obs.fact("max_restarts_requested", MAX_RESTARTS);
    obs.fact("rendezvous", "c10d on a numeric loopback address");
    obs.fact("injected_failure", "rank 1, attempt 0, exit code 91");
    obs.fact("launcher_timeout_s", LAUNCHER_TIMEOUT_S);
    obs.fact("launch_attempts", run.launch_attempts);
    observe_launcher(&mut obs, run);
    observe_failed_attempt(&mut obs, run);
    observe_restarted_attempt(&mut obs, run, expected);
    observe_store_unchanged(&mut obs, run);
    for statement in ELASTIC_NOT_OBSERVED {
        obs.not_observed(statement);
    }
    obs
}

/// What the suite takes from the launcher and the workers without observing it itself.
const ELASTIC_NOT_OBSERVED: [&str; 4] = [
    "the failing worker's exit code 91 is read from the launcher's own failure log line \
     (torch.distributed.elastic: 'failed (exitcode: 91) local_rank: 1'); the suite does not reap that worker itself",
    "restart count and maximum restarts are the values the launcher put into the workers' environment \
     (TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS), as reported by the workers",
    "that rank 0 saw the marker before the failed attempt was torn down is rank 0's own report; \
     rank 1 waits (bounded) for rank 0's acknowledgement before exiting",
    "that no promotion was attempted is observed as an unchanged store: every entry under it (objects, \
     manifests, commit records, staging, LATEST: name, kind, size and content digest) is the same before and \
     after the launcher run; an attempt that failed before writing anything to the store would not be seen",
];

/// The launcher exited cleanly, in time, after logging rank 1's injected failure.
fn observe_launcher(obs: &mut Observation, run: &ElasticRun) {
    obs.check(
        "launcher_exit",
        "code:0",
        match run.launcher_exit {
            Some(ExitOutcome::Code(c)) => format!("code:{c}"),
            Some(ExitOutcome::Signal(s)) => format!("signal:{s}"),
            None => "absent".into(),
        },
    );
    obs.check("launcher_timed_out", false, run.launcher_timed_out);
    obs.check(
        "failure_exit_code_from_launcher_log",
        FAILURE_EXIT_CODE,
        opt(&run.launcher_logged_failure_code),
    );
}

/// Attempt 0: rank 1 wrote the failure marker and rank 0 saw it before the teardown.
fn observe_failed_attempt(obs: &mut Observation, run: &ElasticRun) {
    let marker_ok = run
        .marker
        .as_ref()
        .is_some_and(|m| m.rank == 1 && m.restart_count == 0 && m.exit_code == FAILURE_EXIT_CODE);
    obs.check("marker_written_by_rank1_on_attempt0", true, marker_ok);
    let rank0_saw = run
        .rank0_attempt0
        .as_ref()
        .is_some_and(|r| r.rank == 0 && r.restart_count == 0 && r.saw_marker);
    obs.check("rank0_saw_marker_before_teardown", true, rank0_saw);
}

/// The restarted attempt: every rank loaded the expected generation and reproduced the
/// expected next step.
fn observe_restarted_attempt(
    obs: &mut Observation,
    run: &ElasticRun,
    expected: &ElasticExpectation,
) {
    obs.check("final_reports", WORLD_SIZE, run.finals.len());
    let next_root = expected.next.logical_state_root();
    for rank in 0..WORLD_SIZE {
        let report = run
            .finals
            .iter()
            .find(|r| r.rank == rank && r.restart_count >= 1);
        observe_restarted_rank(obs, rank, report, expected, next_root);
    }
}

fn observe_restarted_rank(
    obs: &mut Observation,
    rank: u32,
    report: Option<&WorkerReport>,
    expected: &ElasticExpectation,
    next_root: Digest,
) {
    type Field = fn(&WorkerReport) -> String;
    let checks: [(&str, String, Field); 10] = [
        ("restart_count", 1.to_string(), |r| {
            r.restart_count.to_string()
        }),
        ("max_restarts", MAX_RESTARTS.to_string(), |r| {
            r.max_restarts.to_string()
        }),
        ("world_size", WORLD_SIZE.to_string(), |r| {
            r.world_size.to_string()
        }),
        ("loaded_generation", expected.generation.to_string(), |r| {
            opt(&r.loaded_generation)
        }),
        (
            "parameters_sha256",
            slot_sha256(&expected.state, |c| c.parameters()).to_string(),
            |r| opt(&r.parameters_sha256),
        ),
        (
            "optimizer_sha256",
            optimizer_sha256(&expected.state).to_string(),
            |r| opt(&r.optimizer_sha256),
        ),
        ("cursor", expected.state.cursor().to_string(), |r| {
            opt(&r.cursor)
        }),
        (
            "loaded_root",
            expected.state.logical_state_root().to_string(),
            |r| opt(&r.loaded_root),
        ),
        ("next_root", next_root.to_string(), |r| opt(&r.next_root)),
        (
            "next_ledger_digest",
            expected.next.ledger_digest().to_string(),
            |r| opt(&r.next_ledger_digest),
        ),
    ];
    for (name, expected_value, field) in checks {
        obs.check(
            &format!("rank{rank}_{name}"),
            expected_value,
            report.map_or("absent".to_owned(), field),
        );
    }
}

/// No promotion: commit records, LATEST and staging are as before, and nothing at all was
/// written to the store (observed from the store's whole tree, not from the workers).
fn observe_store_unchanged(obs: &mut Observation, run: &ElasticRun) {
    let receipts = |r: &Option<(Digest, Option<Digest>)>| r.map(|(c, _)| c.to_hex());
    let latest = |r: &Option<(Digest, Option<Digest>)>| r.map(|(_, l)| opt(&l));
    obs.check(
        "commit_receipts_sha256",
        opt(&receipts(&run.receipts_before)),
        opt(&receipts(&run.receipts_after)),
    );
    obs.check(
        "latest_sha256",
        opt(&latest(&run.receipts_before)),
        opt(&latest(&run.receipts_after)),
    );
    obs.check("staging_entries", run.staging_before, run.staging_after);
    let attempted = match (run.store_tree_before, run.store_tree_after) {
        (Some(before), Some(after)) => before != after,
        // Not observed is not evidence of no attempt.
        _ => true,
    };
    obs.check("publish_attempted", false, attempted);
    obs.check("completed", true, run.launcher_exit.is_some());
}

/// Finds "failed (exitcode: N) local_rank: 1" in the launcher's log.
pub fn logged_failure_code(log: &str, local_rank: u32) -> Option<i32> {
    let needle = format!(") local_rank: {local_rank} ");
    log.lines().find_map(|line| {
        let start = line.find("failed (exitcode: ")? + "failed (exitcode: ".len();
        let rest = &line[start..];
        let end = rest.find(')')?;
        if !rest[end..].starts_with(&needle) {
            return None;
        }
        rest[..end].trim().parse().ok()
    })
}

/// A free loopback port. Racy by nature: the port is released before the launcher binds
/// it, so another process could take it in between; the caller retries once on a
/// rendezvous failure.
fn free_loopback_port() -> Result<u16, ElasticError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(io_error("binding 127.0.0.1:0 to pick a port"))?;
    let port = listener
        .local_addr()
        .map_err(io_error("reading the picked port"))?
        .port();
    drop(listener);
    Ok(port)
}

/// A digest of everything under a store: every entry's path (relative, in order), kind,
/// size and content digest (a symlink's target). Any write to the store changes it.
pub fn store_tree_sha256(store_dir: &Path) -> Result<Digest, ElasticError> {
    let mut hasher = crate::core::digest::FramedHasher::new("shardlift/invariants/store-tree/v1");
    let walk = walkdir::WalkDir::new(store_dir)
        .follow_links(false)
        .sort_by_file_name();
    for entry in walk {
        let entry = entry.map_err(|e| ElasticError::Io {
            context: "walking the store".into(),
            source: e.into(),
        })?;
        let relative = entry
            .path()
            .strip_prefix(store_dir)
            .unwrap_or(entry.path())
            .as_os_str()
            .as_encoded_bytes()
            .to_vec();
        hasher.field(&relative);
        let kind = entry.file_type();
        if kind.is_file() {
            let bytes = std::fs::read(entry.path()).map_err(io_error("reading a store file"))?;
            hasher.field(b"file").u64(bytes.len() as u64);
            hasher.field(Digest::of(&bytes).0.as_slice());
        } else if kind.is_dir() {
            hasher.field(b"dir");
        } else if kind.is_symlink() {
            let target =
                std::fs::read_link(entry.path()).map_err(io_error("reading a store symlink"))?;
            hasher
                .field(b"symlink")
                .field(target.as_os_str().as_encoded_bytes());
        } else {
            hasher.field(b"other");
        }
    }
    Ok(hasher.finish())
}

fn count_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

/// Where the launcher comes from and what to run.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// The `torchrun` executable of the pinned wheel.
    pub torchrun: PathBuf,
    /// Where the Fashion-MNIST payloads are cached.
    pub cache_directory: PathBuf,
    /// A local copy of the payloads, if any.
    pub source_directory: Option<PathBuf>,
    /// Deadline of one launcher run, in seconds.
    pub timeout_s: u64,
    /// Test only: have rank 1 perturb its state on the restarted attempt.
    pub inject: bool,
}

/// One launcher run; returns (exit, timed_out, log).
fn launch_once(
    ctx: &Context<'_>,
    options: &LaunchOptions,
    store_dir: &Path,
    marker_dir: &Path,
    out_dir: &Path,
) -> Result<(Option<ExitOutcome>, bool, String), ElasticError> {
    let port = free_loopback_port()?;
    let mut spec = ChildSpec::new("/bin/sh", Role::Launcher, "invariants-elastic")
        // The launcher logs on stderr; fold it into the one pipe we read.
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 2>&1")
        .arg(&options.torchrun)
        .arg("--no-python")
        .arg("--nnodes=1")
        .arg(format!("--nproc-per-node={WORLD_SIZE}"))
        .arg(format!("--max-restarts={MAX_RESTARTS}"))
        .arg("--monitor-interval=0.5")
        .arg("--rdzv-backend=c10d")
        .arg(format!("--rdzv-endpoint=127.0.0.1:{port}"))
        .arg("--local-addr=127.0.0.1")
        .arg(&ctx.shardlift_exe)
        .arg("elastic-worker")
        .arg("--store")
        .arg(store_dir)
        .arg("--marker-dir")
        .arg(marker_dir)
        .arg("--out")
        .arg(out_dir)
        .arg("--cache-directory")
        .arg(&options.cache_directory)
        .env("OMP_NUM_THREADS", "1")
        .piped_stdout();
    if let Some(source) = &options.source_directory {
        spec = spec.arg("--source-directory").arg(source);
    }
    if options.inject {
        spec = spec.arg("--inject-violation");
    }
    let mut child = SupervisedChild::spawn(spec)?;
    let mut stdout = child.take_stdout().ok_or_else(|| ElasticError::Io {
        context: "launcher output".into(),
        source: std::io::Error::other("no stdout pipe"),
    })?;
    let reader = std::thread::spawn(move || {
        let mut buffer = Vec::new();
        let _ = (&mut stdout).take(8 << 20).read_to_end(&mut buffer);
        String::from_utf8_lossy(&buffer).into_owned()
    });
    let exit = child.wait_timeout(options.timeout_s * 1000)?.cloned();
    let timed_out = exit.is_none();
    let exit = match exit {
        Some(record) => Some(record.outcome),
        None => {
            eprintln!(
                "invariants: the launcher did not finish within {} s; tearing it down",
                options.timeout_s
            );
            // SIGTERM lets the launcher stop its workers; then SIGKILL its whole group.
            let _ = child.signal(Signal::TERM);
            let _ = child.wait_timeout(5_000);
            let _ = child.signal_group(Signal::KILL);
            let _ = child.kill_and_reap();
            None
        }
    };
    let log = reader.join().unwrap_or_default();
    Ok((exit, timed_out, log))
}

/// Runs scenario 11 end to end and returns its observation.
pub fn observe_elastic(
    ctx: &Context<'_>,
    options: &LaunchOptions,
) -> Result<Observation, ElasticError> {
    let store_dir = ctx.fresh_store("s11");
    let committed = crate::store::publish(
        &store_dir,
        &ctx.state1,
        crate::core::topology::Topology::new(WORLD_SIZE).map_err(crate::store::StoreError::from)?,
        &mut crate::store::NoHooks,
    )?;
    let (next, _) = next_step(&ctx.state1, ctx.data)?;
    let expected = ElasticExpectation {
        generation: committed.generation,
        state: ctx.state1.clone(),
        next,
    };
    let mut run = ElasticRun {
        receipts_before: Some(store_receipts(&store_dir)?),
        staging_before: count_entries(&store_dir.join("staging")),
        store_tree_before: Some(store_tree_sha256(&store_dir)?),
        ..ElasticRun::default()
    };
    let mut attempt_dirs = None;
    for attempt in 1..=2u32 {
        let base = ctx.fresh_store("s11-run");
        let marker_dir = base.join("marker");
        let out_dir = base.join("out");
        for dir in [&marker_dir, &out_dir] {
            std::fs::create_dir_all(dir).map_err(io_error("creating the worker directories"))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_error("restricting the worker directories"))?;
        }
        eprintln!("invariants: elastic-restart: launching torch.distributed.run (try {attempt})");
        let (exit, timed_out, log) = launch_once(ctx, options, &store_dir, &marker_dir, &out_dir)?;
        run.launch_attempts = attempt;
        run.launcher_exit = exit;
        run.launcher_timed_out = timed_out;
        run.launcher_logged_failure_code = logged_failure_code(&log, 1);
        let rendezvous_failed = !timed_out
            && exit != Some(ExitOutcome::Code(0))
            && !marker_dir.join(MARKER_FILE).exists()
            && (log.contains("Rendezvous")
                || log.contains("rendezvous")
                || log.contains("Address already in use"));
        if exit != Some(ExitOutcome::Code(0)) {
            eprintln!("invariants: elastic-restart: launcher output follows\n{log}");
        }
        attempt_dirs = Some((marker_dir, out_dir));
        if rendezvous_failed && attempt == 1 {
            eprintln!("invariants: elastic-restart: rendezvous failed (port race?); retrying once");
            continue;
        }
        break;
    }
    if let Some((marker_dir, out_dir)) = attempt_dirs {
        run.marker = std::fs::read(marker_dir.join(MARKER_FILE))
            .ok()
            .and_then(|b| canonical::decode(&b).ok());
        let read_report = |name: String| -> Option<WorkerReport> {
            std::fs::read(out_dir.join(name))
                .ok()
                .and_then(|b| canonical::decode(&b).ok())
        };
        run.rank0_attempt0 = read_report(report_file(0, 0));
        run.finals = (0..WORLD_SIZE)
            .filter_map(|rank| read_report(report_file(rank, MAX_RESTARTS)))
            .collect();
    }
    run.receipts_after = Some(store_receipts(&store_dir)?);
    run.staging_after = count_entries(&store_dir.join("staging"));
    run.store_tree_after = Some(store_tree_sha256(&store_dir)?);
    Ok(elastic_observation(&run, &expected))
}

/// The launcher's provenance from its virtual environment: the torch version its wheel
/// reports and whether its `libtorch_cpu.so` is byte-identical to the one loaded here.
pub fn launcher_provenance(
    torchrun: &Path,
    loaded: Digest,
) -> Option<crate::orchestrate::invariants::evidence::LauncherProvenance> {
    let venv = torchrun.parent()?.parent()?;
    let lib = venv.join("lib");
    let torch_dir = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages/torch"))
        .find(|p| p.is_dir())?;
    let library = torch_dir
        .join("lib")
        .join(crate::orchestrate::invariants::provenance::ATTESTED_LIBRARY);
    let (_, version) =
        crate::orchestrate::invariants::provenance::build_version_beside(&library).ok()?;
    let digest = durable::file_sha256(&library).ok()?;
    Some(
        crate::orchestrate::invariants::evidence::LauncherProvenance {
            launcher: "torch.distributed.run (torchrun --no-python)".into(),
            python_torch_version: version,
            wheel_libtorch_cpu_matches_loaded: digest == loaded,
        },
    )
}
