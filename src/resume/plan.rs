//! When an interrupted run is killed.
//!
//! - After step K: the probe holds (sleeps) right after writing its step-K record when
//!   `SHARDLIFT_PROBE_HOLD_AFTER_STEP=K`, and the supervisor kills the process tree once
//!   every rank has reported step K. The kill is deterministic: the run never gets past
//!   step K, whatever the supervisor's polling latency.
//! - At a seeded instant: an instant `t` of the reference run's timeline is drawn, and
//!   the run is killed `t - t_e` after it reports its `n`-th record, where record `n`
//!   (observed at `t_e`) is the last one the reference had reported by `t`. Anchoring on
//!   records keeps a kill at the same point of the work despite start-up jitter (a
//!   Python import can take seconds). Every second instant is drawn inside one of the
//!   reference's checkpoint saves (from a `saving` record to its `saved`), so that some
//!   kills land inside a save when the script reports its saves.
use crate::core::rng::SplitMix64;

use super::channel::{Record, RecordKind};

/// How an interrupted run is ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "plan")]
pub enum KillPlan {
    /// Kill the whole tree right after every rank reported step `step`.
    AfterStep {
        /// The step.
        step: u64,
    },
    /// Kill `delay_ms` after the run's `after_records`-th record (or its start, for 0).
    Instant {
        /// The seeded instant on the reference's timeline, in milliseconds.
        reference_at_ms: u64,
        /// The number of records the run must have reported first.
        after_records: usize,
        /// The delay after that record, in milliseconds.
        delay_ms: u64,
        /// Whether the instant was drawn inside one of the reference's saves.
        aimed_inside_save: bool,
    },
}

impl KillPlan {
    /// The step the probe should hold after (deterministic kills only).
    pub fn hold_after_step(&self) -> Option<u64> {
        match self {
            KillPlan::AfterStep { step } => Some(*step),
            KillPlan::Instant { .. } => None,
        }
    }

    /// A name for the plan's directory and reports.
    pub fn name(&self, index: usize) -> String {
        match self {
            KillPlan::AfterStep { step } => format!("kill-after-step-{step}"),
            KillPlan::Instant { .. } => format!("random-kill-{index}"),
        }
    }
}

/// The reference's checkpoint saves: (observed `saving`, observed `saved`) in ms.
pub fn save_windows(records: &[Record]) -> Vec<(u64, u64)> {
    let mut windows = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if record.kind != RecordKind::Saving {
            continue;
        }
        let end = records[index + 1..].iter().find(|later| {
            later.kind == RecordKind::Saved
                && later.step == record.step
                && later.rank == record.rank
        });
        if let Some(end) = end {
            windows.push((record.observed_ms, end.observed_ms));
        }
    }
    windows
}

/// `count` seeded kill instants over a reference run that lasted `duration_ms` and
/// reported `records` (in the order they were read).
pub fn random_instants(
    records: &[Record],
    duration_ms: u64,
    count: usize,
    seed: u64,
) -> Vec<KillPlan> {
    let windows = save_windows(records);
    (0..count)
        .map(|index| {
            let mut rng = SplitMix64::keyed(seed, "resume-test.kill-instant", index as u64);
            let inside_save = index % 2 == 1 && !windows.is_empty();
            let at_ms = if inside_save {
                let (start, end) = windows[rng.below(windows.len() as u64) as usize];
                start + rng.below((end - start).max(1))
            } else {
                rng.below(duration_ms.max(1))
            };
            let after_records = records
                .iter()
                .take_while(|r| r.observed_ms <= at_ms)
                .count();
            let anchor_ms = match after_records {
                0 => 0,
                n => records[n - 1].observed_ms,
            };
            KillPlan::Instant {
                reference_at_ms: at_ms,
                after_records,
                delay_ms: at_ms - anchor_ms,
                aimed_inside_save: inside_save,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: RecordKind, step: u64, observed_ms: u64) -> Record {
        Record {
            kind,
            step,
            rank: 0,
            world: 1,
            components: None,
            probe_ns: None,
            observed_ms,
        }
    }

    fn timeline() -> Vec<Record> {
        vec![
            record(RecordKind::Step, 1, 100),
            record(RecordKind::Saving, 1, 110),
            record(RecordKind::Saved, 1, 190),
            record(RecordKind::Step, 2, 300),
        ]
    }

    #[test]
    fn instants_are_seeded_and_every_second_one_is_inside_a_save() {
        let plans = random_instants(&timeline(), 400, 6, 9);
        assert_eq!(plans, random_instants(&timeline(), 400, 6, 9));
        assert_ne!(plans, random_instants(&timeline(), 400, 6, 10));
        for (index, plan) in plans.iter().enumerate() {
            let KillPlan::Instant {
                reference_at_ms,
                after_records,
                delay_ms,
                aimed_inside_save,
            } = plan.clone()
            else {
                panic!("an instant plan");
            };
            assert_eq!(aimed_inside_save, index % 2 == 1);
            if aimed_inside_save {
                assert!((110..190).contains(&reference_at_ms), "{plan:?}");
                // Anchored on the `saving` record, the second one.
                assert_eq!(after_records, 2);
            }
            let anchor_ms = match after_records {
                0 => 0,
                n => timeline()[n - 1].observed_ms,
            };
            assert_eq!(anchor_ms + delay_ms, reference_at_ms);
        }
    }

    #[test]
    fn without_saves_every_instant_is_uniform() {
        let steps: Vec<Record> = timeline()
            .into_iter()
            .filter(|r| r.kind == RecordKind::Step)
            .collect();
        assert!(save_windows(&steps).is_empty());
        let plans = random_instants(&steps, 400, 4, 1);
        assert!(plans.iter().all(|p| matches!(
            p,
            KillPlan::Instant {
                aimed_inside_save: false,
                ..
            }
        )));
    }
}
