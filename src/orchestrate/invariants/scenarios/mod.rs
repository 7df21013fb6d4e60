//! The eleven registered scenarios. Each observes one invariant on the real store, the
//! real training engine and (where named) real child processes, and records only
//! derived digests, counts and booleans. Each can be run with its named violation
//! injected (`inject = true`), which must make it fail: that is how the negative tests
//! show every scenario can detect what it claims to detect.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::core::digest::Digest;
use crate::core::logical::{f32_le_bytes, ChunkState, LogicalState};
use crate::core::sampling::SampleStream;
use crate::core::step::SplitView;
use crate::core::topology::Topology;
use crate::dataset::FashionMnist;
use crate::durable::faulty::{FaultyFs, Operation};
use crate::engine::in_process_step;
use crate::lab::writer_mutants::{MutantFs, WriterFaults};
use crate::store::{self, Barrier, FnHook, NoHooks, ObjectCheck, RealFs, StoreError};

use crate::orchestrate::invariants::evidence::Observation;
use crate::orchestrate::invariants::registry::ScenarioSpec;

/// Why a scenario could not be observed at all (infrastructure, not a verdict).
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A store operation the scenario needed failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A crash-lab child or step failed.
    #[error("crash lab: {0}")]
    Lab(#[from] crate::lab::LabError),
    /// The tch arithmetic failed.
    #[error("training: {0}")]
    Engine(#[from] crate::engine::EngineError),
    /// A coordinator session failed.
    #[error("session: {0}")]
    Session(#[from] crate::trainer::SessionError),
    /// A topology was refused.
    #[error("topology: {0}")]
    Topology(#[from] crate::core::topology::TopologyError),
    /// I/O on the scratch directory failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A child or launcher broke its protocol (its output is not what the scenario reads).
    #[error("{0}")]
    Protocol(String),
}

impl ScenarioError {
    /// A short, path-free name for the evidence.
    pub fn kind(&self) -> &'static str {
        match self {
            ScenarioError::Store(e) => e.kind(),
            ScenarioError::Lab(e) => e.kind(),
            ScenarioError::Engine(_) => "engine",
            ScenarioError::Session(_) => "session",
            ScenarioError::Topology(_) => "topology",
            ScenarioError::Io { .. } => "io",
            ScenarioError::Protocol(_) => "protocol",
        }
    }
}

/// What every scenario needs: the binary (for children), a scratch directory, the
/// dataset, and the fixture state after one step from the seeded genesis.
pub struct Context<'a> {
    /// The `shardlift` binary children run.
    pub shardlift_exe: PathBuf,
    /// The scratch directory (never part of the evidence).
    pub work: PathBuf,
    /// The loaded Fashion-MNIST payloads.
    pub data: &'a FashionMnist,
    /// Seed of the genesis state.
    pub seed: u64,
    /// The state after one in-process step from genesis.
    pub state1: LogicalState,
    counter: AtomicU32,
}

impl<'a> Context<'a> {
    /// Pins torch to one thread and takes the one fixture step from the genesis of `seed`.
    pub fn new(
        shardlift_exe: PathBuf,
        work: PathBuf,
        data: &'a FashionMnist,
        seed: u64,
    ) -> Result<Self, ScenarioError> {
        crate::engine::pin_single_thread();
        let genesis = LogicalState::genesis(crate::core::logical::Hyperparameters::with_seed(seed));
        let (state1, _) = next_step(&genesis, data)?;
        std::fs::create_dir_all(&work).map_err(|source| ScenarioError::Io {
            context: format!("creating {}", work.display()),
            source,
        })?;
        Ok(Context {
            shardlift_exe,
            work,
            data,
            seed,
            state1,
            counter: AtomicU32::new(0),
        })
    }

    /// A new, unused store directory for one scenario run.
    pub fn fresh_store(&self, name: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.work.join(format!("{name}-{n}"))
    }
}

/// The state after one in-process step from `state`, and that step's loss.
pub fn next_step(
    state: &LogicalState,
    data: &FashionMnist,
) -> Result<(LogicalState, f32), ScenarioError> {
    let mut next = state.clone();
    let mut stream = SampleStream::new(state.hyperparameters().seed, data.train.count as u32);
    let outcome = in_process_step(&mut next, &mut stream, SplitView::from(&data.train))?;
    Ok((next, outcome.loss))
}

/// SHA-256 over one slot of every chunk in chunk order (FP32 little-endian).
pub fn slot_sha256(state: &LogicalState, slot: fn(&ChunkState) -> &[f32]) -> Digest {
    let mut bytes = Vec::new();
    for chunk in state.chunks() {
        bytes.extend_from_slice(&f32_le_bytes(slot(chunk)));
    }
    Digest::of(&bytes)
}

fn flip_bit(value: &mut f32) {
    *value = f32::from_bits(value.to_bits() ^ 1);
}

fn w(workers: u32) -> Result<Topology, ScenarioError> {
    Ok(Topology::new(workers)?)
}

/// Digests of what a failed attempt must not change: every commit record (name and
/// bytes, in name order) and the LATEST bytes. Reads only.
pub fn store_receipts(store_dir: &Path) -> Result<(Digest, Option<Digest>), ScenarioError> {
    let io = |context: &str| {
        let context = context.to_owned();
        move |source| ScenarioError::Io { context, source }
    };
    let commits = store_dir.join("commits");
    let mut names: Vec<String> = std::fs::read_dir(&commits)
        .map_err(io("listing commits"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(io("listing commits"))?;
    names.sort();
    let mut hasher =
        crate::core::digest::FramedHasher::new("shardlift/invariants/commit-receipts/v1");
    hasher.u64(names.len() as u64);
    for name in &names {
        let bytes = std::fs::read(commits.join(name)).map_err(io("reading a commit record"))?;
        hasher
            .field(name.as_bytes())
            .field(Digest::of(&bytes).0.as_slice());
    }
    let latest = match std::fs::read(store_dir.join(store::writer::LATEST_REL_PATH)) {
        Ok(bytes) => Some(Digest::of(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("reading LATEST")(e)),
    };
    Ok((hasher.finish(), latest))
}

fn optional_digest(digest: Option<Digest>) -> String {
    digest.map_or_else(|| "absent".to_owned(), |d| d.to_hex())
}

/// Runs scenario `spec` (1..=10; the elastic case has its own entry point). With
/// `inject` the scenario's named violation is injected.
pub fn observe(
    spec: &ScenarioSpec,
    ctx: &Context<'_>,
    inject: bool,
) -> Result<Observation, ScenarioError> {
    let mut obs = Observation::new(spec);
    match spec.ordinal {
        1..=4 => round_trip(spec.ordinal, ctx, inject, &mut obs)?,
        5 => resumed_next_step(ctx, inject, &mut obs)?,
        6 => pointer_stable(ctx, inject, &mut obs)?,
        7 => no_promotion(ctx, inject, &mut obs)?,
        8 => reshard_w4_w3(ctx, inject, &mut obs)?,
        9 => reshard_round_trip(ctx, inject, &mut obs)?,
        10 => stale_latest(ctx, inject, &mut obs)?,
        _ => {
            return Err(ScenarioError::Protocol(format!(
                "scenario {} is not an in-process scenario",
                spec.id
            )))
        }
    }
    obs.check("completed", true, true);
    Ok(obs)
}

/// Observes a scenario, turning an infrastructure error into a failed observation (the
/// error kind is recorded; the full message, which may hold paths, goes to stderr).
pub fn observe_or_fail(spec: &ScenarioSpec, ctx: &Context<'_>, inject: bool) -> Observation {
    match observe(spec, ctx, inject) {
        Ok(observation) => observation,
        Err(error) => {
            eprintln!(
                "invariants: scenario {} could not complete: {error}",
                spec.id
            );
            let mut obs = Observation::new(spec);
            obs.check("completed", true, false);
            obs.fact("error_kind", error.kind());
            obs
        }
    }
}

/// Scenarios 1–4: publish the fixture state at W4, load it back through full verification.
fn round_trip(
    ordinal: u32,
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let saved = &ctx.state1;
    let store_dir = ctx.fresh_store(&format!("s{ordinal:02}"));
    let summary = store::publish(&store_dir, saved, w(4)?, &mut NoHooks)?;
    let (mut loaded, topology) = store::load_generation(&store_dir, summary.committed.generation)?;
    if inject {
        loaded = with_injected_fault(ordinal, loaded)?;
    }
    match ordinal {
        1 => {
            obs.check("chunk_count", saved.chunks().len(), loaded.chunks().len());
            obs.check("topology_workers", 4, topology.workers());
            obs.check(
                "parameters_sha256",
                slot_sha256(saved, |c| c.parameters()),
                slot_sha256(&loaded, |c| c.parameters()),
            );
        }
        2 => {
            let nonzero = loaded.chunks().iter().any(|c| {
                c.exp_avg().iter().any(|v| *v != 0.0) && c.exp_avg_sq().iter().any(|v| *v != 0.0)
            });
            obs.check("slots_nonzero", true, nonzero);
            obs.check("step", saved.step(), loaded.step());
            obs.check(
                "exp_avg_sha256",
                slot_sha256(saved, |c| c.exp_avg()),
                slot_sha256(&loaded, |c| c.exp_avg()),
            );
            obs.check(
                "exp_avg_sq_sha256",
                slot_sha256(saved, |c| c.exp_avg_sq()),
                slot_sha256(&loaded, |c| c.exp_avg_sq()),
            );
        }
        3 => {
            obs.check("cursor", saved.cursor(), loaded.cursor());
            obs.check(
                "ledger_digest",
                saved.ledger_digest(),
                loaded.ledger_digest(),
            );
            let count = ctx.data.train.count as u32;
            obs.check(
                "next_batch_sample_ids_sha256",
                next_batch_ids_digest(saved, count),
                next_batch_ids_digest(&loaded, count),
            );
        }
        _ => {
            let report = store::recover(&store_dir)?;
            let selected_root = report
                .selected
                .map_or_else(|| "none".to_owned(), |s| s.logical_state_root.to_hex());
            let expected = saved.logical_state_root();
            obs.check("loaded_root", expected, loaded.logical_state_root());
            // Observed from the commit record's bytes on disk, not from the publish's
            // own summary (which is computed from the saved state itself).
            obs.check(
                "commit_record_root",
                expected,
                committed_root(&store_dir, summary.committed.generation)?,
            );
            obs.check("recovery_selected_root", expected, selected_root);
        }
    }
    Ok(())
}

/// `loaded` with the fault scenario `ordinal`'s negative control injects: a flipped bit
/// in a parameter (1) or a second moment (2), the cursor one ahead (3), a flipped bit in
/// the learning rate (4).
fn with_injected_fault(
    ordinal: u32,
    mut loaded: LogicalState,
) -> Result<LogicalState, ScenarioError> {
    match ordinal {
        1 => {
            if let Some(chunk) = loaded.chunk_slots_mut(3) {
                flip_bit(&mut chunk.parameters[7]);
            }
        }
        2 => {
            let last = loaded.chunks().len() - 1;
            if let Some(chunk) = loaded.chunk_slots_mut(last) {
                flip_bit(&mut chunk.exp_avg_sq[0]);
            }
        }
        3 => loaded.set_counters(loaded.step(), loaded.cursor() + 1, loaded.ledger_digest()),
        4 => {
            let mut hyperparameters = *loaded.hyperparameters();
            flip_bit(&mut hyperparameters.learning_rate);
            loaded = LogicalState::from_parts(
                hyperparameters,
                loaded.step(),
                loaded.cursor(),
                loaded.ledger_digest(),
                loaded.chunks().to_vec(),
            )
            .map_err(|e| ScenarioError::Protocol(format!("injected state: {e}")))?;
        }
        _ => {}
    }
    Ok(loaded)
}

/// SHA-256 of the sample ids of the step `state`'s cursor points at, over a training set
/// of `count` samples.
fn next_batch_ids_digest(state: &LogicalState, count: u32) -> Digest {
    let mut stream = SampleStream::new(state.hyperparameters().seed, count);
    let batches = stream.step_micro_batches(state.hyperparameters(), state.cursor());
    let mut bytes = Vec::new();
    for id in batches.iter().flatten() {
        bytes.extend_from_slice(&id.to_le_bytes());
    }
    Digest::of(&bytes)
}

/// The `logical_state_root` the commit record of `generation` holds on disk.
fn committed_root(store_dir: &Path, generation: u64) -> Result<Digest, ScenarioError> {
    use crate::store::codec::{self, CommitRecord, MAX_COMMIT_BYTES};
    let path = store_dir.join(codec::commit_rel_path(generation));
    let bytes = crate::durable::read_capped(&path, MAX_COMMIT_BYTES)
        .map_err(|error| StoreError::io(&path, std::io::Error::other(error.to_string())))?;
    let record: CommitRecord = codec::decode(&path, &bytes)?;
    Ok(record.logical_state_root)
}

/// Scenario 5: uninterrupted vs saved-loaded-resumed next step.
fn resumed_next_step(
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let (reference, reference_loss) = next_step(&ctx.state1, ctx.data)?;
    let store_dir = ctx.fresh_store("s05");
    let summary = store::publish(&store_dir, &ctx.state1, w(4)?, &mut NoHooks)?;
    let (mut loaded, _) = store::load_generation(&store_dir, summary.committed.generation)?;
    if inject {
        loaded.set_counters(0, loaded.cursor(), loaded.ledger_digest());
    }
    let (resumed, resumed_loss) = next_step(&loaded, ctx.data)?;
    obs.check("next_step", reference.step(), resumed.step());
    obs.check("next_cursor", reference.cursor(), resumed.cursor());
    obs.check(
        "next_ledger_digest",
        reference.ledger_digest(),
        resumed.ledger_digest(),
    );
    obs.check(
        "next_root",
        reference.logical_state_root(),
        resumed.logical_state_root(),
    );
    obs.check(
        "next_loss_bits",
        format!("{:08x}", reference_loss.to_bits()),
        format!("{:08x}", resumed_loss.to_bits()),
    );
    Ok(())
}

/// Scenario 6: a failed attempt (SIGKILL of a real publisher child before the commit
/// point) must not move the pointer or change any receipt.
fn pointer_stable(
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let store_dir = ctx.fresh_store("s06");
    let committed = store::publish(&store_dir, &ctx.state1, w(4)?, &mut NoHooks)?;
    let before = store_receipts(&store_dir)?;
    let (state2, _) = next_step(&ctx.state1, ctx.data)?;
    let attempt_failed = if inject {
        let target = Barrier::CommitAfterFileFsync;
        let mut hook = FnHook(|event: &store::BarrierEvent| {
            if event.barrier == target {
                Err("simulated crash".into())
            } else {
                Ok(())
            }
        });
        let faults = WriterFaults {
            latest_before_commit_rename: true,
            ..WriterFaults::default()
        };
        let writer_fs = MutantFs::new(&RealFs, &store_dir, faults);
        let result = store::writer::publish_with(&writer_fs, &store_dir, &state2, w(4)?, &mut hook);
        obs.fact("failure", "in-process stop at commit-after-file-fsync");
        result.is_err()
    } else {
        let report = crate::lab::kill_publisher_at(
            &ctx.shardlift_exe,
            &store_dir,
            &state2,
            w(4)?,
            Barrier::CommitAfterFileFsync,
        )?;
        obs.fact(
            "failure",
            "SIGKILL of a publisher child at commit-after-file-fsync",
        );
        obs.fact("publisher_signal", report.signal.map_or(0, |s| s));
        report.signal == Some(9) && !report.candidate_visible
    };
    let after = store_receipts(&store_dir)?;
    let report = crate::lab::recover_in_child(&ctx.shardlift_exe, &store_dir)?;
    obs.check("attempt_failed", true, attempt_failed);
    obs.check("commit_receipts_sha256", before.0, after.0);
    obs.check(
        "latest_sha256",
        optional_digest(before.1),
        optional_digest(after.1),
    );
    obs.check(
        "selected_generation",
        committed.committed.generation,
        report.selected.as_ref().map_or(u64::MAX, |s| s.generation),
    );
    obs.check(
        "selected_commit_digest",
        committed.committed.commit_digest,
        report
            .selected
            .as_ref()
            .map_or_else(|| "none".to_owned(), |s| s.commit_digest.to_hex()),
    );
    Ok(())
}

/// Scenario 7: a failed fsync aborts the generation; nothing is promoted after it.
fn no_promotion(
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let store_dir = ctx.fresh_store("s07");
    let committed = store::publish(&store_dir, &ctx.state1, w(4)?, &mut NoHooks)?;
    let (state2, _) = next_step(&ctx.state1, ctx.data)?;
    // Every fsync of a commit-record temp file fails: an EIO the writer must treat as
    // the end of the generation.
    let failed = store::writer::publish_with(
        &FaultyFs::failing_named(Operation::FsyncFile, "commit-"),
        &store_dir,
        &state2,
        w(4)?,
        &mut NoHooks,
    );
    let refused = matches!(failed, Err(StoreError::FsyncFailed { .. }));
    if inject {
        // The violation: retry the same content (in a fresh publisher child) and commit it.
        crate::lab::publish_in_child(&ctx.shardlift_exe, &store_dir, &state2, w(4)?)?;
    }
    let candidate = committed.committed.generation + 1;
    let candidate_present = store_dir
        .join(store::codec::commit_rel_path(candidate))
        .exists();
    let report = crate::lab::recover_in_child(&ctx.shardlift_exe, &store_dir)?;
    obs.check("failed_publish_refused", true, refused);
    obs.check("candidate_commit_present", false, candidate_present);
    obs.check(
        "valid_generations",
        committed.committed.generation,
        report
            .valid_generations
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    obs.check(
        "selected_generation",
        committed.committed.generation,
        report.selected.as_ref().map_or(u64::MAX, |s| s.generation),
    );
    obs.check(
        "selected_root",
        ctx.state1.logical_state_root(),
        report
            .selected
            .as_ref()
            .map_or_else(|| "none".to_owned(), |s| s.logical_state_root.to_hex()),
    );
    obs.fact("failure", "injected EIO on the commit record's fsync");
    Ok(())
}

/// Which generation to resume: the scan's answer (correct) or LATEST's (the violation).
pub fn resume_generation(report: &store::RecoveryReport, trust_latest: bool) -> Option<u64> {
    if trust_latest {
        report.latest.generation
    } else {
        report.selected.as_ref().map(|s| s.generation)
    }
}

/// Scenario 10: LATEST names an older generation; a fresh recovery ignores it.
fn stale_latest(
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let store_dir = ctx.fresh_store("s10");
    let first = store::publish(&store_dir, &ctx.state1, w(4)?, &mut NoHooks)?;
    let (state2, _) = next_step(&ctx.state1, ctx.data)?;
    let second = store::publish(&store_dir, &state2, w(4)?, &mut NoHooks)?;
    store::writer::Writer::repair_latest(
        &RealFs,
        &store_dir,
        &mut NoHooks,
        first.committed.generation,
        first.committed.commit_digest,
    )?;
    let (_, latest_before) = store_receipts(&store_dir)?;
    let report = crate::lab::recover_in_child(&ctx.shardlift_exe, &store_dir)?;
    let (_, latest_after) = store_receipts(&store_dir)?;
    let status = serde_json::to_value(report.latest.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let chosen = resume_generation(&report, inject);
    let loaded_root = match chosen {
        Some(generation) => store::load_generation(&store_dir, generation)?
            .0
            .logical_state_root()
            .to_hex(),
        None => "none".to_owned(),
    };
    obs.check("latest_status", "stale", status);
    obs.check(
        "selected_generation",
        second.committed.generation,
        chosen.map_or(u64::MAX, |g| g),
    );
    obs.check("loaded_root", state2.logical_state_root(), loaded_root);
    obs.check(
        "latest_unchanged",
        optional_digest(latest_before),
        optional_digest(latest_after),
    );
    Ok(())
}

mod reshard;
use reshard::{reshard_round_trip, reshard_w4_w3};
