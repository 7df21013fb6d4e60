//! `killer-demo`: a real SIGKILL of the checkpoint publisher at a named barrier, fresh
//! recovery, continuation against an uninterrupted reference, an offline W4 → W3
//! reshard, full evaluation, and an evidence bundle.
//!
//! The run, for barrier B (seed K, L = 12 micro-batches of 16):
//! 1. session `genesis` (W4) trains step 1 from the seeded initial state; a publisher
//!    child commits it as generation 0 to two independent stores, `reference` and `crash`;
//! 2. session `reference` (W4) loads generation 0 from the reference store and trains,
//!    uninterrupted, to step 3, recording the digests at every step; a publisher child
//!    commits each step's state to the reference store (generations 1 and 2);
//! 3. session `crash` (W4) loads generation 0 from the crash store and trains step 2; a
//!    publisher child is killed with SIGKILL when it reports barrier B for that state;
//! 4. a fresh child process recovers the crash store by scanning commit records;
//! 5. session `recovered` (W4) loads the selected generation and trains one step (the
//!    target step = selected step + 1), replaying the uncommitted batch if it was lost;
//! 6. the selected generation is resharded offline to W3 (same chunk objects); the
//!    source and the resharded generation are each loaded back from the store and their
//!    roots recomputed from the chunk objects (the reshard's commit record only copies
//!    the source manifest's root, so it proves nothing by itself);
//! 7. session `resharded` (W3) loads it and trains the same next batch; a publisher
//!    child commits the result, which a fresh recovery child must select;
//! 8. the reference's checkpoint at the target step and the final checkpoint, each loaded
//!    back from its store, are evaluated on the whole test split; the bundle is
//!    installed, `audit.json` last.
//!
//! Torch computes in this process only to evaluate; it is pinned to one intra-op and one
//! inter-op thread before anything else, as in every worker.
//!
//! Invariant: every comparison is of exact bytes (SHA-256 of canonical state bytes, the
//! ledger chain, the logit probe's FP32 bytes).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::core::canonical::{self, CanonicalRecord};
use crate::core::digest::Digest;
use crate::core::logical::{Hyperparameters, LogicalState};
use crate::core::pins::{LIBTORCH_VERSION, TCH_VERSION};
use crate::core::sampling::SampleStream;
use crate::core::step::SplitView;
use crate::core::topology::Topology;
use crate::dataset::{self, FashionMnist, Resource, FASHION_MNIST};
use crate::engine::{evaluate, Evaluation};
use crate::evidence::bundle::{self, records::*, EvaluationRole, RunStatus};
use crate::evidence::source::SourceBinding;
use crate::lab::{ChildStore, KillReport, LocalStore};
use crate::store::{self, Barrier, RecoveryReport, SelectedGeneration, StoreError};
use crate::supervise::process::{ExitOutcome, ExitRecord, Role};
use crate::trainer::{CoordinatorSession, SessionOptions};

pub use crate::core::barrier::DEMO_BARRIERS;
pub use crash_store::{check_object_crash_store, CrashStoreEntry};

