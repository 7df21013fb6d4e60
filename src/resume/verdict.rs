//! Judging runs against the reference: where each restart resumed, and whether every
//! step it reported equals the reference's record of that step, component by component.
use std::collections::{BTreeMap, BTreeSet};

use super::channel::{Record, RecordKind};

/// The reference run's step records by (step, rank).
#[derive(Debug)]
pub struct Reference {
    by_step: BTreeMap<(u64, u32), Record>,
    /// The first step it reported.
    pub first_step: u64,
    /// The last step it reported.
    pub last_step: u64,
}

impl Reference {
    /// The reference of `records`; `None` if there is no step record.
    pub fn new(records: &[Record]) -> Option<Self> {
        let steps: Vec<&Record> = records
            .iter()
            .filter(|r| r.kind == RecordKind::Step)
            .collect();
        let first_step = steps.iter().map(|r| r.step).min()?;
        let last_step = steps.iter().map(|r| r.step).max()?;
        let by_step = steps
            .into_iter()
            .map(|r| ((r.step, r.rank), r.clone()))
            .collect();
        Some(Reference {
            by_step,
            first_step,
            last_step,
        })
    }

    /// The number of distinct steps it reported.
    pub fn step_count(&self) -> usize {
        self.by_step
            .keys()
            .map(|(step, _)| step)
            .collect::<BTreeSet<_>>()
            .len()
    }
}

/// The first step record that differs from the reference.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Divergence {
    /// The step.
    pub step: u64,
    /// The reporting rank.
    pub rank: u32,
    /// The components whose digests differ, by name (`param.<name>`,
    /// `optimizer.<name>.<slot>`, `scheduler`, `rng.<generator>`, `batch`, `loss`, ...).
    pub components: Vec<String>,
    /// Components the run reported that the reference did not, or the reverse.
    pub unmatched_components: Vec<String>,
    /// Whether the reference has no record of this step and rank at all.
    pub missing_in_reference: bool,
}

/// Step records of one run compared with the reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Comparison {
    /// Step records compared component by component.
    pub steps_compared: usize,
    /// The first that differs, if any.
    pub first_divergence: Option<Divergence>,
}

fn diverges(reference: Option<&Record>, record: &Record) -> Option<Divergence> {
    let components = record.components.as_ref()?;
    let Some(expected) = reference else {
        return Some(Divergence {
            step: record.step,
            rank: record.rank,
            components: Vec::new(),
            unmatched_components: Vec::new(),
            missing_in_reference: true,
        });
    };
    // A step the reference skipped (`--every`) cannot be compared.
    let expected = expected.components.as_ref()?;
    let differing: Vec<String> = components
        .iter()
        .filter(|(name, digest)| expected.get(*name).is_some_and(|e| e != *digest))
        .map(|(name, _)| name.clone())
        .collect();
    let unmatched: Vec<String> = components
        .keys()
        .filter(|name| !expected.contains_key(*name))
        .chain(
            expected
                .keys()
                .filter(|name| !components.contains_key(*name)),
        )
        .cloned()
        .collect();
    if differing.is_empty() && unmatched.is_empty() {
        return None;
    }
    Some(Divergence {
        step: record.step,
        rank: record.rank,
        components: differing,
        unmatched_components: unmatched,
        missing_in_reference: false,
    })
}

/// Compares every step record of `records` that carries components with the reference.
pub fn compare(reference: &Reference, records: &[Record]) -> Comparison {
    let mut comparison = Comparison::default();
    for record in records.iter().filter(|r| r.kind == RecordKind::Step) {
        let expected = reference.by_step.get(&(record.step, record.rank));
        if record.components.is_some() && expected.is_some_and(|e| e.components.is_some()) {
            comparison.steps_compared += 1;
        }
        if let Some(divergence) = diverges(expected, record) {
            comparison.first_divergence = Some(divergence);
            break;
        }
    }
    comparison
}

/// Where a restart resumed, against the last step acknowledged with `saved` before the
/// kill (a restart should report `acknowledged + 1` first, or the reference's first step
/// when nothing was acknowledged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resumed {
    /// At the expected step.
    Exact,
    /// Earlier: acknowledged work was lost and is done again.
    LostWork,
    /// Later: steps were skipped.
    SkippedSteps,
    /// The restart reported no step at all.
    NoSteps,
}

