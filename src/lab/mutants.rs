//! Mutants: deliberately broken writers and recoveries that the crash model must catch. A
//! model that lets a mutant through has a hole, so a surviving mutant fails the crash
//! matrix.
//!
//! Each writer mutant breaks one rule of RFC 0001 §4 (an fsync dropped, a rename moved or
//! made replacing, a record written in place, an order swapped, a non-durable directory or
//! an unchecked object trusted) and runs the power-loss model on the scenarios that
//! exercise its step ([`MutantScenario`]). Each recovery mutant breaks one rule of §5
//! (trusting LATEST, skipping object digests) and runs the publish scenarios and the
//! corruption cases. Every mutant names the invariant it must break
//! ([`Mutant::expected_invariant`]); it is killed only by a violation of that invariant,
//! so a model that catches it by accident, through another check, does not count.
use serde::Serialize;

use crate::lab::error::LabError;
use crate::lab::matrix::{
    corruption_phase, matrix_states, power_loss_scenario, Action, CheckPlan, Invariant,
    MatrixConfig, ModelFaults, Violation,
};
use crate::lab::powerloss::KilledWriterFiles;
use crate::lab::recovery_mutants::RecoveryFaults;
use crate::lab::writer_mutants::WriterFaults;

/// A mutant run stops checking once it has this many violations of its expected
/// invariant to show (one kills it).
pub const MUTANT_VIOLATIONS_REPORTED: usize = 10;

/// A power-loss scenario a mutant runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MutantScenario {
    /// A genesis publish of the matrix's state A.
    Genesis,
    /// State B published over generation 0 (state A).
    OverGeneration0,
    /// A genesis publish through the bare relative root `store`.
    GenesisBareRelativeRoot,
    /// A genesis publish into a layout a killed writer left non-durable.
    OverKilledLayout,
    /// A publish over generation 0 onto a killed writer's non-durable objects of the same
    /// state, with what that writer had synced of them.
    OverKilledObjects(KilledWriterFiles),
    /// A publish over generation 0 onto wrong bytes at one of its objects' addresses.
    OverWrongBytes,
    /// Two writers racing for generation 1 over generation 0.
    TwoWritersRacing,
    /// A LATEST repair after a writer killed between its commit rename and its
    /// `commits/` fsync.
    RepairAfterKilledCommit,
}

/// One deliberately broken writer or recovery.
#[derive(Clone, Copy, Debug)]
pub struct Mutant {
    /// Its name (as `--mutant` takes it).
    pub name: &'static str,
    /// The rule of RFC 0001 it breaks.
    pub breaks: &'static str,
    /// The invariant it must be seen to break: only a violation of it kills the mutant.
    pub expected_invariant: Invariant,
    /// The faults that make it.
    pub faults: ModelFaults,
    /// The power-loss scenarios it runs on, in order.
    pub scenarios: &'static [MutantScenario],
}

/// The scenarios of most writer mutants: a genesis publish and one over generation 0.
const PUBLISHES: &[MutantScenario] = &[MutantScenario::Genesis, MutantScenario::OverGeneration0];

const fn mutant(
    name: &'static str,
    breaks: &'static str,
    expected_invariant: Invariant,
    writer: WriterFaults,
) -> Mutant {
    Mutant {
        name,
        breaks,
        expected_invariant,
        faults: ModelFaults {
            writer,
            recovery: RecoveryFaults::NONE,
        },
        scenarios: PUBLISHES,
    }
}

/// A writer mutant run on `scenarios` instead of the two publishes.
const fn mutant_on(
    name: &'static str,
    breaks: &'static str,
    expected_invariant: Invariant,
    writer: WriterFaults,
    scenarios: &'static [MutantScenario],
) -> Mutant {
    Mutant {
        scenarios,
        ..mutant(name, breaks, expected_invariant, writer)
    }
}

const fn recovery_mutant(
    name: &'static str,
    breaks: &'static str,
    expected_invariant: Invariant,
    recovery: RecoveryFaults,
) -> Mutant {
    Mutant {
        name,
        breaks,
        expected_invariant,
        faults: ModelFaults {
            writer: WriterFaults::NONE,
            recovery,
        },
        scenarios: PUBLISHES,
    }
}

const N: WriterFaults = WriterFaults::NONE;

