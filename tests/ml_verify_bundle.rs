//! ML lane: `verify-bundle`'s re-evaluation, when the run's stores are beside the bundle.
//!
//! A run directory is built without a run: a state is published to a reference store and
//! a crash store at the generations the committed commit-after-rename bundle names, and a
//! bundle is installed from that bundle's records, re-pointed at this state (its root and
//! ledger replace the target step's everywhere they occur) and at a small synthetic test
//! split (its own pins). The evaluation figures are what the engine gives, so it verifies
//! and re-evaluates; each forgery keeps every digest and every torch-free check satisfied
//! (install recomputes the bindings), so only the re-evaluation can refuse it.
#![cfg(feature = "torch")]
mod common;

use std::path::{Path, PathBuf};

use shardlift::core::canonical::{self, CanonicalRecord};
use shardlift::core::digest::Digest;
use shardlift::core::logical::{Hyperparameters, LogicalState};
use shardlift::core::step::SplitView;
use shardlift::core::topology::Topology;
use shardlift::dataset::{ContentPin, DatasetError, PinTable, Resource, Split, FASHION_MNIST};
use shardlift::engine::evaluate;
use shardlift::evidence::bundle::reevaluate::{reevaluate, Reevaluation, RunStores, SkipReason};
use shardlift::evidence::bundle::{
    self, AuditRecord, BundleError, EvaluationRecord, RecoveryEvidenceRecord, AUDIT,
    RECOVERED_EVALUATION, RECOVERY_EVIDENCE, REFERENCE_EVALUATION,
};
use shardlift::store::{self, NoHooks};

/// Images in the synthetic test split: more than the probe's 128 rows.
const IMAGES: usize = 200;

fn decode<R: CanonicalRecord>(directory: &Path, name: &str) -> R {
    canonical::decode(&std::fs::read(directory.join(name)).expect("read")).expect("decode")
}

/// `record`, encoded, with every occurrence of each `(from, to)` digest replaced, decoded.
fn replaced<R: CanonicalRecord>(record: &R, replacements: &[(Digest, Digest)]) -> R {
    let mut text = String::from_utf8(canonical::encode(record).expect("encode")).expect("utf8");
    for (from, to) in replacements {
        text = text.replace(&from.to_hex(), &to.to_hex());
    }
    canonical::decode(text.as_bytes()).expect("decode")
}

/// A synthetic test split and the pins naming it (the training pins stay Fashion-MNIST's).
fn synthetic_split() -> (Split, PinTable) {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let images: Vec<u8> = (0..IMAGES * 784)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 56) as u8
        })
        .collect();
    let labels: Vec<u8> = (0..IMAGES).map(|i| (i % 10) as u8).collect();
    let mut images_payload = Vec::new();
    for word in [0x0803u32, IMAGES as u32, 28, 28] {
        images_payload.extend_from_slice(&word.to_be_bytes());
    }
    images_payload.extend_from_slice(&images);
    let mut labels_payload = Vec::new();
    for word in [0x0801u32, IMAGES as u32] {
        labels_payload.extend_from_slice(&word.to_be_bytes());
    }
    labels_payload.extend_from_slice(&labels);
    let pin = |bytes: &[u8]| ContentPin {
        bytes: bytes.len() as u64,
        sha256: Digest::of(bytes),
    };
    let mut resources = FASHION_MNIST.resources.map(|r| (r.gzip, r.payload));
    resources[2].1 = pin(&images_payload);
    resources[3].1 = pin(&labels_payload);
    let pins = PinTable::with_pins(resources);
    assert_eq!(
        pins.get(Resource::TestLabels).payload.bytes,
        8 + IMAGES as u64
    );
    (
        Split {
            images,
            labels,
            count: IMAGES,
        },
        pins,
    )
}

/// A run directory: its stores, the state they hold, the test split and its pins, and the
/// records of a bundle consistent with them (not installed yet).
struct Run {
    _scratch: tempfile::TempDir,
    directory: PathBuf,
    split: Split,
    pins: PinTable,
    reference: EvaluationRecord,
    recovered: EvaluationRecord,
    evidence: RecoveryEvidenceRecord,
    audit: AuditRecord,
}

/// Publishes `state` until `store` holds generation `generation`.
fn publish_through(store: &Path, state: &LogicalState, workers: u32, generation: u64) {
    for expected in 0..=generation {
        let summary = store::publish(
            store,
            state,
            Topology::new(workers).expect("topology"),
            &mut NoHooks,
        )
        .expect("publish");
        assert_eq!(summary.committed.generation, expected);
    }
}

