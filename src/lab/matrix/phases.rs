//! The matrix's three phases run over their cases, with their tallies.
use super::*;

/// Counts of one power-loss scenario.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioFigures {
    /// The scenario's name.
    pub name: &'static str,
    /// See [`ScenarioOutcome::trace_operations`].
    pub trace_operations: u64,
    /// See [`ScenarioOutcome::crash_images`].
    pub crash_images: u64,
    /// See [`ScenarioOutcome::distinct_states`].
    pub distinct_states: u64,
    /// See [`ScenarioOutcome::states_checked`].
    pub states_checked: u64,
    /// Whether some crash point had more pending operations than the enumeration limit,
    /// so its subsets were sampled (prefixes, all-but-one, seeded samples), not all
    /// applied: the scenario's enumeration is then not exhaustive.
    pub sampled: bool,
    /// The limit: every subset is applied where at most this many operations are pending.
    pub all_subsets_up_to: u64,
    /// Most operations pending at one crash point.
    pub max_pending: u64,
    /// Distinct subsets of pending operations applied, summed over the crash points.
    pub subsets_checked: u64,
    /// Subsets there are (2^pending per crash point), summed over the crash points,
    /// saturating at `u64::MAX`; equal to `subsets_checked` when not `sampled`.
    pub subsets_total: u64,
}

/// What one phase of the matrix ran (kills, states or cases) and the violations it found.
pub struct PhaseTally {
    /// Kills, states or cases run.
    pub count: u64,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// Process kills: every barrier, plus the last occurrence of each object barrier and a
/// genesis publish killed around the commit rename.
pub fn process_kill_phase(
    exe: &Path,
    base: &Path,
    a: &LogicalState,
    b: &LogicalState,
    progress: &mut dyn Progress,
) -> Result<PhaseTally, LabError> {
    let objects_per_state = u32::try_from(b.chunks().len() * 3).map_err(|_| {
        LabError::Model(format!(
            "{} chunks do not fit the barrier count",
            b.chunks().len()
        ))
    })?;
    let mut kills: Vec<(Option<&Path>, Barrier, u32)> = Barrier::ALL
        .iter()
        .map(|&barrier| (Some(base), barrier, 1))
        .collect();
    for barrier in &Barrier::ALL[..4] {
        kills.push((Some(base), *barrier, objects_per_state));
    }
    for barrier in [Barrier::CommitAfterFileFsync, Barrier::CommitAfterRename] {
        kills.push((None, barrier, 1));
    }
    let mut violations = Vec::new();
    progress.phase("crash-matrix: kills at barriers", Some(kills.len() as u64));
    for (i, (from, barrier, occurrence)) in kills.iter().enumerate() {
        let state = if from.is_some() { b } else { a };
        violations.extend(process_kill_case(exe, *from, state, *barrier, *occurrence)?);
        progress.advance(i as u64 + 1);
    }
    progress.finish();
    Ok(PhaseTally {
        count: kills.len() as u64,
        violations,
    })
}

/// What the power-loss phase found.
pub struct PowerLossTally {
    /// Each scenario's counts, in the order run.
    pub scenarios: Vec<ScenarioFigures>,
    /// Violations of every scenario, each detail prefixed with its scenario's name.
    pub violations: Vec<Violation>,
}

/// Power loss: genesis publish, publish over a durable generation, reshard, a
/// deduplicating republish, a genesis publish with small chunks, a publish into a layout a
/// killed writer left non-durable, a LATEST repair, a publish over a generation with
/// objects installed concurrently, a publish onto the objects a killed writer of the
/// same state installed and never synced (found at their addresses, made durable only by
/// this run), a genesis publish through a bare relative root, a publish onto wrong bytes
/// at one of its objects' addresses, two writers racing for one generation, and a LATEST
/// repair after a writer killed between its commit rename and its `commits/` fsync.
pub fn power_loss_phase(
    base: &Path,
    a: &LogicalState,
    b: &LogicalState,
    config: &MatrixConfig,
    faults: ModelFaults,
    progress: &mut dyn Progress,
) -> Result<PowerLossTally, LabError> {
    let scenarios = power_loss_scenarios(base, a, b, config)?;
    let mut tally = PowerLossTally {
        scenarios: Vec::new(),
        violations: Vec::new(),
    };
    progress.phase(
        "crash-matrix: power-loss scenarios",
        Some(scenarios.len() as u64),
    );
    for (done, (name, from, action)) in scenarios.iter().enumerate() {
        crate::lab::error::stop_if_interrupted()?;
        let outcome = power_loss_scenario(
            *from,
            action,
            faults,
            limits_for(action, config.seed),
            CheckPlan {
                max_states: config.max_states_per_scenario,
                threads: config.threads,
                stop_after_violations: None,
                stop_counting: None,
            },
        )?;
        let limits = limits_for(action, config.seed);
        tally.scenarios.push(ScenarioFigures {
            name,
            trace_operations: outcome.trace_operations,
            crash_images: outcome.crash_images,
            distinct_states: outcome.distinct_states,
            states_checked: outcome.states_checked,
            sampled: outcome.enumeration.sampled,
            all_subsets_up_to: limits.all_subsets_up_to as u64,
            max_pending: outcome.enumeration.max_pending,
            subsets_checked: outcome.enumeration.subsets_checked,
            subsets_total: outcome.enumeration.subsets_total,
        });
        let named = outcome.violations.into_iter().map(|v| v.within(name));
        tally.violations.extend(named);
        progress.advance(done as u64 + 1);
    }
    progress.finish();
    Ok(tally)
}

/// One power-loss scenario: a name, the store it starts from (`None`: an empty
/// directory) and the recorded action.
type PowerLossScenario<'a> = (&'static str, Option<&'a Path>, Action);

/// The power-loss scenarios, in the order they run.
fn power_loss_scenarios<'a>(
    base: &'a Path,
    a: &LogicalState,
    b: &LogicalState,
    config: &MatrixConfig,
) -> Result<Vec<PowerLossScenario<'a>>, LabError> {
    let mut scenarios = Vec::from(action_scenarios(base, a, b, config)?);
    scenarios.extend(edge_scenarios(base, a, config)?);
    Ok(scenarios)
}

