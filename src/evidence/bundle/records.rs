//! The four records of an evidence bundle, as closed canonical-JSON schemas.
//!
//! `recovery-evidence.json` binds both evaluation files by SHA-256; `audit.json` binds all
//! three and carries a digest of its own canonical body, so a change to any byte of any
//! file is detected. The records hold no paths, pids, hostnames, timestamps or wall-clock
//! figures, so two runs of one commit on one machine write identical bytes (the run's wall
//! time is in killer-demo's stdout record only).
use serde::{Deserialize, Serialize};

use crate::core::barrier::Barrier;
use crate::core::digest::Digest;

/// File name of the reference's [`EvaluationRecord`].
pub const REFERENCE_EVALUATION: &str = "reference-evaluation.json";
/// File name of the recovered final checkpoint's [`EvaluationRecord`].
pub const RECOVERED_EVALUATION: &str = "recovered-evaluation.json";
/// File name of the [`RecoveryEvidenceRecord`].
pub const RECOVERY_EVIDENCE: &str = "recovery-evidence.json";
/// File name of the [`AuditRecord`], the bundle's commit marker.
pub const AUDIT: &str = "audit.json";
/// Every file of a complete bundle, in installation order (`audit.json` last: it is the
/// bundle's commit marker).
pub const BUNDLE_FILES: [&str; 4] = [
    REFERENCE_EVALUATION,
    RECOVERED_EVALUATION,
    RECOVERY_EVIDENCE,
    AUDIT,
];

/// Schema id of [`EvaluationRecord`].
pub const EVALUATION_SCHEMA: &str = "shardlift.bundle.evaluation";
/// Schema id of [`RecoveryEvidenceRecord`].
pub const RECOVERY_EVIDENCE_SCHEMA: &str = "shardlift.bundle.recovery-evidence";
/// Schema id of [`AuditRecord`].
pub const AUDIT_SCHEMA: &str = "shardlift.bundle.audit";
/// Version 2: the reshard entry records two roots recomputed from chunk objects loaded
/// back from the store beside the root the reshard's commit record states, and the
/// reference is evaluated from a checkpoint of the reference store (`reference_checkpoint`).
/// Version 3: the audit records no wall time (the bundle is byte-for-byte reproducible).
pub const BUNDLE_VERSION: u32 = 3;

/// What the evidence does not show, written into every audit as data.
pub const NONCLAIMS: [&str; 5] = [
    "no power-loss durability on real hardware: the kill is a process crash (SIGKILL); power loss is only modelled in the crash matrix",
    "no authenticity: the bundle is not signed; anyone can write a bundle that verifies",
    "no freshness: nothing binds the bundle to a time or prevents replaying an old one",
    "local host only: one machine, CPU, one process tree; no multi-node or network file system",
    "no performance claim: the bundle records no time at all",
];

/// One evaluated state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationRecord {
    /// [`EVALUATION_SCHEMA`].
    pub schema: String,
    /// [`BUNDLE_VERSION`].
    pub version: u32,
    /// "reference" or "recovered".
    pub role: String,
    /// The name of the barrier the run killed the publisher at.
    pub barrier: String,
    /// The checkpoint generation evaluated, loaded back from its store (the reference
    /// store for the reference, the crash store for the recovered final checkpoint).
    pub generation: Option<u64>,
    /// The step of the state evaluated: the run's target step.
    pub step: u64,
    /// The worker count of the checkpoint's placement.
    pub workers: u32,
    /// The state's logical state root.
    pub logical_state_root: Digest,
    /// The digest of the state's data ledger.
    pub ledger_digest: Digest,
    /// SHA-256 of the test-images payload evaluated (`t10k-images-idx3-ubyte`).
    pub test_images_sha256: Digest,
    /// SHA-256 of the test-labels payload evaluated (`t10k-labels-idx1-ubyte`).
    pub test_labels_sha256: Digest,
    /// Test images classified correctly.
    pub correct: u64,
    /// Test images evaluated; never below `correct`.
    pub total: u64,
    /// [rows, classes] of the logit probe.
    pub logit_probe_shape: [u32; 2],
    /// The probe's exact FP32 little-endian bytes, hex.
    pub logit_probe_f32le_hex: String,
    /// SHA-256 of the probe's bytes (decoded from `logit_probe_f32le_hex`).
    pub logit_probe_sha256: Digest,
}

crate::canonical_record!(EvaluationRecord, EVALUATION_SCHEMA, BUNDLE_VERSION, 1 << 20);

