//! The recorded history of a partition run and its checker. Pure data and rules: the
//! fast lane checks the rules on forged histories, the objectstore lane on real ones.
//!
//! Rules (each broken one is a [`Violation`]):
//! - every operation ended within its deadline plus the kill grace (nothing hangs);
//! - every failure is typed (the CLI's JSON `error.kind`), or a timeout at its deadline,
//!   or a kill the workload itself dealt;
//! - no acknowledged generation is lost: after healing, the final recovery lists it, as
//!   valid or as a reported split brain, and a valid one verifies with the acknowledged root;
//! - no recovery is stale: one that started after an acknowledgement ended selects that
//!   generation or a later one (a recovery that trusts `refs/LATEST` breaks this);
//! - a split brain (two acknowledged records of one generation) is reported by the final
//!   recovery and never selected by a recovery that started after both acknowledgements;
//! - every recovery answer verifies: it is the highest generation its own scan verified
//!   (not one its scan reported as a split brain), and after healing its generation loads
//!   with its root, or the final recovery reports that generation as a split brain.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What an operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// `store publish-synthetic`.
    Publish,
    /// `store reshard`.
    Reshard,
    /// `store recover`.
    Recover,
    /// `store verify`.
    Verify,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// A publish or reshard acknowledged a commit.
    Committed {
        /// The committed generation.
        generation: u64,
        /// SHA-256 of its commit record.
        commit_digest: String,
        /// Its logical-state root.
        root: String,
    },
    /// A recovery answered.
    Recovered {
        /// The selected generation and its root, if any.
        selected: Option<(u64, String)>,
        /// Every generation that verified.
        valid_generations: Vec<u64>,
        /// Generations reported as split brains.
        split_brains: Vec<u64>,
        /// The generation `refs/LATEST` named (a hint recovery must not follow).
        #[serde(default)]
        latest: Option<u64>,
    },
    /// A verify loaded a generation.
    Verified {
        /// The generation.
        generation: u64,
        /// Its root.
        root: String,
    },
    /// The command failed with a typed error.
    Failed {
        /// The error's kind.
        kind: String,
        /// The generation a split-brain error names.
        generation: Option<u64>,
    },
    /// The command failed without a typed error.
    Untyped {
        /// How it ended.
        exit: String,
    },
    /// Killed at its deadline.
    TimedOut,
    /// Killed by the workload on purpose.
    KilledByWorkload,
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// Its index in the history.
    pub id: usize,
    /// The workload thread that ran it.
    pub actor: String,
    /// What it was.
    pub kind: OpKind,
    /// Start, in milliseconds since the run started.
    pub started_ms: u64,
    /// End, in milliseconds since the run started.
    pub ended_ms: u64,
    /// Its deadline, in milliseconds after its start.
    pub deadline_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// A run's history: the operations under faults, then, healed, the final recovery and
/// the verifies of every acknowledged or recovered generation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    /// Every operation, in start order (the final ones included).
    pub operations: Vec<Operation>,
    /// The id of the final recovery (after healing).
    pub final_recovery: Option<usize>,
    /// How long after a deadline a killed operation may take to be reaped, in ms.
    pub kill_grace_ms: u64,
}

/// A broken rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "violation", rename_all = "kebab-case")]
pub enum Violation {
    /// An operation outlived its deadline plus the grace.
    Hung { op: usize, took_ms: u64 },
    /// A failure without a typed error.
    UntypedFailure { op: usize, exit: String },
    /// No final recovery after healing, or it failed.
    NoFinalRecovery,
    /// An acknowledged generation the final recovery does not list.
    LostAcknowledged { op: usize, generation: u64 },
    /// An acknowledged generation whose final verify is missing or has another root.
    AcknowledgedRootDiffers { op: usize, generation: u64 },
    /// A recovery that selected less than an acknowledgement ended before it started.
    StaleRecovery {
        op: usize,
        selected: Option<u64>,
        acknowledged: u64,
    },
    /// A recovery selected a generation with two acknowledged records.
    SplitBrainChosen { op: usize, generation: u64 },
    /// Two acknowledged records of one generation the final recovery does not report.
    SplitBrainUnreported { generation: u64 },
    /// A recovery whose answer is not the highest generation its own scan verified (or
    /// is one its scan reported as a split brain): RFC 0001 §9.4 step 5.
    SelectionNotHighestValid {
        op: usize,
        selected: Option<u64>,
        highest_valid: Option<u64>,
    },
    /// A recovery answer that did not verify after healing.
    RecoveryUnverified { op: usize, generation: u64 },
}

