//! The consistency of every claim in a bundle with the facts it is derived from.

use crate::core::digest::Digest;
use crate::dataset::{PinTable, Resource};

use super::error::*;
use super::records;
use super::records::*;

/// Every claim must follow from the facts recorded beside it. The checks run in a fixed
/// order and the first that fails names the claim (and the file and field it is in).
pub(super) fn check_claims(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
    pins: &PinTable,
) -> Result<(), BundleError> {
    check_labels(reference, recovered, evidence, audit)?;
    for record in [reference, recovered] {
        check_logit_probe(record)?;
    }
    check_dataset_pins(reference, recovered, audit, pins)?;
    let count = pinned_test_count(pins)?;
    for record in [reference, recovered] {
        check_evaluation_size(record, count)?;
    }
    check_evaluations_agree(reference, recovered)?;
    check_sessions_and_exits(evidence)?;
    let reference_at_target = check_evaluated_states(reference, recovered, evidence)?;
    check_reshard(evidence)?;
    let derived = derive_comparisons(reference, recovered, evidence, reference_at_target)?;
    for (file, claimed) in [
        (RECOVERY_EVIDENCE, &evidence.comparisons),
        (AUDIT, &audit.comparisons),
    ] {
        require(*claimed == derived.comparisons, || {
            format!(
                "{file} comparisons {claimed:?} differ from those derived from the records {:?} ({})",
                derived.comparisons,
                if derived.unequal.is_empty() {
                    "every compared pair is equal".to_owned()
                } else {
                    format!("unequal: {}", derived.unequal.join("; "))
                }
            )
        })?;
    }
    check_audit_summary(evidence, audit)?;
    check_status(audit, evidence, &derived.comparisons)
}

/// The recorded session named `name`.
fn session<'a>(evidence: &'a RecoveryEvidenceRecord, name: &str) -> Option<&'a SessionEntry> {
    evidence.sessions.iter().find(|s| s.name == name)
}

/// The sessions are the demo's, in order, and every worker of every session was reaped
/// exactly once with a clean exit: derived from the recorded exits, never assumed.
fn check_sessions_and_exits(evidence: &RecoveryEvidenceRecord) -> Result<(), BundleError> {
    let recorded: Vec<(&str, u32)> = evidence
        .sessions
        .iter()
        .map(|s| (s.name.as_str(), s.workers))
        .collect();
    require(recorded == records::DEMO_SESSIONS, || {
        format!(
            "{RECOVERY_EVIDENCE} sessions {recorded:?} are not the demo's {:?}",
            records::DEMO_SESSIONS
        )
    })?;
    let expected_exits: usize = evidence.sessions.iter().map(|s| s.workers as usize).sum();
    require(evidence.worker_exits.len() == expected_exits, || {
        format!(
            "{RECOVERY_EVIDENCE} worker_exits: {} recorded, the sessions ran {expected_exits} workers",
            evidence.worker_exits.len()
        )
    })?;
    for session in &evidence.sessions {
        let mut ranks: Vec<u32> = evidence
            .worker_exits
            .iter()
            .filter(|e| e.session == session.name)
            .map(|e| e.rank)
            .collect();
        ranks.sort_unstable();
        require(ranks == (0..session.workers).collect::<Vec<_>>(), || {
            format!(
                "{RECOVERY_EVIDENCE} worker_exits: session {:?} recorded exits of ranks {ranks:?}, not 0..{} once each",
                session.name, session.workers
            )
        })?;
    }
    match evidence
        .worker_exits
        .iter()
        .enumerate()
        .find(|(_, e)| e.outcome != records::CLEAN_WORKER_EXIT)
    {
        Some((index, unclean)) => Err(BundleError::Inconsistent(format!(
            "{RECOVERY_EVIDENCE} worker_exits[{index}].outcome: worker rank {} of session {:?} ended with {}, not a clean {}",
            unclean.rank,
            unclean.session,
            unclean.outcome,
            records::CLEAN_WORKER_EXIT
        ))),
        None => Ok(()),
    }
}

