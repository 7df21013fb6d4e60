//! The one crash-state model: the states a power cut could leave of a recorded
//! [`Trace`], under the persistence model of RFC 0001 §8. Two recorders feed it: the
//! store's writer through `lab::powerloss` (the crash matrix) and any program under
//! ptrace through `lab::external` (`crash-test`), and the kernel runs hold real file
//! systems against its states.
//!
//! - a file's data and size are durable once it is fsynced (or after `sync`); before
//!   that, while it has unsynced writes or truncations (even ones that leave its bytes
//!   as they were), a crash may leave it whole, as last fsynced ("lost"), cut at a 512-
//!   or 4096-byte boundary ("short"), with its unsynced range or last sector read as
//!   zeros ("zeroed"), or with only the first of its unsynced writes ("torn");
//! - an entry operation (create, link, mkdir, rename, unlink, rmdir) is durable once the
//!   directory holding the new entry is fsynced after it; before that any subset of the
//!   pending ones may have happened, applied in program order; a rename is atomic;
//! - an entry whose parent directory is absent is lost;
//! - a durability call (fsync, sync) covers only the operations completed before it was
//!   entered: another thread's operation that completed while it ran stays pending.
//!
//! Crash points are every operation boundary. Subsets of pending entry operations: all
//! when at most `all_subsets_up_to` are pending, else every prefix, every omit-one and
//! seeded samples; [`SubsetCoverage`] says how many subsets were built of how many
//! there are. Per-file data variants are taken where every pending operation
//! happened (the namespace with the most names); every other subset gets "all whole" and
//! "all lost". States are deduplicated by a digest of what a loader can see: every path
//! outside the unread ones, its kind and its content's SHA-256; a state reached again
//! after more acknowledgements keeps its first crash point and takes the larger
//! acknowledgement count (a check demands more, never less, once more has been
//! acknowledged). A namespace reached again while no file's data changed yields the
//! states it yielded before, so they are looked up, not rebuilt.
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::core::digest::{Digest, FramedHasher};
use crate::core::rng::SplitMix64;
use trace::{InitialEntry, InodeId, Trace, TraceOp};

mod data;
pub mod trace;
use data::DataAt;

/// How one file's bytes in a crash state relate to the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "data", content = "at", rename_all = "snake_case")]
pub enum FileData {
    /// Every write up to the crash point.
    Whole,
    /// Only what was durable: the last fsynced contents (empty for a new file).
    Lost,
    /// The whole contents cut to this length.
    Short(u64),
    /// The whole contents with every byte from this offset on read as zeros.
    ZeroedFrom(u64),
    /// The durable contents plus only the first N unsynced writes.
    FirstWrites(usize),
}

/// One entry of a crash state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StateEntry {
    /// A directory.
    Dir,
    /// A regular file.
    File {
        /// Its inode in the trace.
        inode: InodeId,
        /// Which variant of its data survived.
        #[serde(flatten)]
        data: FileData,
        /// Its length in bytes.
        len: u64,
        /// The SHA-256 of its bytes.
        sha256: Digest,
    },
}

/// One distinct crash state.
#[derive(Clone, Debug, Serialize)]
pub struct CrashState {
    /// How many trace operations had completed at the crash.
    pub crash_point: usize,
    /// Acknowledgements the crash follows ([`Trace::acknowledged_at`] at or before the
    /// crash point): the most of any crash point that reaches this state.
    pub acknowledged: usize,
    /// Pending entry operations (trace indices) that did not persist.
    pub dropped_operations: Vec<usize>,
    /// Every entry, by path relative to the state's root.
    pub entries: BTreeMap<String, StateEntry>,
    /// What a loader can see: every path outside the unread ones, its kind and its
    /// content's SHA-256.
    pub digest: Digest,
}

/// Paths (relative to the scratch directory) the check never reads, such as a writer's
/// private staging directory: entry operations in them are applied in every state, their
/// files are always whole, and they do not tell states apart (the crash matrix does the
/// same for the store's `staging/`).
#[derive(Clone, Debug, Default)]
pub struct Unread(Vec<String>);

impl Unread {
    /// Normalises `paths` (no leading `./` or trailing `/`).
    pub fn new(paths: &[String]) -> Self {
        Unread(
            paths
                .iter()
                .map(|p| {
                    let p = p.trim_start_matches("./").trim_end_matches('/');
                    p.to_owned()
                })
                .filter(|p| !p.is_empty())
                .collect(),
        )
    }

