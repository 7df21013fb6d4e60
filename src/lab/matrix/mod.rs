//! The crash matrix: process kills at every barrier, power-loss states and corruption
//! cases on a synthetic multi-chunk state, with the recovery invariants of RFC 0001 §5 checked.
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use serde::Serialize;

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::{NoProgress, Progress};
use crate::core::rng::SplitMix64;
use crate::core::topology::Topology;

use crate::durable::fs::RealFs;
use crate::lab::corruption::{copy_tree, list_files, Damage, FileOffset};
use crate::lab::crash_model::{
    write_state_files, CrashState, CrashStates, EnumerationLimits, StateEntry,
};
use crate::lab::error::LabError;
use crate::lab::harness::{kill_publisher_at_occurrence, recover_in_child, KillReport};
use crate::lab::powerloss::{
    tree_digest, Enumeration, KilledWriterFiles, MarkingHooks, Recording, RecordingFs,
};
use crate::lab::recovery_mutants::{recover_faulty, RecoveryFaults};
use crate::lab::writer_mutants::{MutantFs, WriterFaults};
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, NoHooks};
use crate::store::codec::{commit_rel_path, object_rel_path};
use crate::store::layout::synthetic_state;
use crate::store::recovery::{verify_generation_with, LatestStatus, RecoveryReport};
use crate::store::writer::{publish_with, reshard_with, LATEST_REL_PATH, LAYOUT_DIRS};
use crate::store::ObjectCheck;
use crate::store::StoreError;

mod checks;
mod corruption;
mod kills;
mod phases;
mod plan;
mod power_loss;
mod record;
#[cfg(test)]
mod tests;

pub use checks::*;
pub use corruption::*;
pub use kills::*;
pub use phases::*;
pub use plan::*;
pub use power_loss::*;
pub use record::*;

/// An invariant the crash matrix checks (RFC 0001 §5 and §8), one per kind of violation.
/// Every violation names the one it breaks; a mutant is killed only by a violation of the
/// invariant it is expected to break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// The checker itself ran (a temp dir was created, an image materialized, no checker
    /// thread panicked).
    CheckCompleted,
    /// Recovery answers: it never fails nor panics on a crash or corruption image.
    RecoveryCompletes,
    /// Recovery changes nothing in the store.
    RecoveryChangesNothing,
    /// Recovery gives the same answer every time (twice in a row, in a child process and
    /// in-process).
    RecoveryIsDeterministic,
    /// The selected generation loads, with the logical-state root it was published with.
    SelectedGenerationLoads,
    /// LATEST never changes recovery's answer.
    LatestNeverChangesTheAnswer,
    /// The selected generation is the previous one or the candidate.
    SelectedPreviousOrCandidate,
    /// The newest generation whose files are all intact is selected (a visible record
    /// whose objects verify is selected; a damaged one is not).
    NewestIntactSelected,
    /// Nothing committed is lost: the previous durable generation, the candidate once its
    /// `commits/` fsync (step 12) completed, and the record it committed.
    CommittedNotLost,
    /// LATEST is never `ahead` of the commits nor `garbage` after a crash (RFC 0001 §6).
    LatestNeverAheadOrGarbage,
    /// Once its `refs/` fsync (step 16) completed, LATEST is durable: a power cut leaves it
    /// `consistent`.
    LatestDurableAfterItsFsync,
    /// A name in `objects/` or `commits/` is visible only with its complete bytes.
    CompleteBytesVisible,
    /// A loader refuses a damaged generation.
    DamagedGenerationNeverLoads,
    /// A loader's error names the offending file.
    LoadErrorNamesTheFile,
    /// A killed publisher died of SIGKILL and was reaped.
    PublisherKilledAndReaped,
    /// A killed publisher's acknowledged events or performed operations are exactly those
    /// before the kill.
    KillTranscriptMatches,
    /// The candidate's commit record is visible after a kill exactly when the protocol
    /// says so (after the rename that installs it).
    CandidateVisibleAsTheProtocolSays,
    /// Enough random-instant kills landed before the publisher finished.
    RandomKillsLanded,
}

