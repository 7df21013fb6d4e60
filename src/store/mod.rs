//! The content-addressed, crash-consistent checkpoint store (RFC 0001).
//!
//! Layout under a store directory: `objects/ab/cdef…` (content-addressed, read-only chunk
//! payloads and manifests), `commits/<generation:020>.json` (immutable commit records,
//! installed with a rename that never replaces), `staging/` (temp files), `refs/LATEST`
//! (a hint). Only a commit record that verifies end to end makes a generation selectable.
//!
//! Entry points: [`publish`], [`recover`], [`load_generation`], [`reshard`]. The crash
//! lab above the store tests it: `lab::harness` (`kill_publisher_at`, `recover_in_child`)
//! and the crash, power-loss and corruption checks of `lab::matrix`.
use std::path::Path;

use crate::core::logical::LogicalState;
use crate::core::topology::Topology;
use crate::durable::fs::EntryKind;

pub mod barrier;
pub mod checks;
pub mod codec;
pub mod error;
pub mod layout;
pub mod location;
pub mod paths;
pub mod protocol;
pub mod recovery;
pub mod rejection;
pub mod scan;
pub mod verify;
pub mod writer;

pub use crate::durable::fs::{FileSystem, RealFs};
pub use barrier::{
    Barrier, BarrierEvent, BarrierHook, FnHook, HookStop, InOrder, NoHooks, RecordingHooks,
};
pub use error::StoreError;
pub use recovery::{
    LatestStatus, LoadedGeneration, NewestLoad, ObjectCheck, RecoveryReport, Rejection,
    RejectionKind, SelectedGeneration,
};
pub use writer::CommitSummary;

/// Publishes `state` placed on `topology` as the next generation (0 for an empty store),
/// calling `hooks` at every barrier.
pub fn publish(
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    hooks: &mut dyn BarrierHook,
) -> Result<CommitSummary, StoreError> {
    writer::publish_with(&RealFs, store_dir, state, topology, hooks)
}

/// Publishes `state` plus the synthetic objects of `spec` (a state scaled to benchmark
/// size, `store publish-synthetic --state-bytes`) as the next generation; `progress` gets
/// one step per object. With [`NoHooks`] the objects are installed concurrently (RFC 0001
/// §4); with hooks that observe (such as [`InOrder`]), one after another.
pub fn publish_synthetic(
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
    spec: writer::SyntheticSpec,
    hooks: &mut dyn BarrierHook,
    progress: &mut dyn crate::core::progress::Progress,
) -> Result<CommitSummary, StoreError> {
    writer::publish_synthetic_with(&RealFs, store_dir, state, topology, spec, hooks, progress)
}

/// Read-only recovery scan of a store.
pub fn recover(store_dir: &Path) -> Result<RecoveryReport, StoreError> {
    recovery::recover_with(&RealFs, store_dir)
}

/// The fully verified state and topology of `generation`; never returns unverified bytes.
/// Its commit record's name is made durable (`commits/` fsynced) before the state is
/// returned, so a job that continues from it never continues from a generation a power cut
/// could still take away (RFC 0001 §6).
pub fn load_generation(
    store_dir: &Path,
    generation: u64,
) -> Result<(LogicalState, Topology), StoreError> {
    let found = RealFs
        .entry_kind(store_dir)
        .map_err(|e| StoreError::io(store_dir, e))?;
    if found != Some(EntryKind::Dir) {
        return Err(StoreError::NoStore {
            path: store_dir.to_owned(),
            found,
        });
    }
    let verified = recovery::verify_generation(&RealFs, store_dir, generation)?;
    writer::make_commits_durable(&RealFs, store_dir, generation)?;
    match verified.state {
        Some(state) => Ok((state, verified.topology)),
        None => Err(StoreError::GenerationNotFound {
            path: store_dir.join(codec::commit_rel_path(generation)),
            generation,
        }),
    }
}

/// The newest generation that verifies end to end, loaded with one verification of its
/// bytes (RFC 0001 §5): records are verified from the highest generation down and the
/// first that passes is returned, with the rejected records above it. On a local store
/// this is the generation [`recover`] selects. Like [`load_generation`], the chosen commit
/// record's name is made durable before the state is returned.
pub fn load_newest(store_dir: &Path) -> Result<recovery::NewestLoad, StoreError> {
    let newest = recovery::load_newest_with(&RealFs, store_dir)?;
    if let Some(loaded) = &newest.loaded {
        writer::make_commits_durable(&RealFs, store_dir, loaded.generation)?;
    }
    Ok(newest)
}

/// Offline reshard of `generation` onto `topology`, committed as the next generation.
/// `objects` says how the source's objects are checked first (RFC 0001 §7):
/// [`ObjectCheck::Lengths`] (present with their lengths, in metadata time; the CLI's
/// default) or [`ObjectCheck::Hashed`] (every byte re-hashed, as a loader does).
pub fn reshard(
    store_dir: &Path,
    generation: u64,
    topology: Topology,
    objects: ObjectCheck,
) -> Result<CommitSummary, StoreError> {
    reshard_reporting(
        store_dir,
        generation,
        topology,
        objects,
        &mut crate::core::progress::NoProgress,
    )
}

/// As [`reshard`], reporting its two phases to `progress` (see [`writer::reshard_with`]):
/// checking the source, then committing the new placement.
pub fn reshard_reporting(
    store_dir: &Path,
    generation: u64,
    topology: Topology,
    objects: ObjectCheck,
    progress: &mut dyn crate::core::progress::Progress,
) -> Result<CommitSummary, StoreError> {
    writer::reshard_with(
        &RealFs,
        store_dir,
        generation,
        topology,
        objects,
        &mut NoHooks,
        progress,
    )
}

/// Rewrites LATEST to name the selected generation if it does not already (the only
/// write recovery may do, and only when asked). Returns whether it wrote.
pub fn repair_latest(store_dir: &Path, report: &RecoveryReport) -> Result<bool, StoreError> {
    match &report.selected {
        Some(selected) if report.latest.status != LatestStatus::Consistent => {
            writer::Writer::repair_latest(
                &RealFs,
                store_dir,
                &mut NoHooks,
                selected.generation,
                selected.commit_digest,
            )?;
            Ok(true)
        }
        _ => Ok(false),
    }
}
