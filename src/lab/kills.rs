//! Process kills that land anywhere, not only where the harness parks a publisher at a
//! barrier: a real SIGKILL before every file-system operation of a recorded publish, and
//! SIGKILLs at random instants of a free-running publisher. After each kill a fresh
//! recovery process, then the in-process checks of RFC 0001 §5, judge the store.
//!
//! Checked for every kill:
//! - the publisher died of signal 9 and was reaped;
//! - (operation kills) the operations it performed are exactly the traced prefix, and the
//!   candidate's commit record is visible exactly when the kill came after the rename that
//!   installs it;
//! - recovery selects the candidate when its record is visible, else the previous
//!   generation; it changes nothing, is idempotent, LATEST never changes its answer, and
//!   the selected generation loads with its published root.
//!
//! Process kills keep the page cache, so they test isolation from a dead writer, not
//! durability (the power-loss model does that).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::Progress;
use crate::core::rng::SplitMix64;
use crate::core::topology::Topology;
use crate::durable::fs::RealFs;
use crate::lab::corruption::copy_tree;
use crate::lab::error::LabError;
use crate::lab::harness::{
    drive_operations, run_free_publisher, OperationEvent, OperationKind, OperationsEnd,
    PublisherExit,
};
use crate::lab::matrix::{
    child_recovery_violations, scratch_dir, Invariant, MatrixConfig, Violation,
};
use crate::store::barrier::NoHooks;
use crate::store::codec::commit_rel_path;
use crate::store::layout::synthetic_state;
use crate::store::writer::publish_with;

/// Chunk size of the states the operation and random kills publish (4 chunks: a trace
/// short enough to kill before every operation in seconds).
pub const KILL_CHUNK_ELEMENTS: u32 = 32_768;
/// Random kills that must land before the publisher finishes.
pub const RANDOM_KILLS: u64 = 100;
/// Bound on random-delay runs (kills that come too late do not count). Since publish hashes
/// ahead on threads, its length varies more between runs and more delays land after it
/// finished: one CI run got 96 kills in 400 runs, so the bound leaves room for that.
pub const MAX_RANDOM_RUNS: u64 = 1_000;
/// Free runs timed to choose the random delays.
const CALIBRATION_RUNS: usize = 3;

/// What the operation-boundary kills did and found.
pub struct OperationKills {
    /// Operations in the recorded (unkilled) publish.
    pub trace_operations: u64,
    /// Kills that landed: the publisher, stopped before a traced operation and sent
    /// SIGKILL, was seen (by its reaped exit status) to die of SIGKILL. One is aimed
    /// before each traced operation.
    pub kills: u64,
    /// The recorded trace (temp names as the traced run spelled them).
    pub trace: Vec<OperationEvent>,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// What the random-instant kills did and found.
pub struct RandomKills {
    /// Kills that landed while the publisher was still running.
    pub kills: u64,
    /// Runs where the publisher reported `done` before its kill came (counted apart).
    pub finished_first: u64,
    /// Landed kills after which the candidate's commit record was visible.
    pub candidate_visible: u64,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// A durable generation 0 (state A) to publish state B over, and every published root.
struct KillBase {
    _dir: tempfile::TempDir,
    base: PathBuf,
    candidate: LogicalState,
    topology: Topology,
    previous: Option<u64>,
    roots: BTreeMap<u64, Digest>,
}

impl KillBase {
    fn build(config: &MatrixConfig) -> Result<Self, LabError> {
        let a = synthetic_state(config.seed, 3, KILL_CHUNK_ELEMENTS);
        let b = synthetic_state(config.seed, 4, KILL_CHUNK_ELEMENTS);
        let topology = Topology::new(4)?;
        let dir = scratch_dir()?;
        let base = dir.path().join("base");
        let published = publish_with(&RealFs, &base, &a, topology, &mut NoHooks)?;
        let roots = BTreeMap::from([
            (published.committed.generation, a.logical_state_root()),
            (published.committed.generation + 1, b.logical_state_root()),
        ]);
        Ok(KillBase {
            _dir: dir,
            base,
            candidate: b,
            topology,
            previous: Some(published.committed.generation),
            roots,
        })
    }

    /// A private copy of the base store to kill a publisher in.
    fn fresh_copy(&self) -> Result<(tempfile::TempDir, PathBuf), LabError> {
        let dir = scratch_dir()?;
        let root = dir.path().join("store");
        std::fs::create_dir(&root)?;
        copy_tree(&self.base, &root)?;
        Ok((dir, root))
    }