impl Invariant {
    /// Its kebab-case name, as the JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::CheckCompleted => "check-completed",
            Invariant::RecoveryCompletes => "recovery-completes",
            Invariant::RecoveryChangesNothing => "recovery-changes-nothing",
            Invariant::RecoveryIsDeterministic => "recovery-is-deterministic",
            Invariant::SelectedGenerationLoads => "selected-generation-loads",
            Invariant::LatestNeverChangesTheAnswer => "latest-never-changes-the-answer",
            Invariant::SelectedPreviousOrCandidate => "selected-previous-or-candidate",
            Invariant::NewestIntactSelected => "newest-intact-selected",
            Invariant::CommittedNotLost => "committed-not-lost",
            Invariant::LatestNeverAheadOrGarbage => "latest-never-ahead-or-garbage",
            Invariant::LatestDurableAfterItsFsync => "latest-durable-after-its-fsync",
            Invariant::CompleteBytesVisible => "complete-bytes-visible",
            Invariant::DamagedGenerationNeverLoads => "damaged-generation-never-loads",
            Invariant::LoadErrorNamesTheFile => "load-error-names-the-file",
            Invariant::PublisherKilledAndReaped => "publisher-killed-and-reaped",
            Invariant::KillTranscriptMatches => "kill-transcript-matches",
            Invariant::CandidateVisibleAsTheProtocolSays => {
                "candidate-visible-as-the-protocol-says"
            }
            Invariant::RandomKillsLanded => "random-kills-landed",
        }
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One invariant violated: which, where, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The invariant broken.
    pub invariant: Invariant,
    /// Where: the scenario, crash point, state or case, outermost first (`": "` between
    /// levels); empty when the report around it says where.
    pub context: String,
    /// What was seen.
    pub detail: String,
}

impl Violation {
    /// A violation of `invariant`, described by `detail`, with no context of its own.
    pub fn new(invariant: Invariant, detail: impl Into<String>) -> Self {
        Violation::at(invariant, "", detail)
    }

    /// A violation of `invariant` at `context`, described by `detail`.
    pub fn at(invariant: Invariant, context: &str, detail: impl Into<String>) -> Self {
        Violation {
            invariant,
            context: context.to_owned(),
            detail: detail.into(),
        }
    }

    /// The same violation inside `outer` (a scenario's name around a state's context).
    pub fn within(self, outer: &str) -> Self {
        let context = if self.context.is_empty() {
            outer.to_owned()
        } else {
            format!("{outer}: {}", self.context)
        };
        Violation { context, ..self }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.context.is_empty() {
            write!(f, "[{}] {}", self.invariant, self.detail)
        } else {
            write!(f, "[{}] {}: {}", self.invariant, self.context, self.detail)
        }
    }
}

/// A fresh scratch directory: under `$SHARDLIFT_SCRATCH` if set, else `/dev/shm` (tmpfs:
/// the matrix creates and deletes thousands of small trees), else the system temp dir.
pub fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    let base = match std::env::var_os("SHARDLIFT_SCRATCH") {
        Some(dir) => std::path::PathBuf::from(dir),
        None if Path::new("/dev/shm").is_dir() => std::path::PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    match tempfile::Builder::new()
        .prefix("shardlift-")
        .tempdir_in(&base)
    {
        Ok(dir) => Ok(dir),
        Err(_) => tempfile::tempdir(),
    }
}

/// Chunk size of the synthetic state: 13 chunks, the last one short.
pub const MATRIX_CHUNK_ELEMENTS: u32 = 8192;

/// How the crash matrix runs.
#[derive(Clone, Debug)]
pub struct MatrixConfig {
    /// Seed of the synthetic states and of the sampled crash subsets.
    pub seed: u64,
    /// Most distinct states checked per power-loss scenario (0: all of them).
    pub max_states_per_scenario: usize,
    /// Threads that check crash states (default: the cores available, at most 8).
    pub threads: usize,
}

impl Default for MatrixConfig {
    fn default() -> Self {
        MatrixConfig {
            seed: 0x5eed,
            max_states_per_scenario: 0,
            threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8),
        }
    }
}

/// What a generation must look like to count as intact: each file and its digest.
#[derive(Clone, Debug)]
pub struct GenerationExpectation {
    /// The generation.
    pub generation: u64,
    /// The root of its logical state.
    pub logical_state_root: Digest,
    /// Each file it depends on (path relative to the store) and that file's SHA-256.
    pub files: Vec<(String, Digest)>,
}

/// The files a verified generation depends on (commit record, manifest, chunk objects).
pub fn generation_expectation(
    root: &Path,
    generation: u64,
) -> Result<GenerationExpectation, StoreError> {
    let verified = verify_generation_with(&RealFs, root, generation, false)?;
    let mut files = vec![
        (commit_rel_path(generation), verified.commit_digest),
        (
            object_rel_path(&verified.manifest_digest),
            verified.manifest_digest,
        ),
    ];
    for chunk in &verified.manifest.chunks {
        for (_, digest) in chunk.digests() {
            files.push((object_rel_path(&digest), digest));
        }
    }
    Ok(GenerationExpectation {
        generation,
        logical_state_root: verified.manifest.logical_state_root,
        files,
    })
}