    /// Whether `path` is one of the unread paths or below one.
    pub fn covers(&self, path: &str) -> bool {
        self.0.iter().any(|unread| {
            path == unread
                || (path.len() > unread.len()
                    && path.starts_with(unread.as_str())
                    && path.as_bytes()[unread.len()] == b'/')
        })
    }
}

/// Bounds of one enumeration.
#[derive(Clone, Copy, Debug)]
pub struct ModelLimits {
    /// How many subsets of pending entry operations to take per crash point.
    pub subsets: EnumerationLimits,
    /// Torn variants per volatile file (evenly spaced write counts).
    pub write_prefixes: usize,
    /// Fail once this many distinct states exist (the trace is over the limits).
    pub max_distinct_states: usize,
    /// A deliberately narrowed model, for showing that the kernel can refute a model: no
    /// pending entry operation persists before a directory fsync (or sync) covers it.
    pub narrowed: bool,
}

impl Default for ModelLimits {
    fn default() -> Self {
        ModelLimits {
            subsets: EnumerationLimits::default(),
            write_prefixes: 3,
            max_distinct_states: 50_000,
            narrowed: false,
        }
    }
}

/// Why enumeration stopped.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The trace breaks one of its invariants (see [`Trace::validate`]).
    #[error("the trace is inconsistent: {0}")]
    BadTrace(String),
    /// The enumeration reached [`ModelLimits::max_distinct_states`].
    #[error("more than {limit} distinct crash states (raise --max-distinct-states or shorten the writer's run)")]
    TooManyStates {
        /// The limit reached.
        limit: usize,
    },
}

/// How much of the subsets of pending entry operations an enumeration covered, summed
/// over its crash points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SubsetCoverage {
    /// Distinct subsets whose crash states were built.
    pub enumerated: u64,
    /// Every subset there is (2 to the number of pending entry operations, per crash
    /// point); `None` when the sum exceeds `u64::MAX`.
    pub total: Option<u64>,
    /// Crash points (operation boundaries, the start included).
    pub crash_points: u64,
    /// Most entry operations pending at one crash point.
    pub max_pending: u64,
}

impl SubsetCoverage {
    /// Whether some subsets were left out (sampled instead of all enumerated).
    pub fn sampled(&self) -> bool {
        self.total != Some(self.enumerated)
    }

    fn add_crash_point(&mut self, pending: usize, enumerated: usize) {
        self.crash_points += 1;
        self.max_pending = self.max_pending.max(pending as u64);
        self.enumerated = self.enumerated.saturating_add(enumerated as u64);
        // checked_shl refuses shifts of 64 and more: 2^pending does not fit then.
        let all = u32::try_from(pending)
            .ok()
            .and_then(|pending| 1u64.checked_shl(pending));
        self.total = self
            .total
            .and_then(|total| all.and_then(|all| total.checked_add(all)));
    }
}

/// The distinct crash states of a trace and what the enumeration covered.
#[derive(Clone, Debug)]
pub struct CrashStates {
    /// Every distinct crash state, in order of first appearance (crash point).
    pub states: Vec<CrashState>,
    /// The subsets of pending entry operations enumerated, of all there are.
    pub subsets: SubsetCoverage,
    /// Crash states built over every crash point, subset and data variant, each time
    /// one is reached (so a state reached again is counted again): at least
    /// `states.len()`.
    pub built: u64,
}