/// The checker's verdict.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether no rule is broken.
    pub passed: bool,
    /// Acknowledged commits.
    pub acknowledged: usize,
    /// Generations with two or more acknowledged records.
    pub split_brains: Vec<u64>,
    /// Operations per outcome name.
    pub outcomes: BTreeMap<String, usize>,
    /// Every broken rule.
    pub violations: Vec<Violation>,
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Committed { .. } => "committed",
        Outcome::Recovered { .. } => "recovered",
        Outcome::Verified { .. } => "verified",
        Outcome::Failed { .. } => "failed-typed",
        Outcome::Untyped { .. } => "failed-untyped",
        Outcome::TimedOut => "timed-out",
        Outcome::KilledByWorkload => "killed-by-workload",
    }
}

struct Ack<'a> {
    op: &'a Operation,
    generation: u64,
    commit_digest: &'a str,
    root: &'a str,
}

fn acks(history: &History) -> Vec<Ack<'_>> {
    history
        .operations
        .iter()
        .filter_map(|op| match &op.outcome {
            Outcome::Committed {
                generation,
                commit_digest,
                root,
            } => Some(Ack {
                op,
                generation: *generation,
                commit_digest,
                root,
            }),
            _ => None,
        })
        .collect()
}

/// Generations with two or more acknowledged records, each with the time the second ended.
fn contested(acks: &[Ack<'_>]) -> BTreeMap<u64, u64> {
    let mut by_generation: BTreeMap<u64, Vec<(&str, u64)>> = BTreeMap::new();
    for ack in acks {
        by_generation
            .entry(ack.generation)
            .or_default()
            .push((ack.commit_digest, ack.op.ended_ms));
    }
    by_generation
        .into_iter()
        .filter_map(|(generation, mut records)| {
            records.sort_by_key(|(_, ended)| *ended);
            records.dedup_by_key(|(digest, _)| *digest);
            (records.len() > 1).then(|| (generation, records[1].1))
        })
        .collect()
}

fn check_bounds(history: &History, violations: &mut Vec<Violation>) {
    for op in &history.operations {
        let took_ms = op.ended_ms.saturating_sub(op.started_ms);
        if took_ms > op.deadline_ms + history.kill_grace_ms {
            violations.push(Violation::Hung { op: op.id, took_ms });
        }
        if let Outcome::Untyped { exit } = &op.outcome {
            violations.push(Violation::UntypedFailure {
                op: op.id,
                exit: exit.clone(),
            });
        }
    }
}

fn final_verified_root(history: &History, generation: u64, after_ms: u64) -> Option<&str> {
    history
        .operations
        .iter()
        .rev()
        .find_map(|op| match &op.outcome {
            Outcome::Verified {
                generation: g,
                root,
            } if *g == generation && op.started_ms >= after_ms => Some(root.as_str()),
            _ => None,
        })
}

fn check_recoveries(
    history: &History,
    acks: &[Ack<'_>],
    contested: &BTreeMap<u64, u64>,
    final_split: &BTreeSet<u64>,
    final_started_ms: u64,
    violations: &mut Vec<Violation>,
) {
    for op in &history.operations {
        let Outcome::Recovered { selected, .. } = &op.outcome else {
            continue;
        };
        let selected_generation = selected.as_ref().map(|(g, _)| *g);
        if let Outcome::Recovered {
            valid_generations,
            split_brains,
            ..
        } = &op.outcome
        {
            let highest_valid = valid_generations.iter().copied().max();
            let contested = selected_generation.is_some_and(|g| split_brains.contains(&g));
            if selected_generation != highest_valid || contested {
                violations.push(Violation::SelectionNotHighestValid {
                    op: op.id,
                    selected: selected_generation,
                    highest_valid,
                });
            }
        }
        if let Some(ack) = acks
            .iter()
            .filter(|ack| ack.op.ended_ms < op.started_ms)
            .max_by_key(|ack| ack.generation)
        {
            if selected_generation.is_none_or(|g| g < ack.generation) {
                violations.push(Violation::StaleRecovery {
                    op: op.id,
                    selected: selected_generation,
                    acknowledged: ack.generation,
                });
            }
        }
        let Some((generation, root)) = selected else {
            continue;
        };
        if contested
            .get(generation)
            .is_some_and(|second_ended| *second_ended < op.started_ms)
        {
            violations.push(Violation::SplitBrainChosen {
                op: op.id,
                generation: *generation,
            });
        }
        let verified = final_verified_root(history, *generation, final_started_ms);
        if verified != Some(root.as_str()) && !final_split.contains(generation) {
            violations.push(Violation::RecoveryUnverified {
                op: op.id,
                generation: *generation,
            });
        }
    }
}

/// Checks `history` against every rule.
pub fn check(history: &History) -> Verdict {
    let mut violations = Vec::new();
    let mut outcomes = BTreeMap::new();
    for op in &history.operations {
        *outcomes
            .entry(outcome_name(&op.outcome).to_owned())
            .or_insert(0) += 1;
    }
    check_bounds(history, &mut violations);
    let acks = acks(history);
    let contested = contested(&acks);
    let final_op = history
        .final_recovery
        .and_then(|id| history.operations.iter().find(|op| op.id == id));
    let (final_valid, final_split, final_started_ms) = match final_op.map(|op| (&op.outcome, op)) {
        Some((
            Outcome::Recovered {
                valid_generations,
                split_brains,
                ..
            },
            op,
        )) => (
            valid_generations.iter().copied().collect::<BTreeSet<_>>(),
            split_brains.iter().copied().collect::<BTreeSet<_>>(),
            op.started_ms,
        ),
        _ => {
            violations.push(Violation::NoFinalRecovery);
            (BTreeSet::new(), BTreeSet::new(), u64::MAX)
        }
    };
    if final_started_ms != u64::MAX {
        for ack in &acks {
            if final_split.contains(&ack.generation) {
                continue;
            }
            if !final_valid.contains(&ack.generation) {
                violations.push(Violation::LostAcknowledged {
                    op: ack.op.id,
                    generation: ack.generation,
                });
            } else if final_verified_root(history, ack.generation, final_started_ms)
                != Some(ack.root)
            {
                violations.push(Violation::AcknowledgedRootDiffers {
                    op: ack.op.id,
                    generation: ack.generation,
                });
            }
        }
        for generation in contested.keys() {
            if !final_split.contains(generation) {
                violations.push(Violation::SplitBrainUnreported {
                    generation: *generation,
                });
            }
        }
    }
    check_recoveries(
        history,
        &acks,
        &contested,
        &final_split,
        final_started_ms,
        &mut violations,
    );
    Verdict {
        passed: violations.is_empty(),
        acknowledged: acks.len(),
        split_brains: contested.keys().copied().collect(),
        outcomes,
        violations,
    }
}

/// The history a recovery that trusts `refs/LATEST` would have produced from the same
/// runs: each answer replaced by the generation LATEST named (with that generation's
/// acknowledged root where one is known). The checker must fail it wherever LATEST
/// disagreed with the scan.
pub fn trusting_latest(history: &History) -> History {
    let roots: BTreeMap<u64, String> = acks(history)
        .iter()
        .map(|ack| (ack.generation, ack.root.to_owned()))
        .collect();
    let mut mutant = history.clone();
    for op in &mut mutant.operations {
        if let Outcome::Recovered {
            selected, latest, ..
        } = &mut op.outcome
        {
            *selected = latest.map(|g| (g, roots.get(&g).cloned().unwrap_or_default()));
        }
    }
    mutant
}

/// How many recoveries saw `refs/LATEST` name another generation than the one they
/// selected: where a LATEST-trusting recovery would have answered otherwise.
pub fn latest_disagreements(history: &History) -> usize {
    history
        .operations
        .iter()
        .filter(|op| match &op.outcome {
            Outcome::Recovered {
                selected, latest, ..
            } => selected.as_ref().map(|(g, _)| *g) != *latest,
            _ => false,
        })
        .count()
}