/// All records name one barrier, and each evaluation has its own role.
fn check_labels(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
) -> Result<(), BundleError> {
    let barrier = &audit.barrier;
    require(
        &evidence.barrier == barrier
            && &reference.barrier == barrier
            && &recovered.barrier == barrier,
        || "the records name different barriers".into(),
    )?;
    require(
        EvaluationRole::from_name(&reference.role) == Some(EvaluationRole::Reference)
            && EvaluationRole::from_name(&recovered.role) == Some(EvaluationRole::Recovered),
        || "evaluation roles are swapped or unknown".into(),
    )
}

/// The logit probe decodes, has its declared shape and digest; accuracy is within range.
fn check_logit_probe(record: &EvaluationRecord) -> Result<(), BundleError> {
    let probe = hex::decode(&record.logit_probe_f32le_hex).map_err(|_| {
        BundleError::Inconsistent(format!("{} logit probe is not hex", record.role))
    })?;
    let [rows, classes] = record.logit_probe_shape;
    require(
        probe.len() as u64 == u64::from(rows) * u64::from(classes) * 4,
        || {
            format!(
                "{} logit probe does not have its declared shape",
                record.role
            )
        },
    )?;
    require(Digest::of(&probe) == record.logit_probe_sha256, || {
        format!(
            "{} logit probe bytes do not match their SHA-256",
            record.role
        )
    })?;
    require(record.correct <= record.total, || {
        format!("{} accuracy exceeds its total", record.role)
    })
}

/// The file an evaluation record is installed as.
fn evaluation_file(record: &EvaluationRecord) -> &'static str {
    match EvaluationRole::from_name(&record.role) {
        Some(EvaluationRole::Recovered) => RECOVERED_EVALUATION,
        _ => REFERENCE_EVALUATION,
    }
}

/// Every recorded dataset digest is the pinned payload's: each evaluation's test images
/// and labels, and the audit's list of the four payloads (in pin order).
fn check_dataset_pins(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    audit: &AuditRecord,
    pins: &PinTable,
) -> Result<(), BundleError> {
    let unpinned = |name: &'static str, field: String, recorded: String, pinned: String| {
        Err(BundleError::UnpinnedDataset {
            name,
            field,
            recorded,
            pinned,
        })
    };
    let images = pins.get(Resource::TestImages).payload.sha256;
    let labels = pins.get(Resource::TestLabels).payload.sha256;
    for record in [reference, recovered] {
        for (field, recorded, pinned) in [
            ("test_images_sha256", record.test_images_sha256, images),
            ("test_labels_sha256", record.test_labels_sha256, labels),
        ] {
            if recorded != pinned {
                return unpinned(
                    evaluation_file(record),
                    field.to_owned(),
                    recorded.to_hex(),
                    pinned.to_hex(),
                );
            }
        }
    }
    let listed = &audit.build.dataset_payload_sha256;
    if listed.len() != pins.resources.len() {
        return unpinned(
            AUDIT,
            "build.dataset_payload_sha256".to_owned(),
            format!("a list of {} digests", listed.len()),
            format!("a list of {}", pins.resources.len()),
        );
    }
    for (index, (recorded, pin)) in listed.iter().zip(&pins.resources).enumerate() {
        if *recorded != pin.payload.sha256 {
            return unpinned(
                AUDIT,
                format!("build.dataset_payload_sha256[{index}]"),
                recorded.to_hex(),
                pin.payload.sha256.to_hex(),
            );
        }
    }
    Ok(())
}

/// Bytes of an IDX labels payload before its labels: magic and count, 4 bytes each.
const IDX_LABELS_HEADER_BYTES: u64 = 8;

/// The number of images in the pinned test split, from the pinned size of its labels
/// payload (one byte per label after the IDX header).
fn pinned_test_count(pins: &PinTable) -> Result<u64, BundleError> {
    pins.get(Resource::TestLabels)
        .payload
        .bytes
        .checked_sub(IDX_LABELS_HEADER_BYTES)
        .ok_or_else(|| {
            BundleError::Inconsistent(
                "the pinned test labels payload is shorter than its IDX header".into(),
            )
        })
}

