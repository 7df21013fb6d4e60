//! Evaluating a verified bundle's checkpoints again from the run's stores.
//!
//! `killer-demo` leaves its two stores beside the bundle in the run directory
//! (`reference-store/`, `crash-store/`). Where a store is present, the generation an
//! evaluation record names is loaded from it (every object checked against its address),
//! its state must be the one the record states, and it is evaluated again on the pinned
//! test split: every recorded figure (correct count, total, probe bytes, and with them the
//! probe's shape and digest, checked against its bytes before) must be what the
//! evaluation gives. Each record is reported as re-evaluated only after its
//! comparisons ran; otherwise the report says why not (no torch engine in this build, its
//! store not beside the bundle, or the test split not loadable).
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{BundleError, VerifiedBundle};
use crate::dataset::{DatasetError, Split};

/// The reference store's name in a run directory.
pub const REFERENCE_STORE: &str = "reference-store";
/// The crash store's name in a run directory (absent when the run put its crash store on
/// an object store).
pub const CRASH_STORE: &str = "crash-store";

/// Where a run's two stores are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStores {
    /// The store of the uninterrupted reference: the reference evaluation's checkpoint.
    pub reference: PathBuf,
    /// The store the publisher was killed on: the recovered evaluation's checkpoint.
    pub crash: PathBuf,
}

impl RunStores {
    /// The stores as `killer-demo` lays them out: beside `bundle_directory`, in its parent
    /// (the run directory).
    pub fn beside(bundle_directory: &Path) -> Self {
        let run_directory = bundle_directory.parent().unwrap_or(bundle_directory);
        RunStores {
            reference: run_directory.join(REFERENCE_STORE),
            crash: run_directory.join(CRASH_STORE),
        }
    }
}

/// Why an evaluation record was not evaluated again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipReason {
    /// This build has no torch engine (built without the `torch` feature).
    NoTorchEngine,
    /// The record's store is not beside the bundle.
    StoreAbsent,
    /// The pinned test split could not be loaded (the error is in
    /// [`Reevaluation::test_split_error`]).
    TestSplitUnavailable,
}

impl SkipReason {
    /// The reason in words.
    pub fn describe(self) -> &'static str {
        match self {
            SkipReason::NoTorchEngine => {
                "this build has no torch engine (built without the torch feature)"
            }
            SkipReason::StoreAbsent => "its store is not beside the bundle",
            SkipReason::TestSplitUnavailable => "the pinned test split did not load",
        }
    }
}

/// An evaluation record that was not evaluated again, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NotReevaluated {
    /// The record's file name.
    pub name: &'static str,
    /// Why.
    pub reason: SkipReason,
}

/// What re-evaluation did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reevaluation {
    /// The records whose checkpoints were loaded, evaluated again and found to match
    /// every recorded figure, in bundle order.
    pub reevaluated: Vec<&'static str>,
    /// The records not evaluated again, with the reason.
    pub not_reevaluated: Vec<NotReevaluated>,
    /// Why the test split did not load, when it did not (it may name a path, so it is
    /// not part of the JSON record).
    #[serde(skip)]
    pub test_split_error: Option<String>,
}

impl Reevaluation {
    /// Every evaluation record was evaluated again and matched.
    pub fn complete(&self) -> bool {
        self.not_reevaluated.is_empty() && !self.reevaluated.is_empty()
    }
}