mod crash_store;
use crash_store::CrashStore;

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The `shardlift` binary the workers and publisher children run.
    pub shardlift_exe: PathBuf,
    /// The run's directory (it must not exist): stores, logs and the bundle.
    pub run_directory: PathBuf,
    /// Where the Fashion-MNIST payloads are cached.
    pub cache_directory: PathBuf,
    /// A local copy of the payloads to use instead of downloading, if any.
    pub source_directory: Option<PathBuf>,
    /// The barrier B the publisher is killed at (one of [`DEMO_BARRIERS`]).
    pub barrier: Barrier,
    /// Seed K of the genesis state and the sample stream.
    pub seed: u64,
    /// The clean checkout and exact revision to bind the run to.
    pub source: Option<(PathBuf, String)>,
    /// The crash store on an object store (`s3://bucket/prefix`, an empty prefix); `None`
    /// puts it in the run directory. The reference store is always in the run directory.
    pub crash_store: Option<String>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The run directory exists already.
    #[error("the run directory {0} already exists; a run never reuses a directory (a failed run's directory is kept for inspection): choose a new one")]
    RunDirectoryExists(PathBuf),
    /// The run directory could not be created.
    #[error("cannot create the run directory {path}: {source}")]
    RunDirectory {
        /// The run directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The barrier is not one of [`DEMO_BARRIERS`].
    #[error("barrier {0} is not a killer-demo barrier (use commit-after-file-fsync or commit-after-rename)")]
    UnsupportedBarrier(String),
    /// The Fashion-MNIST payloads could not be loaded.
    #[error(transparent)]
    Dataset(#[from] dataset::DatasetError),
    /// The source checkout could not be bound (not clean, or not at the revision).
    #[error(transparent)]
    Source(#[from] crate::evidence::source::SourceError),
    /// A coordinator session failed.
    #[error("session {session}: {source}")]
    Session {
        /// The session's name (`genesis`, `reference`, `crash`, ...).
        session: &'static str,
        /// The underlying error.
        source: Box<crate::trainer::SessionError>,
    },
    /// A store operation failed.
    #[error("{context}: {source}")]
    Store {
        /// What the run was doing.
        context: &'static str,
        /// The underlying error.
        source: StoreError,
    },
    /// An object-store operation on the crash store failed.
    #[error("{context}: {source}")]
    ObjStore {
        /// What the run was doing.
        context: &'static str,
        /// The underlying error (boxed: it is large).
        source: Box<crate::objstore::ObjStoreError>,
    },
    /// The object-store crash store's prefix holds keys already.
    #[error("the crash store {location} is not empty ({keys} keys, the first {first_key}); a run numbers its generations from 0 and never mixes with another run's records: choose a fresh prefix")]
    CrashStoreNotEmpty {
        /// The store's location.
        location: String,
        /// The first key found (relative to the prefix).
        first_key: String,
        /// How many keys were listed.
        keys: u64,
    },
    /// A publisher or recovery child failed.
    #[error("{context}: {source}")]
    Lab {
        /// What the run was doing.
        context: &'static str,
        /// The underlying error.
        source: crate::lab::LabError,
    },
    /// Evaluating a checkpoint on the test split failed.
    #[error("evaluation: {0}")]
    Evaluation(#[from] crate::engine::EngineError),
    /// Writing or installing the evidence bundle failed.
    #[error(transparent)]
    Bundle(#[from] bundle::BundleError),
    /// A comparison the run makes did not hold (e.g. recovered ≠ reference bytes).
    #[error("the run broke an invariant: {0}")]
    Invariant(String),
}

fn store_error(context: &'static str) -> impl FnOnce(StoreError) -> DemoError {
    move |source| DemoError::Store { context, source }
}

fn lab_error(context: &'static str) -> impl FnOnce(crate::lab::LabError) -> DemoError {
    move |source| DemoError::Lab { context, source }
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
    /// The run's status, as the bundle records it.
    pub status: RunStatus,
    /// What the run found (flattened into the record).
    #[serde(flatten)]
    pub outcome: RunOutcome,
    /// The installed bundle's directory.
    pub bundle_directory: String,
    /// SHA-256 of the bundle's `audit.json`.
    pub audit_sha256: Digest,
    /// Wall time of the whole run, in milliseconds.
    pub wall_time_ms: u64,
    /// The object-store crash store, when the run used one (absent for a local one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_store: Option<CrashStoreEntry>,
}

/// Checks everything that can be checked before any work: the barrier, the run
/// directory (must not exist), the cache directory (owner, mode), the source checkout.
pub fn preflight(options: &DemoOptions) -> Result<Option<SourceBinding>, DemoError> {
    if !DEMO_BARRIERS.contains(&options.barrier) {
        return Err(DemoError::UnsupportedBarrier(
            options.barrier.name().to_owned(),
        ));
    }
    if options.run_directory.symlink_metadata().is_ok() {
        return Err(DemoError::RunDirectoryExists(options.run_directory.clone()));
    }
    dataset::check_cache_directory(&options.cache_directory)?;
    if let Some(url) = &options.crash_store {
        check_object_crash_store(url)?;
    }
    match &options.source {
        Some((repository, revision)) => Ok(Some(crate::evidence::source::check_clean_checkout(
            repository,
            Some(revision),
        )?)),
        None => Ok(None),
    }
}

/// The sessions run and the children they reaped, in order: the log every phase adds to.
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
        step: state.step(),
        workers,
        logical_state_root: state.logical_state_root(),
        ledger_digest: state.ledger_digest(),
    }
}

fn topology(workers: u32) -> Result<Topology, DemoError> {
    Topology::new(workers).map_err(|e| DemoError::Invariant(e.to_string()))
}

impl Run<'_> {
    /// Runs one coordinator session (its name and worker count from the bundle's
    /// `DEMO_SESSIONS` table) for `steps` steps from `state`, returning the final state and
    /// the state after every step.
    fn session(
        &mut self,
        (name, workers): DemoSession,
        state: LogicalState,
        steps: u64,
    ) -> Result<(LogicalState, Vec<LogicalState>), DemoError> {
        let barrier = self.options.barrier;
        let start_step = state.step();
        let seed = state.hyperparameters().seed;
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
            end_step: state.step(),
        });
        Ok((state, trail))
    }

    fn publish(
        &self,
        store: &dyn ChildStore,
        state: &LogicalState,
        workers: u32,
    ) -> Result<store::CommitSummary, DemoError> {
        let summary = crate::lab::publish_in_child_on(
            &self.options.shardlift_exe,
            store,
            state,
            topology(workers)?,
        )
        .map_err(lab_error("publishing a checkpoint"))?;
        invariant(
            summary.logical_state_root == state.logical_state_root(),
            || "the publisher committed another state than it was given".into(),
        )?;
        Ok(summary)
    }

    /// The worker exits of every session, as recorded in the evidence.
    fn worker_exits(&self) -> Vec<WorkerExitEntry> {
        self.exits
            .iter()
            .filter(|exit| exit.role == Role::Worker)
            .map(|exit| WorkerExitEntry {
                session: exit.session.clone(),
                rank: exit.rank.unwrap_or(u32::MAX),
                outcome: outcome_text(exit.outcome),
            })
            .collect()
    }
}

