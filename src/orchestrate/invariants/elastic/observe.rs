//! Deriving the observation from what the launcher run left.

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::supervise::process::ExitOutcome;

use crate::orchestrate::invariants::evidence::Observation;
use crate::orchestrate::invariants::registry::REGISTRY;
use crate::orchestrate::invariants::scenarios::slot_sha256;

use super::*;

/// Everything the parent gathered from one launcher run (raw; never written out).
#[derive(Clone, Debug, Default)]
pub struct ElasticRun {
    /// How the launcher exited (`None`: it did not, it was killed at the deadline).
    pub launcher_exit: Option<ExitOutcome>,
    /// Whether the launcher ran past its deadline.
    pub launcher_timed_out: bool,
    /// The exit code of local rank 1 as printed by the launcher's own failure log line.
    pub launcher_logged_failure_code: Option<i32>,
    /// Rank 1's marker, as decoded.
    pub marker: Option<MarkerRecord>,
    /// Rank 0's report of attempt 0.
    pub rank0_attempt0: Option<WorkerReport>,
    /// Reports of the restarted attempt, by rank.
    pub finals: Vec<WorkerReport>,
    /// [`store_receipts`](crate::orchestrate::invariants::scenarios::store_receipts) before the launcher ran.
    pub receipts_before: Option<(Digest, Option<Digest>)>,
    /// [`store_receipts`](crate::orchestrate::invariants::scenarios::store_receipts) after it ran.
    pub receipts_after: Option<(Digest, Option<Digest>)>,
    /// Entries in the store's `staging/` before the run.
    pub staging_before: usize,
    /// Entries in the store's `staging/` after it.
    pub staging_after: usize,
    /// [`store_tree_sha256`] of the whole store before and after the launcher run.
    pub store_tree_before: Option<Digest>,
    /// See `store_tree_before`.
    pub store_tree_after: Option<Digest>,
    /// Launcher runs made (a rendezvous failure is retried).
    pub launch_attempts: u32,
}

/// What the restarted group must reproduce.
#[derive(Clone, Debug)]
pub struct ElasticExpectation {
    /// The generation recovery must select.
    pub generation: u64,
    /// Its state.
    pub state: LogicalState,
    /// The state after the next step from it.
    pub next: LogicalState,
}

fn opt<T: ToString>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "absent".to_owned(), T::to_string)
}

/// Derives the scenario-11 observation from what was gathered (pure, so the negative
/// tests can feed it violations directly).
pub fn elastic_observation(run: &ElasticRun, expected: &ElasticExpectation) -> Observation {
    let spec = &REGISTRY[10];
    let mut obs = Observation::new(spec);
    obs.fact("launcher", "torch.distributed.run --no-python");
    obs.fact("topology", "nnodes=1 nproc-per-node=2 (fixed 2-to-2)");
    obs.fact("max_restarts_requested", MAX_RESTARTS);
    obs.fact("rendezvous", "c10d on a numeric loopback address");
    obs.fact("injected_failure", "rank 1, attempt 0, exit code 91");
    obs.fact("launcher_timeout_s", LAUNCHER_TIMEOUT_S);
    obs.fact("launch_attempts", run.launch_attempts);
    observe_launcher(&mut obs, run);
    observe_failed_attempt(&mut obs, run);
    observe_restarted_attempt(&mut obs, run, expected);
    observe_store_unchanged(&mut obs, run);
    for statement in ELASTIC_NOT_OBSERVED {
        obs.not_observed(statement);
    }
    obs
}

/// What the suite takes from the launcher and the workers without observing it itself.
const ELASTIC_NOT_OBSERVED: [&str; 4] = [
    "the failing worker's exit code 91 is read from the launcher's own failure log line \
     (torch.distributed.elastic: 'failed (exitcode: 91) local_rank: 1'); the suite does not reap that worker itself",
    "restart count and maximum restarts are the values the launcher put into the workers' environment \
     (TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS), as reported by the workers",
    "that rank 0 saw the marker before the failed attempt was torn down is rank 0's own report; \
     rank 1 waits (bounded) for rank 0's acknowledgement before exiting",
    "that no promotion was attempted is observed as an unchanged store: every entry under it (objects, \
     manifests, commit records, staging, LATEST: name, kind, size and content digest) is the same before and \
     after the launcher run; an attempt that failed before writing anything to the store would not be seen",
];

/// The launcher exited cleanly, in time, after logging rank 1's injected failure.
fn observe_launcher(obs: &mut Observation, run: &ElasticRun) {
    obs.check(
        "launcher_exit",
        "code:0",
        match run.launcher_exit {
            Some(ExitOutcome::Code(c)) => format!("code:{c}"),
            Some(ExitOutcome::Signal(s)) => format!("signal:{s}"),
            None => "absent".into(),
        },
    );
    obs.check("launcher_timed_out", false, run.launcher_timed_out);
    obs.check(
        "failure_exit_code_from_launcher_log",
        FAILURE_EXIT_CODE,
        opt(&run.launcher_logged_failure_code),
    );
}