/// The registry, in protocol order: writer mutants, then recovery mutants.
pub const MUTANTS: [Mutant; 23] = [
    mutant(
        "skip-layout-fsync",
        "the store root and its parent are fsynced after the layout is created",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_layout_fsync: true,
            ..N
        },
    ),
    mutant_on(
        "skip-root-parent-fsync",
        "the store root's parent (\".\" for a bare relative root) is fsynced, so the root's \
         own entry is durable",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_root_parent_fsync: true,
            ..N
        },
        &[
            MutantScenario::GenesisBareRelativeRoot,
            MutantScenario::Genesis,
        ],
    ),
    mutant_on(
        "reuse-non-durable-directory",
        "every directory a publish relies on is made durable, whoever created it",
        Invariant::CommittedNotLost,
        WriterFaults {
            trust_existing_directories: true,
            ..N
        },
        &[
            MutantScenario::Genesis,
            MutantScenario::OverGeneration0,
            MutantScenario::OverKilledLayout,
        ],
    ),
    mutant_on(
        "skip-found-object-fsync",
        "an object found at its address is fsynced before the commit relies on it",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_found_object_fsync: true,
            ..N
        },
        &[
            MutantScenario::Genesis,
            MutantScenario::OverGeneration0,
            MutantScenario::OverKilledObjects(KilledWriterFiles::NothingSynced),
        ],
    ),
    mutant_on(
        "skip-found-object-directory-fsync",
        "the fan-out directory of an object found at its address is fsynced (step 4)",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_found_object_directory_fsync: true,
            ..N
        },
        &[
            MutantScenario::Genesis,
            MutantScenario::OverGeneration0,
            MutantScenario::OverKilledObjects(KilledWriterFiles::DataSynced),
        ],
    ),
    mutant_on(
        "trust-found-object-bytes",
        "an object found at its address is kept only if its bytes verify, else replaced",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_found_object_check: true,
            ..N
        },
        &[MutantScenario::OverWrongBytes],
    ),
    mutant(
        "skip-objects-directory-fsync",
        "objects/ is fsynced before an object is renamed into a new fan-out directory",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_objects_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-object-file-fsync",
        "an object's temp file is fsynced before its rename",
        Invariant::CompleteBytesVisible,
        WriterFaults {
            skip_object_file_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-object-directory-fsync",
        "the fan-out directory is fsynced after an object's rename",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_object_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-manifest-file-fsync",
        "the manifest's temp file is fsynced before its rename",
        Invariant::CompleteBytesVisible,
        WriterFaults {
            skip_manifest_file_fsync: true,
            ..N
        },
    ),
    mutant(
        "skip-manifest-directory-fsync",
        "the fan-out directory is fsynced after the manifest's rename",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_manifest_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "objects-durable-after-commit",
        "every object is durable before the commit record is installed",
        Invariant::CommittedNotLost,
        WriterFaults {
            objects_durable_after_commit: true,
            ..N
        },
    ),
    mutant(
        "skip-commit-file-fsync",
        "the commit record's temp file is fsynced before its rename",
        Invariant::CompleteBytesVisible,
        WriterFaults {
            skip_commit_file_fsync: true,
            ..N
        },
    ),
    mutant(
        "commit-rename-before-fsync",
        "the commit record is renamed into commits/ only after its data is durable",
        Invariant::CompleteBytesVisible,
        WriterFaults {
            commit_rename_before_fsync: true,
            ..N
        },
    ),
    mutant(
        "commit-written-in-place",
        "the commit record appears in commits/ only by a rename of a complete temp file",
        Invariant::CompleteBytesVisible,
        WriterFaults {
            commit_written_in_place: true,
            ..N
        },
    ),
    mutant_on(
        "commit-rename-replaces",
        "the commit record is installed with a rename that never replaces",
        Invariant::CommittedNotLost,
        WriterFaults {
            commit_rename_replaces: true,
            ..N
        },
        &[MutantScenario::TwoWritersRacing],
    ),
    mutant(
        "skip-commits-directory-fsync",
        "commits/ is fsynced after the commit record's rename",
        Invariant::CommittedNotLost,
        WriterFaults {
            skip_commit_directory_fsync: true,
            ..N
        },
    ),
    mutant(
        "latest-before-commit",
        "LATEST advances only after the commit record is durable",
        Invariant::LatestNeverAheadOrGarbage,
        WriterFaults {
            latest_before_commit_rename: true,
            ..N
        },
    ),
    mutant(
        "skip-latest-file-fsync",
        "LATEST's temp file is fsynced before it replaces refs/LATEST",
        Invariant::LatestNeverAheadOrGarbage,
        WriterFaults {
            skip_latest_file_fsync: true,
            ..N
        },
    ),
    mutant_on(
        "skip-latest-directory-fsync",
        "refs/ is fsynced after LATEST's rename",
        Invariant::LatestDurableAfterItsFsync,
        WriterFaults {
            skip_latest_directory_fsync: true,
            ..N
        },
        &[MutantScenario::OverGeneration0],
    ),
    mutant_on(
        "repair-without-commits-fsync",
        "a LATEST repair fsyncs commits/ before LATEST names a generation",
        Invariant::LatestNeverAheadOrGarbage,
        WriterFaults {
            repair_without_commits_fsync: true,
            ..N
        },
        &[MutantScenario::RepairAfterKilledCommit],
    ),
    recovery_mutant(
        "recovery-trusts-latest",
        "recovery selects by scanning commits/, never by trusting LATEST",
        Invariant::LatestNeverChangesTheAnswer,
        RecoveryFaults {
            trust_latest: true,
            skip_object_digests: false,
        },
    ),
    recovery_mutant(
        "recovery-skips-object-digests",
        "recovery hashes every object it selects against its address",
        Invariant::SelectedGenerationLoads,
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
    /// The invariant it must be seen to break.
    pub expected_invariant: Invariant,
    /// The scenarios it ran on, in order (it stops once it has
    /// [`MUTANT_VIOLATIONS_REPORTED`] violations of its expected invariant).
    pub scenarios_run: Vec<MutantScenario>,
    /// Distinct power-loss states checked.
    pub crash_states: u64,
    /// Corruption cases checked (recovery mutants only).
    pub corruption_cases: u64,
    /// Whether the model caught it: a violation of its expected invariant was found.
    pub killed: bool,
    /// The violations of its expected invariant (the ones that killed it).
    pub killed_by: Vec<Violation>,
    /// Every violation found, of any invariant.
    pub violations: Vec<Violation>,
}

/// The action and the base (none: an empty store) of a mutant's scenario.
fn scenario_action<'b>(
    scenario: MutantScenario,
    config: &MatrixConfig,
    base_root: &'b std::path::Path,
) -> Result<(Option<&'b std::path::Path>, Action), LabError> {
    let (a, b) = matrix_states(config.seed);
    let four = crate::core::topology::Topology::new(4)?;
    Ok(match scenario {
        MutantScenario::Genesis => (None, Action::Publish(Box::new(a), four)),
        MutantScenario::OverGeneration0 => (Some(base_root), Action::Publish(Box::new(b), four)),
        MutantScenario::GenesisBareRelativeRoot => {
            (None, Action::PublishBareRelativeRoot(Box::new(a), four))
        }
        MutantScenario::OverKilledLayout => {
            (None, Action::PublishOverKilledLayout(Box::new(a), four))
        }
        MutantScenario::OverKilledObjects(files) => (
            Some(base_root),
            crate::lab::matrix::over_killed_objects(config.seed, files)?,
        ),
        MutantScenario::OverWrongBytes => (
            Some(base_root),
            crate::lab::matrix::over_wrong_bytes(config.seed)?,
        ),
        MutantScenario::TwoWritersRacing => (
            Some(base_root),
            crate::lab::matrix::two_writers_racing(config.seed)?,
        ),
        MutantScenario::RepairAfterKilledCommit => (
            Some(base_root),
            crate::lab::matrix::repair_after_killed_commit(config.seed)?,
        ),
    })
}

