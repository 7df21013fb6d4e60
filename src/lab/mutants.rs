//! Mutants: deliberately broken writers and recoveries that the crash model must catch. A
//! model that lets a mutant through has a hole, so a surviving mutant fails the crash
//! matrix.
//!
//! Each writer mutant breaks one rule of RFC 0001 §4 (an fsync dropped, a rename moved, a
//! record written in place, an order swapped, a non-durable directory trusted) and runs
//! the power-loss model on the scenarios that exercise its step — a genesis publish, a
//! publish over a committed generation, and (for the directory-reuse mutant) a publish
//! into a layout a killed writer left non-durable, or (for the found-object mutants) a
//! publish over a killed writer's non-durable objects of the same state. Each recovery
//! mutant breaks one rule of §5 (trusting LATEST, skipping object digests) and runs those
//! scenarios and the corruption cases. A mutant is killed by at least one violation.
use serde::Serialize;

use crate::lab::error::LabError;
use crate::lab::matrix::{
    corruption_phase, matrix_states, power_loss_scenario, Action, CheckPlan, MatrixConfig,
    ModelFaults,
};
use crate::lab::powerloss::KilledWriterFiles;
use crate::store::recovery::RecoveryFaults;
use crate::store::writer::WriterFaults;

/// A mutant run stops checking once it has this many violations to show (one kills it).
pub const MUTANT_VIOLATIONS_REPORTED: usize = 10;

/// One deliberately broken writer or recovery.
#[derive(Clone, Copy, Debug)]
pub struct Mutant {
    /// Its name (as `--mutant` takes it).
    pub name: &'static str,
    /// The rule of RFC 0001 it breaks.
    pub breaks: &'static str,
    /// The faults that make it.
    pub faults: ModelFaults,
    /// Whether it needs a starting image with non-durable directories.
    pub needs_killed_layout: bool,
    /// Whether it needs a store holding a killed writer's non-durable objects of the state
    /// it publishes, and what that writer had synced of them.
    pub needs_killed_objects: Option<KilledWriterFiles>,
}

const fn mutant(name: &'static str, breaks: &'static str, writer: WriterFaults) -> Mutant {
    Mutant {
        name,
        breaks,
        faults: ModelFaults {
            writer,
            recovery: RecoveryFaults::NONE,
        },
        needs_killed_layout: false,
        needs_killed_objects: None,
    }
}

/// A writer mutant run over a killed writer's objects (see [`Mutant::needs_killed_objects`]).
const fn killed_objects_mutant(
    name: &'static str,
    breaks: &'static str,
    writer: WriterFaults,
    files: KilledWriterFiles,
) -> Mutant {
    Mutant {
        needs_killed_objects: Some(files),
        ..mutant(name, breaks, writer)
    }
}

const fn recovery_mutant(
    name: &'static str,
    breaks: &'static str,
    recovery: RecoveryFaults,
) -> Mutant {
    Mutant {
        name,
        breaks,
        faults: ModelFaults {
            writer: WriterFaults::NONE,
            recovery,
        },
        needs_killed_layout: false,
        needs_killed_objects: None,
    }
}

const N: WriterFaults = WriterFaults::NONE;

