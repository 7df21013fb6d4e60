//! Process kills: a real publisher SIGKILLed at a barrier, its transcript and a fresh child's recovery checked.
use super::*;

/// The synthetic states the matrix uses: A (step 3) and B (step 4).
pub fn matrix_states(seed: u64) -> (LogicalState, LogicalState) {
    (
        synthetic_state(seed, 3, MATRIX_CHUNK_ELEMENTS),
        synthetic_state(seed, 4, MATRIX_CHUNK_ELEMENTS),
    )
}

pub(super) fn topology(workers: u32) -> Result<Topology, LabError> {
    Ok(Topology::new(workers)?)
}

/// Kills a publisher at `barrier` (occurrence `occurrence`) on a copy of `base` and checks
/// the transcript and a fresh child's recovery.
pub fn process_kill_case(
    exe: &Path,
    base: Option<&Path>,
    state: &LogicalState,
    barrier: Barrier,
    occurrence: u32,
) -> Result<Vec<Violation>, LabError> {
    let work = scratch_dir()?;
    let root = work.path().join("store");
    let (previous, mut roots) = match base {
        Some(base) => {
            std::fs::create_dir(&root)?;
            kill_base(base, &root)?
        }
        None => (None, BTreeMap::new()),
    };
    roots.insert(previous.map_or(0, |p| p + 1), state.logical_state_root());
    let context = format!("kill at {barrier}#{occurrence}");
    let report = kill_publisher_at_occurrence(exe, &root, state, topology(4)?, barrier, occurrence)
        .map_err(LabError::during(context.clone()))?;
    let mut violations = kill_transcript_violations(&report, barrier, occurrence, &context);
    if !root.exists() {
        // Killed before the layout existed: nothing to recover.
        return Ok(violations);
    }
    let expected = if report.candidate_visible {
        Some(report.candidate_generation)
    } else {
        previous
    };
    violations.extend(child_recovery_violations(
        exe, &root, &roots, expected, &context,
    )?);
    Ok(violations)
}

/// Copies `base` into `root`: the generation recovery selects there and the logical state
/// root of every valid generation.
pub(crate) fn kill_base(
    base: &Path,
    root: &Path,
) -> Result<(Option<u64>, BTreeMap<u64, Digest>), LabError> {
    copy_tree(base, root)?;
    let report = crate::store::recover(root)?;
    let mut roots = BTreeMap::new();
    for g in &report.valid_generations {
        roots.insert(*g, generation_expectation(root, *g)?.logical_state_root);
    }
    Ok((report.selected.map(|s| s.generation), roots))
}

/// The publisher died of SIGKILL right after the last acknowledged event, and its
/// candidate is visible exactly when the protocol says so.
pub(super) fn kill_transcript_violations(
    report: &KillReport,
    barrier: Barrier,
    occurrence: u32,
    context: &str,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    if report.signal != Some(9) || !report.reaped {
        violations.push(Violation::at(
            Invariant::PublisherKilledAndReaped,
            context,
            format!(
                "publisher not killed by signal 9 and reaped (reaped: {}, {:?})",
                report.reaped, report.exit
            ),
        ));
    }
    if report.unacknowledged.barrier != barrier
        || report.unacknowledged.occurrence != occurrence
        || report.unacknowledged.seq != report.acknowledged.len() as u64
        || report
            .acknowledged
            .iter()
            .enumerate()
            .any(|(i, e)| e.seq != i as u64)
    {
        violations.push(Violation::at(
            Invariant::KillTranscriptMatches,
            context,
            "acknowledged transcript does not end right before the target",
        ));
    }
    if report.candidate_visible != barrier.commit_visible() {
        violations.push(Violation::at(
            Invariant::CandidateVisibleAsTheProtocolSays,
            context,
            format!(
                "candidate visible = {}, protocol says {}",
                report.candidate_visible,
                barrier.commit_visible()
            ),
        ));
    }
    violations
}

/// A fresh child's recovery leaves the store unchanged, selects `expected`, exposes no
/// LATEST ahead of the commits, and agrees with an in-process recovery that passes the
/// common checks against `roots` (the published root of each generation).
pub fn child_recovery_violations(
    exe: &Path,
    root: &Path,
    roots: &BTreeMap<u64, Digest>,
    expected: Option<u64>,
    context: &str,
) -> Result<Vec<Violation>, LabError> {
    let mut violations = Vec::new();
    let before = tree_digest(root)?;
    let first = recover_in_child(exe, root).map_err(LabError::during(context))?;
    if tree_digest(root)? != before {
        violations.push(Violation::at(
            Invariant::RecoveryChangesNothing,
            context,
            "recovery modified the store",
        ));
    }
    let selected = first.selected.as_ref().map(|s| s.generation);
    if selected != expected {
        violations.push(Violation::at(
            Invariant::NewestIntactSelected,
            context,
            format!("selected {selected:?}, expected {expected:?}"),
        ));
    }
    if matches!(
        first.latest.status,
        LatestStatus::Ahead | LatestStatus::Garbage
    ) {
        violations.push(Violation::at(
            Invariant::LatestNeverAheadOrGarbage,
            context,
            format!("LATEST is {:?}", first.latest.status),
        ));
    }
    // The in-process checks (idempotence, LATEST never changes the answer, the selected
    // generation loads with its published root) count like every other: a failed
    // in-process recovery is recorded by `check_recovery_common` itself.
    let in_process =
        check_recovery_common(root, roots, &mut violations, context, RecoveryFaults::NONE);
    if in_process.is_some_and(|r| r.selected != first.selected) {
        violations.push(Violation::at(
            Invariant::RecoveryIsDeterministic,
            context,
            "in-process and child recovery disagree",
        ));
    }
    Ok(violations)
}