/// Every distinct crash state of `trace`, in order of first appearance (crash point).
pub fn crash_states(
    trace: &Trace,
    limits: ModelLimits,
    unread: &Unread,
) -> Result<CrashStates, ModelError> {
    trace.validate().map_err(ModelError::BadTrace)?;
    let mut rng = SplitMix64::keyed(limits.subsets.seed, "shardlift/crash-test/subsets", 0);
    let mut distinct_states = DistinctStates::new(limits.max_distinct_states);
    let mut coverage = SubsetCoverage {
        total: Some(0),
        ..SubsetCoverage::default()
    };
    let mut data = DataAt::initial(trace);
    let mut pending: Vec<usize> = Vec::new();
    // A namespace seen again while no file's data changed yields the same states: they
    // are looked up, not rebuilt (each one hashes every file it holds).
    let mut expanded: HashMap<(BTreeMap<String, Node>, bool), Vec<usize>> = HashMap::new();
    let mut digests = FileDigests::new();
    let mut built = 0u64;
    for crash_point in 0..=trace.ops.len() {
        // Each subset once (`subsets` drops a sample that repeats one).
        let distinct: Vec<Vec<usize>> = if limits.narrowed {
            vec![Vec::new()]
        } else {
            subsets(pending.len(), limits.subsets, &mut rng)
        };
        coverage.add_crash_point(pending.len(), distinct.len());
        let acknowledged = trace.acknowledged_by(crash_point);
        for subset in distinct {
            let chosen: HashSet<usize> = subset.iter().map(|&i| pending[i]).collect();
            let names = namespace(trace, crash_point, &pending, &chosen);
            let everything = subset.len() == pending.len();
            let key = (names, everything);
            if let Some(indices) = expanded.get(&key) {
                built += indices.len() as u64;
                for &index in indices {
                    distinct_states.reached_again(index, acknowledged);
                }
                continue;
            }
            let choices = variants(
                trace,
                &key.0,
                &data,
                everything,
                limits.write_prefixes,
                unread,
            );
            let mut indices = Vec::with_capacity(choices.len());
            for files in choices {
                let state = build_state(
                    trace,
                    (&data, &mut digests),
                    (crash_point, &pending, &chosen),
                    &key.0,
                    &files,
                    unread,
                );
                built += 1;
                indices.push(distinct_states.keep(state)?);
            }
            expanded.insert(key, indices);
        }
        let Some(op) = trace.ops.get(crash_point) else {
            break;
        };
        if data.apply(trace, crash_point) {
            expanded.clear();
            digests.clear();
        }
        update_pending(trace, crash_point, op, unread, &mut pending);
    }
    Ok(CrashStates {
        states: distinct_states.states,
        subsets: coverage,
        built,
    })
}

/// Each distinct state once, by what a loader sees (its digest); where the same state is
/// reached again after more acknowledgements, it is judged with the larger count.
struct DistinctStates {
    seen: HashMap<Digest, usize>,
    states: Vec<CrashState>,
    limit: usize,
}

impl DistinctStates {
    fn new(limit: usize) -> Self {
        DistinctStates {
            seen: HashMap::new(),
            states: Vec::new(),
            limit,
        }
    }

    /// Keeps `state` unless an equal one is kept already; more than `limit` is an error.
    /// Returns the kept state's index.
    fn keep(&mut self, state: CrashState) -> Result<usize, ModelError> {
        if let Some(&index) = self.seen.get(&state.digest) {
            self.reached_again(index, state.acknowledged);
            return Ok(index);
        }
        if self.states.len() == self.limit {
            return Err(ModelError::TooManyStates { limit: self.limit });
        }
        let index = self.states.len();
        self.seen.insert(state.digest, index);
        self.states.push(state);
        Ok(index)
    }

    /// The state at `index` is reached again, after `acknowledged` acknowledgements.
    fn reached_again(&mut self, index: usize, acknowledged: usize) {
        let kept = &mut self.states[index];
        kept.acknowledged = kept.acknowledged.max(acknowledged);
    }
}

/// `pending` (the entry operations not yet durable) after operation `op` at `index`: a
/// durability call covers what completed before its entry only; an entry operation in a
/// directory the check reads becomes pending.
fn update_pending(
    trace: &Trace,
    index: usize,
    op: &TraceOp,
    unread: &Unread,
    pending: &mut Vec<usize>,
) {
    match op {
        TraceOp::FsyncDir {
            path,
            entered_after,
        } => {
            pending.retain(|&seq| {
                seq >= *entered_after || trace.ops[seq].durable_in() != Some(path.as_str())
            });
        }
        TraceOp::SyncAll { entered_after } => pending.retain(|&seq| seq >= *entered_after),
        _ => match op.durable_in() {
            Some(dir) if !unread.covers(dir) => pending.push(index),
            _ => {}
        },
    }
}