fn run() -> Run {
    let template = common::committed_bundle();
    let reference: EvaluationRecord = decode(&template, REFERENCE_EVALUATION);
    let recovered: EvaluationRecord = decode(&template, RECOVERED_EVALUATION);
    let evidence: RecoveryEvidenceRecord = decode(&template, RECOVERY_EVIDENCE);
    let audit: AuditRecord = decode(&template, AUDIT);

    let scratch = tempfile::tempdir().expect("tempdir");
    let directory = scratch.path().join("run");
    std::fs::create_dir(&directory).expect("mkdir");
    let state = LogicalState::genesis(Hyperparameters::with_seed(11));
    let stores = RunStores::beside(&directory.join("bundle"));
    publish_through(
        &stores.reference,
        &state,
        evidence.reference_checkpoint.workers,
        evidence.reference_checkpoint.generation,
    );
    publish_through(
        &stores.crash,
        &state,
        evidence.final_checkpoint.workers,
        evidence.final_checkpoint.generation,
    );

    let (split, pins) = synthetic_split();
    let evaluation = evaluate(&state.flat_parameters(), SplitView::from(&split)).expect("evaluate");
    let replacements = [
        (reference.logical_state_root, state.logical_state_root()),
        (reference.ledger_digest, state.ledger_digest()),
    ];
    let figures = |record: &EvaluationRecord| {
        let mut record = replaced(record, &replacements);
        record.test_images_sha256 = pins.get(Resource::TestImages).payload.sha256;
        record.test_labels_sha256 = pins.get(Resource::TestLabels).payload.sha256;
        record.correct = evaluation.correct;
        record.total = evaluation.total;
        record.logit_probe_shape = [(evaluation.logit_probe.len() / 40) as u32, 10];
        record.logit_probe_f32le_hex = hex::encode(&evaluation.logit_probe);
        record.logit_probe_sha256 = evaluation.logit_probe_sha256;
        record
    };
    let mut audit = replaced(&audit, &replacements);
    audit.build.dataset_payload_sha256 = pins.resources.iter().map(|r| r.payload.sha256).collect();
    Run {
        reference: figures(&reference),
        recovered: figures(&recovered),
        evidence: replaced(&evidence, &replacements),
        audit,
        _scratch: scratch,
        directory,
        split,
        pins,
    }
}

impl Run {
    /// Installs the records (every binding recomputed) as the run's bundle.
    fn install(&self) -> PathBuf {
        let bundle = self.directory.join("bundle");
        bundle::install(
            &bundle,
            &self.reference,
            &self.recovered,
            self.evidence.clone(),
            self.audit.clone(),
        )
        .expect("install");
        bundle
    }

    /// Installs the bundle, verifies it (it must pass every torch-free check) and
    /// re-evaluates it; returns the re-evaluation and how often the split was loaded.
    fn reevaluated(&self) -> (Result<Reevaluation, BundleError>, u32) {
        let bundle = self.install();
        let verified = bundle::verify_pinned(&bundle, &self.pins).expect("verifies");
        let mut loads = 0;
        let result = reevaluate(&verified, &RunStores::beside(&bundle), &mut || {
            loads += 1;
            Ok(self.split.clone())
        });
        (result, loads)
    }
}

#[test]
fn both_checkpoints_are_evaluated_again_and_match() {
    let (result, loads) = run().reevaluated();
    let report = result.expect("re-evaluates");
    assert_eq!(
        report.reevaluated,
        [REFERENCE_EVALUATION, RECOVERED_EVALUATION]
    );
    assert!(report.not_reevaluated.is_empty() && report.complete());
    assert_eq!(loads, 1, "the split is loaded once");
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(
        json,
        serde_json::json!({
            "reevaluated": [REFERENCE_EVALUATION, RECOVERED_EVALUATION],
            "not_reevaluated": []
        })
    );
}

fn refusal(edit: impl FnOnce(&mut Run)) -> BundleError {
    let mut run = run();
    edit(&mut run);
    run.reevaluated().0.expect_err("the forgery re-evaluated")
}