/// The registry, in protocol order: writer mutants, then recovery mutants.
pub const MUTANTS: [Mutant; 18] = [
    mutant(
        "skip-layout-fsync",
        "the store root and its parent are fsynced after the layout is created",
        WriterFaults {
            skip_layout_fsync: true,
            ..N
        },
    ),
    Mutant {
        name: "reuse-non-durable-directory",
        breaks: "every directory a publish relies on is made durable, whoever created it",
        faults: ModelFaults {
            writer: WriterFaults {
                trust_existing_directories: true,
                ..N
            },
            recovery: RecoveryFaults::NONE,
        },
        needs_killed_layout: true,
        needs_killed_objects: None,
    },
    killed_objects_mutant(
        "skip-found-object-fsync",
        "an object found at its address is fsynced before the commit relies on it",
        WriterFaults {
            skip_found_object_fsync: true,
            ..N
        },
        KilledWriterFiles::NothingSynced,
    ),
    killed_objects_mutant(
        "skip-found-object-directory-fsync",
        "the fan-out directory of an object found at its address is fsynced (step 4)",
        WriterFaults {
            skip_found_object_directory_fsync: true,
            ..N
        },
        KilledWriterFiles::DataSynced,
    ),
    mutant(
        "skip-objects-directory-fsync",
        "objects/ is fsynced before an object is renamed into a new fan-out directory",
        WriterFaults {
            skip_objects_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-object-file-fsync",
        "an object's temp file is fsynced before its rename",
        WriterFaults {
            skip_object_file_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-object-directory-fsync",
        "the fan-out directory is fsynced after an object's rename",
        WriterFaults {
            skip_object_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-manifest-file-fsync",
        "the manifest's temp file is fsynced before its rename",
        WriterFaults {
            skip_manifest_file_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-manifest-directory-fsync",
        "the fan-out directory is fsynced after the manifest's rename",
        WriterFaults {
            skip_manifest_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "objects-durable-after-commit",
        "every object is durable before the commit record is installed",
        WriterFaults {
            objects_durable_after_commit: true,
            ..N
        },
    ),
    mutant(
        "skip-commit-file-fsync",
        "the commit record's temp file is fsynced before its rename",
        WriterFaults {
            skip_commit_file_fsync: true,
            ..N
        },
    ),
    mutant(
        "commit-rename-before-fsync",
        "the commit record is renamed into commits/ only after its data is durable",
        WriterFaults {
            commit_rename_before_fsync: true,
            ..N
        },
    ),
    mutant(
        "commit-written-in-place",
        "the commit record appears in commits/ only by a rename of a complete temp file",
        WriterFaults {
            commit_written_in_place: true,
            ..N
        },
    ),
    mutant(
        "skip-commits-directory-fsync",
        "commits/ is fsynced after the commit record's rename",
        WriterFaults {
            skip_commit_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "latest-before-commit",
        "LATEST advances only after the commit record is durable",
        WriterFaults {
            latest_before_commit_rename: true,
            ..N
        },
    ),
    mutant(
        "skip-latest-file-fsync",
        "LATEST's temp file is fsynced before it replaces refs/LATEST",
        WriterFaults {
            skip_latest_file_fsync: true,
            ..N
        },
    ),
    recovery_mutant(
        "recovery-trusts-latest",
        "recovery selects by scanning commits/, never by trusting LATEST",
        RecoveryFaults {
            trust_latest: true,
            skip_object_digests: false,
        },
    ),
    recovery_mutant(
        "recovery-skips-object-digests",
        "recovery hashes every object it selects against its address",
        RecoveryFaults {
            trust_latest: false,
            skip_object_digests: true,
        },
    ),
];

/// The mutant called `name`.
pub fn find(name: &str) -> Option<&'static Mutant> {
    MUTANTS.iter().find(|m| m.name == name)
}

/// What the model found against one mutant.
#[derive(Clone, Debug, Serialize)]
pub struct MutantOutcome {
    /// The mutant's name.
    pub name: &'static str,
    /// The rule it breaks.
    pub breaks: &'static str,
    /// Distinct power-loss states checked.
    pub crash_states: u64,
    /// Corruption cases checked (recovery mutants only).
    pub corruption_cases: u64,
    /// Whether any violation was found (the model caught it).
    pub killed: bool,
    /// The violations found (checking stops once [`MUTANT_VIOLATIONS_REPORTED`] are in).
    pub violations: Vec<String>,
}

/// Runs the power-loss model against `mutant` (at most `max_states_per_scenario` crash
/// states per scenario, evenly sampled, as the matrix samples them).
pub fn run_mutant(mutant: &Mutant, config: &MatrixConfig) -> Result<MutantOutcome, LabError> {
    let (a, b) = matrix_states(config.seed);
    let four = crate::core::topology::Topology::new(4)?;
    let base = crate::lab::matrix::scratch_dir()?;
    let base_root = base.path().join("store");
    crate::store::publish(&base_root, &a, four, &mut crate::store::NoHooks)?;
    let mut scenarios = vec![
        (None, Action::Publish(Box::new(a.clone()), four)),
        (
            Some(base_root.as_path()),
            Action::Publish(Box::new(b.clone()), four),
        ),
    ];
    if let Some(files) = mutant.needs_killed_objects {
        scenarios.push((
            Some(base_root.as_path()),
            crate::lab::matrix::over_killed_objects(config.seed, files)?,
        ));
    }
    if mutant.needs_killed_layout {
        scenarios.push((None, Action::PublishOverKilledLayout(Box::new(a), four)));
    }
    let mut outcome = MutantOutcome {
        name: mutant.name,
        breaks: mutant.breaks,
        crash_states: 0,
        corruption_cases: 0,
        killed: false,
        violations: Vec::new(),
    };
    for (from, action) in &scenarios {
        let scenario = power_loss_scenario(
            *from,
            action,
            mutant.faults,
            crate::lab::matrix::limits_for(action, config.seed),
            CheckPlan {
                max_states: config.max_states_per_scenario,
                threads: config.threads,
                stop_after_violations: Some(MUTANT_VIOLATIONS_REPORTED),
            },
        )?;
        outcome.crash_states += scenario.states_checked;
        outcome.violations.extend(scenario.violations);
        if outcome.violations.len() >= MUTANT_VIOLATIONS_REPORTED {
            break;
        }
    }
    if mutant.faults.recovery != RecoveryFaults::NONE
        && outcome.violations.len() < MUTANT_VIOLATIONS_REPORTED
    {
        let work = crate::lab::matrix::scratch_dir()?;
        let corruption = corruption_phase(
            &work.path().join("corrupt-base"),
            config,
            mutant.faults.recovery,
            &mut crate::core::progress::NoProgress,
        )?;
        outcome.corruption_cases = corruption.count;
        outcome.violations.extend(corruption.violations);
    }
    outcome.killed = !outcome.violations.is_empty();
    Ok(outcome)
}

/// Every mutant's fate: the crash matrix fails while any survives.
#[derive(Clone, Debug, Serialize)]
pub struct MutantTally {
    /// Mutants run.
    pub total: u64,
    /// Mutants killed.
    pub killed: u64,
    /// Names of the mutants that survived (none, or the matrix fails).
    pub survived: Vec<&'static str>,
    /// Per mutant: how many crash states were checked and the first violation found.
    pub details: Vec<MutantDetail>,
}

/// One line of [`MutantTally`].
#[derive(Clone, Debug, Serialize)]
pub struct MutantDetail {
    /// The mutant's name.
    pub name: &'static str,
    /// The rule of RFC 0001 it breaks.
    pub breaks: &'static str,
    /// Distinct power-loss states checked.
    pub crash_states: u64,
    /// Corruption cases checked (recovery mutants only).
    pub corruption_cases: u64,
    /// Violations found.
    pub violations: u64,
    /// The first of them.
    pub first_violation: Option<String>,
}

/// Runs every registered mutant, with progress on stderr.
pub fn run_all(
    config: &MatrixConfig,
    progress: &mut dyn crate::core::progress::Progress,
) -> Result<MutantTally, LabError> {
    let mut tally = MutantTally {
        total: MUTANTS.len() as u64,
        killed: 0,
        survived: Vec::new(),
        details: Vec::new(),
    };
    progress.phase("crash-matrix: writer mutants", Some(MUTANTS.len() as u64));
    for (index, mutant) in MUTANTS.iter().enumerate() {
        let outcome = run_mutant(mutant, config)?;
        progress.advance(index as u64 + 1);
        if outcome.killed {
            tally.killed += 1;
        } else {
            tally.survived.push(mutant.name);
        }
        tally.details.push(MutantDetail {
            name: mutant.name,
            breaks: mutant.breaks,
            crash_states: outcome.crash_states,
            corruption_cases: outcome.corruption_cases,
            violations: outcome.violations.len() as u64,
            first_violation: outcome.violations.into_iter().next(),
        });
    }
    progress.finish();
    Ok(tally)
}