/// The names after the durable entry operations and the chosen pending ones of the
/// first `crash_point` operations, applied in program order.
fn namespace(
    trace: &Trace,
    crash_point: usize,
    pending: &[usize],
    chosen: &HashSet<usize>,
) -> BTreeMap<String, Node> {
    let pending: HashSet<usize> = pending.iter().copied().collect();
    let mut names: BTreeMap<String, Node> = trace
        .initial
        .iter()
        .map(|(path, entry)| {
            let node = match entry {
                InitialEntry::Dir => Node::Dir,
                InitialEntry::File(inode) => Node::File(*inode),
            };
            (path.clone(), node)
        })
        .collect();
    for (seq, op) in trace.ops[..crash_point].iter().enumerate() {
        if pending.contains(&seq) && !chosen.contains(&seq) {
            continue;
        }
        match op {
            TraceOp::Mkdir { path } => {
                names.insert(path.clone(), Node::Dir);
            }
            TraceOp::Create { path, inode } | TraceOp::Link { path, inode } => {
                names.insert(path.clone(), Node::File(*inode));
            }
            TraceOp::Rename { from, to, .. } => {
                if let Some(node) = names.remove(from) {
                    names.insert(to.clone(), node);
                }
            }
            TraceOp::Unlink { path } | TraceOp::Rmdir { path } => {
                names.remove(path);
            }
            _ => {}
        }
    }
    // BTreeMap order visits a directory before its entries.
    let mut reachable = BTreeMap::new();
    for (path, node) in names {
        let dir = parent(&path);
        if dir.is_empty() || reachable.get(dir) == Some(&Node::Dir) {
            reachable.insert(path, node);
        }
    }
    reachable
}

/// Per-inode data choices for one namespace.
fn variants(
    trace: &Trace,
    names: &BTreeMap<String, Node>,
    data: &DataAt,
    each_torn: bool,
    write_prefixes: usize,
    unread: &Unread,
) -> Vec<BTreeMap<InodeId, FileData>> {
    let mut volatile: Vec<InodeId> = names
        .iter()
        .filter_map(|(path, node)| match node {
            // Unsynced operations put a file at risk even when its bytes are back to
            // the durable ones: a crash may keep the truncation and lose the rewrite.
            Node::File(inode) if data.has_unsynced(*inode) && !unread.covers(path) => Some(*inode),
            _ => None,
        })
        .collect();
    volatile.sort_unstable();
    volatile.dedup();
    let whole: BTreeMap<InodeId, FileData> =
        volatile.iter().map(|&i| (i, FileData::Whole)).collect();
    let mut out = vec![whole.clone()];
    if volatile.is_empty() {
        return out;
    }
    out.push(volatile.iter().map(|&i| (i, FileData::Lost)).collect());
    if each_torn {
        for &inode in &volatile {
            let mut alone = vec![FileData::Lost];
            alone.extend(data.torn_variants(trace, inode, write_prefixes));
            for variant in alone {
                let mut choice = whole.clone();
                choice.insert(inode, variant);
                out.push(choice);
            }
        }
    }
    out
}

/// The crash point, the pending entry operations and the chosen ones among them.
type Point<'a> = (usize, &'a [usize], &'a HashSet<usize>);

/// Each file variant's length and SHA-256, computed once while no file's data changes
/// (a state hashes its files' digests, not their bytes).
type FileDigests = HashMap<(InodeId, FileData), (u64, Digest)>;

/// The domain of a state's digest ([`CrashState::digest`], [`tree_digest`]).
const STATE_DIGEST_DOMAIN: &str = "shardlift/crash-model/state/v2";

fn build_state(
    trace: &Trace,
    (data, digests): (&DataAt, &mut FileDigests),
    (crash_point, pending, chosen): Point<'_>,
    names: &BTreeMap<String, Node>,
    files: &BTreeMap<InodeId, FileData>,
    unread: &Unread,
) -> CrashState {
    let mut hasher = FramedHasher::new(STATE_DIGEST_DOMAIN);
    let mut entries = BTreeMap::new();
    for (path, node) in names {
        let seen = !unread.covers(path);
        if seen {
            hasher.field(path.as_bytes());
        }
        let entry = match node {
            Node::Dir => {
                if seen {
                    hasher.field(b"<dir>");
                }
                StateEntry::Dir
            }
            Node::File(inode) => {
                let variant = files.get(inode).copied().unwrap_or(FileData::Whole);
                let (len, sha256) = *digests.entry((*inode, variant)).or_insert_with(|| {
                    let bytes = data.bytes(trace, *inode, variant);
                    (bytes.len() as u64, Digest::of(&bytes))
                });
                if seen {
                    hasher.field(&sha256.0);
                }
                StateEntry::File {
                    inode: *inode,
                    data: variant,
                    len,
                    sha256,
                }
            }
        };
        entries.insert(path.clone(), entry);
    }
    CrashState {
        crash_point,
        acknowledged: trace.acknowledged_by(crash_point),
        dropped_operations: pending
            .iter()
            .copied()
            .filter(|seq| !chosen.contains(seq))
            .collect(),
        entries,
        digest: hasher.finish(),
    }
}

