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

pub const REFERENCE_EVALUATION: &str = "reference-evaluation.json";
pub const RECOVERED_EVALUATION: &str = "recovered-evaluation.json";
pub const RECOVERY_EVIDENCE: &str = "recovery-evidence.json";
pub const AUDIT: &str = "audit.json";
/// Every file of a complete bundle, in installation order (`audit.json` last: it is the
/// bundle's commit marker).
pub const BUNDLE_FILES: [&str; 4] = [
    REFERENCE_EVALUATION,
    RECOVERED_EVALUATION,
    RECOVERY_EVIDENCE,
    AUDIT,
];

pub const EVALUATION_SCHEMA: &str = "shardlift.bundle.evaluation";
pub const RECOVERY_EVIDENCE_SCHEMA: &str = "shardlift.bundle.recovery-evidence";
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
    pub schema: String,
    pub version: u32,
    /// "reference" or "recovered".
    pub role: String,
    pub barrier: String,
    /// The checkpoint generation evaluated, loaded back from its store (the reference
    /// store for the reference, the crash store for the recovered final checkpoint).
    pub generation: Option<u64>,
    pub step: u64,
    pub workers: u32,
    pub logical_state_root: Digest,
    pub ledger_digest: Digest,
    /// SHA-256 of the test-split payloads evaluated (images, labels).
    pub test_images_sha256: Digest,
    pub test_labels_sha256: Digest,
    pub correct: u64,
    pub total: u64,
    /// [rows, classes] of the logit probe.
    pub logit_probe_shape: [u32; 2],
    /// The probe's exact FP32 little-endian bytes, hex.
    pub logit_probe_f32le_hex: String,
    pub logit_probe_sha256: Digest,
}

crate::canonical_record!(EvaluationRecord, EVALUATION_SCHEMA, BUNDLE_VERSION, 1 << 20);

/// A coordinator session of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEntry {
    pub name: String,
    pub workers: u32,
    pub start_step: u64,
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
pub const SESSION_GENESIS: DemoSession = ("genesis", 4);
pub const SESSION_REFERENCE: DemoSession = ("reference", 4);
pub const SESSION_CRASH: DemoSession = ("crash", 4);
pub const SESSION_RECOVERED: DemoSession = ("recovered", 4);
pub const SESSION_RESHARDED: DemoSession = ("resharded", 3);

/// The recorded outcome of a worker that ended cleanly.
pub const CLEAN_WORKER_EXIT: &str = "code:0";

/// One reaped worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerExitEntry {
    pub session: String,
    pub rank: u32,
    /// "code:N" or "signal:N".
    pub outcome: String,
}

/// The SIGKILL of the publisher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillEntry {
    pub target_barrier: String,
    /// Barrier events the parent acknowledged, in order.
    pub acknowledged_events: Vec<String>,
    /// The target event, answered with SIGKILL instead of an acknowledgement.
    pub unacknowledged_event: String,
    pub signal: i32,
    pub reaped: bool,
    pub candidate_generation: u64,
    pub candidate_installed: bool,
}

/// What the fresh recovery process chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryEntry {
    pub selected_generation: u64,
    pub selected_step: u64,
    pub selected_commit_sha256: Digest,
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
    pub step: u64,
    pub workers: u32,
    pub logical_state_root: Digest,
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
    pub source_generation: u64,
    pub generation: u64,
    pub workers_before: u32,
    pub workers_after: u32,
    /// The root the reshard's commit record states.
    pub committed_root: Digest,
    /// Recomputed from the source generation's chunk objects, loaded from the store.
    pub source_root_from_chunks: Digest,
    /// Recomputed from the resharded generation's chunk objects, loaded from the store.
    pub resharded_root_from_chunks: Digest,
    pub chunk_objects_written: u64,
}

/// A committed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointEntry {
    pub generation: u64,
    pub step: u64,
    pub workers: u32,
}

/// The equalities the run claims, each derivable from the other fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparisons {
    pub logical_state_roots_equal: bool,
    pub ledger_digests_equal: bool,
    pub logit_probe_equal: bool,
}

/// How the run went from crash to the final W3 checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryEvidenceRecord {
    pub schema: String,
    pub version: u32,
    pub barrier: String,
    pub seed: u64,
    pub sessions: Vec<SessionEntry>,
    pub worker_exits: Vec<WorkerExitEntry>,
    pub kill: KillEntry,
    pub recovery: RecoveryEntry,
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
    pub reshard: ReshardEntry,
    /// The resharded W3 continuation at the target step, as committed.
    pub resharded_w3: StateDigests,
    pub final_checkpoint: CheckpointEntry,
    pub comparisons: Comparisons,
    pub reference_evaluation_sha256: Digest,
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
    pub name: String,
    pub bytes: u64,
    pub sha256: Digest,
}

/// Versions the run was built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildEntry {
    pub shardlift_version: String,
    pub tch_version: String,
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
    pub schema: String,
    pub version: u32,
    pub barrier: String,
    /// "passed" when every comparison holds and the run matches the expected table.
    pub status: String,
    pub candidate_installed: bool,
    pub selected_generation: u64,
    pub selected_step: u64,
    pub replayed_batches: u64,
    pub final_checkpoint: CheckpointEntry,
    pub comparisons: Comparisons,
    pub worker_exits: u64,
    pub files: Vec<BoundFile>,
    pub build: BuildEntry,
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
    pub barrier: String,
    pub candidate_installed: bool,
    pub selected_generation: u64,
    pub selected_step: u64,
    pub replayed_batches: u64,
    pub final_checkpoint: CheckpointEntry,
    pub logit_probe_equal: bool,
    pub logical_state_roots_equal: bool,
    pub ledger_digests_equal: bool,
    pub worker_exits: u64,
}

impl RunOutcome {
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
