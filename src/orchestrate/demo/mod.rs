//! `killer-demo`: a real SIGKILL of the checkpoint publisher at a named barrier, fresh
//! recovery, continuation against an uninterrupted reference, an offline W4 → W3
//! reshard, full evaluation, and an evidence bundle.
//!
//! The run, for barrier B (seed K, L = 12 micro-batches of 16):
//! 1. session `genesis` (W4) trains step 1 from the seeded initial state; a publisher
//!    child commits it as generation 0 to two independent stores, `reference` and `crash`;
//! 2. session `reference` (W4) loads generation 0 from the reference store and trains,
//!    uninterrupted, to step 3, recording the digests at every step; a publisher child
//!    commits each step's state to the reference store (generations 1 and 2);
//! 3. session `crash` (W4) loads generation 0 from the crash store and trains step 2; a
//!    publisher child is killed with SIGKILL when it reports barrier B for that state;
//! 4. a fresh child process recovers the crash store by scanning commit records;
//! 5. session `recovered` (W4) loads the selected generation and trains one step (the
//!    target step = selected step + 1), replaying the uncommitted batch if it was lost;
//! 6. the selected generation is resharded offline to W3 (same chunk objects); the
//!    source and the resharded generation are each loaded back from the store and their
//!    roots recomputed from the chunk objects (the reshard's commit record only copies
//!    the source manifest's root, so it proves nothing by itself);
//! 7. session `resharded` (W3) loads it and trains the same next batch; a publisher
//!    child commits the result, which a fresh recovery child must select;
//! 8. the reference's checkpoint at the target step and the final checkpoint, each loaded
//!    back from its store, are evaluated on the whole test split; the bundle is
//!    installed, `audit.json` last.
//!
//! Torch computes in this process only to evaluate; it is pinned to one intra-op and one
//! inter-op thread before anything else, as in every worker.
//!
//! Invariant: every comparison is of exact bytes (SHA-256 of canonical state bytes, the
//! ledger chain, the logit probe's FP32 bytes).

use std::path::PathBuf;

use crate::core::digest::Digest;
use crate::dataset::{self};
use crate::evidence::bundle::{records::*, RunStatus};
use crate::evidence::source::SourceBinding;
use crate::store::Barrier;

pub use crate::core::barrier::DEMO_BARRIERS;
pub use crash_store::{check_object_crash_store, CrashStoreEntry};

mod crash_store;

mod error;
mod phases;
pub use error::DemoError;
pub use phases::run;

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The `shardlift` binary the workers and publisher children run.
    pub shardlift_exe: PathBuf,
    /// The run's directory (it must not exist): stores, logs and the bundle.
    pub run_directory: PathBuf,
    /// Where the Fashion-MNIST payloads are cached.
    pub cache_directory: PathBuf,
    /// A local copy of the payloads to use instead of downloading, if any.
    pub source_directory: Option<PathBuf>,
    /// The barrier B the publisher is killed at (one of [`DEMO_BARRIERS`]).
    pub barrier: Barrier,
    /// Seed K of the genesis state and the sample stream.
    pub seed: u64,
    /// The clean checkout and exact revision to bind the run to.
    pub source: Option<(PathBuf, String)>,
    /// The crash store on an object store (`s3://bucket/prefix`, an empty prefix); `None`
    /// puts it in the run directory. The reference store is always in the run directory.
    pub crash_store: Option<String>,
}

/// The record printed on stdout when a run completes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DemoRecord {
    /// The run's status, as the bundle records it.
    pub status: RunStatus,
    /// What the run found (flattened into the record).
    #[serde(flatten)]
    pub outcome: RunOutcome,
    /// The installed bundle's directory.
    pub bundle_directory: String,
    /// SHA-256 of the bundle's `audit.json`.
    pub audit_sha256: Digest,
    /// Wall time of the whole run, in milliseconds.
    pub wall_time_ms: u64,
    /// The object-store crash store, when the run used one (absent for a local one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_store: Option<CrashStoreEntry>,
}

/// Checks everything that can be checked before any work: the barrier, the run
/// directory (must not exist), the cache directory (owner, mode), the source checkout.
pub fn preflight(options: &DemoOptions) -> Result<Option<SourceBinding>, DemoError> {
    if !DEMO_BARRIERS.contains(&options.barrier) {
        return Err(DemoError::UnsupportedBarrier(
            options.barrier.name().to_owned(),
        ));
    }
    if options.run_directory.symlink_metadata().is_ok() {
        return Err(DemoError::RunDirectoryExists(options.run_directory.clone()));
    }
    dataset::check_cache_directory(&options.cache_directory)?;
    if let Some(url) = &options.crash_store {
        check_object_crash_store(url)?;
    }
    match &options.source {
        Some((repository, revision)) => Ok(Some(crate::evidence::source::check_clean_checkout(
            repository,
            Some(revision),
        )?)),
        None => Ok(None),
    }
}
