//! The partition run's history checker on forged histories (fast lane): a clean history
//! passes, and each broken rule is caught by a history that is internally consistent
//! except for that one bug. The real histories are checked in `objectstore_partitions`.
#[path = "partition_support/history.rs"]
mod history;

use history::{
    check, latest_disagreements, trusting_latest, History, OpKind, Operation, Outcome, Violation,
};

const ROOT_A: &str = "aa";
const ROOT_B: &str = "bb";
const ROOT_C: &str = "cc";

fn op(id: usize, kind: OpKind, started_ms: u64, ended_ms: u64, outcome: Outcome) -> Operation {
    Operation {
        id,
        actor: format!("actor-{id}"),
        kind,
        started_ms,
        ended_ms,
        deadline_ms: 10_000,
        outcome,
    }
}

fn committed(generation: u64, digest: &str, root: &str) -> Outcome {
    Outcome::Committed {
        generation,
        commit_digest: digest.into(),
        root: root.into(),
    }
}

fn recovered(selected: Option<(u64, &str)>, valid: &[u64], split: &[u64]) -> Outcome {
    Outcome::Recovered {
        selected: selected.map(|(g, r)| (g, r.to_owned())),
        valid_generations: valid.to_vec(),
        split_brains: split.to_vec(),
        latest: selected.map(|(g, _)| g),
    }
}

fn verified(generation: u64, root: &str) -> Outcome {
    Outcome::Verified {
        generation,
        root: root.into(),
    }
}

/// Two publishes (generations 0 and 1), a recovery between them that saw 0, a timeout, a
/// typed failure, then healed: the final recovery and a verify of each generation.
fn clean_history() -> History {
    History {
        operations: vec![
            op(0, OpKind::Publish, 0, 1_000, committed(0, "d0", ROOT_A)),
            op(
                1,
                OpKind::Recover,
                1_500,
                2_000,
                recovered(Some((0, ROOT_A)), &[0], &[]),
            ),
            op(2, OpKind::Publish, 2_000, 3_000, committed(1, "d1", ROOT_B)),
            op(3, OpKind::Publish, 3_000, 13_200, Outcome::TimedOut),
            op(
                4,
                OpKind::Recover,
                3_100,
                4_000,
                Outcome::Failed {
                    kind: "request".into(),
                    generation: None,
                },
            ),
            op(
                5,
                OpKind::Recover,
                20_000,
                20_500,
                recovered(Some((1, ROOT_B)), &[0, 1], &[]),
            ),
            op(6, OpKind::Verify, 20_500, 21_000, verified(0, ROOT_A)),
            op(7, OpKind::Verify, 21_000, 21_500, verified(1, ROOT_B)),
        ],
        final_recovery: Some(5),
        kill_grace_ms: 1_000,
    }
}

fn violations(history: &History) -> Vec<Violation> {
    let verdict = check(history);
    assert_eq!(verdict.passed, verdict.violations.is_empty());
    verdict.violations
}

#[test]
fn a_clean_history_passes() {
    let verdict = check(&clean_history());
    assert!(verdict.passed, "{:?}", verdict.violations);
    assert_eq!(verdict.acknowledged, 2);
    assert_eq!(verdict.outcomes.get("timed-out"), Some(&1));
}

#[test]
fn a_writer_that_acknowledges_before_its_record_landed_loses_a_generation() {
    // The writer said "generation 1" but its record never reached the store: the final
    // recovery (and everything after) knows generation 0 only.
    let mut history = clean_history();
    history.operations[5].outcome = recovered(Some((0, ROOT_A)), &[0], &[]);
    history.operations.truncate(7);
    assert!(violations(&history).contains(&Violation::LostAcknowledged {
        op: 2,
        generation: 1
    }));
}

#[test]
fn an_acknowledged_generation_with_another_root_is_caught() {
    let mut history = clean_history();
    history.operations[7].outcome = verified(1, ROOT_C);
    assert!(
        violations(&history).contains(&Violation::AcknowledgedRootDiffers {
            op: 2,
            generation: 1
        })
    );
}

#[test]
fn a_recovery_that_trusts_latest_is_stale() {
    // LATEST still named 0 (the publisher of 1 had not rewritten it yet, or lost the race
    // to write it): a recovery that follows it answers 0 after 1 was acknowledged.
    let mut history = clean_history();
    history.operations[4].outcome = recovered(Some((0, ROOT_A)), &[0], &[]);
    assert_eq!(
        violations(&history),
        vec![Violation::StaleRecovery {
            op: 4,
            selected: Some(0),
            acknowledged: 1
        }]
    );
}