/// A coordinator session of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEntry {
    /// Its name in [`DEMO_SESSIONS`], e.g. `crash`.
    pub name: String,
    /// The worker processes it ran (its placement).
    pub workers: u32,
    /// The step of the state it started from.
    pub start_step: u64,
    /// The step of the state it ended with.
    pub end_step: u64,
}

/// The coordinator sessions of a killer-demo run, in order, with their worker counts:
/// genesis, the uninterrupted reference, the crashed run, the recovered W4 continuation
/// and the resharded continuation (4 + 4 + 4 + 4 + 3 = 19 worker exits).
pub const DEMO_SESSIONS: [DemoSession; 5] = [
    SESSION_GENESIS,
    SESSION_REFERENCE,
    SESSION_CRASH,
    SESSION_RECOVERED,
    SESSION_RESHARDED,
];

/// A coordinator session of the demo: its name and worker count (the demo runs them and
/// the verifier expects them from this one table).
pub type DemoSession = (&'static str, u32);
/// Trains step 1 from the seeded initial state on four workers; committed as generation
/// 0 to both stores.
pub const SESSION_GENESIS: DemoSession = ("genesis", 4);
/// The uninterrupted reference run, on four workers, in its own store.
pub const SESSION_REFERENCE: DemoSession = ("reference", 4);
/// The run whose publisher is killed at the barrier, on four workers.
pub const SESSION_CRASH: DemoSession = ("crash", 4);
/// The continuation on four workers from the generation recovery selected.
pub const SESSION_RECOVERED: DemoSession = ("recovered", 4);
/// The continuation on three workers after the offline W4 → W3 reshard.
pub const SESSION_RESHARDED: DemoSession = ("resharded", 3);

/// The recorded outcome of a worker that ended cleanly.
pub const CLEAN_WORKER_EXIT: &str = "code:0";

/// One reaped worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerExitEntry {
    /// The name of the session it belonged to.
    pub session: String,
    /// Its rank in that session, `0..workers`.
    pub rank: u32,
    /// "code:N" or "signal:N".
    pub outcome: String,
}

/// The SIGKILL of the publisher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillEntry {
    /// The barrier name the kill was aimed at.
    pub target_barrier: String,
    /// Barrier events the parent acknowledged, in order.
    pub acknowledged_events: Vec<String>,
    /// The target event, answered with SIGKILL instead of an acknowledgement.
    pub unacknowledged_event: String,
    /// The signal that ended the publisher; 9 (SIGKILL), or 0 when it was not signalled.
    pub signal: i32,
    /// Whether the killed publisher was reaped.
    pub reaped: bool,
    /// The generation the killed publisher was writing.
    pub candidate_generation: u64,
    /// Whether `commits/<candidate>.json` existed after the kill.
    pub candidate_installed: bool,
}

/// What the fresh recovery process chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryEntry {
    /// The generation recovery selected: the newest valid one.
    pub selected_generation: u64,
    /// The step of the selected generation.
    pub selected_step: u64,
    /// SHA-256 of the selected generation's commit record.
    pub selected_commit_sha256: Digest,
    /// Every generation that fully verified, ascending.
    pub valid_generations: Vec<u64>,
    /// LATEST's status as reported (missing, stale, ahead, garbage, consistent).
    pub latest_status: String,
    /// Rejected commit records: "generation:kind".
    pub rejected: Vec<String>,
}

/// A state at a step, by its digests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDigests {
    /// The step.
    pub step: u64,
    /// The worker count of the placement the state was on.
    pub workers: u32,
    /// The logical state root, independent of placement.
    pub logical_state_root: Digest,
    /// The digest of the data ledger.
    pub ledger_digest: Digest,
}

/// The offline W4 → W3 reshard.
///
/// The reshard writer copies the source manifest's root into the new commit record, so
/// `committed_root` alone shows nothing about the bytes. The two `*_from_chunks` roots are
/// computed independently by the demo: each from the chunk objects of one generation,
/// loaded back from the crash store (every object checked against its address), over
/// the rebuilt state. `verify-bundle` compares the three with each other and the source
/// root with the reference at the selected step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReshardEntry {
    /// The generation resharded: the one recovery selected.
    pub source_generation: u64,
    /// The generation the reshard committed; the final checkpoint is the next one.
    pub generation: u64,
    /// The source placement's worker count (4).
    pub workers_before: u32,
    /// The new placement's worker count (3).
    pub workers_after: u32,
    /// The root the reshard's commit record states.
    pub committed_root: Digest,
    /// Recomputed from the source generation's chunk objects, loaded from the store.
    pub source_root_from_chunks: Digest,
    /// Recomputed from the resharded generation's chunk objects, loaded from the store.
    pub resharded_root_from_chunks: Digest,
    /// Chunk objects the reshard wrote to the store (those not already present).
    pub chunk_objects_written: u64,
}

