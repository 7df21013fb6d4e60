//! Power loss: one recorded writer run, every distinct crash state derived from it, each checked.
use super::*;

/// Where the matrix puts the store under the recorded directory: the recorder images the
/// store root's parent, so the root's own entry is one the model may lose.
pub const STORE_DIR_NAME: &str = "store";

/// Records one writer run on a copy of `base` (or a store the run creates) and checks
/// recovery on every distinct derived crash state (at most `max_states` when nonzero,
/// sampled evenly). The recorded directory is the store root's parent: the root is part
/// of the model, created by the run when there is no base. A copied base also gets a
/// killed writer's garbage in `staging/`, named as this process's own writer would name
/// its first temp file (a restarted container reuses pids).
pub fn power_loss_scenario(
    base: Option<&Path>,
    action: &Action,
    faults: ModelFaults,
    limits: EnumerationLimits,
    plan: CheckPlan,
) -> Result<ScenarioOutcome, LabError> {
    let work = scratch_dir()?;
    let root = work.path().join(STORE_DIR_NAME);
    let (previous, mut roots) = match base {
        Some(base) => {
            std::fs::create_dir(&root)?;
            let seeded = seed_from_base(base, &root)?;
            plant_staging_garbage(&root)?;
            seeded
        }
        None => (None, BTreeMap::new()),
    };
    let (candidate, recording) = record_action(work.path(), &root, action, faults.writer)?;
    roots.insert(candidate.generation, candidate.logical_state_root);
    let durable_from = recording.acknowledgements_at(Barrier::CommitAfterDirectoryFsync);
    let latest_durable_from = recording.acknowledgements_at(Barrier::LatestAfterDirectoryFsync);
    let CrashStates {
        states,
        subsets,
        built,
    } = recording
        .crash_states(limits)
        .map_err(|e| LabError::Model(format!("enumerating crash states: {e}")))?;
    let distinct_count = states.len() as u64;
    let mut states = sample_evenly(states, plan.max_states);
    if plan.stop_after_violations.is_some() {
        // Hunting a mutant: a seeded shuffle spreads the first checks over the whole run.
        let mut rng = SplitMix64::keyed(limits.seed, "shardlift/lab/mutant-order", 0);
        for i in (1..states.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            states.swap(i, j);
        }
    }
    let checks = ScenarioChecks {
        recording: &recording,
        expectations: StoreExpectations {
            recovery: faults.recovery,
            previous: previous.as_ref(),
            candidate: &candidate,
            roots,
        },
        durable_from,
        latest_durable_from,
    };
    let (violations, states_checked) = check_crash_states(&checks, &states, plan);
    Ok(ScenarioOutcome {
        trace_operations: recording.trace.ops.len() as u64,
        crash_images: built,
        distinct_states: distinct_count,
        states_checked,
        enumeration: Enumeration::from(&subsets),
        violations,
    })
}

/// At most `max_states` of `states`, evenly spaced (all of them when `max_states` is 0).
pub(super) fn sample_evenly(states: Vec<CrashState>, max_states: usize) -> Vec<CrashState> {
    if states.len() > max_states && max_states > 0 {
        let stride = states.len() as f64 / max_states as f64;
        (0..max_states)
            .filter_map(|i| states.get((i as f64 * stride) as usize).cloned())
            .collect()
    } else {
        states
    }
}

/// How a scenario's states are checked.
#[derive(Clone, Copy, Debug)]
pub struct CheckPlan {
    /// Check at most this many distinct states, sampled evenly (0: all of them).
    pub max_states: usize,
    /// Threads checking states.
    pub threads: usize,
    /// Stop once this many violations are found (a mutant is killed by the first one of
    /// its expected invariant); `None` checks every state.
    pub stop_after_violations: Option<usize>,
    /// Count only violations of this invariant towards `stop_after_violations` (`None`:
    /// every violation counts).
    pub stop_counting: Option<Invariant>,
}

impl CheckPlan {
    /// Every distinct state, on `threads` threads.
    pub fn exhaustive(threads: usize) -> Self {
        CheckPlan {
            max_states: 0,
            threads,
            stop_after_violations: None,
            stop_counting: None,
        }
    }
}

/// Checks crash states on `plan.threads` threads (thread `t` takes states `t`, `t + n`,
/// ...), stopping early only when the plan says so.
pub(super) fn check_crash_states(
    checks: &ScenarioChecks<'_>,
    states: &[CrashState],
    plan: CheckPlan,
) -> (Vec<Violation>, u64) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = plan.threads.max(1);
    let found_total = AtomicUsize::new(0);
    let found_total = &found_total;
    let mut violations = Vec::new();
    let mut checked_total = 0u64;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|first| {
                scope.spawn(move || {
                    let mut found = Vec::new();
                    let mut checked = 0u64;
                    for state in states.iter().skip(first).step_by(threads) {
                        if plan
                            .stop_after_violations
                            .is_some_and(|stop| found_total.load(Ordering::Relaxed) >= stop)
                        {
                            break;
                        }
                        let before = found.len();
                        check_crash_state(checks, state, &mut found);
                        checked += 1;
                        let counted = found[before..]
                            .iter()
                            .filter(|v| plan.stop_counting.is_none_or(|i| v.invariant == i))
                            .count();
                        found_total.fetch_add(counted, Ordering::Relaxed);
                    }
                    (found, checked)
                })
            })
            .collect();
        for handle in handles {
            match handle.join() {
                Ok((found, checked)) => {
                    violations.extend(found);
                    checked_total += checked;
                }
                Err(_) => violations.push(Violation::new(
                    Invariant::CheckCompleted,
                    "a checker thread panicked",
                )),
            }
        }
    });
    (violations, checked_total)
}