/// Evaluates the checkpoints `verified`'s evaluation records name again, each from its
/// store in `stores` where that store is present, on the split `test_split` loads (called
/// at most once, and only when a store is present). The split must be the one the
/// verification's pins named. A present store whose generation does not load, a loaded
/// state that is not the recorded one, or a figure that differs is an error.
#[cfg(feature = "torch")]
pub fn reevaluate(
    verified: &VerifiedBundle,
    stores: &RunStores,
    test_split: &mut dyn FnMut() -> Result<Split, DatasetError>,
) -> Result<Reevaluation, BundleError> {
    use super::{RECOVERED_EVALUATION, REFERENCE_EVALUATION};

    let mut report = Reevaluation::default();
    let mut split: Option<Split> = None;
    for (name, record, store_name, store) in [
        (
            REFERENCE_EVALUATION,
            &verified.reference,
            REFERENCE_STORE,
            &stores.reference,
        ),
        (
            RECOVERED_EVALUATION,
            &verified.recovered,
            CRASH_STORE,
            &stores.crash,
        ),
    ] {
        let skip = |reason| NotReevaluated { name, reason };
        if matches!(store.symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            report.not_reevaluated.push(skip(SkipReason::StoreAbsent));
            continue;
        }
        if split.is_none() && report.test_split_error.is_none() {
            match test_split() {
                Ok(loaded) => split = Some(loaded),
                Err(error) => report.test_split_error = Some(error.to_string()),
            }
        }
        let Some(split) = split.as_ref() else {
            report
                .not_reevaluated
                .push(skip(SkipReason::TestSplitUnavailable));
            continue;
        };
        reevaluate_one(name, record, store_name, store, split)?;
        report.reevaluated.push(name);
    }
    Ok(report)
}

/// Without the torch engine nothing can be evaluated: every record is reported as not
/// re-evaluated, and nothing is read.
#[cfg(not(feature = "torch"))]
pub fn reevaluate(
    _verified: &VerifiedBundle,
    _stores: &RunStores,
    _test_split: &mut dyn FnMut() -> Result<Split, DatasetError>,
) -> Result<Reevaluation, BundleError> {
    Ok(Reevaluation {
        reevaluated: Vec::new(),
        not_reevaluated: [super::REFERENCE_EVALUATION, super::RECOVERED_EVALUATION]
            .into_iter()
            .map(|name| NotReevaluated {
                name,
                reason: SkipReason::NoTorchEngine,
            })
            .collect(),
        test_split_error: None,
    })
}

/// Loads `record`'s generation from `store`, checks that it is the recorded state, and
/// compares a fresh evaluation of it on `split` with every recorded figure.
#[cfg(feature = "torch")]
fn reevaluate_one(
    name: &'static str,
    record: &super::EvaluationRecord,
    store_name: &'static str,
    store: &Path,
    split: &Split,
) -> Result<(), BundleError> {
    use crate::core::digest::Digest;

    let generation = record
        .generation
        .ok_or_else(|| BundleError::Inconsistent(format!("{name} names no generation to load")))?;
    let (state, _) = crate::store::load_generation(store, generation).map_err(|source| {
        BundleError::StoreUnreadable {
            store: store_name,
            generation,
            source: Box::new(source),
        }
    })?;
    for (field, recorded, loaded) in [
        (
            "logical_state_root",
            record.logical_state_root,
            state.logical_state_root(),
        ),
        ("ledger_digest", record.ledger_digest, state.ledger_digest()),
    ] {
        if recorded != loaded {
            return Err(BundleError::StoreStateMismatch {
                name,
                store: store_name,
                generation,
                field,
                recorded: recorded.to_hex(),
                loaded: loaded.to_hex(),
            });
        }
    }
    let evaluation =
        crate::engine::evaluate(&state.flat_parameters(), split.into()).map_err(|error| {
            BundleError::ReevaluationFailed {
                name,
                message: error.to_string(),
            }
        })?;
    let probe = |sha256: Digest| format!("probe bytes with SHA-256 {sha256}");
    let checks = [
        (
            "total",
            record.total == evaluation.total,
            record.total.to_string(),
            evaluation.total.to_string(),
        ),
        (
            "correct",
            record.correct == evaluation.correct,
            record.correct.to_string(),
            evaluation.correct.to_string(),
        ),
        (
            "logit_probe_f32le_hex",
            record.logit_probe_f32le_hex == hex::encode(&evaluation.logit_probe),
            probe(record.logit_probe_sha256),
            probe(evaluation.logit_probe_sha256),
        ),
    ];
    for (field, equal, recorded, reevaluated) in checks {
        if !equal {
            return Err(BundleError::ReevaluationMismatch {
                name,
                field,
                recorded,
                reevaluated,
            });
        }
    }
    Ok(())
}
