//! `killer-demo`: a real SIGKILL of the checkpoint publisher at a named barrier, fresh
//! recovery, continuation against an uninterrupted reference, an offline W4 → W3
//! reshard, full evaluation, and an evidence bundle.
//!
//! The run, for barrier B (seed K, L = 12 micro-batches of 16):
//! 1. session `genesis` (W4) trains step 1 from the seeded initial state; a publisher
//!    child commits it as generation 0 to two independent stores, `reference` and `crash`;
//! 2. session `reference` (W4) loads generation 0 from the reference store and trains,
//!    uninterrupted, to step 3, recording the digests at every step;
//! 3. session `crash` (W4) loads generation 0 from the crash store and trains step 2; a
//!    publisher child is killed with SIGKILL when it reports barrier B for that state;
//! 4. a fresh child process recovers the crash store by scanning commit records;
//! 5. session `recovered` (W4) loads the selected generation and trains one step (the
//!    target step = selected step + 1), replaying the uncommitted batch if it was lost;
//! 6. the selected generation is resharded offline to W3 (same chunk objects);
//! 7. session `resharded` (W3) loads it and trains the same next batch; a publisher
//!    child commits the result, which a fresh recovery child must select;
//! 8. the reference and the final checkpoint (loaded back from disk) are evaluated on
//!    the whole test split; the bundle is installed, `audit.json` last.
//!
//! Invariant: every comparison is of exact bytes (SHA-256 of canonical state bytes, the
//! ledger chain, the logit probe's FP32 bytes).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::core::digest::Digest;
use crate::core::logical::{Hyperparameters, LogicalState};
use crate::core::pins::{LIBTORCH_VERSION, TCH_VERSION};
use crate::core::sampling::SampleStream;
use crate::core::step::SplitView;
use crate::core::topology::Topology;
use crate::dataset::{self, FashionMnist, Resource, FASHION_MNIST};
use crate::engine::{evaluate, Evaluation};
use crate::evidence::bundle::{self, records::*};
use crate::store::{self, Barrier, StoreError};
use crate::supervise::process::{ExitOutcome, ExitRecord};
use crate::trainer::{CoordinatorSession, SessionOptions};