/// Runs the power-loss model against `mutant` (at most `max_states_per_scenario` crash
/// states per scenario, evenly sampled, as the matrix samples them), scenario after
/// scenario until [`MUTANT_VIOLATIONS_REPORTED`] violations of its expected invariant
/// are in; a recovery mutant then runs the corruption cases too, unless killed already.
pub fn run_mutant(mutant: &Mutant, config: &MatrixConfig) -> Result<MutantOutcome, LabError> {
    let (a, _) = matrix_states(config.seed);
    let four = crate::core::topology::Topology::new(4)?;
    let base = crate::lab::matrix::scratch_dir()?;
    let base_root = base.path().join("store");
    crate::store::publish(&base_root, &a, four, &mut crate::store::NoHooks)?;
    let mut outcome = MutantOutcome {
        name: mutant.name,
        breaks: mutant.breaks,
        expected_invariant: mutant.expected_invariant,
        scenarios_run: Vec::new(),
        crash_states: 0,
        corruption_cases: 0,
        killed: false,
        killed_by: Vec::new(),
        violations: Vec::new(),
    };
    let expected = mutant.expected_invariant;
    let enough = |outcome: &MutantOutcome| outcome.killed_by.len() >= MUTANT_VIOLATIONS_REPORTED;
    for &scenario in mutant.scenarios {
        let (from, action) = scenario_action(scenario, config, &base_root)?;
        let result = power_loss_scenario(
            from,
            &action,
            mutant.faults,
            crate::lab::matrix::limits_for(&action, config.seed),
            CheckPlan {
                max_states: config.max_states_per_scenario,
                threads: config.threads,
                stop_after_violations: Some(MUTANT_VIOLATIONS_REPORTED),
                stop_counting: Some(expected),
            },
        )?;
        outcome.scenarios_run.push(scenario);
        outcome.crash_states += result.states_checked;
        outcome.violations.extend(result.violations);
        outcome.killed_by = expected_violations(&outcome.violations, expected);
        if enough(&outcome) {
            break;
        }
    }
    if mutant.faults.recovery != RecoveryFaults::NONE && !enough(&outcome) {
        let work = crate::lab::matrix::scratch_dir()?;
        let corruption = corruption_phase(
            &work.path().join("corrupt-base"),
            config,
            mutant.faults.recovery,
            &mut crate::core::progress::NoProgress,
        )?;
        outcome.corruption_cases = corruption.count;
        outcome.violations.extend(corruption.violations);
        outcome.killed_by = expected_violations(&outcome.violations, expected);
    }
    outcome.killed = !outcome.killed_by.is_empty();
    Ok(outcome)
}

