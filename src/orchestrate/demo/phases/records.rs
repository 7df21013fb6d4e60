//! The four records of the bundle and its installation.

use crate::core::canonical::{self, CanonicalRecord};
use crate::core::digest::Digest;
use crate::core::pins::{LIBTORCH_VERSION, TCH_VERSION};
use crate::dataset::FASHION_MNIST;
use crate::evidence::bundle::{self, records::*, RunStatus};
use crate::evidence::source::SourceBinding;

use super::*;

/// The four records of the bundle, complete: every binding digest is computed from the
/// canonical bytes of the record it binds.
pub(super) struct Records {
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
pub(super) fn build_records(
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

/// The bundle installed (`audit.json` last) and the run's stdout record.
pub(super) fn bundle_phase(
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