/// A committed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointEntry {
    /// The generation.
    pub generation: u64,
    /// The step of its state.
    pub step: u64,
    /// The worker count of its placement.
    pub workers: u32,
}

/// The equalities the run claims, each derivable from the other fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparisons {
    /// The recovered and resharded roots, and the reshard's recomputed and committed roots,
    /// equal the reference's root at the same step.
    pub logical_state_roots_equal: bool,
    /// Both continuations' ledger digests, and the recovered evaluation's, equal the
    /// reference's at the target step.
    pub ledger_digests_equal: bool,
    /// The two evaluations' logit probes are the same bytes.
    pub logit_probe_equal: bool,
}

/// How the run went from crash to the final W3 checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryEvidenceRecord {
    /// [`RECOVERY_EVIDENCE_SCHEMA`].
    pub schema: String,
    /// [`BUNDLE_VERSION`].
    pub version: u32,
    /// The name of the barrier the publisher was killed at.
    pub barrier: String,
    /// The run's seed: of the initial parameters and the data permutations.
    pub seed: u64,
    /// The coordinator sessions, in order; must be [`DEMO_SESSIONS`].
    pub sessions: Vec<SessionEntry>,
    /// Every reaped worker of every session, each rank once.
    pub worker_exits: Vec<WorkerExitEntry>,
    /// The kill of the crash session's publisher.
    pub kill: KillEntry,
    /// What the fresh recovery process chose.
    pub recovery: RecoveryEntry,
    /// Batches trained before the crash, past the selected step, that the continuation
    /// trains again.
    pub replayed_batches: u64,
    /// The step every path is compared at (selected step + 1).
    pub target_step: u64,
    /// The uninterrupted reference, at every step it passed.
    pub reference: Vec<StateDigests>,
    /// The reference store's checkpoint of the reference at the target step: the state
    /// the reference evaluation was computed from, loaded back from disk.
    pub reference_checkpoint: CheckpointEntry,
    /// The recovered W4 continuation at the target step.
    pub recovered_w4: StateDigests,
    /// The offline W4 → W3 reshard of the selected generation.
    pub reshard: ReshardEntry,
    /// The resharded W3 continuation at the target step, as committed.
    pub resharded_w3: StateDigests,
    /// The checkpoint the resharded continuation committed at the target step.
    pub final_checkpoint: CheckpointEntry,
    /// The equalities claimed; `verify-bundle` derives them again from the digests.
    pub comparisons: Comparisons,
    /// SHA-256 of `reference-evaluation.json`, filled in at install.
    pub reference_evaluation_sha256: Digest,
    /// SHA-256 of `recovered-evaluation.json`, filled in at install.
    pub recovered_evaluation_sha256: Digest,
}

crate::canonical_record!(
    RecoveryEvidenceRecord,
    RECOVERY_EVIDENCE_SCHEMA,
    BUNDLE_VERSION,
    1 << 20
);

/// A bound file of the bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundFile {
    /// The member's file name.
    pub name: String,
    /// Its size, in bytes.
    pub bytes: u64,
    /// The SHA-256 of its bytes.
    pub sha256: Digest,
}

/// Versions the run was built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildEntry {
    /// The `shardlift` crate version.
    pub shardlift_version: String,
    /// The `tch` crate version.
    pub tch_version: String,
    /// The libtorch version `tch` was built against.
    pub libtorch_version: String,
    /// The git commit the run was bound to with --repository/--expected-revision.
    pub source_revision: Option<String>,
    /// SHA-256 of the four pinned Fashion-MNIST payloads, in pin order.
    pub dataset_payload_sha256: Vec<Digest>,
}