/// The violations of `expected` among `violations`, at most
/// [`MUTANT_VIOLATIONS_REPORTED`].
fn expected_violations(violations: &[Violation], expected: Invariant) -> Vec<Violation> {
    violations
        .iter()
        .filter(|v| v.invariant == expected)
        .take(MUTANT_VIOLATIONS_REPORTED)
        .cloned()
        .collect()
}

/// Every mutant's fate: the crash matrix fails while any survives.
#[derive(Clone, Debug, Serialize)]
pub struct MutantTally {
    /// Mutants run.
    pub total: u64,
    /// Mutants killed (by a violation of their expected invariant).
    pub killed: u64,
    /// Names of the mutants that survived (none, or the matrix fails).
    pub survived: Vec<&'static str>,
    /// Per mutant: its expected invariant, what was checked and the violations that
    /// killed it.
    pub details: Vec<MutantDetail>,
}

/// One line of [`MutantTally`].
#[derive(Clone, Debug, Serialize)]
pub struct MutantDetail {
    /// The mutant's name.
    pub name: &'static str,
    /// The rule of RFC 0001 it breaks.
    pub breaks: &'static str,
    /// The invariant it must be seen to break.
    pub expected_invariant: Invariant,
    /// The scenarios it ran on.
    pub scenarios_run: Vec<MutantScenario>,
    /// Distinct power-loss states checked.
    pub crash_states: u64,
    /// Corruption cases checked (recovery mutants only).
    pub corruption_cases: u64,
    /// Violations found, of any invariant.
    pub violations: u64,
    /// The violations of its expected invariant that killed it (none: it survived).
    pub killed_by: Vec<Violation>,
    /// The invariants every violation found broke, each once, in order.
    pub invariants_violated: Vec<Invariant>,
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
        let invariants_violated: Vec<Invariant> = outcome
            .violations
            .iter()
            .map(|v| v.invariant)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        tally.details.push(MutantDetail {
            name: mutant.name,
            breaks: mutant.breaks,
            expected_invariant: mutant.expected_invariant,
            scenarios_run: outcome.scenarios_run,
            crash_states: outcome.crash_states,
            corruption_cases: outcome.corruption_cases,
            violations: outcome.violations.len() as u64,
            killed_by: outcome.killed_by,
            invariants_violated,
        });
    }
    progress.finish();
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_mutant_runs_somewhere() {
        let mut names = std::collections::BTreeSet::new();
        for mutant in &MUTANTS {
            assert!(names.insert(mutant.name), "{} twice", mutant.name);
            assert!(!mutant.scenarios.is_empty(), "{}", mutant.name);
        }
    }

    #[test]
    fn a_mutant_is_killed_only_by_its_expected_invariant() {
        // The dropped refs/ fsync breaks LATEST's durability and nothing else: told to
        // expect another invariant, the same mutant survives, violations and all.
        let Some(real) = find("skip-latest-directory-fsync") else {
            panic!("registered");
        };
        let config = MatrixConfig {
            threads: 2,
            ..MatrixConfig::default()
        };
        let killed = run_mutant(real, &config).expect("run");
        assert!(killed.killed);
        assert!(killed
            .killed_by
            .iter()
            .all(|v| v.invariant == Invariant::LatestDurableAfterItsFsync));
        let mislabelled = Mutant {
            expected_invariant: Invariant::CommittedNotLost,
            ..*real
        };
        let survived = run_mutant(&mislabelled, &config).expect("run");
        assert!(!survived.killed);
        assert!(survived.killed_by.is_empty());
        assert!(!survived.violations.is_empty());
    }

    #[test]
    fn the_new_writer_mutants_are_killed_by_their_expected_invariant() {
        let config = MatrixConfig {
            threads: 2,
            ..MatrixConfig::default()
        };
        for name in [
            "skip-root-parent-fsync",
            "trust-found-object-bytes",
            "commit-rename-replaces",
            "repair-without-commits-fsync",
        ] {
            let Some(mutant) = find(name) else {
                panic!("{name} is registered");
            };
            let outcome = run_mutant(mutant, &config).expect("run");
            assert!(outcome.killed, "{name}: {:#?}", outcome.violations);
            assert!(outcome
                .killed_by
                .iter()
                .all(|v| v.invariant == mutant.expected_invariant));
        }
    }
}