fn evaluation_record(
    role: EvaluationRole,
    barrier: Barrier,
    generation: Option<u64>,
    state: &LogicalState,
    workers: u32,
    evaluation: &Evaluation,
) -> EvaluationRecord {
    EvaluationRecord {
        schema: EVALUATION_SCHEMA.to_owned(),
        version: BUNDLE_VERSION,
        role: role.name().to_owned(),
        barrier: barrier.name().to_owned(),
        generation,
        step: state.step(),
        workers,
        logical_state_root: state.logical_state_root(),
        ledger_digest: state.ledger_digest(),
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

/// The two checkpoint stores of a run.
struct Stores {
    reference: PathBuf,
    crash: CrashStore,
}

/// Creates the run directory, which must not exist yet, and names its stores.
fn create_run_directory(options: &DemoOptions) -> Result<Stores, DemoError> {
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
    Ok(Stores {
        reference: options.run_directory.join("reference-store"),
        crash: CrashStore::open(
            options.crash_store.as_deref(),
            options.run_directory.join("crash-store"),
        )?,
    })
}

/// Phase 1: step 1 trained from the seeded initial state (W4), committed as generation 0
/// to both stores.
struct Genesis {
    step1: LogicalState,
}

fn genesis_phase(run: &mut Run, stores: &Stores) -> Result<Genesis, DemoError> {
    let initial = LogicalState::genesis(Hyperparameters::with_seed(run.options.seed));
    let (step1, _) = run.session(SESSION_GENESIS, initial, 1)?;
    let reference_genesis = run.publish(&LocalStore(&stores.reference), &step1, 4)?;
    let crash_genesis = run.publish(&stores.crash, &step1, 4)?;
    invariant(
        reference_genesis.generation == 0 && crash_genesis.generation == 0,
        || "genesis must be generation 0 in both stores".into(),
    )?;
    progress(
        run.options.barrier,
        "genesis (step 1) committed as generation 0 to the reference and crash stores",
    );
    Ok(Genesis { step1 })
}

/// Phase 2: the uninterrupted reference, every step from genesis on (steps 1 to 3), each
/// committed to the reference store.
struct Reference {
    trail: Vec<LogicalState>,
    /// (step, generation) of every reference state committed to the reference store.
    checkpoints: Vec<(u64, u64)>,
}

fn reference_phase(
    run: &mut Run,
    stores: &Stores,
    genesis: &Genesis,
) -> Result<Reference, DemoError> {
    let (from_store, _) = store::load_generation(&stores.reference, 0)
        .map_err(store_error("loading the reference genesis"))?;
    let (_, after_genesis) = run.session(SESSION_REFERENCE, from_store, 2)?;
    let mut checkpoints = vec![(genesis.step1.step(), 0)];
    for state in &after_genesis {
        let summary = run.publish(&LocalStore(&stores.reference), state, 4)?;
        checkpoints.push((state.step(), summary.generation));
    }
    let trail = std::iter::once(genesis.step1.clone())
        .chain(after_genesis)
        .collect();
    Ok(Reference { trail, checkpoints })
}

/// Phase 3: step 2 trained on the crash store, its publisher killed at the barrier.
struct Crash {
    step2: LogicalState,
    kill: KillReport,
}

fn crash_phase(run: &mut Run, stores: &Stores) -> Result<Crash, DemoError> {
    let barrier = run.options.barrier;
    let (from_store, _) = stores
        .crash
        .load_generation(0, "loading the crash genesis")?;
    let (step2, _) = run.session(SESSION_CRASH, from_store, 1)?;
    let w4 = topology(4)?;
    progress(
        barrier,
        &format!(
            "publishing step 2 in a child and killing it with SIGKILL at {}",
            barrier.name()
        ),
    );
    let kill = crate::lab::kill_publisher_on(
        &run.options.shardlift_exe,
        &stores.crash,
        &step2,
        w4,
        barrier,
    )
    .map_err(lab_error("killing the publisher"))?;
    invariant(kill.signal == Some(9) && kill.reaped, || {
        format!("the publisher ended with {}", kill.exit.outcome)
    })?;
    invariant(kill.unacknowledged.barrier == barrier, || {
        "the kill happened at another barrier".into()
    })?;
    progress(
        barrier,
        &format!(
            "publisher killed ({}), candidate installed: {}",
            kill.exit.outcome, kill.candidate_visible
        ),
    );
    Ok(Crash { step2, kill })
}

/// Phase 4: what a fresh recovery process selects in the crash store.
struct Recovery {
    report: RecoveryReport,
    selected: SelectedGeneration,
    /// The step the continuations train to: the selected step + 1.
    target_step: u64,
    /// Batches trained before the crash that the continuation trains again.
    replayed_batches: u64,
}

fn recovery_phase(run: &Run, stores: &Stores, crash: &Crash) -> Result<Recovery, DemoError> {
    let report = crate::lab::recover_in_child_on(&run.options.shardlift_exe, &stores.crash)
        .map_err(lab_error("recovering in a child"))?;
    let selected = report
        .selected
        .clone()
        .ok_or_else(|| DemoError::Invariant("recovery selected nothing".into()))?;
    progress(
        run.options.barrier,
        &format!(
            "recovery selected generation {} (step {}); LATEST is {:?}",
            selected.generation, selected.step, report.latest.status
        ),
    );
    Ok(Recovery {
        target_step: selected.step + 1,
        replayed_batches: crash.step2.step() - selected.step,
        report,
        selected,
    })
}

/// Phase 5: the recovered W4 continuation, one step from the selected generation.
struct Continuation {
    recovered_w4: LogicalState,
}

fn continuation_phase(
    run: &mut Run,
    stores: &Stores,
    recovery: &Recovery,
) -> Result<Continuation, DemoError> {
    let (selected_state, _) = stores.crash.load_generation(
        recovery.selected.generation,
        "loading the selected generation",
    )?;
    let (recovered_w4, _) = run.session(SESSION_RECOVERED, selected_state, 1)?;
    Ok(Continuation { recovered_w4 })
}

/// Phases 6 and 7: the selected generation resharded offline to W3, one W3 step from it
/// committed, and that final checkpoint selected by a fresh recovery and loaded back.
struct Reshard {
    reshard: store::CommitSummary,
    /// The root the reshard's commit record states, read back from the store.
    committed_root: Digest,
    /// Recomputed from the source generation's chunk objects, loaded from the store.
    source_root_from_chunks: Digest,
    /// Recomputed from the resharded generation's chunk objects, loaded from the store.
    resharded_root_from_chunks: Digest,
    final_commit: store::CommitSummary,
    final_state: LogicalState,
}

fn reshard_phase(
    run: &mut Run,
    stores: &Stores,
    recovery: &Recovery,
) -> Result<Reshard, DemoError> {
    let barrier = run.options.barrier;
    let selected = &recovery.selected;
    let w3 = topology(3)?;
    let (source_state, _) = stores
        .crash
        .load_generation(selected.generation, "loading the generation to reshard")?;
    let source_root_from_chunks = source_state.logical_state_root();
    drop(source_state);
    let reshard = stores.crash.reshard(selected.generation, w3)?;
    let committed_root = stores.crash.committed_root(reshard.generation)?;
    progress(
        barrier,
        &format!(
            "resharded generation {} to W3 as generation {}",
            selected.generation, reshard.generation
        ),
    );
    let (resharded_state, placement) = stores
        .crash
        .load_generation(reshard.generation, "loading the resharded generation")?;
    invariant(placement == w3, || {
        "the resharded generation is not placed on three workers".into()
    })?;
    // Recomputed over the chunk objects just loaded, not copied from any record.
    let resharded_root_from_chunks = resharded_state.logical_state_root();
    let (resharded_w3, _) = run.session(SESSION_RESHARDED, resharded_state, 1)?;
    let final_commit = run.publish(&stores.crash, &resharded_w3, 3)?;
    let final_recovery = crate::lab::recover_in_child_on(&run.options.shardlift_exe, &stores.crash)
        .map_err(lab_error("recovering the final checkpoint"))?;
    invariant(
        final_recovery.selected.as_ref().map(|s| s.generation) == Some(final_commit.generation),
        || "a fresh recovery does not select the final checkpoint".into(),
    )?;
    let (final_state, _) = stores
        .crash
        .load_generation(final_commit.generation, "loading the final checkpoint")?;
    progress(
        barrier,
        &format!(
            "final W3 checkpoint: generation {} step {}",
            final_commit.generation,
            final_state.step()
        ),
    );
    Ok(Reshard {
        reshard,
        committed_root,
        source_root_from_chunks,
        resharded_root_from_chunks,
        final_commit,
        final_state,
    })
}

/// Phase 8: the reference at the target step and the final checkpoint, each loaded back
/// from its store and evaluated on the whole test split.
struct Evaluations {
    /// The reference's state at the target step, loaded from the reference store.
    reference_at_target: LogicalState,
    /// Its generation in the reference store.
    reference_generation: u64,
    reference: Evaluation,
    recovered: Evaluation,
}

fn evaluation_phase(
    run: &Run,
    stores: &Stores,
    reference: &Reference,
    recovery: &Recovery,
    reshard: &Reshard,
) -> Result<Evaluations, DemoError> {
    let target_step = recovery.target_step;
    let reference_generation = reference
        .checkpoints
        .iter()
        .find(|(step, _)| *step == target_step)
        .map(|(_, generation)| *generation)
        .ok_or_else(|| {
            DemoError::Invariant(format!(
                "the reference store has no checkpoint at step {target_step}"
            ))
        })?;
    let (reference_at_target, _) = store::load_generation(&stores.reference, reference_generation)
        .map_err(store_error("loading the reference checkpoint"))?;
    let in_memory = reference.trail.iter().find(|s| s.step() == target_step);
    invariant(
        in_memory.map(LogicalState::logical_state_root)
            == Some(reference_at_target.logical_state_root()),
        || "the reference checkpoint loaded back is not the reference state".into(),
    )?;
    progress(
        run.options.barrier,
        "evaluating the reference and the recovered final checkpoint on all 10,000 test images",
    );
    let reference_evaluation = evaluate(
        &reference_at_target.flat_parameters(),
        SplitView::from(&run.data.test),
    )?;
    let recovered_evaluation = evaluate(
        &reshard.final_state.flat_parameters(),
        SplitView::from(&run.data.test),
    )?;
    Ok(Evaluations {
        reference_at_target,
        reference_generation,
        reference: reference_evaluation,
        recovered: recovered_evaluation,
    })
}

/// Every phase's result: what the records are built from.
struct Phases {
    crash: Crash,
    recovery: Recovery,
    reference: Reference,
    continuation: Continuation,
    reshard: Reshard,
    evaluations: Evaluations,
}

impl Phases {
    /// The byte comparisons against the reference at the target step.
    fn comparisons(&self) -> Comparisons {
        let target = &self.evaluations.reference_at_target;
        let recovered_w4 = &self.continuation.recovered_w4;
        let final_state = &self.reshard.final_state;
        let reshard = &self.reshard;
        let reference_at_selected = self
            .reference
            .trail
            .iter()
            .find(|s| s.step() == self.recovery.selected.step)
            .map(LogicalState::logical_state_root);
        Comparisons {
            logical_state_roots_equal: recovered_w4.logical_state_root()
                == target.logical_state_root()
                && final_state.logical_state_root() == target.logical_state_root()
                && reference_at_selected == Some(reshard.source_root_from_chunks)
                && reshard.resharded_root_from_chunks == reshard.source_root_from_chunks
                && reshard.committed_root == reshard.resharded_root_from_chunks,
            ledger_digests_equal: recovered_w4.ledger_digest() == target.ledger_digest()
                && final_state.ledger_digest() == target.ledger_digest(),
            logit_probe_equal: self.evaluations.reference.logit_probe_sha256
                == self.evaluations.recovered.logit_probe_sha256,
        }
    }

    fn final_checkpoint(&self) -> CheckpointEntry {
        CheckpointEntry {
            generation: self.reshard.final_commit.generation,
            step: self.reshard.final_state.step(),
            workers: 3,
        }
    }

    /// Passed when the run matches its row of the outcome table and every comparison holds.
    fn status(&self, barrier: Barrier) -> RunStatus {
        let final_checkpoint = self.final_checkpoint();
        let observed = (
            self.crash.kill.candidate_visible,
            self.recovery.selected.generation,
            self.recovery.selected.step,
            self.recovery.replayed_batches,
            final_checkpoint.generation,
            final_checkpoint.step,
        );
        let comparisons = self.comparisons();
        RunStatus::from_passed(
            expected_outcome(barrier) == Some(observed)
                && comparisons.logical_state_roots_equal
                && comparisons.ledger_digests_equal
                && comparisons.logit_probe_equal,
        )
    }

    fn evaluation_records(&self, barrier: Barrier) -> (EvaluationRecord, EvaluationRecord) {
        let reference = evaluation_record(
            EvaluationRole::Reference,
            barrier,
            Some(self.evaluations.reference_generation),
            &self.evaluations.reference_at_target,
            4,
            &self.evaluations.reference,
        );
        let recovered = evaluation_record(
            EvaluationRole::Recovered,
            barrier,
            Some(self.reshard.final_commit.generation),
            &self.reshard.final_state,
            3,
            &self.evaluations.recovered,
        );
        (reference, recovered)
    }

    fn kill_entry(&self, barrier: Barrier) -> KillEntry {
        let kill = &self.crash.kill;
        KillEntry {
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
        }
    }

    fn recovery_entry(&self) -> RecoveryEntry {
        let Recovery {
            report, selected, ..
        } = &self.recovery;
        RecoveryEntry {
            selected_generation: selected.generation,
            selected_step: selected.step,
            selected_commit_sha256: selected.commit_digest,
            valid_generations: report.valid_generations.clone(),
            latest_status: serde_json::to_value(report.latest.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            rejected: report
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
        }
    }

    fn reshard_entry(&self) -> ReshardEntry {
        let selected = &self.recovery.selected;
        let reshard = &self.reshard.reshard;
        ReshardEntry {
            source_generation: selected.generation,
            generation: reshard.generation,
            workers_before: selected.workers,
            workers_after: reshard.workers,
            committed_root: self.reshard.committed_root,
            source_root_from_chunks: self.reshard.source_root_from_chunks,
            resharded_root_from_chunks: self.reshard.resharded_root_from_chunks,
            chunk_objects_written: reshard.objects_written,
        }
    }
}

/// The four records of the bundle, complete: every binding digest is computed from the
/// canonical bytes of the record it binds.
struct Records {
    status: RunStatus,
    reference: EvaluationRecord,
    recovered: EvaluationRecord,
    evidence: RecoveryEvidenceRecord,
    audit: AuditRecord,
}

fn encoded<R: CanonicalRecord>(record: &R) -> Result<Vec<u8>, DemoError> {
    canonical::encode(record).map_err(|e| DemoError::Bundle(bundle::BundleError::Encode(e)))
}

fn bound_file(name: &str, bytes: &[u8]) -> BoundFile {
    BoundFile {
        name: name.to_owned(),
        bytes: bytes.len() as u64,
        sha256: Digest::of(bytes),
    }
}

fn evidence_record(
    run: &Run,
    phases: &Phases,
    evaluation_bytes: (&[u8], &[u8]),
) -> RecoveryEvidenceRecord {
    let barrier = run.options.barrier;
    RecoveryEvidenceRecord {
        schema: RECOVERY_EVIDENCE_SCHEMA.to_owned(),
        version: BUNDLE_VERSION,
        barrier: barrier.name().to_owned(),
        seed: run.options.seed,
        sessions: run.sessions.clone(),
        worker_exits: run.worker_exits(),
        kill: phases.kill_entry(barrier),
        recovery: phases.recovery_entry(),
        replayed_batches: phases.recovery.replayed_batches,
        target_step: phases.recovery.target_step,
        reference: phases
            .reference
            .trail
            .iter()
            .map(|s| digests_of(s, 4))
            .collect(),
        reference_checkpoint: CheckpointEntry {
            generation: phases.evaluations.reference_generation,
            step: phases.evaluations.reference_at_target.step(),
            workers: 4,
        },
        recovered_w4: digests_of(&phases.continuation.recovered_w4, 4),
        reshard: phases.reshard_entry(),
        resharded_w3: digests_of(&phases.reshard.final_state, 3),
        final_checkpoint: phases.final_checkpoint(),
        comparisons: phases.comparisons(),
        reference_evaluation_sha256: Digest::of(evaluation_bytes.0),
        recovered_evaluation_sha256: Digest::of(evaluation_bytes.1),
    }
}

fn build_entry(source: Option<SourceBinding>) -> BuildEntry {
    BuildEntry {
        shardlift_version: env!("CARGO_PKG_VERSION").to_owned(),
        tch_version: TCH_VERSION.to_owned(),
        libtorch_version: LIBTORCH_VERSION.to_owned(),
        source_revision: source.map(|s| s.commit),
        dataset_payload_sha256: FASHION_MNIST
            .resources
            .iter()
            .map(|r| r.payload.sha256)
            .collect(),
    }
}

/// Builds the four records once, from the phases' results.
fn build_records(
    run: &Run,
    phases: &Phases,
    source: Option<SourceBinding>,
) -> Result<Records, DemoError> {
    let barrier = run.options.barrier;
    let status = phases.status(barrier);
    let (reference, recovered) = phases.evaluation_records(barrier);
    let reference_bytes = encoded(&reference)?;
    let recovered_bytes = encoded(&recovered)?;
    let evidence = evidence_record(run, phases, (&reference_bytes, &recovered_bytes));
    let evidence_bytes = encoded(&evidence)?;
    let unsealed = AuditRecord {
        schema: AUDIT_SCHEMA.to_owned(),
        version: BUNDLE_VERSION,
        barrier: barrier.name().to_owned(),
        status: status.name().to_owned(),
        candidate_installed: phases.crash.kill.candidate_visible,
        selected_generation: phases.recovery.selected.generation,
        selected_step: phases.recovery.selected.step,
        replayed_batches: phases.recovery.replayed_batches,
        final_checkpoint: phases.final_checkpoint(),
        comparisons: phases.comparisons(),
        worker_exits: evidence.worker_exits.len() as u64,
        files: vec![
            bound_file(REFERENCE_EVALUATION, &reference_bytes),
            bound_file(RECOVERED_EVALUATION, &recovered_bytes),
            bound_file(RECOVERY_EVIDENCE, &evidence_bytes),
        ],
        build: build_entry(source),
        nonclaims: NONCLAIMS.iter().map(|s| (*s).to_owned()).collect(),
        // The self digest is defined over the body with this field zeroed.
        self_sha256: Digest([0; 32]),
    };
    let audit = AuditRecord {
        self_sha256: bundle::audit_self_digest(&unsealed)?,
        ..unsealed
    };
    Ok(Records {
        status,
        reference,
        recovered,
        evidence,
        audit,
    })
}

/// Runs the whole demo for one barrier. `preflight` must have passed.
pub fn run(options: &DemoOptions, source: Option<SourceBinding>) -> Result<DemoRecord, DemoError> {
    let started = Instant::now();
    // Before any torch computation in this process (the evaluations), as in every worker.
    crate::engine::pin_single_thread();
    let barrier = options.barrier;
    let stores = create_run_directory(options)?;
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
    let genesis = genesis_phase(&mut run, &stores)?;
    let reference = reference_phase(&mut run, &stores, &genesis)?;
    let crash = crash_phase(&mut run, &stores)?;
    let recovery = recovery_phase(&run, &stores, &crash)?;
    let continuation = continuation_phase(&mut run, &stores, &recovery)?;
    let reshard = reshard_phase(&mut run, &stores, &recovery)?;
    let evaluations = evaluation_phase(&run, &stores, &reference, &recovery, &reshard)?;
    let phases = Phases {
        crash,
        recovery,
        reference,
        continuation,
        reshard,
        evaluations,
    };
    let wall_time_ms = started.elapsed().as_millis() as u64;
    let records = build_records(&run, &phases, source)?;
    bundle_phase(options, records, wall_time_ms, stores.crash.entry())
}

/// The bundle installed (`audit.json` last) and the run's stdout record.
fn bundle_phase(
    options: &DemoOptions,
    records: Records,
    wall_time_ms: u64,
    crash_store: Option<CrashStoreEntry>,
) -> Result<DemoRecord, DemoError> {
    let outcome = RunOutcome::of(&records.audit);
    let bundle_directory = options.run_directory.join("bundle");
    let installed = bundle::install(
        &bundle_directory,
        &records.reference,
        &records.recovered,
        records.evidence,
        records.audit,
    )?;
    progress(
        options.barrier,
        &format!(
            "bundle installed at {} (audit.json last)",
            bundle_directory.display()
        ),
    );
    Ok(DemoRecord {
        status: records.status,
        outcome,
        bundle_directory: installed.directory.display().to_string(),
        audit_sha256: installed.audit_sha256,
        wall_time_ms,
        crash_store,
    })
}
