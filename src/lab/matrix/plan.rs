//! The matrix's plan: the actions a power-loss scenario records, their enumeration limits, and what a scenario reports.
use super::*;

/// What a writer run under the power-loss model is.
#[derive(Clone, Debug)]
pub enum Action {
    /// Publish this state at this topology.
    Publish(Box<LogicalState>, Topology),
    /// Reshard this generation to this topology.
    Reshard(u64, Topology),
    /// Publish into a store whose layout directories a killed writer created and never
    /// made durable (they exist, empty, but a power cut may still remove them).
    PublishOverKilledLayout(Box<LogicalState>, Topology),
    /// Rewrite LATEST for the selected generation of a store that lost it.
    RepairLatest,
    /// Publish this state at this topology with nothing observing the object barriers,
    /// so the writer installs objects from several threads (RFC 0001 §4); the recording
    /// is the interleaving that happened.
    PublishConcurrent(Box<LogicalState>, Topology),
    /// Publish this state at this topology into a store where a killed writer already
    /// installed every object of it (it stopped at its commit record) and none of those
    /// objects' names is durable (nor, with [`KilledWriterFiles::NothingSynced`], their
    /// data or the fan-out directories it created): each is found at its address, so the
    /// publish's found-object fsync (RFC 0001 §4 step 3) and its step 4 alone make them
    /// durable. With `concurrent`, nothing observes the object barriers, so the writer
    /// installs from several threads (as [`Action::PublishConcurrent`]); without, in order.
    PublishOverKilledObjects {
        /// The state both writers publish.
        state: Box<LogicalState>,
        /// Its topology.
        topology: Topology,
        /// What the killed writer had made durable of its files.
        files: KilledWriterFiles,
        /// Whether the publish may install its objects concurrently.
        concurrent: bool,
    },
    /// Publish this state at this topology (a genesis publish) through the bare relative
    /// root `store`, the recorded directory standing for the working directory: its
    /// parent is `.`, which the writer must fsync like any other parent.
    PublishBareRelativeRoot(Box<LogicalState>, Topology),
    /// Publish this state at this topology into a store holding wrong bytes (the right
    /// length, one byte changed) at the address of one of its objects: the writer finds
    /// a file there that does not verify and must replace it.
    PublishOverWrongBytes(Box<LogicalState>, Topology),
    /// Two writers race for one generation: the second claims it, then the first
    /// publishes it whole, then the second goes on to its commit, which the protocol
    /// refuses (generation taken). The candidate is the first writer's.
    PublishRacing {
        /// The first writer's state, which commits.
        first: Box<LogicalState>,
        /// The second writer's state, whose commit finds the generation taken.
        second: Box<LogicalState>,
        /// Both writers' topology.
        topology: Topology,
    },
    /// Repair LATEST after a writer of this state at this topology was killed between its
    /// commit record's rename and its `commits/` fsync: the record is visible and verifies
    /// but its name is not durable, and LATEST still names the previous generation.
    RepairAfterKilledCommit(Box<LogicalState>, Topology),
}

/// Subset enumeration for a concurrent publish, and for one over a killed writer's
/// objects: its renames (or the killed writer's creates) all stay pending until the run's
/// one step 4, so every subset of up to ten of them (the default) would be 1 024 images
/// per crash point; from five on, each point gets the prefixes, every all-but-one and 16
/// seeded random subsets of what is pending.
pub const CONCURRENT_LIMITS: EnumerationLimits = EnumerationLimits {
    all_subsets_up_to: 4,
    samples: 16,
    seed: 0x5eed,
};

/// How the crash states of `action`'s run are enumerated, seeded with `seed`: the
/// concurrent limits where many operations stay pending at once (a concurrent publish's
/// renames, a killed writer's creates), the default elsewhere.
pub fn limits_for(action: &Action, seed: u64) -> EnumerationLimits {
    let limits = match action {
        Action::PublishConcurrent(..) | Action::PublishOverKilledObjects { .. } => {
            CONCURRENT_LIMITS
        }
        _ => EnumerationLimits::default(),
    };
    EnumerationLimits { seed, ..limits }
}

/// The publish over a killed writer's objects that the matrix and the found-object mutants
/// run on a base holding generation 0: a four-worker publish, in order, of a 12-object
/// state (32 768-element chunks, as the concurrent scenario's) that the killed writer had
/// installed whole, leaving `files` durable of it. With the matrix's 39-object state the
/// killed writer's pending creates give 21 359 distinct states (10 minutes); these 12
/// give about 2 600.
pub fn over_killed_objects(seed: u64, files: KilledWriterFiles) -> Result<Action, LabError> {
    Ok(Action::PublishOverKilledObjects {
        state: Box::new(synthetic_state(seed, 2, 32_768)),
        topology: topology(4)?,
        files,
        concurrent: false,
    })
}

/// The publish over generation 0 onto wrong bytes at one of its objects' addresses that
/// the matrix and the `trust-found-object-bytes` mutant run: a four-worker publish of a
/// 12-object state (32 768-element chunks).
pub fn over_wrong_bytes(seed: u64) -> Result<Action, LabError> {
    Ok(Action::PublishOverWrongBytes(
        Box::new(synthetic_state(seed, 5, 32_768)),
        topology(4)?,
    ))
}

/// The two writers racing for generation 1 over generation 0 that the matrix and the
/// `commit-rename-replaces` mutant run: the first publishes a 12-object state, the second
/// republishes generation 0's state on two workers (every object found, a new manifest
/// and record), so their records differ.
pub fn two_writers_racing(seed: u64) -> Result<Action, LabError> {
    let (a, _) = matrix_states(seed);
    Ok(Action::PublishRacing {
        first: Box::new(synthetic_state(seed, 6, 32_768)),
        second: Box::new(a),
        topology: topology(2)?,
    })
}

/// The LATEST repair over generation 0 after a writer of a 12-object state was killed
/// between its commit rename and its `commits/` fsync, that the matrix and the
/// `repair-without-commits-fsync` mutant run.
pub fn repair_after_killed_commit(seed: u64) -> Result<Action, LabError> {
    Ok(Action::RepairAfterKilledCommit(
        Box::new(synthetic_state(seed, 7, 32_768)),
        topology(4)?,
    ))
}

/// The result of one power-loss scenario.
#[derive(Clone, Debug, Default)]
pub struct ScenarioOutcome {
    /// Operations the recorded run issued.
    pub trace_operations: u64,
    /// Crash states built from the trace (every crash point, admissible subsets, data
    /// variants), before deduplication: a state reached again is counted again
    /// ([`crate::lab::crash_model::CrashStates::built`]).
    pub crash_images: u64,
    /// Distinct states among them, as recovery can see them (everything outside `staging/`).
    pub distinct_states: u64,
    /// States recovery was checked on (all distinct ones unless capped).
    pub states_checked: u64,
    /// What was enumerated: crash points, and subsets of pending operations applied out
    /// of all of them (exhaustive unless `sampled`).
    pub enumeration: Enumeration,
    /// One per invariant violated (none: the store held).
    pub violations: Vec<Violation>,
}

/// The deliberate faults a model run is given: none for the matrix, one for each mutant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelFaults {
    /// Faults of the writer (publish, reshard).
    pub writer: WriterFaults,
    /// Faults of recovery.
    pub recovery: RecoveryFaults,
}

impl ModelFaults {
    /// No fault: the real protocol.
    pub const NONE: ModelFaults = ModelFaults {
        writer: WriterFaults::NONE,
        recovery: RecoveryFaults::NONE,
    };
}