#[test]
fn a_split_brain_chosen_by_a_recovery_is_caught() {
    let mut history = clean_history();
    // A second writer also acknowledged generation 1, with another record.
    history.operations[3] = op(
        3,
        OpKind::Publish,
        2_100,
        3_500,
        committed(1, "d1x", ROOT_C),
    );
    history.operations[4] = op(
        4,
        OpKind::Recover,
        4_000,
        4_500,
        recovered(Some((1, ROOT_B)), &[0, 1], &[]),
    );
    history.operations[5].outcome = recovered(Some((2, ROOT_A)), &[0, 2], &[1]);
    history.operations[7].outcome = verified(2, ROOT_A);
    let found = violations(&history);
    assert!(
        found.contains(&Violation::SplitBrainChosen {
            op: 4,
            generation: 1
        }),
        "{found:?}"
    );
}

#[test]
fn a_split_brain_the_final_recovery_does_not_report_is_caught() {
    let mut history = clean_history();
    history.operations[3] = op(
        3,
        OpKind::Publish,
        2_100,
        3_500,
        committed(1, "d1x", ROOT_C),
    );
    let found = violations(&history);
    assert!(
        found.contains(&Violation::SplitBrainUnreported { generation: 1 }),
        "{found:?}"
    );
}

#[test]
fn a_reported_split_brain_passes() {
    // Two writers acknowledged generation 1 with different records; recovery refuses to
    // choose (a typed split-brain error), a healing publish commits 2, and the final
    // recovery reports 1 as a split brain below its selection.
    let mut history = clean_history();
    history.operations[3] = op(
        3,
        OpKind::Publish,
        2_100,
        3_500,
        committed(1, "d1x", ROOT_C),
    );
    history.operations[4] = op(
        4,
        OpKind::Recover,
        4_000,
        4_500,
        Outcome::Failed {
            kind: "split-brain".into(),
            generation: Some(1),
        },
    );
    history.operations[5] = op(
        5,
        OpKind::Publish,
        19_000,
        19_500,
        committed(2, "d2", ROOT_A),
    );
    history.operations[7] = op(7, OpKind::Verify, 21_000, 21_500, verified(2, ROOT_A));
    history.operations.push(op(
        8,
        OpKind::Recover,
        20_000,
        20_500,
        recovered(Some((2, ROOT_A)), &[0, 2], &[1]),
    ));
    history.final_recovery = Some(8);
    let verdict = check(&history);
    assert!(verdict.passed, "{:?}", verdict.violations);
    assert_eq!(verdict.split_brains, vec![1]);
}

#[test]
fn an_operation_past_its_deadline_hangs() {
    let mut history = clean_history();
    history.operations[3].ended_ms = 3_000 + 10_000 + 1_001;
    assert_eq!(
        violations(&history),
        vec![Violation::Hung {
            op: 3,
            took_ms: 11_001
        }]
    );
}

#[test]
fn an_untyped_failure_is_caught() {
    let mut history = clean_history();
    history.operations[4].outcome = Outcome::Untyped {
        exit: "exit status 101".into(),
    };
    assert_eq!(
        violations(&history),
        vec![Violation::UntypedFailure {
            op: 4,
            exit: "exit status 101".into()
        }]
    );
}

#[test]
fn a_recovery_answer_that_does_not_verify_is_caught() {
    let mut history = clean_history();
    history.operations[1].outcome = recovered(Some((0, ROOT_C)), &[0], &[]);
    assert_eq!(
        violations(&history),
        vec![Violation::RecoveryUnverified {
            op: 1,
            generation: 0
        }]
    );
}

#[test]
fn a_missing_final_recovery_is_caught() {
    let mut history = clean_history();
    history.final_recovery = None;
    assert!(violations(&history).contains(&Violation::NoFinalRecovery));
}

#[test]
fn the_latest_trusting_variant_of_a_history_fails_where_latest_lagged() {
    // The same runs, but LATEST still named 0 when the final recovery listed 0 and 1 (the
    // publisher of 1 was killed after its commit record, before LATEST): the real
    // recovery passes, the variant that follows LATEST is stale.
    let mut history = clean_history();
    if let Outcome::Recovered { latest, .. } = &mut history.operations[5].outcome {
        *latest = Some(0);
    }
    assert!(check(&history).passed);
    assert_eq!(latest_disagreements(&history), 1);
    let found = check(&trusting_latest(&history)).violations;
    assert!(
        found.contains(&Violation::StaleRecovery {
            op: 5,
            selected: Some(0),
            acknowledged: 1
        }),
        "{found:?}"
    );
}

#[test]
fn a_recovery_that_answers_below_its_own_scan_is_caught() {
    // Its scan verified 0 and 1, yet it answered 0 (as one that follows a lagging LATEST
    // would); no acknowledgement had ended before it started, so only this rule sees it.
    let mut history = clean_history();
    history.operations[2].ended_ms = 2_500;
    history.operations[4] = op(
        4,
        OpKind::Recover,
        2_100,
        2_400,
        recovered(Some((0, ROOT_A)), &[0, 1], &[]),
    );
    assert_eq!(
        violations(&history),
        vec![Violation::SelectionNotHighestValid {
            op: 4,
            selected: Some(0),
            highest_valid: Some(1)
        }]
    );
}