/// What a loader can see of a directory tree (the same digest as
/// [`CrashState::digest`]), and every path with `dir` or its content's SHA-256, for
/// holding a real file system's state against the model's.
pub fn tree_digest(
    root: &std::path::Path,
    unread: &Unread,
) -> std::io::Result<(Digest, BTreeMap<String, String>)> {
    let mut tree: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    for entry in walkdir::WalkDir::new(root).min_depth(1) {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(root)
            .map_err(std::io::Error::other)?
            .to_string_lossy()
            .into_owned();
        let bytes = if entry.file_type().is_dir() {
            None
        } else {
            Some(std::fs::read(entry.path())?)
        };
        tree.insert(rel, bytes);
    }
    let mut hasher = FramedHasher::new(STATE_DIGEST_DOMAIN);
    let mut listing = BTreeMap::new();
    for (path, bytes) in &tree {
        let sha256 = bytes.as_deref().map(Digest::of);
        if !unread.covers(path) {
            hasher.field(path.as_bytes());
            match &sha256 {
                Some(sha256) => hasher.field(&sha256.0),
                None => hasher.field(b"<dir>"),
            };
        }
        let shown = sha256.map_or_else(|| "dir".to_owned(), |sha256| sha256.to_string());
        listing.insert(path.clone(), shown);
    }
    Ok((hasher.finish(), listing))
}

/// The bytes of every file of `state`, rebuilt from the trace (states keep digests, not
/// bytes, so thousands of them fit in memory).
pub fn state_files(trace: &Trace, state: &CrashState) -> Vec<(String, Option<Vec<u8>>)> {
    let mut data = DataAt::initial(trace);
    for seq in 0..state.crash_point.min(trace.ops.len()) {
        data.apply(trace, seq);
    }
    state
        .entries
        .iter()
        .map(|(path, entry)| match entry {
            StateEntry::Dir => (path.clone(), None),
            StateEntry::File { inode, data: d, .. } => (
                path.clone(),
                Some(data.bytes(trace, *inode, *d).into_owned()),
            ),
        })
        .collect()
}

/// Writes `files` (a state's entries and bytes, [`state_files`], in path order so each
/// directory comes before its entries) under `dir`, which must exist and be empty. On
/// failure, the path that could not be written and why.
pub fn write_state_files(
    files: &[(String, Option<Vec<u8>>)],
    dir: &std::path::Path,
) -> Result<(), (String, std::io::Error)> {
    for (path, bytes) in files {
        let target = dir.join(path);
        match bytes {
            None => std::fs::create_dir(&target),
            Some(bytes) => std::fs::write(&target, bytes),
        }
        .map_err(|e| (path.clone(), e))?;
    }
    Ok(())
}

/// The parent of a relative, `/`-separated path (`""` for a top-level name).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}

/// What a name refers to while a run's operations are replayed: a directory, or a file
/// by its inode (an index into the recording's or the trace's file contents). The one
/// namespace node of both crash-state models (the store's and `crash-test`'s).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Node {
    Dir,
    File(usize),
}

/// How many crash states to derive, and how to sample.
#[derive(Clone, Copy, Debug)]
pub struct EnumerationLimits {
    /// Enumerate all subsets when at most this many operations are pending.
    pub all_subsets_up_to: usize,
    /// Seeded random subsets per crash point when there are more.
    pub samples: usize,
    /// Seed of the sampled subsets.
    pub seed: u64,
}

impl Default for EnumerationLimits {
    fn default() -> Self {
        EnumerationLimits {
            all_subsets_up_to: 10,
            samples: 16,
            seed: 0x5eed,
        }
    }
}

/// Index subsets of `0..n` to try.
pub(crate) fn subsets(
    n: usize,
    limits: EnumerationLimits,
    rng: &mut SplitMix64,
) -> Vec<Vec<usize>> {
    if n <= limits.all_subsets_up_to {
        return (0u32..(1u32 << n))
            .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
            .collect();
    }
    let mut out: Vec<Vec<usize>> = (0..=n).map(|k| (0..k).collect()).collect();
    for omit in 0..n {
        out.push((0..n).filter(|&i| i != omit).collect());
    }
    for _ in 0..limits.samples {
        out.push((0..n).filter(|_| rng.next_u64() & 1 == 1).collect());
    }
    // Each subset once, in the order first drawn (a sample may repeat a prefix).
    let mut drawn = HashSet::new();
    out.retain(|subset| drawn.insert(subset.clone()));
    out
}

#[cfg(test)]
mod tests;