/// The first eight: each store action (publish, reshard, LATEST repair, the concurrent
/// install) from a clean start, and a publish into a killed writer's layout.
fn action_scenarios<'a>(
    base: &'a Path,
    a: &LogicalState,
    b: &LogicalState,
    config: &MatrixConfig,
) -> Result<[PowerLossScenario<'a>; 8], LabError> {
    Ok([
        (
            "genesis publish",
            None,
            Action::Publish(Box::new(a.clone()), topology(4)?),
        ),
        (
            "publish over generation 0",
            Some(base),
            Action::Publish(Box::new(b.clone()), topology(4)?),
        ),
        (
            "reshard generation 0 to 3 workers",
            Some(base),
            Action::Reshard(0, topology(3)?),
        ),
        (
            "republish generation 0's state (deduplicated objects)",
            Some(base),
            Action::Publish(Box::new(a.clone()), topology(2)?),
        ),
        (
            "genesis publish, 4096-element chunks",
            None,
            Action::Publish(
                Box::new(synthetic_state(config.seed, 9, 4096)),
                topology(3)?,
            ),
        ),
        (
            "publish into a layout a killed writer left non-durable",
            None,
            Action::PublishOverKilledLayout(Box::new(a.clone()), topology(4)?),
        ),
        ("repair a missing LATEST", Some(base), Action::RepairLatest),
        (
            // 32 768-element chunks: 12 objects. Every rename stays pending until the
            // run's one step 4, so the images grow with the objects; 12 keep it minutes.
            "publish over generation 0, objects installed concurrently",
            Some(base),
            Action::PublishConcurrent(
                Box::new(synthetic_state(config.seed, 4, 32_768)),
                topology(4)?,
            ),
        ),
    ])
}

