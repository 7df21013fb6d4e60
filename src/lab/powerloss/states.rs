//! The crash states of a [`Recording`], and what the store's checks read of them.
use super::*;
use crate::lab::crash_model::{
    self, CrashState, CrashStates, EnumerationLimits, ModelError, ModelLimits, StateEntry,
    SubsetCoverage, Unread,
};

/// Most distinct crash states one recording may have: the largest scenario (the
/// concurrent install) has a few thousand.
const MAX_DISTINCT_STATES: usize = 200_000;

/// What the model enumerated for one recording: per crash point (every operation
/// boundary), the subsets of its pending operations it applied, out of all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Enumeration {
    /// Crash points (operation boundaries, the start included).
    pub crash_points: u64,
    /// Most operations pending at one crash point.
    pub max_pending: u64,
    /// Whether some crash point had more pending operations than
    /// [`EnumerationLimits::all_subsets_up_to`], so only some of its subsets were applied
    /// (prefixes, all-but-one and seeded samples): the enumeration is then not exhaustive.
    pub sampled: bool,
    /// Distinct subsets of pending operations applied, summed over the crash points.
    pub subsets_checked: u64,
    /// Subsets of pending operations there are, summed over the crash points (2^pending
    /// each), saturating at `u64::MAX`. Equal to `subsets_checked` when not `sampled`.
    pub subsets_total: u64,
}

impl From<&SubsetCoverage> for Enumeration {
    fn from(coverage: &SubsetCoverage) -> Self {
        Enumeration {
            crash_points: coverage.crash_points,
            max_pending: coverage.max_pending,
            sampled: coverage.sampled(),
            subsets_checked: coverage.enumerated,
            subsets_total: coverage.total.unwrap_or(u64::MAX),
        }
    }
}

impl Recording {
    /// `path` (relative to the recorded directory) relative to the store root, if it is
    /// the root or below it.
    pub fn in_store<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.store.is_empty() {
            return Some(path);
        }
        if path == self.store {
            return Some("");
        }
        path.strip_prefix(self.store.as_str())?.strip_prefix('/')
    }

    /// `rel` (relative to the store root, `/`-separated) relative to the recorded
    /// directory.
    pub fn store_path(&self, rel: &str) -> String {
        match (self.store.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_owned(),
            (false, true) => self.store.clone(),
            (false, false) => format!("{}/{rel}", self.store),
        }
    }

    /// What recovery never reads: the store's `staging/`.
    pub fn unread(&self) -> Unread {
        Unread::new(&[self.store_path(STAGING_DIR)])
    }

    /// Every distinct crash state of the run (by what recovery can see), with what was
    /// enumerated to get them.
    pub fn crash_states(&self, limits: EnumerationLimits) -> Result<CrashStates, ModelError> {
        let model = ModelLimits {
            subsets: limits,
            max_distinct_states: MAX_DISTINCT_STATES,
            ..ModelLimits::default()
        };
        crash_model::crash_states(&self.trace, model, &self.unread())
    }

    /// How many acknowledgements a state must follow to follow the first `barrier`
    /// ([`CrashState::acknowledged`]), if the run reached it.
    pub fn acknowledgements_at(&self, barrier: Barrier) -> Option<usize> {
        self.barriers
            .iter()
            .position(|b| *b == barrier)
            .map(|index| index + 1)
    }

    /// Whether `state` follows `barrier`: some crash point after the run first reached
    /// it leaves that state.
    pub fn follows(&self, state: &CrashState, barrier: Barrier) -> bool {
        self.acknowledgements_at(barrier)
            .is_some_and(|at| state.acknowledged >= at)
    }

    /// Each barrier reached and how many operations had been issued then.
    pub fn marks(&self) -> impl Iterator<Item = (Barrier, usize)> + '_ {
        self.barriers
            .iter()
            .copied()
            .zip(self.trace.acknowledged_at.iter().copied())
    }

    /// Whether a state holds the store root (a directory).
    pub fn has_store_root(&self, state: &CrashState) -> bool {
        self.store.is_empty() || matches!(state.entries.get(&self.store), Some(StateEntry::Dir))
    }

    /// Whether `inode` is a file of the durable starting image (not written by the run nor
    /// by a killed writer before it).
    pub fn is_initial_inode(&self, inode: InodeId) -> bool {
        self.trace
            .initial
            .values()
            .any(|entry| *entry == InitialEntry::File(inode))
    }

    /// Whether the file `inode` is one an earlier, killed writer wrote before the run
    /// without fsyncing it, and no operation of the trace's first `crash_point` fsynced
    /// it since: its torn bytes are that writer's, not the run's.
    pub fn torn_by_earlier_writer(&self, inode: InodeId, crash_point: usize) -> bool {
        let ops = &self.trace.ops;
        let written_before = ops[..self.pre_run_ops.min(ops.len())]
            .iter()
            .any(|op| matches!(op, TraceOp::Write { inode: i, .. } if *i == inode));
        written_before
            && !ops[..crash_point.min(ops.len())]
                .iter()
                .any(|op| matches!(op, TraceOp::Fsync { inode: i, .. } if *i == inode))
    }

    /// Every entry of `state` with its bytes (`None` for a directory), by path relative to
    /// the recorded directory.
    pub fn files(&self, state: &CrashState) -> Vec<(String, Option<Vec<u8>>)> {
        crash_model::state_files(&self.trace, state)
    }

    /// Writes `state` as a real directory tree under `dir` (which must exist, empty).
    pub fn materialize(&self, state: &CrashState, dir: &Path) -> std::io::Result<()> {
        crash_model::write_state_files(&self.files(state), dir)
            .map_err(|(path, e)| std::io::Error::new(e.kind(), format!("{path}: {e}")))
    }
}