    /// A fresh recovery process and the in-process checks, after a publisher ended as
    /// `ended`: they must select the candidate when its record is visible, else the
    /// previous generation.
    fn recovery_violations(
        &self,
        exe: &Path,
        root: &Path,
        ended: &PublisherExit,
        context: &str,
    ) -> Result<Vec<Violation>, LabError> {
        let expected = if ended.candidate_visible {
            Some(ended.candidate_generation)
        } else {
            self.previous
        };
        child_recovery_violations(exe, root, &self.roots, expected, context)
    }
}

/// An operation as two runs can agree on it: temp names carry the writer's pid.
fn comparable(op: &OperationEvent) -> (OperationKind, String, Option<String>, Option<u64>) {
    let name = |path: &str| {
        if path.starts_with("staging/") {
            "staging/<temp>".to_owned()
        } else {
            path.to_owned()
        }
    };
    (
        op.kind,
        name(&op.path),
        op.to.as_deref().map(name),
        op.bytes,
    )
}

/// Records a real publish operation by operation, then kills a fresh publisher before
/// each of its operations in turn.
pub fn operation_kill_phase(
    exe: &Path,
    config: &MatrixConfig,
    progress: &mut dyn Progress,
) -> Result<OperationKills, LabError> {
    let base = KillBase::build(config)?;
    let (_trace_dir, trace_root) = base.fresh_copy()?;
    let (summary, trace) =
        match drive_operations(exe, &trace_root, &base.candidate, base.topology, None)? {
            OperationsEnd::Completed(summary, trace) => (summary, trace),
            OperationsEnd::Killed(_) => {
                return Err(LabError::Model("the traced publish was killed".into()))
            }
        };
    let mut violations = Vec::new();
    let commit_rel = commit_rel_path(summary.committed.generation);
    let commit_rename = trace
        .iter()
        .position(|op| op.to.as_deref() == Some(commit_rel.as_str()));
    if commit_rename.is_none() {
        violations.push(Violation::new(
            Invariant::KillTranscriptMatches,
            format!("operation trace: no rename installs {commit_rel} (RFC 0001 §4)"),
        ));
    }
    let mut landed = 0u64;
    progress.phase(
        "crash-matrix: kills before every operation of a publish",
        Some(trace.len() as u64),
    );
    let traced = TracedPublish {
        expected: trace.iter().map(comparable).collect(),
        commit_rename,
    };
    for (index, op) in trace.iter().enumerate() {
        progress.advance(index as u64);
        let (killed, found) = kill_before_operation(exe, &base, &traced, index, op)?;
        landed += u64::from(killed);
        violations.extend(found);
    }
    progress.advance(trace.len() as u64);
    progress.finish();
    Ok(OperationKills {
        trace_operations: trace.len() as u64,
        kills: landed,
        trace,
        violations,
    })
}

/// What the kills of one traced publish are judged against.
struct TracedPublish {
    /// Its operations, as two runs can agree on them.
    expected: Vec<(OperationKind, String, Option<String>, Option<u64>)>,
    /// The operation that installs its commit record.
    commit_rename: Option<usize>,
}

/// Kills a fresh publisher before operation `index` (`op`) of the traced publish:
/// whether signal 9 ended it, and what the kill, the operations it performed and the
/// recovery after it broke.
fn kill_before_operation(
    exe: &Path,
    base: &KillBase,
    traced: &TracedPublish,
    index: usize,
    op: &OperationEvent,
) -> Result<(bool, Vec<Violation>), LabError> {
    let mut violations = Vec::new();
    let context = format!(
        "kill before operation {index} ({} {})",
        serde_json::to_string(&op.kind).unwrap_or_default(),
        op.path
    );
    let (_dir, root) = base.fresh_copy()?;
    let report = match drive_operations(
        exe,
        &root,
        &base.candidate,
        base.topology,
        Some(index as u64),
    )
    .map_err(LabError::during(context.clone()))?
    {
        OperationsEnd::Killed(report) => report,
        OperationsEnd::Completed(..) => {
            violations.push(Violation::at(
                Invariant::PublisherKilledAndReaped,
                &context,
                "the publisher was not killed",
            ));
            return Ok((false, violations));
        }
    };
    let killed = report.ended.signal == Some(9);
    if !killed {
        violations.push(Violation::at(
            Invariant::PublisherKilledAndReaped,
            &context,
            format!(
                "publisher not killed by signal 9 ({})",
                report.ended.exit.outcome
            ),
        ));
    }
    let performed: Vec<_> = report.performed.iter().map(comparable).collect();
    if performed.as_slice() != &traced.expected[..index]
        || comparable(&report.killed_before) != traced.expected[index]
    {
        violations.push(Violation::at(
            Invariant::KillTranscriptMatches,
            &context,
            "the operations performed differ from the recorded trace",
        ));
    }
    let visible_by_trace = traced.commit_rename.is_some_and(|rename| index > rename);
    if report.ended.candidate_visible != visible_by_trace {
        violations.push(Violation::at(
            Invariant::CandidateVisibleAsTheProtocolSays,
            &context,
            format!(
                "candidate visible = {}, but the trace installs it {}",
                report.ended.candidate_visible,
                match traced.commit_rename {
                    Some(rename) => format!("at operation {rename}"),
                    None => "never".to_owned(),
                }
            ),
        ));
    }
    violations.extend(base.recovery_violations(exe, &root, &report.ended, &context)?);
    Ok((killed, violations))
}

/// The median length of a free-running publish (from `ready` to `done`) over
/// `CALIBRATION_RUNS` runs, in microseconds.
fn median_publish_us(exe: &Path, base: &KillBase) -> Result<u64, LabError> {
    let mut lengths_us = Vec::with_capacity(CALIBRATION_RUNS);
    for _ in 0..CALIBRATION_RUNS {
        let (_dir, root) = base.fresh_copy()?;
        let run = run_free_publisher(exe, &root, &base.candidate, base.topology, None)?;
        if !run.ended.exit.outcome.success() {
            return Err(LabError::ChildFailed(format!(
                "a free-running publisher ended with {}",
                run.ended.exit.outcome
            )));
        }
        lengths_us.push(run.elapsed_us);
    }
    lengths_us.sort_unstable();
    Ok(lengths_us[CALIBRATION_RUNS / 2])
}

/// One kill delay: half the delays anywhere up to `max_delay_us`; half in the publish's
/// last stretch (0.85× to 1.1× of `publish_us`), where the manifest, the commit record
/// and LATEST are written (a few operations of 87).
fn random_delay_us(rng: &mut SplitMix64, publish_us: u64, max_delay_us: u64) -> u64 {
    if rng.below(2) == 0 {
        rng.below(max_delay_us + 1)
    } else {
        let tail_start = publish_us.saturating_mul(17) / 20;
        tail_start + rng.below(publish_us.saturating_mul(11) / 10 - tail_start + 1)
    }
}

/// Kills free-running publishers after random delays until `RANDOM_KILLS` landed
/// mid-publish (before the child reported `done`), checking recovery after every run. Of
/// the delays, half are drawn up to 1.25× the measured length of a publish (from `ready`
/// to `done`) and half from 0.85× to 1.1× of it, where the commit is written.
pub fn random_kill_phase(
    exe: &Path,
    config: &MatrixConfig,
    progress: &mut dyn Progress,
) -> Result<RandomKills, LabError> {
    let base = KillBase::build(config)?;
    let publish_us = median_publish_us(exe, &base)?;
    let max_delay_us = publish_us.saturating_mul(5) / 4 + 1;
    progress.phase(
        &format!(
            "crash-matrix: random kills (a free publish takes {publish_us} µs; delays 0..{max_delay_us} µs, half in its last 15 %)"
        ),
        Some(RANDOM_KILLS),
    );
    let mut rng = SplitMix64::keyed(config.seed, "shardlift/lab/random-kills", 0);
    let mut tally = RandomKills {
        kills: 0,
        finished_first: 0,
        candidate_visible: 0,
        violations: Vec::new(),
    };
    let mut runs = 0u64;
    while tally.kills < RANDOM_KILLS && runs < MAX_RANDOM_RUNS {
        runs += 1;
        progress.advance(tally.kills);
        let delay_us = random_delay_us(&mut rng, publish_us, max_delay_us);
        let context = format!("random kill after {delay_us} µs (run {runs})");
        let (_dir, root) = base.fresh_copy()?;
        let report = run_free_publisher(
            exe,
            &root,
            &base.candidate,
            base.topology,
            Some(Duration::from_micros(delay_us)),
        )
        .map_err(LabError::during(context.clone()))?;
        let ended = &report.ended;
        match (ended.signal, report.completed) {
            (Some(9), false) => {
                tally.kills += 1;
                if ended.candidate_visible {
                    tally.candidate_visible += 1;
                }
            }
            // Killed after `done` (while exiting) or exited first: the publish completed.
            (Some(9), true) => tally.finished_first += 1,
            (None, true) if ended.exit.outcome.success() => tally.finished_first += 1,
            _ => tally.violations.push(Violation::at(
                Invariant::PublisherKilledAndReaped,
                &context,
                format!("publisher ended with {}", ended.exit.outcome),
            )),
        }
        tally
            .violations
            .extend(base.recovery_violations(exe, &root, ended, &context)?);
    }
    progress.advance(tally.kills);
    progress.finish();
    if tally.kills < RANDOM_KILLS {
        tally.violations.push(Violation::new(
            Invariant::RandomKillsLanded,
            format!(
                "only {} of {RANDOM_KILLS} random kills landed before the publisher finished in {runs} runs",
                tally.kills
            ),
        ));
    }
    Ok(tally)
}