/// The last five: a publish onto a killed writer's objects, through a bare relative root
/// and onto wrong bytes; two racing writers; a repair after a killed commit.
fn edge_scenarios<'a>(
    base: &'a Path,
    a: &LogicalState,
    config: &MatrixConfig,
) -> Result<[PowerLossScenario<'a>; 5], LabError> {
    Ok([
        (
            // The killed writer installed every object of generation 1 and died before
            // its commit record; none of its data, names or new fan-out directories is
            // durable. Every object takes the found-and-verified path, so only the run's
            // found-object fsyncs and its step 4 can make generation 1 survive.
            "publish over generation 0 onto a killed writer's unsynced objects",
            Some(base),
            over_killed_objects(config.seed, KilledWriterFiles::NothingSynced)?,
        ),
        (
            // The root's own entry is made durable by fsyncing ".", the recorded directory.
            "genesis publish through a bare relative root",
            None,
            Action::PublishBareRelativeRoot(Box::new(a.clone()), topology(4)?),
        ),
        (
            // The writer finds a file at one object's address that does not verify and
            // replaces it (RFC 0001 §4 step 3).
            "publish over generation 0 onto wrong bytes at an object's address",
            Some(base),
            over_wrong_bytes(config.seed)?,
        ),
        (
            // The second writer's commit finds generation 1 taken and fails.
            "two writers racing for generation 1",
            Some(base),
            two_writers_racing(config.seed)?,
        ),
        (
            "repair LATEST after a writer killed before its commits/ fsync",
            Some(base),
            repair_after_killed_commit(config.seed)?,
        ),
    ])
}

/// What the corruption phase ran and found.
pub struct CorruptionTally {
    /// Cases run.
    pub count: u64,
    /// Cases per kind of file damaged (commit record, manifest, object, ...).
    pub by_file_kind: BTreeMap<&'static str, u64>,
    /// Cases per kind of damage ([`crate::lab::corruption::Damage::label`]).
    pub by_damage: BTreeMap<&'static str, u64>,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// Corruption: every case applied to a copy of a healthy three-generation store, with
/// recovery given `faults` (none, except for the recovery mutants).
pub fn corruption_phase(
    corrupt_base: &Path,
    config: &MatrixConfig,
    faults: RecoveryFaults,
    progress: &mut dyn Progress,
) -> Result<CorruptionTally, LabError> {
    build_corruption_base(corrupt_base, config.seed)?;
    let expectations = (0..3)
        .map(|g| generation_expectation(corrupt_base, g))
        .collect::<Result<Vec<_>, _>>()?;
    let cases = corruption_cases(corrupt_base)?;
    progress.phase("crash-matrix: corruption cases", Some(cases.len() as u64));
    let mut tally = CorruptionTally {
        count: cases.len() as u64,
        by_file_kind: BTreeMap::new(),
        by_damage: BTreeMap::new(),
        violations: Vec::new(),
    };
    for (done, damage) in cases.iter().enumerate() {
        crate::lab::error::stop_if_interrupted()?;
        let kind = file_kind(damage.target(), &expectations);
        *tally.by_file_kind.entry(kind).or_default() += 1;
        *tally.by_damage.entry(damage.label()).or_default() += 1;
        tally.violations.extend(corruption_case(
            corrupt_base,
            damage,
            &expectations,
            faults,
        )?);
        progress.advance(done as u64 + 1);
    }
    progress.finish();
    Ok(tally)
}

/// What a store path holds: a commit record, a manifest or chunk object of a known
/// generation, LATEST, a temp file, or something no generation names.
pub(super) fn file_kind(path: &str, expectations: &[GenerationExpectation]) -> &'static str {
    let named = |index: Option<usize>| {
        expectations.iter().any(|e| match index {
            Some(i) => e.files.get(i).is_some_and(|(p, _)| p == path),
            None => e.files.iter().skip(2).any(|(p, _)| p == path),
        })
    };
    if named(Some(0)) {
        "commit_record"
    } else if named(Some(1)) {
        "manifest"
    } else if named(None) {
        "chunk_object"
    } else if path == LATEST_REL_PATH {
        "latest"
    } else if path.ends_with(".tmp") {
        "temp_file"
    } else {
        "unknown_entry"
    }
}