/// The evaluation covers the whole pinned test split, and its probe holds the logits of
/// its first images ([`LOGIT_PROBE_IMAGES`](crate::core::step::LOGIT_PROBE_IMAGES) or the
/// split's count, whichever is fewer) over every class.
fn check_evaluation_size(record: &EvaluationRecord, count: u64) -> Result<(), BundleError> {
    let probe_rows = count.min(crate::core::step::LOGIT_PROBE_IMAGES as u64);
    let [rows, classes] = record.logit_probe_shape;
    for (field, recorded, expected) in [
        ("total", record.total, count),
        ("logit_probe_shape[0]", u64::from(rows), probe_rows),
        (
            "logit_probe_shape[1]",
            u64::from(classes),
            u64::from(crate::dataset::idx::CLASSES),
        ),
    ] {
        if recorded != expected {
            return Err(BundleError::EvaluationSize {
                name: evaluation_file(record),
                field,
                recorded,
                expected,
            });
        }
    }
    Ok(())
}

/// When both evaluations are of one state (equal logical state roots and ledger
/// digests), every figure they record is equal: evaluation is a function of the state and
/// the split. The split (digests), `total` and the probe's shape are pinned for both, so
/// checked before; what remains is the correct count and the probe's bytes (its SHA-256
/// is checked against the bytes before).
fn check_evaluations_agree(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
) -> Result<(), BundleError> {
    if reference.logical_state_root != recovered.logical_state_root
        || reference.ledger_digest != recovered.ledger_digest
    {
        return Ok(());
    }
    if reference.correct != recovered.correct {
        return Err(BundleError::EvaluationsDisagree {
            field: "correct",
            reference: reference.correct.to_string(),
            recovered: recovered.correct.to_string(),
        });
    }
    if reference.logit_probe_f32le_hex != recovered.logit_probe_f32le_hex {
        let probe = |record: &EvaluationRecord| {
            format!("probe bytes with SHA-256 {}", record.logit_probe_sha256)
        };
        return Err(BundleError::EvaluationsDisagree {
            field: "logit_probe_f32le_hex",
            reference: probe(reference),
            recovered: probe(recovered),
        });
    }
    Ok(())
}

/// Both evaluations are at the target step, of the reference store's checkpoint of the
/// reference and of the final checkpoint respectively, each on the placement of the
/// session that produced it. Returns the reference's digests at the target step.
fn check_evaluated_states<'a>(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &'a RecoveryEvidenceRecord,
) -> Result<&'a StateDigests, BundleError> {
    let target = evidence.target_step;
    let reference_at_target = reference_at(evidence, target)?;
    require(reference.step == target && recovered.step == target, || {
        format!(
            "{REFERENCE_EVALUATION} step {} / {RECOVERED_EVALUATION} step {} are not the target step {target}",
            reference.step, recovered.step
        )
    })?;
    require(
        reference.logical_state_root == reference_at_target.logical_state_root
            && reference.ledger_digest == reference_at_target.ledger_digest,
        || {
            format!(
                "{REFERENCE_EVALUATION} logical_state_root/ledger_digest are not the reference's at step {target}"
            )
        },
    )?;
    let checkpoint = &evidence.reference_checkpoint;
    let reference_workers = session(evidence, "reference").map(|s| s.workers);
    require(
        reference.generation == Some(checkpoint.generation)
            && checkpoint.step == target
            && Some(checkpoint.workers) == reference_workers
            && reference.workers == checkpoint.workers,
        || {
            format!(
                "{REFERENCE_EVALUATION} generation {:?} (W{}) is not {RECOVERY_EVIDENCE} reference_checkpoint {checkpoint:?} of the reference session (W{reference_workers:?}) at step {target}",
                reference.generation, reference.workers
            )
        },
    )?;
    require(
        recovered.logical_state_root == evidence.resharded_w3.logical_state_root
            && recovered.ledger_digest == evidence.resharded_w3.ledger_digest
            && recovered.generation == Some(evidence.final_checkpoint.generation)
            && recovered.workers == evidence.final_checkpoint.workers,
        || {
            format!(
                "{RECOVERED_EVALUATION} is not of {RECOVERY_EVIDENCE} final_checkpoint / resharded_w3"
            )
        },
    )?;
    Ok(reference_at_target)
}

/// The reference's digests at `step`.
fn reference_at(
    evidence: &RecoveryEvidenceRecord,
    step: u64,
) -> Result<&StateDigests, BundleError> {
    evidence
        .reference
        .iter()
        .find(|d| d.step == step)
        .ok_or_else(|| {
            BundleError::Inconsistent(format!(
                "{RECOVERY_EVIDENCE} reference never reached step {step}"
            ))
        })
}