/// The two barriers the demo is defined for.
pub const DEMO_BARRIERS: [Barrier; 2] = [Barrier::CommitAfterFileFsync, Barrier::CommitAfterRename];

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub shardlift_exe: PathBuf,
    pub run_directory: PathBuf,
    pub cache_directory: PathBuf,
    pub source_directory: Option<PathBuf>,
    pub barrier: Barrier,
    pub seed: u64,
    /// The clean checkout and exact revision to bind the run to.
    pub source: Option<(PathBuf, String)>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the run directory {0} already exists; a run never reuses a directory (a failed run's directory is kept for inspection): choose a new one")]
    RunDirectoryExists(PathBuf),
    #[error("cannot create the run directory {path}: {source}")]
    RunDirectory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("barrier {0} is not a killer-demo barrier (use commit-after-file-fsync or commit-after-rename)")]
    UnsupportedBarrier(String),
    #[error(transparent)]
    Dataset(#[from] dataset::DatasetError),
    #[error(transparent)]
    Source(#[from] crate::evidence::source::SourceError),
    #[error("session {session}: {source}")]
    Session {
        session: &'static str,
        source: Box<crate::trainer::SessionError>,
    },
    #[error("{context}: {source}")]
    Store {
        context: &'static str,
        source: StoreError,
    },
    #[error("evaluation: {0}")]
    Evaluation(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Bundle(#[from] bundle::BundleError),
    #[error("the run broke an invariant: {0}")]
    Invariant(String),
}

fn store_error(context: &'static str) -> impl FnOnce(StoreError) -> DemoError {
    move |source| DemoError::Store { context, source }
}

fn invariant(condition: bool, message: impl FnOnce() -> String) -> Result<(), DemoError> {
    if condition {
        Ok(())
    } else {
        Err(DemoError::Invariant(message()))
    }
}

/// The record printed on stdout when a run completes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DemoRecord {
    pub status: String,
    #[serde(flatten)]
    pub outcome: RunOutcome,
    pub bundle_directory: String,
    pub audit_sha256: Digest,
    pub wall_time_ms: u64,
}

/// Checks everything that can be checked before any work: the barrier, the run
/// directory (must not exist), the cache directory (owner, mode), the source checkout.
pub fn preflight(
    options: &DemoOptions,
) -> Result<Option<crate::evidence::source::SourceBinding>, DemoError> {
    if !DEMO_BARRIERS.contains(&options.barrier) {
        return Err(DemoError::UnsupportedBarrier(
            options.barrier.name().to_owned(),
        ));
    }
    if options.run_directory.symlink_metadata().is_ok() {
        return Err(DemoError::RunDirectoryExists(options.run_directory.clone()));
    }
    dataset::check_cache_directory(&options.cache_directory)?;
    match &options.source {
        Some((repository, revision)) => Ok(Some(crate::evidence::source::check_clean_checkout(
            repository,
            Some(revision),
        )?)),
        None => Ok(None),
    }
}

struct Run<'a> {
    options: &'a DemoOptions,
    data: &'a FashionMnist,
    exits: Vec<ExitRecord>,
    sessions: Vec<SessionEntry>,
}

fn progress(barrier: Barrier, message: &str) {
    eprintln!("killer-demo[{}]: {message}", barrier.name());
}

fn digests_of(state: &LogicalState, workers: u32) -> StateDigests {
    StateDigests {
        step: state.step,
        workers,
        logical_state_root: state.logical_state_root(),
        ledger_digest: state.ledger_digest,
    }
}

impl Run<'_> {
    /// Runs one coordinator session of `workers` for `steps` steps from `state`,
    /// returning the final state and the state after every step.
    fn session(
        &mut self,
        name: &'static str,
        workers: u32,
        state: LogicalState,
        steps: u64,
    ) -> Result<(LogicalState, Vec<LogicalState>), DemoError> {
        let barrier = self.options.barrier;
        let start_step = state.step;
        let seed = state.hyperparameters.seed;
        let options = SessionOptions::new(&self.options.shardlift_exe, workers, name);
        let session_error = |source: crate::trainer::SessionError| DemoError::Session {
            session: name,
            source: Box::new(source),
        };
        let mut session = CoordinatorSession::start(options, state).map_err(session_error)?;
        let mut stream = SampleStream::new(seed, self.data.train.count as u32);
        let mut trail = Vec::new();
        for _ in 0..steps {
            let outcome = session
                .step(&mut stream, SplitView::from(&self.data.train))
                .map_err(session_error)?;
            progress(
                barrier,
                &format!(
                    "session {name} (W{workers}) step {} loss {:.6}",
                    outcome.step, outcome.loss
                ),
            );
            trail.push(session.state().clone());
        }
        let (state, exits) = session.finish().map_err(session_error)?;
        self.exits.extend(exits);
        self.sessions.push(SessionEntry {
            name: name.to_owned(),
            workers,
            start_step,
            end_step: state.step,
        });
        Ok((state, trail))
    }

    fn publish(
        &self,
        store_dir: &Path,
        state: &LogicalState,
        workers: u32,
    ) -> Result<store::CommitSummary, DemoError> {
        let topology = Topology::new(workers).map_err(|e| DemoError::Invariant(e.to_string()))?;
        let summary =
            crate::lab::publish_in_child(&self.options.shardlift_exe, store_dir, state, topology)
                .map_err(store_error("publishing a checkpoint"))?;
        invariant(
            summary.logical_state_root == state.logical_state_root(),
            || "the publisher committed another state than it was given".into(),
        )?;
        Ok(summary)
    }
}

fn evaluation_record(
    role: &str,
    barrier: Barrier,
    generation: Option<u64>,
    state: &LogicalState,
    workers: u32,
    evaluation: &Evaluation,
) -> EvaluationRecord {
    EvaluationRecord {
        schema: EVALUATION_SCHEMA.to_owned(),
        version: BUNDLE_VERSION,
        role: role.to_owned(),
        barrier: barrier.name().to_owned(),
        generation,
        step: state.step,
        workers,
        logical_state_root: state.logical_state_root(),
        ledger_digest: state.ledger_digest,
        test_images_sha256: FASHION_MNIST.get(Resource::TestImages).payload.sha256,
        test_labels_sha256: FASHION_MNIST.get(Resource::TestLabels).payload.sha256,
        correct: evaluation.correct,
        total: evaluation.total,
        logit_probe_shape: [(evaluation.logit_probe.len() / 40) as u32, 10],
        logit_probe_f32le_hex: hex::encode(&evaluation.logit_probe),
        logit_probe_sha256: evaluation.logit_probe_sha256,
    }
}

