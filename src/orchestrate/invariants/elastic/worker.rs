//! The worker side: what each rank does on attempt 0 and after the restart.
use std::path::PathBuf;
use std::time::Duration;

use crate::core::canonical;
use crate::core::logical::LogicalState;
use crate::supervise::process::Signal;

use crate::orchestrate::invariants::scenarios::{next_step, slot_sha256};

use super::*;

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