/// The reshard is of the generation recovery selected, onto the placement the last
/// session loaded, committed just before the final checkpoint.
fn check_reshard(evidence: &RecoveryEvidenceRecord) -> Result<(), BundleError> {
    let reshard = &evidence.reshard;
    require(
        reshard.source_generation == evidence.recovery.selected_generation,
        || {
            format!(
                "{RECOVERY_EVIDENCE} reshard.source_generation {} is not recovery.selected_generation {}",
                reshard.source_generation, evidence.recovery.selected_generation
            )
        },
    )?;
    require(
        reshard.generation.checked_add(1) == Some(evidence.final_checkpoint.generation),
        || {
            format!(
                "{RECOVERY_EVIDENCE} reshard.generation {} does not precede final_checkpoint.generation {}",
                reshard.generation, evidence.final_checkpoint.generation
            )
        },
    )?;
    let before = session(evidence, "recovered").map(|s| s.workers);
    let after = evidence.sessions.last().map(|s| s.workers);
    require(
        Some(reshard.workers_before) == before && Some(reshard.workers_after) == after,
        || {
            format!(
                "{RECOVERY_EVIDENCE} reshard.workers_before/after W{}→W{} are not the placements the recovered (W{before:?}) and last (W{after:?}) sessions loaded",
                reshard.workers_before, reshard.workers_after
            )
        },
    )
}

/// The comparisons as the recorded digests imply them, and every unequal pair by name.
struct Derived {
    comparisons: Comparisons,
    unequal: Vec<String>,
}

/// Derives the comparisons from the recorded digests. The reshard's root is derived from
/// the two roots the demo recomputed from chunk objects loaded back from the store, not
/// from the commit record's root field (which the reshard writer copies).
/// Two named digests that must be equal: `(a_name, a, b_name, b)`.
type DigestPair = (String, Digest, String, Digest);

fn derive_comparisons(
    reference: &EvaluationRecord,
    recovered: &EvaluationRecord,
    evidence: &RecoveryEvidenceRecord,
    reference_at_target: &StateDigests,
) -> Result<Derived, BundleError> {
    let reference_at_selected = reference_at(evidence, evidence.recovery.selected_step)?;
    let mut unequal = Vec::new();
    let mut all_equal = |pairs: &[DigestPair]| {
        let mut equal = true;
        for (a_name, a, b_name, b) in pairs {
            if a != b {
                unequal.push(format!("{a_name} != {b_name}"));
                equal = false;
            }
        }
        equal
    };
    let roots_equal = all_equal(&root_pairs(
        evidence,
        reference_at_target,
        reference_at_selected,
    ));
    let ledgers_equal = all_equal(&ledger_pairs(evidence, recovered, reference_at_target));
    let probe_equal = all_equal(&[(
        format!("{REFERENCE_EVALUATION} logit_probe_sha256"),
        reference.logit_probe_sha256,
        format!("{RECOVERED_EVALUATION} logit_probe_sha256"),
        recovered.logit_probe_sha256,
    )]);
    Ok(Derived {
        comparisons: Comparisons {
            logical_state_roots_equal: roots_equal,
            ledger_digests_equal: ledgers_equal,
            logit_probe_equal: probe_equal,
        },
        unequal,
    })
}

/// A field of the recovery evidence, named as a comparison reports it.
fn evidence_field(field: &str) -> String {
    format!("{RECOVERY_EVIDENCE} {field}")
}