/// Judges a restart's first step against the expected one. A kill inside the save of
/// step `s` (reported `saving`, never `saved`) may have left that checkpoint durable, so
/// resuming at `s + 1` (`also_exact`) is exact too.
pub fn resumed(first_step: Option<u64>, expected: u64, also_exact: Option<u64>) -> Resumed {
    match first_step {
        None => Resumed::NoSteps,
        Some(step) if step == expected || Some(step) == also_exact => Resumed::Exact,
        Some(step) if step < expected => Resumed::LostWork,
        Some(_) => Resumed::SkippedSteps,
    }
}

/// The first step a run reported.
pub fn first_step(records: &[Record]) -> Option<u64> {
    records
        .iter()
        .find(|r| r.kind == RecordKind::Step)
        .map(|r| r.step)
}

/// The last step a run reported.
pub fn last_step(records: &[Record]) -> Option<u64> {
    records
        .iter()
        .filter(|r| r.kind == RecordKind::Step)
        .map(|r| r.step)
        .max()
}

/// The probe's own cost over a run's step records.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ProbeOverhead {
    /// Step records that carried components (digested steps).
    pub digested_steps: usize,
    /// Mean probe time of a digested step, in microseconds.
    pub mean_us: f64,
    /// Longest probe time of any step, in microseconds.
    pub max_us: f64,
    /// Mean wall time between consecutive step records of rank 0, in milliseconds.
    pub mean_step_interval_ms: f64,
}

/// The probe's cost as the reference run reported it.
pub fn probe_overhead(records: &[Record]) -> ProbeOverhead {
    let steps: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Step)
        .collect();
    let digested: Vec<u64> = steps
        .iter()
        .filter(|r| r.components.is_some())
        .filter_map(|r| r.probe_ns)
        .collect();
    let mean_us = match digested.len() {
        0 => 0.0,
        n => digested.iter().sum::<u64>() as f64 / n as f64 / 1_000.0,
    };
    let max_us = steps.iter().filter_map(|r| r.probe_ns).max().unwrap_or(0) as f64 / 1_000.0;
    let rank0: Vec<u64> = steps
        .iter()
        .filter(|r| r.rank == 0)
        .map(|r| r.observed_ms)
        .collect();
    let mean_step_interval_ms = match (rank0.first(), rank0.last()) {
        (Some(first), Some(last)) if rank0.len() > 1 => {
            (last - first) as f64 / (rank0.len() - 1) as f64
        }
        _ => 0.0,
    };
    ProbeOverhead {
        digested_steps: digested.len(),
        mean_us,
        max_us,
        mean_step_interval_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: u64, loss: &str) -> Record {
        let components = [
            ("loss".to_owned(), loss.to_owned()),
            ("param.w".to_owned(), "aa".to_owned()),
        ];
        Record {
            kind: RecordKind::Step,
            step,
            rank: 0,
            world: 1,
            components: Some(components.into_iter().collect()),
            probe_ns: Some(1_000),
            observed_ms: step * 10,
        }
    }

    #[test]
    fn the_first_differing_component_is_named() {
        let reference = Reference::new(&[step(1, "a"), step(2, "b"), step(3, "c")]).expect("steps");
        assert_eq!(
            compare(&reference, &[step(2, "b"), step(3, "c")]).first_divergence,
            None
        );
        let comparison = compare(&reference, &[step(2, "b"), step(3, "x"), step(4, "y")]);
        let divergence = comparison.first_divergence.expect("diverges");
        assert_eq!(
            (divergence.step, divergence.components),
            (3, vec!["loss".to_owned()])
        );
        let beyond = compare(&reference, &[step(4, "d")])
            .first_divergence
            .expect("diverges");
        assert!(beyond.missing_in_reference);
    }

    #[test]
    fn resume_points_are_judged_against_the_acknowledged_save() {
        assert_eq!(resumed(Some(4), 4, None), Resumed::Exact);
        assert_eq!(resumed(Some(3), 4, None), Resumed::LostWork);
        assert_eq!(resumed(Some(5), 4, None), Resumed::SkippedSteps);
        assert_eq!(resumed(Some(7), 4, Some(7)), Resumed::Exact);
        assert_eq!(resumed(None, 4, None), Resumed::NoSteps);
    }
}
