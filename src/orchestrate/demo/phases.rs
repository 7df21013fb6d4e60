//! The run's phases, in order: genesis, reference, crash, recovery, continuation,
//! reshard, evaluation; then the records and the bundle.
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::core::digest::Digest;
use crate::core::logical::{Hyperparameters, LogicalState};
use crate::core::sampling::SampleStream;
use crate::core::step::SplitView;
use crate::core::topology::Topology;
use crate::dataset::{self, FashionMnist, Resource, FASHION_MNIST};
use crate::engine::{evaluate, Evaluation};
use crate::evidence::bundle::{records::*, EvaluationRole, RunStatus};
use crate::evidence::source::SourceBinding;
use crate::lab::{ChildStore, KillReport, LocalStore};
use crate::store::{self, Barrier, RecoveryReport, SelectedGeneration};
use crate::supervise::process::{ExitOutcome, ExitRecord, Role};
use crate::trainer::{CoordinatorSession, SessionOptions};

use crate::orchestrate::demo::crash_store::CrashStore;
use crate::orchestrate::demo::error::*;
use crate::orchestrate::demo::*;

mod records;
use records::{build_records, bundle_phase};

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
            summary.committed.logical_state_root == state.logical_state_root(),
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
        reference_genesis.committed.generation == 0 && crash_genesis.committed.generation == 0,
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
        checkpoints.push((state.step(), summary.committed.generation));
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
    let committed_root = stores.crash.committed_root(reshard.committed.generation)?;
    progress(
        barrier,
        &format!(
            "resharded generation {} to W3 as generation {}",
            selected.generation, reshard.committed.generation
        ),
    );
    let (resharded_state, placement) = stores.crash.load_generation(
        reshard.committed.generation,
        "loading the resharded generation",
    )?;
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
        final_recovery.selected.as_ref().map(|s| s.generation)
            == Some(final_commit.committed.generation),
        || "a fresh recovery does not select the final checkpoint".into(),
    )?;
    let (final_state, _) = stores.crash.load_generation(
        final_commit.committed.generation,
        "loading the final checkpoint",
    )?;
    progress(
        barrier,
        &format!(
            "final W3 checkpoint: generation {} step {}",
            final_commit.committed.generation,
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
            generation: self.reshard.final_commit.committed.generation,
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
            Some(self.reshard.final_commit.committed.generation),
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
            generation: reshard.committed.generation,
            workers_before: selected.workers,
            workers_after: reshard.committed.workers,
            committed_root: self.reshard.committed_root,
            source_root_from_chunks: self.reshard.source_root_from_chunks,
            resharded_root_from_chunks: self.reshard.resharded_root_from_chunks,
            chunk_objects_written: reshard.objects_written,
        }
    }
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