fn outcome_text(outcome: ExitOutcome) -> String {
    match outcome {
        ExitOutcome::Code(code) => format!("code:{code}"),
        ExitOutcome::Signal(signal) => format!("signal:{signal}"),
    }
}

/// Runs the whole demo for one barrier. `preflight` must have passed.
pub fn run(
    options: &DemoOptions,
    source: Option<crate::evidence::source::SourceBinding>,
) -> Result<DemoRecord, DemoError> {
    let started = Instant::now();
    let barrier = options.barrier;
    std::fs::create_dir_all(options.run_directory.parent().unwrap_or(Path::new("/"))).map_err(
        |source| DemoError::RunDirectory {
            path: options.run_directory.clone(),
            source,
        },
    )?;
    // create_dir (not _all) fails if someone created it since the preflight: never reuse.
    std::fs::create_dir(&options.run_directory).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => {
            DemoError::RunDirectoryExists(options.run_directory.clone())
        }
        _ => DemoError::RunDirectory {
            path: options.run_directory.clone(),
            source,
        },
    })?;
    let reference_store = options.run_directory.join("reference-store");
    let crash_store = options.run_directory.join("crash-store");

    progress(
        barrier,
        "acquiring and checking the pinned Fashion-MNIST payloads",
    );
    let data = dataset::ensure_and_load(
        &options.cache_directory,
        options.source_directory.as_deref(),
    )?;
    let mut run = Run {
        options,
        data: &data,
        exits: Vec::new(),
        sessions: Vec::new(),
    };
    let genesis = LogicalState::genesis(Hyperparameters::with_seed(options.seed));

    // 1. Genesis, committed to both stores.
    let (step1, _) = run.session("genesis", 4, genesis, 1)?;
    let reference_genesis = run.publish(&reference_store, &step1, 4)?;
    let crash_genesis = run.publish(&crash_store, &step1, 4)?;
    invariant(
        reference_genesis.generation == 0 && crash_genesis.generation == 0,
        || "genesis must be generation 0 in both stores".into(),
    )?;
    progress(
        barrier,
        "genesis (step 1) committed as generation 0 to the reference and crash stores",
    );

    // 2. Uninterrupted reference from the committed genesis.
    let (from_reference_store, _) = store::load_generation(&reference_store, 0)
        .map_err(store_error("loading the reference genesis"))?;
    let (_, mut reference_trail) = run.session("reference", 4, from_reference_store, 2)?;
    reference_trail.insert(0, step1.clone());

    // 3. The crash: train step 2, kill its publisher at the barrier.
    let (from_crash_store, _) = store::load_generation(&crash_store, 0)
        .map_err(store_error("loading the crash genesis"))?;
    let (step2, _) = run.session("crash", 4, from_crash_store, 1)?;
    let w4 = Topology::new(4).map_err(|e| DemoError::Invariant(e.to_string()))?;
    progress(
        barrier,
        &format!(
            "publishing step 2 in a child and killing it with SIGKILL at {}",
            barrier.name()
        ),
    );
    let kill =
        crate::lab::kill_publisher_at(&options.shardlift_exe, &crash_store, &step2, w4, barrier)
            .map_err(store_error("killing the publisher"))?;
    invariant(kill.signal == Some(9) && kill.reaped, || {
        format!("the publisher ended with {}", kill.exit.outcome)
    })?;
    invariant(kill.unacknowledged.barrier == barrier, || {
        "the kill happened at another barrier".into()
    })?;
    let publisher_exit = kill.exit.clone();
    progress(
        barrier,
        &format!(
            "publisher killed ({}), candidate installed: {}",
            publisher_exit.outcome, kill.candidate_visible
        ),
    );

    // 4. Fresh-process recovery.
    let recovery = crate::lab::recover_in_child(&options.shardlift_exe, &crash_store)
        .map_err(store_error("recovering in a child"))?;
    let selected = recovery
        .selected
        .clone()
        .ok_or_else(|| DemoError::Invariant("recovery selected nothing".into()))?;
    progress(
        barrier,
        &format!(
            "recovery selected generation {} (step {}); LATEST is {:?}",
            selected.generation, selected.step, recovery.latest.status
        ),
    );
    let target_step = selected.step + 1;
    let replayed_batches = step2.step - selected.step;

    // 5. Recovered W4 continuation.
    let (selected_state, _) = store::load_generation(&crash_store, selected.generation)
        .map_err(store_error("loading the selected generation"))?;
    let (recovered_w4, _) = run.session("recovered", 4, selected_state, 1)?;

    // 6. Offline reshard W4 → W3.
    let w3 = Topology::new(3).map_err(|e| DemoError::Invariant(e.to_string()))?;
    let reshard =
        store::reshard(&crash_store, selected.generation, w3).map_err(store_error("resharding"))?;
    invariant(
        reshard.logical_state_root == selected.logical_state_root,
        || "reshard changed the logical state".into(),
    )?;
    progress(
        barrier,
        &format!(
            "resharded generation {} to W3 as generation {}",
            selected.generation, reshard.generation
        ),
    );

    // 7. Resharded W3 continuation, committed, then recovered by a fresh child.
    let (resharded_state, placement) = store::load_generation(&crash_store, reshard.generation)
        .map_err(store_error("loading the resharded generation"))?;
    invariant(placement == w3, || {
        "the resharded generation is not placed on three workers".into()
    })?;
    let (resharded_w3, _) = run.session("resharded", 3, resharded_state, 1)?;
    let final_commit = run.publish(&crash_store, &resharded_w3, 3)?;
    let final_recovery = crate::lab::recover_in_child(&options.shardlift_exe, &crash_store)
        .map_err(store_error("recovering the final checkpoint"))?;
    invariant(
        final_recovery.selected.as_ref().map(|s| s.generation) == Some(final_commit.generation),
        || "a fresh recovery does not select the final checkpoint".into(),
    )?;
    let (final_state, _) = store::load_generation(&crash_store, final_commit.generation)
        .map_err(store_error("loading the final checkpoint"))?;
    progress(
        barrier,
        &format!(
            "final W3 checkpoint: generation {} step {}",
            final_commit.generation, final_state.step
        ),
    );

    // 8. Evaluation and evidence.
    let reference_at_target = reference_trail
        .iter()
        .find(|state| state.step == target_step)
        .cloned()
        .ok_or_else(|| {
            DemoError::Invariant(format!("the reference never reached step {target_step}"))
        })?;
    progress(
        barrier,
        "evaluating the reference and the recovered final checkpoint on all 10,000 test images",
    );
    let reference_evaluation = evaluate(
        &reference_at_target.flat_parameters(),
        SplitView::from(&data.test),
    )?;
    let recovered_evaluation =
        evaluate(&final_state.flat_parameters(), SplitView::from(&data.test))?;

    let mut exits = run.exits.clone();
    exits.retain(|e| e.role == crate::supervise::process::Role::Worker);
    let worker_exits: Vec<WorkerExitEntry> = exits
        .iter()
        .map(|e| WorkerExitEntry {
            session: e.session.clone(),
            rank: e.rank.unwrap_or(u32::MAX),
            outcome: outcome_text(e.outcome),
        })
        .collect();
    let reference_digests: Vec<StateDigests> =
        reference_trail.iter().map(|s| digests_of(s, 4)).collect();
    let target_reference = digests_of(&reference_at_target, 4);
    let recovered_w4_digests = digests_of(&recovered_w4, 4);
    let resharded_w3_digests = digests_of(&final_state, 3);
    let roots_equal = recovered_w4_digests.logical_state_root
        == target_reference.logical_state_root
        && resharded_w3_digests.logical_state_root == target_reference.logical_state_root
        && reshard.logical_state_root == selected.logical_state_root;
    let ledgers_equal = recovered_w4_digests.ledger_digest == target_reference.ledger_digest
        && resharded_w3_digests.ledger_digest == target_reference.ledger_digest;
    let probe_equal =
        reference_evaluation.logit_probe_sha256 == recovered_evaluation.logit_probe_sha256;
    let comparisons = Comparisons {
        logical_state_roots_equal: roots_equal,
        ledger_digests_equal: ledgers_equal,
        logit_probe_equal: probe_equal,
    };
    let final_checkpoint = CheckpointEntry {
        generation: final_commit.generation,
        step: final_state.step,
        workers: 3,
    };
    let expected = expected_outcome(barrier.name());
    let observed = (
        kill.candidate_visible,
        selected.generation,
        selected.step,
        replayed_batches,
        final_checkpoint.generation,
        final_checkpoint.step,
    );
    let passed = expected == Some(observed) && roots_equal && ledgers_equal && probe_equal;

    let reference_record = evaluation_record(
        "reference",
        barrier,
        None,
        &reference_at_target,
        4,
        &reference_evaluation,
    );
    let recovered_record = evaluation_record(
        "recovered",
        barrier,
        Some(final_commit.generation),
        &final_state,
        3,
        &recovered_evaluation,
    );
    let evidence = RecoveryEvidenceRecord {
        schema: RECOVERY_EVIDENCE_SCHEMA.to_owned(),
        version: BUNDLE_VERSION,
        barrier: barrier.name().to_owned(),
        seed: options.seed,
        sessions: run.sessions.clone(),
        worker_exits,
        kill: KillEntry {
            target_barrier: barrier.name().to_owned(),
            acknowledged_events: kill
                .acknowledged
                .iter()
                .map(|e| e.barrier.name().to_owned())
                .collect(),
            unacknowledged_event: kill.unacknowledged.barrier.name().to_owned(),
            signal: kill.signal.unwrap_or(0),
            reaped: kill.reaped,
            candidate_generation: kill.candidate_generation,
            candidate_installed: kill.candidate_visible,
        },
        recovery: RecoveryEntry {
            selected_generation: selected.generation,
            selected_step: selected.step,
            selected_commit_sha256: selected.commit_digest,
            valid_generations: recovery.valid_generations.clone(),
            latest_status: serde_json::to_value(recovery.latest.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            rejected: recovery
                .rejected
                .iter()
                .map(|r| {
                    format!(
                        "{}:{}",
                        r.generation.map_or("?".into(), |g| g.to_string()),
                        r.kind
                    )
                })
                .collect(),
        },
        replayed_batches,
        target_step,
        reference: reference_digests,
        recovered_w4: recovered_w4_digests,
        reshard: ReshardEntry {
            source_generation: selected.generation,
            generation: reshard.generation,
            workers_before: selected.workers,
            workers_after: reshard.workers,
            logical_state_root_before: selected.logical_state_root,
            logical_state_root_after: reshard.logical_state_root,
            chunk_objects_written: reshard.objects_written,
        },
        resharded_w3: resharded_w3_digests,
        final_checkpoint: final_checkpoint.clone(),
        comparisons,
        reference_evaluation_sha256: Digest([0; 32]),
        recovered_evaluation_sha256: Digest([0; 32]),
    };
    let wall_time_ms = started.elapsed().as_millis() as u64;
    let audit = AuditRecord {
        schema: AUDIT_SCHEMA.to_owned(),
        version: BUNDLE_VERSION,
        barrier: barrier.name().to_owned(),
        status: if passed { "passed" } else { "failed" }.to_owned(),
        candidate_installed: kill.candidate_visible,
        selected_generation: selected.generation,
        selected_step: selected.step,
        replayed_batches,
        final_checkpoint: final_checkpoint.clone(),
        comparisons,
        worker_exits: evidence.worker_exits.len() as u64,
        files: Vec::new(),
        build: BuildEntry {
            shardlift_version: env!("CARGO_PKG_VERSION").to_owned(),
            tch_version: TCH_VERSION.to_owned(),
            libtorch_version: LIBTORCH_VERSION.to_owned(),
            source_revision: source.map(|s| s.commit),
            dataset_payload_sha256: FASHION_MNIST
                .resources
                .iter()
                .map(|r| r.payload.sha256)
                .collect(),
        },
        nonclaims: NONCLAIMS.iter().map(|s| (*s).to_owned()).collect(),
        context: ContextEntry { wall_time_ms },
        self_sha256: Digest([0; 32]),
    };
    let status = audit.status.clone();
    let outcome = RunOutcome::of(&audit);
    let bundle_directory = options.run_directory.join("bundle");
    let installed = bundle::install(
        &bundle_directory,
        &reference_record,
        &recovered_record,
        evidence,
        audit,
    )?;
    progress(
        barrier,
        &format!(
            "bundle installed at {} (audit.json last)",
            bundle_directory.display()
        ),
    );
    Ok(DemoRecord {
        status,
        outcome,
        bundle_directory: installed.directory.display().to_string(),
        audit_sha256: installed.audit_sha256,
        wall_time_ms,
    })
}
