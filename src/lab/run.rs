//! One whole crash-matrix run: process kills at barriers, before every operation and at
//! random instants, the power-loss model, corruption, and the summary they add up to.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::core::progress::Progress;
use crate::durable::fs::RealFs;
use crate::lab::error::LabError;
use crate::lab::kills::{operation_kill_phase, random_kill_phase};
use crate::lab::matrix::{
    corruption_phase, matrix_states, power_loss_phase, process_kill_phase, scratch_dir,
    MatrixConfig, ModelFaults, ScenarioFigures, Violation,
};
use crate::lab::recovery_mutants::RecoveryFaults;
use crate::store::barrier::{Barrier, NoHooks};
use crate::store::writer::publish_with;

/// The page-cache caveat every report carries.
pub const PAGE_CACHE_CAVEAT: &str = "process kills (at barriers, before every operation, at random instants) leave the page cache intact: they test isolation and recovery from a dead writer, not durability; durability is tested by the power-loss model, which rebuilds what a power cut could leave on disk under the persistence model of RFC 0001 \u{a7}8";

/// What one crash-matrix run did and found (printed as JSON); the run fails when
/// `violations` is not empty.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixSummary {
    /// The named barriers of RFC 0001 §4.
    pub barriers: Vec<&'static str>,
    /// Operations in the recorded publish that the operation-boundary kills cut.
    pub trace_operations: u64,
    /// Real SIGKILLs that landed (the publisher was seen to die of SIGKILL), aimed one
    /// before each operation of that publish.
    pub op_boundary_kills: u64,
    /// That publish, operation by operation, as the publisher child reported it.
    pub operation_trace: Vec<crate::lab::harness::OperationEvent>,
    /// Real SIGKILLs at barriers (every barrier, last object occurrences, genesis).
    pub barrier_kills: u64,
    /// Real SIGKILLs of a free-running publisher after a random delay that landed before
    /// it finished.
    pub random_kills: u64,
    /// Random-delay runs where the publisher finished before the kill (not counted above).
    pub random_runs_finished_first: u64,
    /// Random kills after which the candidate's commit record was visible.
    pub random_kills_candidate_visible: u64,
    /// Power-loss crash states built, over all scenarios (before deduplication).
    pub crash_images: u64,
    /// Distinct states among them as recovery sees them; each was checked.
    pub distinct_states: u64,
    /// Each power-loss scenario's counts.
    pub power_loss_scenarios: Vec<ScenarioFigures>,
    /// Corruption cases applied, each to a fresh copy of a healthy store.
    pub corruption_cases: u64,
    /// Corruption cases per kind of file damaged.
    pub corruption_by_file_kind: BTreeMap<&'static str, u64>,
    /// Corruption cases per kind of damage.
    pub corruption_by_damage: BTreeMap<&'static str, u64>,
    /// [`PAGE_CACHE_CAVEAT`].
    pub caveat: &'static str,
    /// Every invariant violation of every phase (none: the store held).
    pub violations: Vec<Violation>,
}

/// Runs everything and returns the summary (violations listed, not raised).
pub fn run_matrix(
    exe: &Path,
    config: &MatrixConfig,
    progress: &mut dyn Progress,
) -> Result<MatrixSummary, LabError> {
    let (a, b) = matrix_states(config.seed);
    let work = scratch_dir()?;
    let base = work.path().join("base");
    publish_with(
        &RealFs,
        &base,
        &a,
        crate::core::topology::Topology::new(4)?,
        &mut NoHooks,
    )?;
    let barrier_kills = process_kill_phase(exe, &base, &a, &b, progress)?;
    let operation_kills = operation_kill_phase(exe, config, progress)?;
    let random_kills = random_kill_phase(exe, config, progress)?;
    let power_loss = power_loss_phase(&base, &a, &b, config, ModelFaults::NONE, progress)?;
    let corruption = corruption_phase(
        &work.path().join("corrupt-base"),
        config,
        RecoveryFaults::NONE,
        progress,
    )?;
    let violations: Vec<Violation> = [
        barrier_kills.violations,
        operation_kills.violations,
        random_kills.violations,
        power_loss.violations,
        corruption.violations,
    ]
    .concat();
    Ok(MatrixSummary {
        barriers: Barrier::ALL.iter().map(|b| b.name()).collect(),
        trace_operations: operation_kills.trace_operations,
        op_boundary_kills: operation_kills.kills,
        operation_trace: operation_kills.trace,
        barrier_kills: barrier_kills.count,
        random_kills: random_kills.kills,
        random_runs_finished_first: random_kills.finished_first,
        random_kills_candidate_visible: random_kills.candidate_visible,
        crash_images: power_loss.scenarios.iter().map(|s| s.crash_images).sum(),
        distinct_states: power_loss.scenarios.iter().map(|s| s.distinct_states).sum(),
        power_loss_scenarios: power_loss.scenarios,
        corruption_cases: corruption.count,
        corruption_by_file_kind: corruption.by_file_kind,
        corruption_by_damage: corruption.by_damage,
        caveat: PAGE_CACHE_CAVEAT,
        violations,
    })
}