/// The bundle's commit marker: installed last, binds the other three files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    /// [`AUDIT_SCHEMA`].
    pub schema: String,
    /// [`BUNDLE_VERSION`].
    pub version: u32,
    /// The name of the barrier the publisher was killed at.
    pub barrier: String,
    /// "passed" when every comparison holds and the run matches the expected table.
    pub status: String,
    /// As [`KillEntry::candidate_installed`].
    pub candidate_installed: bool,
    /// As [`RecoveryEntry::selected_generation`].
    pub selected_generation: u64,
    /// As [`RecoveryEntry::selected_step`].
    pub selected_step: u64,
    /// As [`RecoveryEvidenceRecord::replayed_batches`].
    pub replayed_batches: u64,
    /// As [`RecoveryEvidenceRecord::final_checkpoint`].
    pub final_checkpoint: CheckpointEntry,
    /// As [`RecoveryEvidenceRecord::comparisons`].
    pub comparisons: Comparisons,
    /// The number of worker exits in the evidence (19 for [`DEMO_SESSIONS`]).
    pub worker_exits: u64,
    /// The other three files, in [`BUNDLE_FILES`] order.
    pub files: Vec<BoundFile>,
    /// What the run was built from.
    pub build: BuildEntry,
    /// [`NONCLAIMS`].
    pub nonclaims: Vec<String>,
    /// SHA-256 of this record's canonical bytes with this field set to 64 zeros.
    pub self_sha256: Digest,
}

crate::canonical_record!(AuditRecord, AUDIT_SCHEMA, BUNDLE_VERSION, 1 << 20);

/// What a run showed, stated the same way by every report of it (killer-demo's stdout
/// record and verify-bundle's summary): read from the audit, its one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOutcome {
    /// The name of the barrier the publisher was killed at.
    pub barrier: String,
    /// Whether the killed publisher's commit record was installed.
    pub candidate_installed: bool,
    /// The generation recovery selected.
    pub selected_generation: u64,
    /// Its step.
    pub selected_step: u64,
    /// Batches trained again after recovery.
    pub replayed_batches: u64,
    /// The final W3 checkpoint.
    pub final_checkpoint: CheckpointEntry,
    /// As [`Comparisons::logit_probe_equal`].
    pub logit_probe_equal: bool,
    /// As [`Comparisons::logical_state_roots_equal`].
    pub logical_state_roots_equal: bool,
    /// As [`Comparisons::ledger_digests_equal`].
    pub ledger_digests_equal: bool,
    /// The number of worker exits recorded.
    pub worker_exits: u64,
}

impl RunOutcome {
    /// The outcome as `audit` states it.
    pub fn of(audit: &AuditRecord) -> Self {
        RunOutcome {
            barrier: audit.barrier.clone(),
            candidate_installed: audit.candidate_installed,
            selected_generation: audit.selected_generation,
            selected_step: audit.selected_step,
            replayed_batches: audit.replayed_batches,
            final_checkpoint: audit.final_checkpoint.clone(),
            logit_probe_equal: audit.comparisons.logit_probe_equal,
            logical_state_roots_equal: audit.comparisons.logical_state_roots_equal,
            ledger_digests_equal: audit.comparisons.ledger_digests_equal,
            worker_exits: audit.worker_exits,
        }
    }
}

/// The expected row of the outcome table for a barrier: (candidate installed, selected
/// generation, selected step, replayed batches, final generation, final step).
pub fn expected_outcome(barrier: Barrier) -> Option<(bool, u64, u64, u64, u64, u64)> {
    match barrier {
        Barrier::CommitAfterFileFsync => Some((false, 0, 1, 1, 2, 2)),
        Barrier::CommitAfterRename => Some((true, 1, 2, 0, 3, 3)),
        _ => None,
    }
}

/// A run's verdict, as `audit.json` states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// The run matched its row of the outcome table and every comparison held.
    Passed,
    /// It did not.
    Failed,
}

impl RunStatus {
    /// `Passed` when `passed`, else `Failed`.
    pub fn from_passed(passed: bool) -> Self {
        if passed {
            RunStatus::Passed
        } else {
            RunStatus::Failed
        }
    }

    /// The name recorded in `audit.json` (and printed in every report of the run).
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Passed => "passed",
            RunStatus::Failed => "failed",
        }
    }

    /// The status recorded as `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [RunStatus::Passed, RunStatus::Failed]
            .into_iter()
            .find(|status| status.name() == name)
    }
}

/// Which state an evaluation record is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationRole {
    /// The uninterrupted reference at the target step.
    Reference,
    /// The final checkpoint, loaded back from disk after recovery and reshard.
    Recovered,
}

impl EvaluationRole {
    /// The name recorded in an evaluation record's `role`.
    pub fn name(self) -> &'static str {
        match self {
            EvaluationRole::Reference => "reference",
            EvaluationRole::Recovered => "recovered",
        }
    }

    /// The role recorded as `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [EvaluationRole::Reference, EvaluationRole::Recovered]
            .into_iter()
            .find(|role| role.name() == name)
    }
}