/// Attempt 0: rank 1 wrote the failure marker and rank 0 saw it before the teardown.
fn observe_failed_attempt(obs: &mut Observation, run: &ElasticRun) {
    let marker_ok = run
        .marker
        .as_ref()
        .is_some_and(|m| m.rank == 1 && m.restart_count == 0 && m.exit_code == FAILURE_EXIT_CODE);
    obs.check("marker_written_by_rank1_on_attempt0", true, marker_ok);
    let rank0_saw = run
        .rank0_attempt0
        .as_ref()
        .is_some_and(|r| r.rank == 0 && r.restart_count == 0 && r.saw_marker);
    obs.check("rank0_saw_marker_before_teardown", true, rank0_saw);
}

/// The restarted attempt: every rank loaded the expected generation and reproduced the
/// expected next step.
fn observe_restarted_attempt(
    obs: &mut Observation,
    run: &ElasticRun,
    expected: &ElasticExpectation,
) {
    obs.check("final_reports", WORLD_SIZE, run.finals.len());
    let next_root = expected.next.logical_state_root();
    for rank in 0..WORLD_SIZE {
        let report = run
            .finals
            .iter()
            .find(|r| r.rank == rank && r.restart_count >= 1);
        observe_restarted_rank(obs, rank, report, expected, next_root);
    }
}

fn observe_restarted_rank(
    obs: &mut Observation,
    rank: u32,
    report: Option<&WorkerReport>,
    expected: &ElasticExpectation,
    next_root: Digest,
) {
    type Field = fn(&WorkerReport) -> String;
    let checks: [(&str, String, Field); 10] = [
        ("restart_count", 1.to_string(), |r| {
            r.restart_count.to_string()
        }),
        ("max_restarts", MAX_RESTARTS.to_string(), |r| {
            r.max_restarts.to_string()
        }),
        ("world_size", WORLD_SIZE.to_string(), |r| {
            r.world_size.to_string()
        }),
        ("loaded_generation", expected.generation.to_string(), |r| {
            opt(&r.loaded_generation)
        }),
        (
            "parameters_sha256",
            slot_sha256(&expected.state, |c| c.parameters()).to_string(),
            |r| opt(&r.parameters_sha256),
        ),
        (
            "optimizer_sha256",
            optimizer_sha256(&expected.state).to_string(),
            |r| opt(&r.optimizer_sha256),
        ),
        ("cursor", expected.state.cursor().to_string(), |r| {
            opt(&r.cursor)
        }),
        (
            "loaded_root",
            expected.state.logical_state_root().to_string(),
            |r| opt(&r.loaded_root),
        ),
        ("next_root", next_root.to_string(), |r| opt(&r.next_root)),
        (
            "next_ledger_digest",
            expected.next.ledger_digest().to_string(),
            |r| opt(&r.next_ledger_digest),
        ),
    ];
    for (name, expected_value, field) in checks {
        obs.check(
            &format!("rank{rank}_{name}"),
            expected_value,
            report.map_or("absent".to_owned(), field),
        );
    }
}

/// No promotion: commit records, LATEST and staging are as before, and nothing at all was
/// written to the store (observed from the store's whole tree, not from the workers).
fn observe_store_unchanged(obs: &mut Observation, run: &ElasticRun) {
    let receipts = |r: &Option<(Digest, Option<Digest>)>| r.map(|(c, _)| c.to_hex());
    let latest = |r: &Option<(Digest, Option<Digest>)>| r.map(|(_, l)| opt(&l));
    obs.check(
        "commit_receipts_sha256",
        opt(&receipts(&run.receipts_before)),
        opt(&receipts(&run.receipts_after)),
    );
    obs.check(
        "latest_sha256",
        opt(&latest(&run.receipts_before)),
        opt(&latest(&run.receipts_after)),
    );
    obs.check("staging_entries", run.staging_before, run.staging_after);
    let attempted = match (run.store_tree_before, run.store_tree_after) {
        (Some(before), Some(after)) => before != after,
        // Not observed is not evidence of no attempt.
        _ => true,
    };
    obs.check("publish_attempted", false, attempted);
    obs.check("completed", true, run.launcher_exit.is_some());
}

/// Finds "failed (exitcode: N) local_rank: 1" in the launcher's log.
pub fn logged_failure_code(log: &str, local_rank: u32) -> Option<i32> {
    let needle = format!(") local_rank: {local_rank} ");
    log.lines().find_map(|line| {
        let start = line.find("failed (exitcode: ")? + "failed (exitcode: ".len();
        let rest = &line[start..];
        let end = rest.find(')')?;
        if !rest[end..].starts_with(&needle) {
            return None;
        }
        rest[..end].trim().parse().ok()
    })
}