/// The logical-state roots that must all equal the reference's: the recovered and the
/// resharded state at the target step, and the reshard's source, result and commit.
fn root_pairs(
    evidence: &RecoveryEvidenceRecord,
    reference_at_target: &StateDigests,
    reference_at_selected: &StateDigests,
) -> Vec<DigestPair> {
    let ev = evidence_field;
    let reshard = &evidence.reshard;
    let at_target = format!("reference[step {}]", evidence.target_step);
    vec![
        (
            ev("recovered_w4.logical_state_root"),
            evidence.recovered_w4.logical_state_root,
            ev(&format!("{at_target}.logical_state_root")),
            reference_at_target.logical_state_root,
        ),
        (
            ev("resharded_w3.logical_state_root"),
            evidence.resharded_w3.logical_state_root,
            ev(&format!("{at_target}.logical_state_root")),
            reference_at_target.logical_state_root,
        ),
        (
            ev("reshard.source_root_from_chunks"),
            reshard.source_root_from_chunks,
            ev(&format!(
                "reference[step {}].logical_state_root",
                evidence.recovery.selected_step
            )),
            reference_at_selected.logical_state_root,
        ),
        (
            ev("reshard.resharded_root_from_chunks"),
            reshard.resharded_root_from_chunks,
            ev("reshard.source_root_from_chunks"),
            reshard.source_root_from_chunks,
        ),
        (
            ev("reshard.committed_root"),
            reshard.committed_root,
            ev("reshard.resharded_root_from_chunks"),
            reshard.resharded_root_from_chunks,
        ),
    ]
}

/// The ledger digests that must all equal the reference's at the target step.
fn ledger_pairs(
    evidence: &RecoveryEvidenceRecord,
    recovered: &EvaluationRecord,
    reference_at_target: &StateDigests,
) -> Vec<DigestPair> {
    let ev = evidence_field;
    let at_target = format!("reference[step {}]", evidence.target_step);
    vec![
        (
            ev("recovered_w4.ledger_digest"),
            evidence.recovered_w4.ledger_digest,
            ev(&format!("{at_target}.ledger_digest")),
            reference_at_target.ledger_digest,
        ),
        (
            ev("resharded_w3.ledger_digest"),
            evidence.resharded_w3.ledger_digest,
            ev(&format!("{at_target}.ledger_digest")),
            reference_at_target.ledger_digest,
        ),
        (
            format!("{RECOVERED_EVALUATION} ledger_digest"),
            recovered.ledger_digest,
            ev(&format!("{at_target}.ledger_digest")),
            reference_at_target.ledger_digest,
        ),
    ]
}

/// The audit summarises the evidence faithfully, and the evidence shows a SIGKILL at the
/// target barrier followed by a continuation to the selected step + 1.
fn check_audit_summary(
    evidence: &RecoveryEvidenceRecord,
    audit: &AuditRecord,
) -> Result<(), BundleError> {
    require(
        audit.candidate_installed == evidence.kill.candidate_installed
            && audit.selected_generation == evidence.recovery.selected_generation
            && audit.selected_step == evidence.recovery.selected_step
            && audit.replayed_batches == evidence.replayed_batches
            && audit.final_checkpoint == evidence.final_checkpoint
            && audit.worker_exits == evidence.worker_exits.len() as u64,
        || "audit.json summarises recovery-evidence.json wrongly".into(),
    )?;
    require(
        evidence.kill.signal == 9
            && evidence.kill.reaped
            && evidence.kill.unacknowledged_event == evidence.kill.target_barrier,
        || "the publisher was not killed with SIGKILL at the target barrier and reaped".into(),
    )?;
    require(
        evidence.target_step == evidence.recovery.selected_step + 1,
        || "target step is not the selected step + 1".into(),
    )
}

/// The status follows from the outcome table and the derived comparisons.
fn check_status(
    audit: &AuditRecord,
    evidence: &RecoveryEvidenceRecord,
    derived: &Comparisons,
) -> Result<(), BundleError> {
    // The final checkpoint was committed by the last session: its placement is that
    // session's worker count, as recorded.
    let final_workers = evidence.sessions.last().map(|s| s.workers);
    let matches_table = crate::core::barrier::Barrier::from_name(&audit.barrier)
        .and_then(records::expected_outcome)
        == Some((
            audit.candidate_installed,
            audit.selected_generation,
            audit.selected_step,
            audit.replayed_batches,
            audit.final_checkpoint.generation,
            audit.final_checkpoint.step,
        ));
    let passed = matches_table
        && derived.logical_state_roots_equal
        && derived.ledger_digests_equal
        && derived.logit_probe_equal
        && Some(audit.final_checkpoint.workers) == final_workers;
    require(
        RunStatus::from_name(&audit.status) == Some(RunStatus::from_passed(passed)),
        || {
            format!(
                "status {:?} does not follow from the recorded outcome",
                audit.status
            )
        },
    )
}