#[test]
fn one_more_correct_answer_in_both_evaluations_is_refused() {
    // The two evaluations agree with each other (one state), so only the stores show it.
    let error = refusal(|run| {
        run.reference.correct += 1;
        run.recovered.correct += 1;
    });
    assert!(
        matches!(&error, BundleError::ReevaluationMismatch { name, field: "correct", .. } if *name == REFERENCE_EVALUATION),
        "{error}"
    );
    assert_eq!(error.kind(), "reevaluation-mismatch");
}

#[test]
fn other_probe_bytes_in_both_evaluations_are_refused() {
    let error = refusal(|run| {
        for record in [&mut run.reference, &mut run.recovered] {
            let mut probe = hex::decode(&record.logit_probe_f32le_hex).expect("hex");
            probe[5] ^= 0x01;
            record.logit_probe_f32le_hex = hex::encode(&probe);
            record.logit_probe_sha256 = Digest::of(&probe);
        }
    });
    assert!(
        matches!(
            &error,
            BundleError::ReevaluationMismatch {
                field: "logit_probe_f32le_hex",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_split_that_is_not_the_recorded_one_is_refused() {
    // The caller's split has one image fewer than the one the records (and pins) name.
    let error = refusal(|run| {
        run.split.count -= 1;
        run.split.images.truncate(run.split.count * 784);
        run.split.labels.truncate(run.split.count);
    });
    assert!(
        matches!(
            &error,
            BundleError::ReevaluationMismatch { field: "total", .. }
        ),
        "{error}"
    );
}

#[test]
fn a_store_holding_another_state_is_refused() {
    let error = refusal(|run| {
        let stores = RunStores::beside(&run.directory.join("bundle"));
        std::fs::remove_dir_all(&stores.crash).expect("rm");
        let other = LogicalState::genesis(Hyperparameters::with_seed(12));
        publish_through(
            &stores.crash,
            &other,
            run.evidence.final_checkpoint.workers,
            run.evidence.final_checkpoint.generation,
        );
    });
    assert!(
        matches!(
            &error,
            BundleError::StoreStateMismatch { name, store: "crash-store", field: "logical_state_root", .. }
                if *name == RECOVERED_EVALUATION
        ),
        "{error}"
    );
    assert_eq!(error.kind(), "store-state-mismatch");
}

#[test]
fn a_present_store_lacking_the_generation_is_refused() {
    let error = refusal(|run| {
        let stores = RunStores::beside(&run.directory.join("bundle"));
        std::fs::remove_dir_all(&stores.reference).expect("rm");
        let state = LogicalState::genesis(Hyperparameters::with_seed(11));
        publish_through(&stores.reference, &state, 4, 0);
    });
    assert!(
        matches!(
            &error,
            BundleError::StoreUnreadable {
                store: "reference-store",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.kind(), "store-unreadable");
}

#[test]
fn an_absent_store_is_reported_and_the_other_still_evaluated() {
    let run = run();
    std::fs::remove_dir_all(RunStores::beside(&run.directory.join("bundle")).crash).expect("rm");
    let report = run.reevaluated().0.expect("re-evaluates");
    assert_eq!(report.reevaluated, [REFERENCE_EVALUATION]);
    assert_eq!(report.not_reevaluated.len(), 1);
    assert_eq!(report.not_reevaluated[0].name, RECOVERED_EVALUATION);
    assert_eq!(report.not_reevaluated[0].reason, SkipReason::StoreAbsent);
    assert!(!report.complete());
}

#[test]
fn an_unloadable_test_split_is_reported_not_guessed() {
    let run = run();
    let bundle = run.install();
    let verified = bundle::verify_pinned(&bundle, &run.pins).expect("verifies");
    let mut loads = 0;
    let report = reevaluate(&verified, &RunStores::beside(&bundle), &mut || {
        loads += 1;
        Err(DatasetError::CachedFileMissing {
            name: "t10k-images-idx3-ubyte".into(),
            path: PathBuf::from("/nowhere"),
        })
    })
    .expect("reports");
    assert_eq!(loads, 1, "a failed load is not retried");
    assert!(report.reevaluated.is_empty());
    assert!(report
        .not_reevaluated
        .iter()
        .all(|n| n.reason == SkipReason::TestSplitUnavailable));
    assert_eq!(report.not_reevaluated.len(), 2);
    assert!(report.test_split_error.is_some());
    // The JSON names no path.
    let json = serde_json::to_string(&report).expect("json");
    assert!(!json.contains("/nowhere"), "{json}");
}
